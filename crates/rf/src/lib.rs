//! sonograph-rf: synthetic RF IQ recordings and RF features.
//!
//! - [`philox`]: the counter-based generator (Philox 4x32-10) every random draw comes from,
//!   keyed by the seed and addressed by (sample index, stream, counter);
//! - [`normal`]: normal deviates from one Philox word with integer arithmetic only;
//! - [`spec`], [`modulate`], [`synth`]: a dataset spec, the modulations and the impairments;
//! - [`features`]: Welch PSD (as scipy), SNR estimators, occupied bandwidth, spectral shape,
//!   PAPR, amplitude/phase/frequency statistics, cumulants;
//! - [`sigmf`]: SigMF metadata types.
//!
//! No I/O and no GPU here: sonograph-io reads and writes files, sonograph-gpu runs the exact
//! stage of synthesis and the PSD on devices.

pub mod error;
pub mod features;
pub mod math;
pub mod modulate;
mod ndtri_table;
pub mod normal;
pub mod philox;
mod pool;
pub mod rows;
pub mod sigmf;
#[cfg(target_arch = "x86_64")]
mod simd;
pub mod spec;
pub mod synth;

pub use error::RfError;
pub use features::{features, FeatureConfig, Psd, RfFeatures, WelchConfig};
/// The complex sample type of every IQ buffer (rustfft's).
pub use rustfft::num_complex::Complex32;
pub use spec::{ModKind, ModulationSpec, Range, SnrDefinition, SynthSpec};
pub use synth::{add_noise, NoiseDevice, NoiseJob, Sample, Synth, Truth};
