//! What a model test does where it cannot run for want of onnxruntime: with
//! `SONOGRAPH_REQUIRE_ORT=1` (set by CI, which pip-installs onnxruntime==1.31.1) it fails,
//! naming why; otherwise it prints why and appends a line to `$SONOGRAPH_SKIP_LOG`, so that
//! the run ends with a count of skipped tests. Included with `#[path]` by every test that needs
//! the runtime, so that no model test skips in any other way (the ORT twin of skip.rs, the
//! GPU one on main).

use std::io::Write;

/// onnxruntime, or `None` after recording the skip (the caller returns). Fails under
/// `SONOGRAPH_REQUIRE_ORT=1`.
#[allow(dead_code)]
pub fn runtime_or_skip() -> Option<&'static sonograph_model::Runtime> {
    match sonograph_model::Runtime::get(None) {
        Ok(rt) => Some(rt),
        Err(e) => {
            skip(&e.to_string());
            None
        }
    }
}

/// Fails under `SONOGRAPH_REQUIRE_ORT=1`; else records and prints the skip.
#[allow(dead_code)]
pub fn skip(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    if std::env::var("SONOGRAPH_REQUIRE_ORT").is_ok_and(|v| v == "1") {
        panic!("{test} would skip, and SONOGRAPH_REQUIRE_ORT=1 makes that a failure: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    if let Some(path) = std::env::var_os("SONOGRAPH_SKIP_LOG") {
        let line = format!("{test}: {why}\n");
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .unwrap_or_else(|e| panic!("cannot record the skip in {path:?}: {e}"));
    }
}
