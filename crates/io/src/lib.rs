//! sonograph-io: decoding (symphonia), resampling (rubato) and writers.

pub mod decode;
pub mod error;
pub mod ledger;
pub mod manifest;
pub mod npy;
pub mod parquet;
pub mod resample;
pub mod transcripts;

use std::path::Path;

pub use decode::{AudioInfo, AudioReader, ChannelMix, DecodeOptions, Limits};
pub use error::{DecodeError, StreamError, WriteError};
pub use npy::{read_npy, read_npy_f32, write_npy};
pub use resample::StreamResampler;

/// What a finished stream was.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSummary {
    pub info: AudioInfo,
    /// Frames decoded at the file's rate.
    pub source_frames: u64,
    /// Samples handed to the sink, at the target rate.
    pub output_samples: u64,
}

/// Decodes `path`, mixes to mono, resamples to `rate` and hands the samples to `sink` chunk
/// by chunk as they are decoded: the sink starts working before the file has been read.
pub fn stream_mono<E: std::error::Error + 'static>(
    path: &Path,
    opts: &DecodeOptions,
    rate: u32,
    sink: impl FnMut(&[f32]) -> Result<(), E>,
) -> Result<StreamSummary, StreamError<E>> {
    stream_reader(AudioReader::open(path, opts)?, rate, sink)
}

/// [`stream_mono`] from a reader already open (e.g. one whose header was inspected first).
pub fn stream_reader<E: std::error::Error + 'static>(
    mut reader: AudioReader,
    rate: u32,
    mut sink: impl FnMut(&[f32]) -> Result<(), E>,
) -> Result<StreamSummary, StreamError<E>> {
    let path = reader.path().to_path_buf();
    let path = path.as_path();
    let info = reader.info().clone();
    let mut resampler =
        StreamResampler::new(info.sample_rate, rate).map_err(|reason| DecodeError::Resample {
            path: path.to_path_buf(),
            reason,
        })?;
    let mut out = Vec::new();
    let mut output_samples = 0u64;
    let mut deliver = |out: &mut Vec<f32>, sink: &mut dyn FnMut(&[f32]) -> Result<(), E>| {
        output_samples += out.len() as u64;
        let r = if out.is_empty() { Ok(()) } else { sink(out) };
        out.clear();
        r.map_err(|source| StreamError::Sink {
            path: path.to_path_buf(),
            source,
        })
    };
    while let Some(chunk) = reader.next_chunk()? {
        if resampler.is_passthrough() {
            out.extend_from_slice(chunk);
        } else {
            resampler.process(chunk, &mut out);
        }
        deliver(&mut out, &mut sink)?;
    }
    resampler.finish(&mut out);
    deliver(&mut out, &mut sink)?;
    Ok(StreamSummary {
        info,
        source_frames: reader.frames_read(),
        output_samples,
    })
}

/// Decodes the whole file to mono at `rate`.
pub fn decode_mono(path: &Path, opts: &DecodeOptions, rate: u32) -> Result<Vec<f32>, DecodeError> {
    decode_reader(AudioReader::open(path, opts)?, rate)
}

/// Decodes what is left of `reader` to mono at `rate`.
pub fn decode_reader(reader: AudioReader, rate: u32) -> Result<Vec<f32>, DecodeError> {
    let mut all = Vec::new();
    stream_reader::<std::convert::Infallible>(reader, rate, |chunk| {
        all.extend_from_slice(chunk);
        Ok(())
    })
    .map_err(|e| match e {
        StreamError::Decode(d) => d,
        StreamError::Sink { source, .. } => match source {},
    })?;
    Ok(all)
}
