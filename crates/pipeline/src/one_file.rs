//! The `features` command: one file's features on one device, written as a .npy
//! `[frames, bins]`.

use std::path::Path;

use sonograph_dsp::{
    AudioBatch, CpuBackend, CpuExtractor, Extractor, FeatureBatch, FeatureSpec, Precision,
};
use sonograph_io::parquet::Dtype;
use sonograph_io::{DecodeOptions, StreamError};

use crate::batcher::{AdaptiveBatcher, BatcherConfig};
use crate::error::JobError;

/// What was written, and what the user should be told.
#[derive(Debug, Clone)]
pub struct FileFeatures {
    pub frames: usize,
    /// The device that computed them.
    pub device: String,
    /// Warnings naming the file: a file shorter than one frame, a GPU that could not take it.
    pub warnings: Vec<String>,
}

/// Computes `input`'s features and writes them to `out` in `dtype`. On the CPU (`gpu` is
/// `None`) the frames are computed while the file is still being decoded, on another core; a
/// GPU gets the whole file as one item through the adaptive batcher, so a file that does not
/// fit on it (or a device lost on it) is computed on the CPU, with a warning.
pub fn file_features(
    input: &Path,
    spec: &FeatureSpec,
    precision: Precision,
    opts: &DecodeOptions,
    gpu: Option<Box<dyn Extractor>>,
    out: &Path,
    dtype: Dtype,
) -> Result<FileFeatures, JobError> {
    // A fixed item length reads no further than it needs, as `extract` reads.
    let opts = &DecodeOptions {
        duration_s: crate::config::decoded_seconds(spec, opts.duration_s, 1.0),
        ..opts.clone()
    };
    let mut warnings = Vec::new();
    let short = |frames: usize, samples: u64| {
        (frames == 0).then(|| format!(
            "{}: {samples} samples at {} Hz are shorter than one frame; writing 0 frames (as the reference does)",
            input.display(),
            spec.sample_rate
        ))
    };
    let write = |frames: usize, rows: &[f32]| {
        sonograph_io::write_npy(out, &[frames, spec.n_bins()], rows, dtype)
            .map_err(|e| JobError::Input(e.to_string()))
    };
    let Some(mut gpu) = gpu else {
        let (rows, frames, samples) = streamed_on_cpu(input, spec, precision, opts)?;
        warnings.extend(short(frames, samples));
        write(frames, &rows)?;
        return Ok(FileFeatures {
            frames,
            device: "cpu".into(),
            warnings,
        });
    };
    let samples = sonograph_io::decode_mono(input, opts, spec.sample_rate)
        .map_err(|e| JobError::Input(e.to_string()))?;
    let mut cpu = CpuBackend::new(spec, precision).map_err(|e| JobError::Config(e.to_string()))?;
    let mut batcher = AdaptiveBatcher::new(BatcherConfig {
        initial: 1,
        max: 1,
        ..Default::default()
    });
    gpu.set_rows_stored_as_f16(dtype == Dtype::F16);
    let mut batch = FeatureBatch::new(spec.n_bins());
    batcher.run(
        &AudioBatch::from_items([samples.as_slice()]),
        gpu.as_mut(),
        &mut cpu,
        &mut batch,
    );
    for alert in &batcher.stats().alerts {
        warnings.push(format!("{}: {alert}", input.display()));
    }
    let (frames, rows) = batch
        .item(0)
        .map_err(|e| JobError::Input(format!("{}: {e}", input.display())))?;
    warnings.extend(short(frames, samples.len() as u64));
    write(frames, rows)?;
    Ok(FileFeatures {
        frames,
        device: gpu.device(),
        warnings,
    })
}

/// The CPU extractor fed as the file decodes; the rows, frames and samples.
fn streamed_on_cpu(
    input: &Path,
    spec: &FeatureSpec,
    precision: Precision,
    opts: &DecodeOptions,
) -> Result<(Vec<f32>, usize, u64), JobError> {
    let mut extractor = CpuExtractor::with_precision(spec, precision)
        .map_err(|e| JobError::Config(e.to_string()))?;
    // The header's length (when it has one) sizes the rows at once.
    let expected = sonograph_io::AudioReader::open(input, opts)
        .ok()
        .and_then(|r| r.expected_seconds())
        .map_or(0, |s| (s * f64::from(spec.sample_rate)) as usize);
    extractor.begin_sized(expected);
    let summary = sonograph_io::stream_mono_pipelined(input, opts, spec.sample_rate, |chunk| {
        extractor.push(chunk)
    })
    .map_err(|e| match e {
        StreamError::Decode(d) => JobError::Input(d.to_string()),
        other => JobError::Input(other.to_string()),
    })?;
    let mut rows = Vec::new();
    let frames = extractor
        .finish(&mut rows)
        .map_err(|e| JobError::Input(format!("{}: {e}", input.display())))?;
    Ok((rows, frames, summary.output_samples))
}
