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

pub(crate) fn reflects(spec: &FeatureSpec) -> bool {
    spec.framing == Framing::Center && spec.pad_mode == PadMode::Reflect
}

/// The signal index frame sample `idx` is read from under the spec's padding (`None`: zero).
pub fn padded_index(spec: &FeatureSpec, idx: isize, signal_len: usize) -> Option<usize> {
    if (0..signal_len as isize).contains(&idx) {
        Some(idx as usize)
    } else if reflects(spec) {
        Some(reflect_index(idx, signal_len))
    } else {
        None
    }
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
