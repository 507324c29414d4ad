//! Pieces of long items. A [`Span`] names the frames of an item to compute and the window of
//! the item's samples they read, so that any backend can compute a piece on its own — and the
//! pieces of one item can run on several devices at once — and still give exactly the frames
//! of the whole item: the same padding at the item's edges, the same pre-emphasis across a
//! piece's first sample, the same dither (keyed by the item's frame index).

use std::ops::Range;

use crate::error::ItemError;
use crate::signal::{scale_and_preemphasize_into, EdgePadding};
use crate::spec::{FeatureSpec, OutputKind, PreemphasisScope};

/// Frames `first_frame..first_frame + frames` of an item, from the window of its samples that
/// starts at signal index `sample_start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Signal index of the window's first sample.
    pub sample_start: usize,
    /// The item's length: all of it for the last piece; for an earlier one (whose length is
    /// not known yet), at least the end of its window, which its frames never read past.
    pub signal_len: usize,
    pub first_frame: usize,
    pub frames: usize,
    /// The item's last piece: the steps that end an item (Whisper's dropped frame) apply.
    pub last: bool,
}

impl Span {
    /// All of an item of `n` samples.
    pub fn whole(spec: &FeatureSpec, n: usize) -> Span {
        Span {
            sample_start: 0,
            signal_len: n,
            first_frame: 0,
            frames: if n == 0 { 0 } else { spec.n_raw_frames(n) },
            last: true,
        }
    }
}

/// Why a piece of an item cannot be computed under a spec of fixed item length: the item is
/// padded or cut whole, and a piece has no length of its own to take.
pub fn piece_of_fixed_item(spec: &FeatureSpec) -> ItemError {
    let length = match spec.fixed_samples {
        0 => format!("{} frames", spec.fixed_frames),
        samples => format!("{samples} samples"),
    };
    ItemError::BadSpan(format!(
        "the spec pads or cuts every item to {length}, so an item is computed whole, not in \
         pieces"
    ))
}

/// Frames whose samples all lie within the first `n` samples (or the left padding): those a
/// stream can compute before it knows where the item ends.
pub fn frames_ready(spec: &FeatureSpec, n: usize) -> usize {
    // The left edge's mirror reads samples up to -frame_start(0) (numpy's) or one fewer
    // (Kaldi's, which repeats the edge sample).
    let mirror_reach = match EdgePadding::of(spec) {
        EdgePadding::Zeros => 0,
        EdgePadding::Reflect => -spec.frame_start(0),
        EdgePadding::Symmetric => -spec.frame_start(0) - 1,
    };
    if mirror_reach > 0 && n as isize <= mirror_reach {
        return 0;
    }
    let need = spec.window_offset() + spec.win_length;
    if spec.pad_left() + n < need {
        0
    } else {
        (spec.pad_left() + n - need) / spec.hop_length + 1
    }
}

/// The samples frames `frames` of an item of `signal_len` samples read, with the reflections
/// at its edges, plus the sample before them (signal-scope pre-emphasis needs it).
pub fn span_window(spec: &FeatureSpec, frames: Range<usize>, signal_len: usize) -> Range<usize> {
    let n = signal_len as isize;
    if frames.is_empty() || n == 0 {
        return 0..0;
    }
    let first = spec.frame_start(frames.start);
    let end = spec.frame_start(frames.end - 1) + spec.win_length as isize;
    let edge = EdgePadding::of(spec);
    // The mirror of the furthest sample read past each edge, in one reflection: numpy's
    // reflects -i to i and n - 1 + i to n - 1 - i; Kaldi's -i to i - 1 and n - 1 + i to n - i.
    let (left_mirror, right_mirror) = match edge {
        EdgePadding::Zeros => (0, 0),
        EdgePadding::Reflect => (-first, 2 * (n - 1) - (end - 1)),
        EdgePadding::Symmetric => (-first - 1, 2 * n - 1 - (end - 1)),
    };
    // Beyond one reflection (items shorter than the padding) a mirror is periodic: such an
    // item is read whole.
    if edge.mirrors() && (left_mirror > n - 1 || right_mirror < 0) {
        return 0..signal_len;
    }
    let mut lo = first.max(0);
    let mut hi = end.min(n);
    if edge.mirrors() {
        if first < 0 {
            hi = hi.max(left_mirror + 1).min(n);
        }
        if end > n {
            lo = lo.min(right_mirror).max(0);
        }
    }
    (lo - 1).max(0) as usize..hi.max(0) as usize
}

/// Checks that `window_len` samples at `span.sample_start` hold everything the span's frames
/// read, and that the frames exist.
pub fn check_span(spec: &FeatureSpec, window_len: usize, span: &Span) -> Result<(), ItemError> {
    let bad = |reason: String| Err(ItemError::BadSpan(reason));
    // A last piece of no frames (an item shorter than a frame) reads nothing.
    if span.signal_len == 0 || (window_len == 0 && span.frames > 0) {
        return Err(ItemError::Empty);
    }
    if span.signal_len < spec.min_samples {
        return Err(ItemError::TooShort {
            samples: span.signal_len,
            min: spec.min_samples,
        });
    }
    if window_len == 0 && span.sample_start > 0 {
        return bad("an empty window inside the item".into());
    }
    if spec.output == OutputKind::Psd && *span != Span::whole(spec, window_len) {
        return bad("Welch PSD averages the whole item; it cannot be cut into pieces".into());
    }
    let window = span.sample_start..span.sample_start + window_len;
    if window.end > span.signal_len {
        return bad(format!(
            "the window ends at sample {}, past the item's {} samples",
            window.end, span.signal_len
        ));
    }
    let end_frame = span.first_frame + span.frames;
    if span.last && end_frame != spec.n_raw_frames(span.signal_len) {
        return bad(format!(
            "the last piece ends at frame {end_frame}; the item has {}",
            spec.n_raw_frames(span.signal_len)
        ));
    }
    if !span.last && end_frame > frames_ready(spec, span.signal_len) {
        return bad(format!(
            "frame {} reads past the {} samples known",
            end_frame - 1,
            span.signal_len
        ));
    }
    let need = span_window(spec, span.first_frame..end_frame, span.signal_len);
    if !need.is_empty() && (need.start < window.start || need.end > window.end) {
        return bad(format!(
            "frames {}..{end_frame} read samples {}..{}; the window holds {}..{}",
            span.first_frame, need.start, need.end, window.start, window.end
        ));
    }
    Ok(())
}

/// Refuses a window holding a NaN or an infinity, naming the signal index of its sample
/// (`start` is the window's; a sample takes `per_sample` values). The scan has no early exit,
/// so it vectorises; the index is looked for only then.
pub fn check_finite(window: &[f32], start: usize, per_sample: usize) -> Result<(), ItemError> {
    if window.iter().fold(true, |ok, s| ok & s.is_finite()) {
        return Ok(());
    }
    let i = window
        .iter()
        .position(|s| !s.is_finite())
        .expect("the scan found one");
    Err(ItemError::NonFinite {
        index: start + i / per_sample,
        value: window[i],
    })
}

/// A span's window as the spectral core sees it, and the signal index of its first sample:
/// the window itself where the spec neither scales nor pre-emphasises the signal (no copy),
/// else [`prepare_span`]'s copy in `dst`.
pub fn prepared_window<'a>(
    spec: &FeatureSpec,
    window: &'a [f32],
    span: &Span,
    dst: &'a mut Vec<f32>,
) -> Result<(&'a [f32], usize), ItemError> {
    let (base, _) = check_prepared(spec, window, span)?;
    Ok((prepared_checked(spec, window, span, dst), base))
}

/// Whether the spec's prepared window is the signal's own samples: it neither scales nor
/// pre-emphasises the signal (per-frame pre-emphasis comes later, in the frame).
pub fn prepared_as_is(spec: &FeatureSpec) -> bool {
    spec.input_scale == 1.0
        && (spec.preemphasis == 0.0 || spec.preemphasis_scope == PreemphasisScope::Frame)
}

/// [`prepared_window`] of a span [`check_prepared`] has passed: the window itself where the
/// spec neither scales nor pre-emphasises the signal (no copy), else its prepared copy in
/// `dst`.
pub fn prepared_checked<'a>(
    spec: &FeatureSpec,
    window: &'a [f32],
    span: &Span,
    dst: &'a mut Vec<f32>,
) -> &'a [f32] {
    let plain = prepared_as_is(spec);
    // A later piece's first sample is only pre-emphasis context, as in `prepare_span`.
    let len = if span.sample_start == 0 {
        window.len()
    } else {
        window.len() - 1
    };
    if plain {
        return &window[window.len() - len..];
    }
    dst.clear();
    dst.resize(len, 0.0);
    prepare_span_into(spec, window, span, dst);
    dst
}

/// Appends a span's window to `dst` as the spectral core sees it (scaled, and pre-emphasised
/// across its first sample; see [`scale_and_preemphasize`]) after checking it. Returns the
/// signal index of `dst`'s first new sample. One definition for the CPU and the GPU path.
pub fn prepare_span(
    spec: &FeatureSpec,
    window: &[f32],
    span: &Span,
    dst: &mut Vec<f32>,
) -> Result<usize, ItemError> {
    let (base, len) = check_prepared(spec, window, span)?;
    let start = dst.len();
    dst.resize(start + len, 0.0);
    prepare_span_into(spec, window, span, &mut dst[start..]);
    Ok(base)
}

/// Checks a span's window as [`prepare_span`] does; returns the signal index of the first
/// prepared sample and how many there are, so that a caller can lay items out before it
/// writes any (the GPU path writes them straight into its staging memory, in parallel).
pub fn check_prepared(
    spec: &FeatureSpec,
    window: &[f32],
    span: &Span,
) -> Result<(usize, usize), ItemError> {
    let layout = prepared_layout(spec, window.len(), span)?;
    check_finite(window, span.sample_start, 1)?;
    Ok(layout)
}

/// [`check_prepared`] without the scan for non-finite samples, for a caller that scans the
/// window as it copies it (the GPU path's fill, where a second pass over every sample cost
/// 1.9 ms of a 64-clip batch's 10.5 on an H200 machine): it must refuse the window with
/// [`check_finite`] over the same samples, `span.sample_start` being the window's first.
pub fn prepared_layout(
    spec: &FeatureSpec,
    window_len: usize,
    span: &Span,
) -> Result<(usize, usize), ItemError> {
    check_span(spec, window_len, span)?;
    Ok(if span.sample_start == 0 {
        (0, window_len)
    } else {
        // The window's first sample is context: the previous input of its second.
        (span.sample_start + 1, window_len - 1)
    })
}

/// Writes a checked span's window into `dst` (exactly as long as [`check_prepared`] said) as
/// the spectral core sees it.
pub fn prepare_span_into(spec: &FeatureSpec, window: &[f32], span: &Span, dst: &mut [f32]) {
    if span.sample_start == 0 {
        scale_and_preemphasize_into(spec, window, true, 0.0, dst);
    } else {
        let prev = window[0] * spec.input_scale;
        scale_and_preemphasize_into(spec, &window[1..], false, prev, dst);
    }
}

/// The samples `offset..offset + dst.len()` of a checked span's prepared window (as
/// [`prepare_span_into`] writes them, the same bits) into `dst`: a piece of the window made
/// on its own, so that pieces can be made side by side straight where they go (the GPU path's
/// staging memory) without a copy of the whole window first.
pub fn prepare_piece_into(
    spec: &FeatureSpec,
    window: &[f32],
    span: &Span,
    offset: usize,
    dst: &mut [f32],
) {
    // The window's first sample is context where the span starts past the signal's first.
    let context = usize::from(span.sample_start != 0);
    let at = context + offset;
    let samples = &window[at..at + dst.len()];
    if at == 0 {
        scale_and_preemphasize_into(spec, samples, true, 0.0, dst);
    } else {
        // Pre-emphasis reads the sample before, scaled: the context or the piece before's last.
        let prev = window[at - 1] * spec.input_scale;
        scale_and_preemphasize_into(spec, samples, false, prev, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_made_in_pieces_is_the_window_made_whole() {
        let signal: Vec<f32> = (0..5000)
            .map(|i| ((i * 7) as f32 * 0.013).sin() * 0.4)
            .collect();
        for spec in [
            FeatureSpec::nemo(80),
            FeatureSpec::kaldi(80),
            FeatureSpec::whisper(80),
        ] {
            let whole_span = Span::whole(&spec, signal.len());
            // A later piece of the signal: its window's first sample is context.
            let first_frame = 7;
            let start = (spec.frame_start(first_frame) - 1) as usize;
            let later = Span {
                sample_start: start,
                signal_len: signal.len(),
                first_frame,
                frames: 5,
                last: false,
            };
            let end = (spec.frame_start(first_frame + 4) + spec.n_fft as isize) as usize;
            for (window, span) in [(&signal[..], whole_span), (&signal[start..end], later)] {
                let (_, len) = check_prepared(&spec, window, &span).unwrap();
                let mut whole = vec![0.0f32; len];
                prepare_span_into(&spec, window, &span, &mut whole);
                for piece in [1, 2, 333, len] {
                    let mut pieces = vec![f32::NAN; len];
                    for (i, dst) in pieces.chunks_mut(piece).enumerate() {
                        prepare_piece_into(&spec, window, &span, i * piece, dst);
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert!(bits(&pieces) == bits(&whole), "pieces of {piece}");
                }
            }
        }
    }
    use crate::signal::{padded_index, reflect_index};

    #[test]
    fn reflect_matches_numpy() {
        // np.pad([0,1,2,3], 5, mode="reflect") → [3 2 1 2 1 | 0 1 2 3 | 2 1 0 1 2]
        let left: Vec<usize> = (-5..0).map(|i| reflect_index(i, 4)).collect();
        assert_eq!(left, [1, 2, 3, 2, 1]);
        let right: Vec<usize> = (4..9).map(|i| reflect_index(i, 4)).collect();
        assert_eq!(right, [2, 1, 0, 1, 2]);
        assert_eq!(reflect_index(-3, 1), 0);
    }

    #[test]
    fn frames_ready_never_read_past_the_samples_known() {
        for spec in [
            FeatureSpec::whisper(80),
            FeatureSpec::kaldi(80),
            FeatureSpec::nemo(80),
            FeatureSpec::lhotse_fbank(),
            // Kaldi's mirror reaching past the window's own bound: pad_left 200, so frame 0
            // reads samples 0..=199 mirrored and is ready at 200 samples.
            FeatureSpec {
                hop_length: 1,
                ..FeatureSpec::lhotse_fbank()
            },
        ] {
            for n in [
                0, 1, 119, 120, 121, 199, 200, 201, 399, 400, 401, 16_000, 16_161,
            ] {
                let ready = frames_ready(&spec, n);
                if ready > 0 {
                    let end = spec.frame_start(ready - 1) + spec.win_length as isize;
                    assert!(end <= n as isize, "{n}: frame {} ends at {end}", ready - 1);
                    // Reflections included: a long item has these samples where this one does.
                    let long = 10 * n + 1000;
                    for j in 0..ready {
                        for m in 0..spec.win_length as isize {
                            let i = padded_index(&spec, spec.frame_start(j) + m, long);
                            assert!(i.is_none_or(|i| i < n), "{n}: frame {j} reads {i:?}");
                        }
                    }
                    let next = spec.frame_start(ready) + spec.win_length as isize;
                    assert!(next > n as isize, "{n}: frame {ready} would fit too");
                }
            }
        }
    }

    #[test]
    fn windows_cover_every_read_including_reflections() {
        // numpy's reflection (Whisper) and Kaldi's mirror (snip_edges = false), on items long
        // and short (shorter than the padding: the mirror is periodic).
        for (spec, n) in [
            (FeatureSpec::whisper(80), 48_000),
            (FeatureSpec::whisper(80), 150),
            (FeatureSpec::lhotse_fbank(), 48_000),
            (FeatureSpec::lhotse_fbank(), 16_161),
            (FeatureSpec::lhotse_fbank(), 100),
        ] {
            let total = spec.n_raw_frames(n);
            let mut ranges = vec![0..total, total - 1..total];
            if total > 200 {
                ranges.extend([0..3, 100..200, total - 2..total]);
            }
            for frames in ranges {
                let w = span_window(&spec, frames.clone(), n);
                for j in frames.clone() {
                    for m in 0..spec.win_length as isize {
                        let i = padded_index(&spec, spec.frame_start(j) + m, n).unwrap();
                        assert!(
                            w.contains(&i),
                            "n {n}, {frames:?}: frame {j} reads {i}, outside {w:?}"
                        );
                    }
                }
            }
        }
        let spec = FeatureSpec::whisper(80);
        let n = 48_000;
        // A frame inside the item gets one sample of context before it.
        let inner = span_window(&spec, 100..101, n);
        assert_eq!(inner.start as isize, spec.frame_start(100) - 1);
    }

    #[test]
    fn raw_frames_match_the_spec_after_drop_and_psd() {
        for p in FeatureSpec::presets() {
            for n in [1usize, 5, 399, 400, 401, 16_000, 22_050] {
                // A fixed item length frames that many samples, whatever the item's.
                let framed = match p.spec.fixed_samples {
                    0 => n,
                    fixed => fixed,
                };
                let raw = Span::whole(&p.spec, framed).frames;
                let expect = if p.spec.drop_last_frame {
                    raw.saturating_sub(1)
                } else {
                    raw
                };
                // Output rows: frames stacked where the spec stacks them; a fixed frame count
                // whatever the item.
                let rows = match p.spec.fixed_frames {
                    0 => expect.div_ceil(p.spec.stack_frames.max(1)),
                    fixed => fixed,
                };
                assert_eq!(p.spec.n_frames(n), rows, "{} n={n}", p.name);
            }
        }
        let w = FeatureSpec::welch(16_000, 256);
        assert_eq!(w.n_frames(1000), usize::from(w.n_raw_frames(1000) > 0));
        assert_eq!(Span::whole(&w, 0).frames, 0);
    }

    #[test]
    fn preparation_matches_nemo_signal_preemphasis_and_refuses_bad_items() {
        let spec = FeatureSpec::nemo(80);
        let whole = |n| Span::whole(&spec, n);
        let mut dst = Vec::new();
        assert_eq!(
            prepare_span(&spec, &[1.0, 0.5, -0.25], &whole(3), &mut dst),
            Ok(0)
        );
        assert_eq!(dst, [1.0, 0.5 - 0.97, -0.25 - 0.97 * 0.5]);
        assert_eq!(
            prepare_span(&spec, &[], &whole(0), &mut dst),
            Err(ItemError::Empty)
        );
        assert!(matches!(
            prepare_span(&spec, &[0.0, f32::NAN], &whole(2), &mut dst),
            Err(ItemError::NonFinite { index: 1, .. })
        ));
        assert_eq!(dst.len(), 3, "a refused item appends nothing");
        // A piece's first sample is context: it pre-emphasises the second and is dropped.
        let x: Vec<f32> = (0..20_000).map(|i| (i as f32 * 0.01).sin()).collect();
        let w = span_window(&spec, 30..31, x.len());
        let piece = Span {
            sample_start: w.start,
            signal_len: x.len(),
            first_frame: 30,
            frames: 1,
            last: false,
        };
        dst.clear();
        let base = prepare_span(&spec, &x[w.clone()], &piece, &mut dst).unwrap();
        assert_eq!(base, w.start + 1);
        let mut all = Vec::new();
        prepare_span(&spec, &x, &whole(x.len()), &mut all).unwrap();
        assert_eq!(dst, all[base..w.end]);
    }
}
