//! Pieces of a long item for the GPU tests, cut as the pipeline's decode workers cut them:
//! `frames_per_piece` frames each, from the window of samples its frames read (the sample
//! before included), the last piece the signal's end.

use sonograph_dsp::span::{span_window, Span};
use sonograph_dsp::{AudioBatch, FeatureSpec};

/// Appends every piece of `signal` to `batch`; returns how many.
pub fn push_every_piece(
    batch: &mut AudioBatch,
    spec: &FeatureSpec,
    signal: &[f32],
    frames_per_piece: usize,
) -> usize {
    let total = spec.n_raw_frames(signal.len());
    let (mut first, mut pieces) = (0, 0);
    while first < total {
        let frames = frames_per_piece.min(total - first);
        let last = first + frames == total;
        let w = span_window(spec, first..first + frames, signal.len());
        let span = Span {
            sample_start: w.start,
            signal_len: if last { signal.len() } else { w.end },
            first_frame: first,
            frames,
            last,
        };
        batch.push_piece(&signal[w], Some(span));
        first += frames;
        pieces += 1;
    }
    pieces
}
