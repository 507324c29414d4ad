//! Helpers of several test files: the golden fixtures' keys, model outputs, the publish crash
//! driver, a served sonograph, and the recording of skipped tests.

pub mod golden_keys;
pub mod model_outputs;
#[cfg(feature = "failpoints")]
pub mod publish_crash;
pub mod serving;
pub mod skip;
pub mod skip_ort;
