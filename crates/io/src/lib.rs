//! sonograph-io: decoding (symphonia), resampling (rubato) and writers.

pub mod aws_profile;
pub mod calibration;
mod declared;
pub mod decode;
pub mod error;
mod item;
pub mod ledger;
pub mod manifest;
mod nemo_tarred;
pub mod npy;
mod ogg_guard;
pub mod parquet;
pub mod publish;
pub mod remote;
pub mod resample;
pub mod roots;
mod sha512_lanes;
pub mod sigmf;
pub mod span;
pub mod table;
mod tar_index;
pub mod transcripts;
pub mod walk;
pub mod wds_part;
pub mod webdataset;

use std::path::Path;

pub use decode::{AudioInfo, AudioReader, ChannelMix, DecodeOptions, Limits};
pub use error::{DecodeError, StreamError, WriteError};
pub use npy::{read_npy, read_npy_f32, write_npy};
pub use resample::StreamResampler;
pub use roots::Roots;
pub use sigmf::{IqError, IqReader, IqRecording, IqSource};

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

/// [`stream_mono`] with the decoding on a thread of its own: the sink works on one chunk
/// while the next is being decoded (two cores for one file), with at most a few chunks held
/// between them, so memory stays flat in the file's length.
pub fn stream_mono_pipelined<E: std::error::Error + Send + 'static>(
    path: &Path,
    opts: &DecodeOptions,
    rate: u32,
    mut sink: impl FnMut(&[f32]) -> Result<(), E>,
) -> Result<StreamSummary, StreamError<E>> {
    /// The sink stopped: the decoder stops too.
    #[derive(Debug, thiserror::Error)]
    #[error("the consumer stopped")]
    struct Stopped;
    // Chunks of at least this many samples cross between the threads: a decoder's packets
    // are small (a WAV's are a few hundred frames), and a hand-over costs a context switch.
    const BATCH: usize = 1 << 16;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<f32>>(4);
    std::thread::scope(|scope| {
        let decoder = scope.spawn(move || {
            let mut batch = Vec::with_capacity(BATCH);
            let summary = stream_mono(path, opts, rate, |chunk| {
                batch.extend_from_slice(chunk);
                if batch.len() >= BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    tx.send(full).map_err(|_| Stopped)?;
                }
                Ok(())
            })?;
            if !batch.is_empty() {
                tx.send(batch).map_err(|_| StreamError::Sink {
                    path: path.to_path_buf(),
                    source: Stopped,
                })?;
            }
            Ok(summary)
        });
        let mut failed = None;
        for chunk in rx {
            if let Err(e) = sink(&chunk) {
                failed = Some(e);
                break; // drops the receiver: the decoder's next send fails and it stops
            }
        }
        let decoded = decoder
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match (failed, decoded) {
            (Some(source), _) => Err(StreamError::Sink {
                path: path.to_path_buf(),
                source,
            }),
            (None, Ok(summary)) => Ok(summary),
            (None, Err(StreamError::Decode(d))) => Err(StreamError::Decode(d)),
            // The receiver only goes away after a sink error, handled above.
            (None, Err(e)) => Err(StreamError::Decode(DecodeError::Corrupt {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })),
        }
    })
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
    let mut deliver = |samples: &[f32]| -> Result<(), StreamError<E>> {
        output_samples += samples.len() as u64;
        if samples.is_empty() {
            return Ok(());
        }
        sink(samples).map_err(|source| StreamError::Sink {
            path: path.to_path_buf(),
            source,
        })
    };
    while let Some(chunk) = reader.next_chunk()? {
        if resampler.is_passthrough() {
            // At the file's own rate the decoder's chunk goes to the sink as it is.
            deliver(chunk)?;
            continue;
        }
        resampler.process(chunk, &mut out);
        deliver(&out)?;
        out.clear();
    }
    resampler.finish(&mut out);
    deliver(&out)?;
    Ok(StreamSummary {
        info,
        source_frames: reader.frames_read(),
        output_samples,
    })
}

/// An item's samples, read a chunk at a time: a decoded (and resampled) audio file, or an IQ
/// recording's interleaved I/Q values. What the stages that cut and compute items read, so
/// that audio and IQ go through the same code.
pub enum ItemReader {
    Audio(AudioReader),
    Iq(IqReader),
}

impl ItemReader {
    /// The file read (an IQ recording's data; `archive/member` inside an archive).
    pub fn path(&self) -> &Path {
        match self {
            ItemReader::Audio(r) => r.path(),
            ItemReader::Iq(r) => r.path(),
        }
    }

    /// The item's length in seconds as its header (or an IQ recording's data length) says,
    /// before anything is read; `None` when the header does not say.
    pub fn expected_seconds(&self) -> Option<f64> {
        match self {
            ItemReader::Audio(r) => r.expected_seconds(),
            ItemReader::Iq(r) => Some(r.samples() as f64 / r.sample_rate()),
        }
    }

    /// Hands the samples to `sink` chunk by chunk as they are read: audio resampled to
    /// `rate`, IQ as recorded (it is never resampled: the caller checked its rate). Returns
    /// how many samples went to the sink.
    pub fn stream<E: std::error::Error + 'static>(
        self,
        rate: u32,
        mut sink: impl FnMut(&[f32]) -> Result<(), E>,
    ) -> Result<u64, StreamError<E>> {
        match self {
            ItemReader::Audio(r) => stream_reader(r, rate, sink).map(|s| s.output_samples),
            ItemReader::Iq(mut r) => {
                let path = r.path().to_path_buf();
                let mut chunk = Vec::new();
                let mut samples = 0u64;
                loop {
                    chunk.clear();
                    let n = r.read_interleaved(&mut chunk).map_err(DecodeError::Iq)?;
                    if n == 0 {
                        return Ok(samples);
                    }
                    samples += n as u64;
                    sink(&chunk).map_err(|source| StreamError::Sink {
                        path: path.clone(),
                        source,
                    })?;
                }
            }
        }
    }

    /// All the samples (see [`stream`](Self::stream)).
    pub fn read_all(self, rate: u32) -> Result<Vec<f32>, DecodeError> {
        Ok(self
            .read_up_to(rate, usize::MAX)?
            .expect("no stream is longer than usize::MAX values"))
    }

    /// All the samples when there are at most `max_values` of them (an IQ sample is two
    /// values); `None`, having read no more than that, when the stream goes on past it. What
    /// holds an item whole reads it so: a header that says "short" and lies costs at most
    /// `max_values`, never the decode limit.
    pub fn read_up_to(self, rate: u32, max_values: usize) -> Result<Option<Vec<f32>>, DecodeError> {
        // Sized from the header, or an IQ recording's real length, where they say: no
        // reallocation. Capped at 64 MiB of samples, since a header can lie within the limits.
        let expected = match &self {
            ItemReader::Audio(r) => r
                .expected_seconds()
                .map_or(0, |s| (s * f64::from(rate)).ceil() as usize + 1024),
            ItemReader::Iq(r) => 2 * r.samples() as usize,
        };
        let mut all = Vec::with_capacity(expected.min(max_values).min(1 << 24));
        #[derive(Debug, thiserror::Error)]
        #[error("longer than asked")]
        struct TooLong;
        let read = self.stream(rate, |chunk| {
            if all.len() + chunk.len() > max_values {
                return Err(TooLong);
            }
            all.extend_from_slice(chunk);
            Ok(())
        });
        match read {
            Ok(_) => Ok(Some(all)),
            Err(StreamError::Sink { .. }) => Ok(None),
            Err(StreamError::Decode(d)) => Err(d),
        }
    }
}

/// Decodes the whole file to mono at `rate`.
pub fn decode_mono(path: &Path, opts: &DecodeOptions, rate: u32) -> Result<Vec<f32>, DecodeError> {
    decode_reader(AudioReader::open(path, opts)?, rate)
}

/// Decodes what is left of `reader` to mono at `rate`.
pub fn decode_reader(reader: AudioReader, rate: u32) -> Result<Vec<f32>, DecodeError> {
    ItemReader::Audio(reader).read_all(rate)
}
