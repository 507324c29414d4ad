//! What a model test does where it cannot run for want of onnxruntime: with
//! `SONOGRAPH_REQUIRE_ORT=1` (set by CI, which pip-installs onnxruntime==1.31.1) it fails,
//! naming why; otherwise it prints why and appends a line to `$SONOGRAPH_SKIP_LOG`, so that
//! the run ends with a count of skipped tests. The onnxruntime twin of skip.rs (whose
//! recording it uses); every test that needs the runtime goes through it, so that no model
//! test skips in any other way.

// Included with `#[path]` by the model crate's tests too, so it brings skip.rs itself; the
// integration tests have it twice, which is harmless: it holds functions only.
#[allow(clippy::duplicate_mod)]
#[path = "skip.rs"]
mod gpu_skip;

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
    gpu_skip::skip_unless_required("SONOGRAPH_REQUIRE_ORT", why);
}

/// A CUDA device that refused to open (no NVIDIA GPU, the CPU wheel of onnxruntime, a build
/// without `cuda`): counted as a skip. Fails under `SONOGRAPH_REQUIRE_CUDA=1` (set where a GPU
/// and onnxruntime-gpu are, bench/gpu/model_cuda.sh).
#[allow(dead_code)]
pub fn skip_cuda(why: &str) {
    gpu_skip::skip_unless_required("SONOGRAPH_REQUIRE_CUDA", why);
}
