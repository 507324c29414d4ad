//! sonograph-model: models on onnxruntime, loaded at run time through the `ort` crate
//! (`load-dynamic`: no download or link at build time; [`Runtime::get`] finds the library).
//!
//! - [`vad`]: Silero VAD (vendored, silero-vad 6.2.3) and `get_speech_timestamps`, streamed:
//!   [`VadSegmenter`] takes samples and yields speech segments.
//! - [`runner`]: [`ModelRunner`] runs an ONNX encoder (NeMo FastConformer: `audio_signal`,
//!   `length` → `outputs`, `encoded_lengths`) or CTC model (→ `logprobs`) on batches of
//!   feature rows, padded, with lengths; its errors tell one item's from the batch's.
//! - [`asr`]: NeMo Parakeet exports in the layout onnx-asr reads (CTC: `model.onnx`; TDT and
//!   RNN-T: `encoder-model.onnx` + `decoder_joint-model.onnx`; `vocab.txt`, `config.json`),
//!   decoded greedily as onnx-asr 0.12.0 does.
//!
//! No wgpu and no HTTP here: models run through onnxruntime's own providers, on the CPU, or on
//! a CUDA device in a build with the `cuda` feature (onnxruntime-gpu loaded).

pub mod asr;
pub mod decode;
pub mod error;
pub mod runner;
pub mod runtime;
pub mod vad;

pub use asr::{AsrModel, Transcript};
pub use error::{DeviceError, ItemError, ModelError, INSTALL_HINT};
pub use runner::{ModelBatch, ModelOutput, ModelRunner};
pub use runtime::{ModelDevice, Runtime, ORT_LIB_ENV};
pub use vad::{Segment, VadParams, VadSegmenter};
