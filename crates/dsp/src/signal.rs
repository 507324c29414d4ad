//! The signal as the spectral core reads it: scaled, pre-emphasised, and padded at the item's
//! edges. One definition for the streaming extractor, pieces of long items and the GPU.

use crate::spec::{FeatureSpec, Framing, PadMode, PreemphasisScope};

/// Appends `samples` to `dst` as the spectral core sees them: times `input_scale`, and, with
/// signal-scope pre-emphasis, `y[i] = x[i] − c·x[i−1]`, keeping the item's first sample as is
/// (NeMo). `prev` is the last scaled input of the previous chunk (ignored `at_start`); returns
/// the last scaled input of this one. One definition for the CPU and the GPU path.
pub fn scale_and_preemphasize(
    spec: &FeatureSpec,
    samples: &[f32],
    at_start: bool,
    prev: f32,
    dst: &mut Vec<f32>,
) -> f32 {
    let start = dst.len();
    dst.resize(start + samples.len(), 0.0);
    scale_and_preemphasize_into(spec, samples, at_start, prev, &mut dst[start..])
}

/// [`scale_and_preemphasize`] into `dst`, exactly as long as `samples`.
pub fn scale_and_preemphasize_into(
    spec: &FeatureSpec,
    samples: &[f32],
    at_start: bool,
    prev: f32,
    dst: &mut [f32],
) -> f32 {
    debug_assert_eq!(samples.len(), dst.len());
    let scale = spec.input_scale;
    let c = if spec.preemphasis_scope == PreemphasisScope::Signal {
        spec.preemphasis
    } else {
        0.0
    };
    let Some(&last) = samples.last() else {
        return prev;
    };
    if c == 0.0 && scale == 1.0 {
        dst.copy_from_slice(samples);
        return last;
    }
    let (mut rest, mut out) = (samples, &mut dst[..]);
    let mut prev = prev;
    if at_start {
        prev = samples[0] * scale;
        out[0] = prev;
        rest = &samples[1..];
        out = &mut out[1..];
    }
    for (y, &s) in out.iter_mut().zip(rest) {
        let x = s * scale;
        *y = x - c * prev;
        prev = x;
    }
    prev
}

/// What a frame reads beyond the item's edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgePadding {
    /// Zeros (or nothing: whole frames only).
    Zeros,
    /// numpy's "reflect": index −1 reads sample 1 (torch.stft, librosa).
    Reflect,
    /// Kaldi's mirror with the edge sample repeated: index −1 reads sample 0 (`snip_edges =
    /// false`).
    Symmetric,
}

impl EdgePadding {
    /// The padding `spec`'s framing reads.
    pub fn of(spec: &FeatureSpec) -> Self {
        match (spec.framing, spec.pad_mode) {
            (Framing::Center, PadMode::Reflect) => EdgePadding::Reflect,
            (Framing::NoSnipEdges, _) => EdgePadding::Symmetric,
            (Framing::Center, PadMode::Constant) | (Framing::SnipEdges, _) => EdgePadding::Zeros,
        }
    }

    /// Whether samples beyond the edges are read from the signal.
    pub fn mirrors(self) -> bool {
        self != EdgePadding::Zeros
    }

    /// The signal index that index `i` (inside or outside `0..n`) reads; `None`: a zero.
    /// Mirrors are periodic beyond one reflection.
    pub fn read_index(self, i: isize, n: usize) -> Option<usize> {
        if (0..n as isize).contains(&i) {
            return Some(i as usize);
        }
        match self {
            EdgePadding::Zeros => None,
            EdgePadding::Reflect => Some(reflect_index(i, n)),
            EdgePadding::Symmetric => Some(symmetric_index(i, n)),
        }
    }
}

/// The signal index frame sample `idx` is read from under the spec's padding (`None`: zero).
pub fn padded_index(spec: &FeatureSpec, idx: isize, signal_len: usize) -> Option<usize> {
    EdgePadding::of(spec).read_index(idx, signal_len)
}

/// numpy's "reflect" index for any `i`, periodic beyond one reflection.
pub(crate) fn reflect_index(i: isize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let m = i.rem_euclid(period);
    if m < n as isize {
        m as usize
    } else {
        (period - m) as usize
    }
}

/// Kaldi's mirror index for any `i` (`ExtractWindow`'s loop: −i − 1 below the signal,
/// 2n − 1 − i above it, until inside): periodic with period 2n.
pub(crate) fn symmetric_index(i: isize, n: usize) -> usize {
    let n = n as isize;
    let m = i.rem_euclid(2 * n);
    if m < n {
        m as usize
    } else {
        (2 * n - 1 - m) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kaldi's loop, as feature-window.cc writes it.
    fn kaldi_index(mut s: isize, n: isize) -> isize {
        while s < 0 || s >= n {
            s = if s < 0 { -s - 1 } else { 2 * n - 1 - s };
        }
        s
    }

    #[test]
    fn symmetric_index_is_kaldis_loop_for_any_index_and_length() {
        for n in 1..9usize {
            for i in -40..40isize {
                assert_eq!(
                    symmetric_index(i, n) as isize,
                    kaldi_index(i, n as isize),
                    "{i} {n}"
                );
            }
        }
        assert_eq!(symmetric_index(-1, 5), 0);
        assert_eq!(symmetric_index(5, 5), 4);
        assert_eq!(reflect_index(-1, 5), 1);
    }
}
