//! What every target shares: the panic bookkeeping, scratch folders, and the checks of error
//! messages.
//!
//! sonograph's decoder catches symphonia's panics on hostile headers (symphonia 0.5 asserts
//! instead of returning an error) and turns them into a `Corrupt` error for the file. Under
//! libFuzzer the panic hook aborts the process at any panic, caught or not, so those would be
//! reported as crashes. [`run`] replaces the hook with one that only records the panic, then:
//! a panic that escapes the target is printed (message, place, backtrace with
//! `RUST_BACKTRACE=1`) and re-raised, which libFuzzer reports as a crash; a panic caught
//! inside sonograph passes only when it was raised in a symphonia crate, so that the decoder's
//! catch cannot hide a bug of sonograph's own.

use std::any::Any;
use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// A panic as the hook saw it.
struct Panic {
    message: String,
    location: String,
    backtrace: String,
}

thread_local! {
    /// This thread's panics since its current input began (capped: a loop of caught panics
    /// must not grow it without bound). Per thread: the corpus test runs targets side by side.
    static PANICS: RefCell<Vec<Panic>> = const { RefCell::new(Vec::new()) };
}
const MAX_RECORDED: usize = 64;
static HOOK: Once = Once::new();

fn install_hook() {
    HOOK.call_once(|| {
        panic::set_hook(Box::new(|info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_else(|| "an unknown place".into());
            let panic = Panic {
                message: payload_text(info.payload()),
                location,
                backtrace: std::backtrace::Backtrace::capture().to_string(),
            };
            PANICS.with_borrow_mut(|panics| {
                if panics.len() < MAX_RECORDED {
                    panics.push(panic);
                }
            });
        }))
    });
}

fn take_panics() -> Vec<Panic> {
    PANICS.with_borrow_mut(std::mem::take)
}

fn payload_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".into())
}

/// Raised in a symphonia crate (its own code, or std code it called with `#[track_caller]`:
/// an index out of bounds, an `unwrap`, an overflow).
fn in_symphonia(p: &Panic) -> bool {
    p.location.contains("symphonia")
}

fn report(target: &str, panics: &[Panic]) {
    for p in panics {
        eprintln!(
            "sonograph-fuzz {target}: panic at {}: {}",
            p.location, p.message
        );
        if !p.backtrace.is_empty() && p.backtrace != "disabled backtrace" {
            eprintln!("{}", p.backtrace);
        }
    }
}

/// Runs one input through `body` (see the module's notes on panics).
pub(crate) fn run(target: &str, body: impl FnOnce()) {
    install_hook();
    take_panics();
    let outcome = panic::catch_unwind(AssertUnwindSafe(body));
    let panics = take_panics();
    if let Err(payload) = outcome {
        report(target, &panics);
        panic::resume_unwind(payload);
    }
    let ours: Vec<Panic> = panics.into_iter().filter(|p| !in_symphonia(p)).collect();
    if !ours.is_empty() {
        report(target, &ours);
        let first = &ours[0];
        panic::resume_unwind(Box::new(format!(
            "{target}: a panic outside symphonia was caught inside sonograph and became an \
             error: {} at {}",
            first.message, first.location
        )));
    }
}

/// A folder of its own for one input, under the temporary folder (set `TMPDIR=/dev/shm` for
/// speed); removed when dropped.
pub(crate) struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("sonograph-fuzz-{}-{n}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        Scratch { dir }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes `bytes` to the file `name` in the folder; returns its path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, bytes)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// sonograph's errors about a file are one line that names it.
pub(crate) fn assert_names(message: &str, file: &Path) {
    assert!(
        !message.contains('\n') && !message.contains('\r'),
        "an error message spans lines: {message:?}"
    );
    let name = file.display().to_string();
    assert!(
        message.contains(&name),
        "an error message does not name {name}: {message:?}"
    );
}

/// Equal as stored: the same bits, or both NaN.
pub(crate) fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Two sample buffers are identical (see [`same_f32`]); names the first difference.
pub(crate) fn assert_same(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    if let Some(i) = (0..got.len()).find(|&i| !same_f32(got[i], want[i])) {
        panic!(
            "{what}: value {i} is {} where {} was expected",
            got[i], want[i]
        );
    }
}

/// Two JSON values are the same, floats bit for bit (serde_json's `float_roundtrip` reads every
/// f64 back as written: job.json's floats are compared on resume).
pub(crate) fn assert_json_equal(what: &str, got: &serde_json::Value, want: &serde_json::Value) {
    assert!(got == want, "{what}: {got} where {want} was expected");
}
