//! What a test does where it cannot run for want of a device (or of the Python package an
//! interoperability test runs): with `SONOGRAPH_REQUIRE_GPU=1` (or `SONOGRAPH_REQUIRE_PYTHON=1`;
//! CI sets both, having installed lavapipe and the packages) it fails, naming why;
//! otherwise it prints why and appends a line to `$SONOGRAPH_SKIP_LOG`, so that the run ends
//! with a count of skipped tests (scripts/test.sh prints it). Included with `#[path]` by every
//! test that can skip, so that no test skips in any other way.

use std::io::Write;

/// Fails under `SONOGRAPH_REQUIRE_GPU=1`; else records and prints the skip. The caller returns
/// right after.
#[allow(dead_code)]
pub fn skip(why: &str) {
    skip_unless_required("SONOGRAPH_REQUIRE_GPU", why);
}

/// Fails when the variable `required` (`SONOGRAPH_REQUIRE_GPU`, `SONOGRAPH_REQUIRE_PYTHON`)
/// is 1; else records and prints the skip.
#[allow(dead_code)]
pub fn skip_unless_required(required: &str, why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    if std::env::var(required).is_ok_and(|v| v == "1") {
        panic!("{test} would skip, and {required}=1 makes that a failure: {why}");
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
