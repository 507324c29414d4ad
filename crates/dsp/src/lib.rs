//! sonograph-dsp: feature specs and presets, windows, mel and DCT tables, and the CPU
//! extractor. No I/O, no GPU, no async: everything here is a pure function of samples and a
//! [`FeatureSpec`].

pub mod backend;
pub mod calibration;
pub mod complex;
pub mod dct;
pub mod dither;
pub mod error;
pub mod extractor;
pub mod fastlog;
pub mod float;
pub mod mel;
pub mod pcm16;
pub mod signal;
pub mod span;
pub mod spec;
pub mod window;

pub use backend::{AudioBatch, CpuBackend, Extractor, FeatureBatch, MemoryStats, TransferStats};
pub use calibration::CalibrationStore;
pub use error::{DeviceError, ItemError, SpecError};
pub use extractor::{CpuExtractor, Precision};
pub use span::Span;
pub use spec::{FeatureSpec, InputKind, OutputKind, Preset};
