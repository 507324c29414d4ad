//! One item, streamed: decode → resample → extract, cut into pieces of `chunk_seconds` as
//! the frames become available. Memory stays flat in the file's length: what is held is the
//! extractor's tail of samples and at most one piece of frames.
//!
//! Consecutive pieces concatenate to the frames of the whole item computed at once (one
//! extractor sees the whole stream, so every frame has its true context). Steps that the
//! spec defines over a whole row — Whisper's dynamic-range clamp, NeMo's per-feature
//! normalisation — apply to each piece as its own row.

use std::path::Path;

use sonograph_dsp::spec::OutputKind;
use sonograph_dsp::CpuExtractor;

use crate::decode::{AudioReader, DecodeOptions};
use crate::error::{DecodeError, StreamError};
use crate::StreamSummary;

/// One row of output.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    pub index: u32,
    /// The item's last piece.
    pub last: bool,
    /// Start within the item, in seconds.
    pub offset_s: f64,
    pub duration_s: f64,
    pub frames: usize,
    /// `frames × bins`, row-major.
    pub rows: Vec<f32>,
}

/// Frames per piece for `chunk_seconds` (at least one).
pub fn frames_per_piece(extractor: &CpuExtractor, chunk_seconds: f64) -> usize {
    let spec = extractor.spec();
    let samples = chunk_seconds * f64::from(spec.sample_rate);
    ((samples / spec.hop_length as f64).round() as usize).max(1)
}

/// Streams `path` through `extractor`; with `chunk_seconds`, hands a piece to `sink` each
/// time one is complete, otherwise one piece at the end. Welch PSD averages the whole item,
/// so it is never cut.
pub fn extract_streaming<E: std::error::Error + 'static>(
    path: &Path,
    opts: &DecodeOptions,
    extractor: &mut CpuExtractor,
    chunk_seconds: Option<f64>,
    sink: impl FnMut(Piece) -> Result<(), E>,
) -> Result<StreamSummary, StreamError<E>> {
    extract_from_reader(
        AudioReader::open(path, opts)?,
        extractor,
        chunk_seconds,
        sink,
    )
}

/// [`extract_streaming`] from a reader already open.
pub fn extract_from_reader<E: std::error::Error + 'static>(
    reader: AudioReader,
    extractor: &mut CpuExtractor,
    chunk_seconds: Option<f64>,
    mut sink: impl FnMut(Piece) -> Result<(), E>,
) -> Result<StreamSummary, StreamError<E>> {
    let path = reader.path().to_path_buf();
    let path = path.as_path();
    let spec = extractor.spec().clone();
    let per_piece = match chunk_seconds {
        Some(c) if spec.output != OutputKind::Psd => Some(frames_per_piece(extractor, c)),
        _ => None,
    };
    let seconds_per_frame = spec.hop_length as f64 / f64::from(spec.sample_rate);
    let mut index = 0u32;
    let mut frames_out = 0usize;
    let mut failed: Option<StreamError<E>> = None;
    extractor.begin();
    let summary =
        crate::stream_reader::<sonograph_dsp::ExtractError>(reader, spec.sample_rate, |chunk| {
            extractor.push(chunk)?;
            let Some(n) = per_piece else { return Ok(()) };
            // Keep two frames back so that the final piece is never empty, even when Whisper
            // drops the last frame.
            while failed.is_none() && extractor.pending_frames() >= n + 2 {
                let mut rows = Vec::new();
                let frames = extractor.take_frames(n, &mut rows);
                let piece = Piece {
                    index,
                    last: false,
                    offset_s: frames_out as f64 * seconds_per_frame,
                    duration_s: frames as f64 * seconds_per_frame,
                    frames,
                    rows,
                };
                index += 1;
                frames_out += frames;
                if let Err(source) = sink(piece) {
                    failed = Some(StreamError::Sink {
                        path: path.to_path_buf(),
                        source,
                    });
                }
            }
            if failed.is_some() {
                // Stop decoding: nobody takes the pieces any more.
                return Err(sonograph_dsp::ExtractError::Unavailable(
                    "the sink stopped".into(),
                ));
            }
            Ok(())
        });
    if let Some(e) = failed {
        return Err(e);
    }
    let summary = summary.map_err(|e| match e {
        StreamError::Decode(d) => StreamError::Decode(d),
        StreamError::Sink { path, source } => StreamError::Decode(DecodeError::Corrupt {
            path,
            reason: source.to_string(),
        }),
    })?;
    let mut rows = Vec::new();
    let frames = extractor.finish(&mut rows).map_err(|e| {
        StreamError::Decode(DecodeError::Corrupt {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    })?;
    let total_s = summary.output_samples as f64 / f64::from(spec.sample_rate);
    let offset_s = frames_out as f64 * seconds_per_frame;
    sink(Piece {
        index,
        last: true,
        offset_s,
        duration_s: (total_s - offset_s).max(0.0),
        frames,
        rows,
    })
    .map_err(|source| StreamError::Sink {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(summary)
}
