//! Replays every committed fuzz input on stable: the seed corpus (`fuzz/corpus/<target>/`)
//! and the minimised crashes (`fuzz/regressions/<target>/`), each through the target's
//! function in sonograph-fuzz, so that `cargo test --workspace` keeps every fixed crash fixed.
//!
//! A target's corpus folder that is missing or empty fails the test, and so does a folder
//! under `corpus/` or `regressions/` that names no target: a rename must not leave the replay
//! passing on nothing. Inputs are read, never written; the targets write their temporary files
//! under the temporary folder.

use std::path::{Path, PathBuf};

use sonograph_fuzz::{Target, TARGETS};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir` (dot files such as `.gitkeep` aside), sorted.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a readable folder entry").path())
        .filter(|p| {
            p.is_file()
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

/// Runs every input through `target`; returns the failures, one line each.
fn replay(target: Target, files: &[PathBuf]) -> Vec<String> {
    let mut failures = Vec::new();
    for file in files {
        let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if let Err(payload) = std::panic::catch_unwind(|| target(&data)) {
            let why = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("{}: {why}", file.display()));
        }
    }
    failures
}

/// Folders under `dir` must each name a target.
fn assert_only_targets(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a readable folder entry").path();
        if path.is_dir() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                TARGETS.iter().any(|(t, _)| *t == name),
                "{} names no fuzz target (targets: {})",
                path.display(),
                TARGETS
                    .iter()
                    .map(|(t, _)| *t)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
}

fn replay_target(name: &str) {
    let (_, target) = TARGETS
        .iter()
        .find(|(t, _)| *t == name)
        .unwrap_or_else(|| panic!("no target {name}"));
    let fuzz = fuzz_dir();
    let corpus = fuzz.join("corpus").join(name);
    assert!(
        corpus.is_dir(),
        "{} is missing: every target has a committed seed corpus",
        corpus.display()
    );
    let seeds = inputs(&corpus);
    assert!(
        !seeds.is_empty(),
        "{} is empty: every target has a committed seed corpus",
        corpus.display()
    );
    let regressions = fuzz.join("regressions").join(name);
    let crashes = if regressions.is_dir() {
        inputs(&regressions)
    } else {
        Vec::new()
    };
    let mut failures = replay(*target, &seeds);
    failures.extend(replay(*target, &crashes));
    assert!(
        failures.is_empty(),
        "{name}: {} of {} inputs fail:\n{}",
        failures.len(),
        seeds.len() + crashes.len(),
        failures.join("\n")
    );
}

#[test]
fn every_corpus_and_regression_folder_names_a_target() {
    let fuzz = fuzz_dir();
    for dir in ["corpus", "regressions"] {
        let dir = fuzz.join(dir);
        assert!(dir.is_dir(), "{} is missing", dir.display());
        assert_only_targets(&dir);
    }
    // Every target has its cargo-fuzz binary too.
    for (name, _) in TARGETS {
        let bin = fuzz.join("fuzz_targets").join(format!("{name}.rs"));
        assert!(bin.is_file(), "{} is missing", bin.display());
    }
}

macro_rules! replay_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                replay_target(stringify!($name));
            }
        )*

        /// Every target has its test above.
        #[test]
        fn every_target_is_replayed() {
            let tested = [$(stringify!($name)),*];
            for (name, _) in TARGETS {
                assert!(tested.contains(name), "{name} has no replay test");
            }
        }
    };
}

replay_tests!(
    audio,
    nemo_manifest,
    csv_manifest,
    sigmf_meta,
    sigmf_archive,
    raw_iq,
    spec,
    alert_rules,
    job_request,
    webdataset_shard,
);
