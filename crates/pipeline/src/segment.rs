//! The segment stage. One item, streamed: decode → resample → extract, cut into pieces of `chunk_seconds` as
//! the frames become available. Memory stays flat in the file's length: what is held is the
//! samples the next piece reads and at most one piece of frames.
//!
//! A piece is a [`Span`]: frames of the item with the window of samples they read, so it can be
//! computed on its own, by any backend. Consecutive pieces concatenate to the frames of the
//! whole item computed at once (every frame has its true context). Steps that the spec defines
//! over a whole row — Whisper's dynamic-range clamp, NeMo's per-feature normalisation — apply
//! to each piece as its own row.

use std::path::Path;

use sonograph_dsp::span::{frames_ready, span_window, Span};
use sonograph_dsp::spec::{FeatureSpec, OutputKind};
use sonograph_dsp::{CpuExtractor, ItemError};
use thiserror::Error;

use sonograph_io::decode::{AudioReader, DecodeOptions};
use sonograph_io::{DecodeError, ItemReader, StreamError};

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

/// Frames per piece for `chunk_seconds` (at least one), a whole number of rows where the
/// spec stacks frames into rows (no piece but the item's last ends in a padded row).
pub fn frames_per_piece(spec: &FeatureSpec, chunk_seconds: f64) -> usize {
    let samples = chunk_seconds * f64::from(spec.sample_rate);
    ((samples / spec.hop_length as f64).round() as usize)
        .max(1)
        .next_multiple_of(spec.stack_frames.max(1))
}

/// Streams `path` through `extractor`; with `chunk_seconds`, hands a piece to `sink` each
/// time one is complete, otherwise one piece at the end. Welch PSD averages the whole item,
/// so it is never cut. Returns the samples read.
pub fn extract_streaming<E: std::error::Error + 'static>(
    path: &Path,
    opts: &DecodeOptions,
    extractor: &mut CpuExtractor,
    chunk_seconds: Option<f64>,
    sink: impl FnMut(Piece) -> Result<(), E>,
) -> Result<u64, StreamError<E>> {
    extract_from_reader(
        ItemReader::Audio(AudioReader::open(path, opts)?),
        extractor,
        chunk_seconds,
        sink,
    )
}

/// Why computing the pieces of a streamed item stopped.
#[derive(Debug, Error)]
enum PieceStop {
    #[error(transparent)]
    Item(#[from] ItemError),
    #[error("the sink stopped")]
    SinkStopped,
}

/// Where a piece sits in its item: its index, its frames and window, and its time span.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PiecePlan {
    pub index: u32,
    /// The frames and the window of samples they read. (Its `last` says that the window
    /// ends the signal; a speech segment is a signal of its own, ended whether or not it is
    /// its item's last.)
    pub span: Span,
    /// Start within the item, in seconds.
    pub offset_s: f64,
    pub duration_s: f64,
    /// The item's last row: once it is written, the item is done.
    pub last: bool,
}

/// A piece with the window of samples its frames read.
#[derive(Debug, Clone, PartialEq)]
pub struct PieceWindow {
    pub plan: PiecePlan,
    pub samples: Vec<f32>,
}

/// Cuts an item's samples, as they arrive, into pieces of a fixed number of frames, each with
/// its window; holds only the samples from the next piece's window on. A piece is cut once two
/// more frames are ready, so that the last piece is never empty (Whisper drops a frame).
/// Samples are values in the buffers, or interleaved I/Q pairs of values for a complex spec.
pub struct PieceCutter {
    spec: FeatureSpec,
    per_piece: usize,
    /// Values per sample: 2 for IQ.
    per_sample: usize,
    /// Samples from signal index `held_from` on (and half a sample at the end, when the
    /// values so far do not pair up).
    held: Vec<f32>,
    held_from: usize,
    /// Whole samples seen.
    seen: usize,
    values_seen: usize,
    next_frame: usize,
    index: u32,
}

impl PieceCutter {
    pub fn new(spec: &FeatureSpec, chunk_seconds: f64) -> Self {
        PieceCutter {
            spec: spec.clone(),
            per_piece: frames_per_piece(spec, chunk_seconds),
            per_sample: spec.values_per_sample(),
            held: Vec::new(),
            held_from: 0,
            seen: 0,
            values_seen: 0,
            next_frame: 0,
            index: 0,
        }
    }

    /// Samples seen so far.
    pub fn samples_seen(&self) -> usize {
        self.seen
    }

    /// Pieces cut so far.
    pub fn pieces(&self) -> u32 {
        self.index
    }

    /// Adds the item's next samples; hands every piece they complete to `sink`.
    pub fn push<E>(
        &mut self,
        samples: &[f32],
        mut sink: impl FnMut(PieceWindow) -> Result<(), E>,
    ) -> Result<(), E> {
        self.held.extend_from_slice(samples);
        self.values_seen += samples.len();
        self.seen = self.values_seen / self.per_sample;
        while frames_ready(&self.spec, self.seen) >= self.next_frame + self.per_piece + 2 {
            let piece = self.cut(self.per_piece, false);
            // What no later piece reads goes.
            let next = span_window(&self.spec, self.next_frame..self.next_frame + 1, self.seen);
            let drop = next
                .start
                .saturating_sub(self.held_from)
                .min(self.held.len() / self.per_sample);
            self.held.drain(..drop * self.per_sample);
            self.held_from += drop;
            sink(piece)?;
        }
        Ok(())
    }

    /// The last piece (the rest of the item); `None` for an item without samples.
    pub fn finish(mut self) -> Option<PieceWindow> {
        if self.values_seen == 0 {
            return None;
        }
        let frames = self.spec.n_raw_frames(self.seen) - self.next_frame;
        Some(self.cut(frames, true))
    }

    fn cut(&mut self, frames: usize, last: bool) -> PieceWindow {
        let first = self.next_frame;
        let w = span_window(&self.spec, first..first + frames, self.seen);
        let start = w.start.max(self.held_from);
        let span = Span {
            sample_start: start,
            // An earlier piece's frames never read past its window: the item's end is unknown.
            signal_len: if last { self.seen } else { w.end },
            first_frame: first,
            frames,
            last,
        };
        let rate = f64::from(self.spec.sample_rate);
        let seconds_per_frame = self.spec.hop_length as f64 / rate;
        let offset_s = first as f64 * seconds_per_frame;
        let duration_s = if last {
            (self.seen as f64 / rate - offset_s).max(0.0)
        } else {
            frames as f64 * seconds_per_frame
        };
        let v = self.per_sample;
        // The last piece keeps a trailing half sample, for the extractor to refuse.
        let end = if last {
            self.held.len()
        } else {
            (w.end - self.held_from) * v
        };
        let samples = self.held[(start - self.held_from) * v..end].to_vec();
        self.next_frame += frames;
        let index = self.index;
        self.index += 1;
        PieceWindow {
            plan: PiecePlan {
                index,
                span,
                offset_s,
                duration_s,
                last,
            },
            samples,
        }
    }
}

/// [`extract_streaming`] from a reader already open (audio, or IQ for a complex spec).
pub fn extract_from_reader<E: std::error::Error + 'static>(
    reader: ItemReader,
    extractor: &mut CpuExtractor,
    chunk_seconds: Option<f64>,
    mut sink: impl FnMut(Piece) -> Result<(), E>,
) -> Result<u64, StreamError<E>> {
    let path = reader.path().to_path_buf();
    let path = path.as_path();
    let spec = extractor.spec().clone();
    let corrupt = |reason: String| -> StreamError<E> {
        StreamError::Decode(DecodeError::Corrupt {
            path: path.to_path_buf(),
            reason,
        })
    };
    let chunk_seconds = chunk_seconds.filter(|_| spec.output != OutputKind::Psd);
    let Some(chunk_seconds) = chunk_seconds else {
        // One piece: the extractor streams the whole item.
        extractor.begin();
        let samples = reader
            .stream(spec.sample_rate, |c| extractor.push(c))
            .map_err(|e| match e {
                StreamError::Decode(d) => StreamError::Decode(d),
                other => corrupt(other.to_string()),
            })?;
        let mut rows = Vec::new();
        let frames = extractor
            .finish(&mut rows)
            .map_err(|e| corrupt(e.to_string()))?;
        let duration_s = samples as f64 / f64::from(spec.sample_rate);
        sink(Piece {
            index: 0,
            last: true,
            offset_s: 0.0,
            duration_s,
            frames,
            rows,
        })
        .map_err(|source| StreamError::Sink {
            path: path.to_path_buf(),
            source,
        })?;
        return Ok(samples);
    };
    let mut cutter = PieceCutter::new(&spec, chunk_seconds);
    let mut failed: Option<E> = None;
    let mut compute = |w: PieceWindow| -> Result<(), PieceStop> {
        let mut rows = Vec::new();
        let frames = extractor.extract_span(&w.samples, &w.plan.span, &mut rows)?;
        let p = w.plan;
        sink(Piece {
            index: p.index,
            last: p.span.last,
            offset_s: p.offset_s,
            duration_s: p.duration_s,
            frames,
            rows,
        })
        .map_err(|e| {
            failed = Some(e);
            // Stops decoding: nobody takes the pieces any more.
            PieceStop::SinkStopped
        })
    };
    let streamed = reader.stream(spec.sample_rate, |c| cutter.push(c, &mut compute));
    let samples = match streamed {
        Ok(s) => s,
        Err(StreamError::Sink { source, .. }) => {
            return Err(match failed.take() {
                Some(source) => StreamError::Sink {
                    path: path.to_path_buf(),
                    source,
                },
                None => corrupt(source.to_string()),
            })
        }
        Err(StreamError::Decode(d)) => return Err(StreamError::Decode(d)),
        Err(other) => return Err(corrupt(other.to_string())),
    };
    let Some(last) = cutter.finish() else {
        return Err(corrupt(ItemError::Empty.to_string()));
    };
    compute(last).map_err(|e| match failed.take() {
        Some(source) => StreamError::Sink {
            path: path.to_path_buf(),
            source,
        },
        None => corrupt(e.to_string()),
    })?;
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_of_a_stacking_spec_hold_whole_rows() {
        let m4t = FeatureSpec::seamless_m4t();
        assert_eq!(
            frames_per_piece(&m4t, 0.25),
            26,
            "25 frames, rounded up to rows of 2"
        );
        assert_eq!(frames_per_piece(&m4t, 30.0), 3000);
        assert_eq!(frames_per_piece(&FeatureSpec::kaldi(80), 0.25), 25);
    }

    /// The cutter's pieces, each computed alone, are the pieces one extractor streaming the
    /// whole item gives (cut while two frames more than a piece are pending), whatever the
    /// sizes the samples arrive in; and it holds about one window of samples, not the item.
    #[test]
    fn cut_pieces_equal_the_streamed_ones_in_any_chunking() {
        let x: Vec<f32> = (0..16_000 * 7 + 123)
            .map(|i| (0.3 * (i as f64 * 0.011).sin() * (i as f64 * 3e-5).cos()) as f32)
            .collect();
        for spec in [FeatureSpec::whisper(80), FeatureSpec::nemo(80)] {
            let per_piece = frames_per_piece(&spec, 2.0);
            let mut ex = CpuExtractor::new(&spec).unwrap();
            ex.begin();
            let mut streamed: Vec<Vec<f32>> = Vec::new();
            for c in x.chunks(4000) {
                ex.push(c).unwrap();
                while ex.pending_frames() >= per_piece + 2 {
                    let mut rows = Vec::new();
                    ex.take_frames(per_piece, &mut rows);
                    streamed.push(rows);
                }
            }
            let mut rows = Vec::new();
            ex.finish(&mut rows).unwrap();
            streamed.push(rows);
            for chunk in [1_000, 7_919, x.len()] {
                let mut cutter = PieceCutter::new(&spec, 2.0);
                let mut pieces = Vec::new();
                let mut most_held = 0;
                for c in x.chunks(chunk) {
                    cutter
                        .push(c, |p| {
                            pieces.push(p);
                            Ok::<(), ()>(())
                        })
                        .unwrap();
                    most_held = most_held.max(cutter.held.len());
                }
                pieces.push(cutter.finish().unwrap());
                let bound = per_piece * spec.hop_length + spec.n_fft + 2 + chunk;
                assert!(most_held <= bound, "held {most_held} > {bound}");
                assert_eq!(pieces.len(), streamed.len(), "chunk {chunk}");
                let mut offset = 0.0;
                for (k, (p, want)) in pieces.iter().zip(&streamed).enumerate() {
                    assert_eq!(p.plan.index as usize, k);
                    assert_eq!(p.plan.span.last, k + 1 == pieces.len());
                    assert!((p.plan.offset_s - offset).abs() < 1e-9);
                    offset += p.plan.duration_s;
                    let mut rows = Vec::new();
                    ex.extract_span(&p.samples, &p.plan.span, &mut rows)
                        .unwrap();
                    assert_eq!(&rows, want, "chunk {chunk} piece {k}");
                }
                assert!((offset - x.len() as f64 / 16_000.0).abs() < 1e-9);
            }
        }
    }

    #[test]
    fn an_item_without_samples_has_no_last_piece() {
        let cutter = PieceCutter::new(&FeatureSpec::whisper(80), 30.0);
        assert_eq!(cutter.samples_seen(), 0);
        assert!(cutter.finish().is_none());
    }

    /// A "long" item that decodes shorter than one Kaldi frame has one piece of no frames, as
    /// the same audio has as a short item.
    #[test]
    fn an_item_shorter_than_a_frame_has_an_empty_last_piece() {
        let spec = FeatureSpec::kaldi(80);
        let mut cutter = PieceCutter::new(&spec, 30.0);
        cutter.push(&[0.1f32; 100], |_| Err(())).unwrap();
        let last = cutter.finish().unwrap();
        assert_eq!((last.plan.span.frames, last.plan.span.last), (0, true));
        let mut rows = Vec::new();
        let mut ex = CpuExtractor::new(&spec).unwrap();
        assert_eq!(
            ex.extract_span(&last.samples, &last.plan.span, &mut rows),
            Ok(0)
        );
        assert_eq!(ex.extract(&[0.1f32; 100], &mut rows), Ok(0));
        assert!(rows.is_empty());
    }
}
