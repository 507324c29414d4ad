//! What the GPU computes for a spec, worked out on the host: the memory a batch needs, and the item-level steps applied after readback (drop last frame,
//! dynamic range, DCT, affine, per-feature normalisation, Welch averaging), which are
//! transcriptions of `sonograph_dsp::extractor` so that both backends mean the same thing.

use std::borrow::Cow;

use sonograph_dsp::dct::Dct;
use sonograph_dsp::extractor::{finish_rows, log_row, welch_row};
use sonograph_dsp::spec::{FeatureSpec, LogGuard, LogKind, Normalize, OutputKind};
use sonograph_dsp::Precision;

/// True when the GPU projects onto mel bands (and applies the log there).
pub fn uses_mel(spec: &FeatureSpec) -> bool {
    matches!(
        spec.output,
        OutputKind::Mel | OutputKind::Logmel | OutputKind::Mfcc
    )
}

/// True when the GPU's rows are f32 values in its rows buffer: mel bands (the log applied),
/// or a waveform's samples; spectra come back in the core's own scalar instead.
pub fn f32_rows(spec: &FeatureSpec) -> bool {
    uses_mel(spec) || spec.output == OutputKind::Waveform
}

/// Width of the rows the GPU returns: mel bands, one sample, or the full one-sided spectrum.
pub fn gpu_row_width(spec: &FeatureSpec) -> usize {
    if uses_mel(spec) {
        spec.n_mels
    } else if spec.output == OutputKind::Waveform {
        1
    } else {
        spec.n_fft / 2 + 1
    }
}

/// Bytes of one scalar of the spectral core.
pub fn scalar_bytes(precision: Precision) -> u64 {
    match precision {
        Precision::F32 => 4,
        Precision::F64 => 8,
    }
}

/// The device buffers of one batch of `items` items with `samples` samples and `frames`
/// frames, in binding order: (name, bytes). The extractor allocates exactly these (plus its
/// parameter uniform); the batcher's first estimate sums them. The fused kernel keeps frames
/// and spectra in workgroup memory: a buffer it does not bind is one word, so that the
/// indices stay fixed. `f16_rows`: the rows come back as f16 (kernels/f16_rows.wgsl).
pub fn batch_buffers(
    spec: &FeatureSpec,
    precision: Precision,
    fused: bool,
    f16_rows: bool,
    items: usize,
    samples: usize,
    frames: usize,
) -> [(&'static str, u64); 9] {
    let real = scalar_bytes(precision);
    let n_freq = (spec.n_fft / 2 + 1) as u64;
    let frames = frames as u64;
    let mel = uses_mel(spec);
    let waveform = spec.output == OutputKind::Waveform;
    // Log-mel rows and samples come back as f32; spectra (no mel) in the core's own scalar.
    let (mel_rows, row_bytes) = if f32_rows(spec) {
        (4 * frames * gpu_row_width(spec) as u64, 4)
    } else {
        (4, real)
    };
    let frame_bytes = if fused {
        4
    } else {
        real * frames * spec.n_fft as u64
    };
    // A waveform's samples go from its frames straight to its rows.
    let spectrum_bytes = if (fused && mel) || waveform {
        4
    } else {
        real * frames * n_freq
    };
    // Per item, in `real`: its maximum, or each band's mean and deviation.
    let statistics_bytes = match device_item_steps(spec, precision) {
        Some(steps) if steps.normalize.is_some() => {
            2 * real * (items * gpu_row_width(spec)).max(1) as u64
        }
        Some(_) => real * items.max(1) as u64,
        None => 4,
    };
    let values = frames * gpu_row_width(spec) as u64;
    let (packed, row_bytes) = if f16_rows {
        let packed = 2 * values.next_multiple_of(2);
        (packed.max(4), 2)
    } else {
        (4, row_bytes)
    };
    [
        ("samples", 4 * samples.max(1) as u64),
        // Ten words an item (`Item` in kernels/common.wgsl).
        ("items", 40 * items.max(1) as u64),
        ("frame table", 4 * frames),
        ("frames", frame_bytes),
        ("spectrum", spectrum_bytes),
        ("mel rows", mel_rows),
        ("item statistics", statistics_bytes),
        ("f16 rows", packed),
        ("readback", (row_bytes * values).next_multiple_of(4)),
    ]
}

/// Whether the device's rows for `spec` are its output values, so that they may come back
/// as f16 for a job that stores f16: mel and log-mel rows, and waveforms, whose whole-row
/// steps the device applies or that have none (`host` is the spec the host finishes them by). The host then
/// only drops a last frame and completes stacked rows with zeros, which f16 rows allow
/// alike; MFCC's DCT, the spectra's log and Welch's mean need the f32 values.
pub fn rows_final_on_device(spec: &FeatureSpec, host: &FeatureSpec) -> bool {
    matches!(
        spec.output,
        OutputKind::Mel | OutputKind::Logmel | OutputKind::Waveform
    ) && host.fixed_frames == 0
        && host.dynamic_range.is_none()
        && host.affine.is_none()
        && host.normalize == Normalize::None
}

/// The whole-row steps the device applies after its mel kernel, or to a waveform's samples
/// (kernels/item_steps.wgsl).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ItemSteps {
    /// Values at least the row's maximum minus this.
    pub dynamic_range: Option<f32>,
    /// `(x + add) * scale`.
    pub affine: Option<(f32, f32)>,
    /// Each band over the item, on its own: NeMo's per-feature normalisation
    /// (`Normalize::PerFeature`), or transformers' zero mean and unit variance of a waveform
    /// (`Normalize::ZeroMeanUnitVar`).
    pub normalize: Option<Normalize>,
}

/// The steps of `spec` that the device applies to its log-mel rows (or a waveform's samples)
/// as the host's `finish_rows` does, so that the host only copies the rows out (on an H200
/// machine the host's finishing took 5.4 ms of a 64-clip Whisper batch's 13.5 ms, and 7.4 ms
/// of NeMo's), for mel, log-mel and waveform outputs (MFCC's DCT sits between the steps):
/// - the dynamic-range clamp and the affine, bit for bit, the affine only where its divisor is
///   a power of two (a multiplication by its inverse is then the host's division; WGSL's
///   division promises 2.5 ulp);
/// - NeMo's per-feature normalisation alone, or a waveform's zero mean and unit variance
///   alone, where the core computes in f64: each band's sums in f64 in the host's lane order
///   (`sonograph_dsp::extractor::SUM_LANES`: the same mean; the deviation and the quotient to
///   the device's f64 sqrt and division, far under f32's rounding). The other normalisations divide by a deviation
///   that may be zero (NaN on the host, which a shader may assume away; a waveform's adds
///   1e-7 first), and f32 sums would not hold 1e-4: they stay on the host.
///
/// `None`: nothing to do on the device.
pub fn device_item_steps(spec: &FeatureSpec, precision: Precision) -> Option<ItemSteps> {
    // A guard that lets ln 0 = -inf through (Clamp(0), Add(0)) could give an item of only
    // -inf, whose floor the host takes as -inf; a shader may assume no infinity is present.
    // (A waveform takes no log: its samples are checked finite as they are sent.)
    let finite_logs = match spec.log_guard {
        LogGuard::Clamp(floor) | LogGuard::Add(floor) => floor > 0.0,
    };
    let waveform = spec.output == OutputKind::Waveform;
    // Frames of zeros completing a `fixed_frames` item go in before the affine: on the host.
    if !(matches!(spec.output, OutputKind::Mel | OutputKind::Logmel) && finite_logs || waveform)
        || spec.fixed_frames > 0
    {
        return None;
    }
    let alone =
        precision == Precision::F64 && spec.dynamic_range.is_none() && spec.affine.is_none();
    match spec.normalize {
        Normalize::None => {}
        Normalize::PerFeature | Normalize::ZeroMeanUnitVar if alone => {
            return Some(ItemSteps {
                dynamic_range: None,
                affine: None,
                normalize: Some(spec.normalize),
            });
        }
        _ => return None,
    }
    let affine = match spec.affine {
        None => None,
        Some(a) => {
            let inverse = 1.0 / a.div;
            // A power of two (its mantissa bits zero) with a normal inverse.
            let exact = a.div.is_normal()
                && inverse.is_normal()
                && a.div.abs().to_bits() & 0x007f_ffff == 0;
            if !exact {
                return None;
            }
            Some((a.add, inverse))
        }
    };
    let steps = ItemSteps {
        dynamic_range: spec.dynamic_range,
        affine,
        normalize: None,
    };
    (steps.dynamic_range.is_some() || steps.affine.is_some()).then_some(steps)
}

/// The most loop iterations one invocation of kernels/item_steps.wgsl may run: lavapipe
/// (llvmpipe) ends an invocation's loops after 65,535 iterations in all, silently (a band's
/// sums then stop short); half of that, for margin.
pub const INVOCATION_LOOP_BOUND: usize = 32_768;

/// Whether the device applies `steps` to an item of `frames` rows of `width` values with every
/// invocation's loops within [`INVOCATION_LOOP_BOUND`] (a band: 4 M frames; Whisper's maximum:
/// 105,000 frames of 80 bands, 17 minutes). A chunk holding a longer item is finished by the
/// host instead.
pub fn item_steps_fit(steps: ItemSteps, frames: usize, width: usize) -> bool {
    let lanes = sonograph_dsp::extractor::SUM_LANES;
    let tree = lanes.ilog2() as usize;
    let per_invocation = if steps.normalize.is_some() {
        // A band's sum, then its squares: a walk of every lanes-th frame and a tree each.
        2 * (frames.div_ceil(lanes) + tree)
    } else {
        // The maximum: a walk of every lanes-th value of the item, and a tree.
        (frames * width).div_ceil(lanes) + tree
    };
    per_invocation <= INVOCATION_LOOP_BOUND
}

/// `spec` as the host finishes its rows when the device has applied `steps`: without them.
pub fn host_finish_spec(spec: &FeatureSpec, steps: Option<ItemSteps>) -> FeatureSpec {
    let mut host = spec.clone();
    if steps.is_some() {
        host.dynamic_range = None;
        host.affine = None;
        host.normalize = Normalize::None;
    }
    host
}

/// The log and guard the mel kernels apply (`guarded_log` in kernels/common.wgsl): the log
/// kind (0 none, 1 ln, 2 log10, 3 dB), how the guard is applied, and its value, so that a
/// guard under f32's normal range survives GPUs that flush f32 subnormals (NVIDIA's do):
/// - a clamp (0): the CPU's output for a clamped energy, `(ln(floor) · scale) as f32`,
///   computed here as `log_row` computes it; the kernels clamp after the log;
/// - an addend (`1 + k`): the addend times 2^k, which the kernels scale back with `ldexp`
///   (exact where `real` is f64; k is 0 unless the addend is subnormal in f32).
pub fn log_params(spec: &FeatureSpec) -> (u32, u32, f32) {
    let (kind, scale) = match spec.log {
        LogKind::None => (0, 1.0),
        LogKind::Ln => (1, 1.0),
        LogKind::Log10 => (2, std::f64::consts::LOG10_E),
        LogKind::Db => (3, 10.0 * std::f64::consts::LOG10_E),
    };
    let (add, guard) = match spec.log_guard {
        LogGuard::Clamp(floor) => {
            let mut ln_floor = [f64::from(floor)];
            sonograph_dsp::fastlog::ln_in_place(&mut ln_floor);
            (0, (ln_floor[0] * scale) as f32)
        }
        LogGuard::Add(v) if v > 0.0 && v < f32::MIN_POSITIVE => {
            const SHIFT: u32 = 64;
            (1 + SHIFT, (f64::from(v) * 2f64.powi(SHIFT as i32)) as f32)
        }
        LogGuard::Add(v) => (1, v),
    };
    (kind, add, guard)
}

/// Turns one item's (or piece's) GPU rows (`frames × gpu_row_width`) into its final rows,
/// appended to `out`; returns the frame count. `last`: the rows end the item.
pub fn finish_item(
    spec: &FeatureSpec,
    dct: Option<&Dct>,
    gpu_rows: Cow<'_, [f32]>,
    frames: usize,
    last: bool,
    out: &mut Vec<f32>,
) -> usize {
    let width = gpu_row_width(spec);
    let mut raw: Vec<f32> = match spec.output {
        OutputKind::Psd => return finish_psd(spec, &gpu_rows, frames, out),
        OutputKind::Power | OutputKind::Magnitude => {
            let mut raw = Vec::with_capacity(frames * spec.n_bins());
            let keep = spec.n_spectrum_bins();
            let mut row = Vec::with_capacity(keep);
            for r in gpu_rows.chunks_exact(width) {
                row.clear();
                if spec.output == OutputKind::Magnitude {
                    row.extend(r[..keep].iter().map(|&p| f64::from(p).sqrt()));
                } else {
                    row.extend(r[..keep].iter().map(|&p| f64::from(p)));
                }
                log_row(spec, &mut row, &mut raw);
            }
            raw
        }
        // The mel kernel has applied the guard and the log already; a waveform's rows are its
        // samples. (Rows widened from f16 are the host's own already: they are not copied
        // again.)
        OutputKind::Mel | OutputKind::Logmel | OutputKind::Mfcc | OutputKind::Waveform => {
            gpu_rows.into_owned()
        }
    };
    finish_rows(spec, dct, &mut raw, last && spec.drop_last_frame, out)
}

/// Welch over the GPU's power rows: their sum, then the CPU's own [`welch_row`].
fn finish_psd(spec: &FeatureSpec, power: &[f32], frames: usize, out: &mut Vec<f32>) -> usize {
    let mut sum = vec![0.0f64; spec.n_fft / 2 + 1];
    for row in power.chunks_exact(sum.len()) {
        for (s, &p) in sum.iter_mut().zip(row) {
            *s += f64::from(p);
        }
    }
    welch_row(spec, &sum, frames, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clamp arrives as the CPU's own output for a clamped energy (silence), bit for bit.
    #[test]
    fn a_clamp_arrives_as_the_cpus_clamped_output() {
        for (log, floor) in [
            (LogKind::Ln, 1e-40f32),
            (LogKind::Log10, 1e-10),
            (LogKind::Db, f32::EPSILON),
            (LogKind::Ln, 0.0),
        ] {
            let mut spec = FeatureSpec::kaldi(40);
            spec.log = log;
            spec.log_guard = LogGuard::Clamp(floor);
            let mut cpu = Vec::new();
            log_row(&spec, &mut [0.0], &mut cpu);
            let (_, add, guard) = log_params(&spec);
            assert_eq!(add, 0);
            assert_eq!(guard.to_bits(), cpu[0].to_bits(), "{log:?} {floor}");
        }
    }

    /// An addend under f32's normal range arrives scaled into it, and scales back exactly.
    #[test]
    fn a_subnormal_addend_arrives_scaled_into_the_normal_range() {
        for v in [1e-40f32, f32::MIN_POSITIVE / 2.0, f32::from_bits(1)] {
            let mut spec = FeatureSpec::kaldi(40);
            spec.log_guard = LogGuard::Add(v);
            let (_, add, guard) = log_params(&spec);
            assert!(guard.is_normal(), "{v:e} arrives as {guard:e}");
            let back = f64::from(guard) * 2f64.powi(1 - add as i32);
            assert_eq!(back, f64::from(v));
        }
        let mut spec = FeatureSpec::nemo(80);
        spec.log_guard = LogGuard::Add(5.960_464_5e-8);
        // NeMo's 2^-24 is normal: sent as it is.
        assert_eq!(log_params(&spec), (1, 1, 5.960_464_5e-8));
    }
}
