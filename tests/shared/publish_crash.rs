//! The crash test every ledgered command takes (rf-features, synth-iq, transcribe): a crash
//! at each step of publishing each of its files, as kill -9 or a power cut would leave it,
//! then the same command run again. Included by the test files that use it, in failpoints
//! builds (`#[path = "shared/publish_crash.rs"]`); needs the crate's `common` module.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Output;

use crate::common::{stderr, Tmp};

/// Runs a job with a crash (a failpoint that aborts) the k-th time it reaches each of the
/// three steps of `sonograph_io::publish` (syncing a file, renaming it, syncing its folder),
/// for k = 0, 1, … until a run that finishes without reaching it, which must be after
/// `publishes[step]` times (files published together sync their folder once); reruns each
/// crashed job in its own folder, and calls `check(out, label)` on what the rerun left there.
/// `run(out, failpoints)` runs the job into `out`; `finished` says a run ended as a clean run
/// ends, and `resumed` that a rerun did (a rerun after the last file finds the job complete,
/// which may exit otherwise). Returns the crashes made: the sum of `publishes`.
pub fn crash_at_every_publish(
    tmp: &Tmp,
    publishes: [usize; 3],
    run: impl Fn(&Path, &str) -> Output,
    finished: impl Fn(&Output) -> bool,
    resumed: impl Fn(&Output) -> bool,
    check: impl Fn(&Path, &str),
) -> usize {
    let steps = [
        "publish-before-sync",
        "publish-before-rename",
        "publish-before-dir-sync",
    ];
    let mut crashes = 0;
    for (point, publishes) in steps.into_iter().zip(publishes) {
        for k in 0.. {
            let out = tmp.path(&format!("{point}-{k}"));
            let o = run(&out, &format!("{point}={k}*off->return"));
            if finished(&o) {
                assert_eq!(k, publishes, "{point}: reached {k} times, not {publishes}");
                break;
            }
            assert_eq!(o.status.signal(), Some(6), "{point} #{k}: {}", stderr(&o));
            crashes += 1;
            let o = run(&out, "");
            assert!(resumed(&o), "{point} #{k}, run again: {}", stderr(&o));
            check(&out, &format!("{point} #{k}"));
        }
    }
    crashes
}
