//! What the GPU computes for a spec, worked out on the host: the memory a batch needs, and the item-level steps applied after readback (drop last frame,
//! dynamic range, DCT, affine, per-feature normalisation, Welch averaging), which are
//! transcriptions of `sonograph_dsp::extractor` so that both backends mean the same thing.

use sonograph_dsp::dct::Dct;
use sonograph_dsp::extractor::{finish_rows, log_row, welch_row};
use sonograph_dsp::spec::{FeatureSpec, LogGuard, LogKind, OutputKind};
use sonograph_dsp::Precision;

/// True when the GPU projects onto mel bands (and applies the log there).
pub fn uses_mel(spec: &FeatureSpec) -> bool {
    matches!(
        spec.output,
        OutputKind::Mel | OutputKind::Logmel | OutputKind::Mfcc
    )
}

/// Width of the rows the GPU returns: mel bands, or the full one-sided spectrum.
pub fn gpu_row_width(spec: &FeatureSpec) -> usize {
    if uses_mel(spec) {
        spec.n_mels
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
/// indices stay fixed.
pub fn batch_buffers(
    spec: &FeatureSpec,
    precision: Precision,
    fused: bool,
    items: usize,
    samples: usize,
    frames: usize,
) -> [(&'static str, u64); 7] {
    let real = scalar_bytes(precision);
    let n_freq = (spec.n_fft / 2 + 1) as u64;
    let frames = frames as u64;
    let mel = uses_mel(spec);
    // Log-mel rows come back as f32; spectra (no mel) in the core's own scalar.
    let (mel_rows, row_bytes) = if mel {
        (4 * frames * spec.n_mels as u64, 4)
    } else {
        (4, real)
    };
    let frame_bytes = if fused {
        4
    } else {
        real * frames * spec.n_fft as u64
    };
    let spectrum_bytes = if fused && mel {
        4
    } else {
        real * frames * n_freq
    };
    [
        ("samples", 4 * samples.max(1) as u64),
        ("items", 32 * items.max(1) as u64),
        ("frame table", 4 * frames),
        ("frames", frame_bytes),
        ("spectrum", spectrum_bytes),
        ("mel rows", mel_rows),
        ("readback", row_bytes * frames * gpu_row_width(spec) as u64),
    ]
}

/// The log and guard the mel kernels apply (`guarded_log` in kernels/common.wgsl): the log
/// kind (0 none, 1 ln, 2 log10, 3 dB), whether the guard is added (else a clamp), and the
/// addend, or for a clamp the natural log of the floor (the kernels clamp after the log, so a
/// floor under f32's normal range survives GPUs that flush subnormals).
pub fn log_params(spec: &FeatureSpec) -> (u32, u32, f32) {
    let kind = match spec.log {
        LogKind::None => 0,
        LogKind::Ln => 1,
        LogKind::Log10 => 2,
        LogKind::Db => 3,
    };
    let (add, guard) = match spec.log_guard {
        LogGuard::Clamp(v) => (0, (f64::from(v)).ln() as f32),
        LogGuard::Add(v) => (1, v),
    };
    (kind, add, guard)
}

/// Turns one item's (or piece's) GPU rows (`frames × gpu_row_width`) into its final rows,
/// appended to `out`; returns the frame count. `last`: the rows end the item.
pub fn finish_item(
    spec: &FeatureSpec,
    dct: Option<&Dct>,
    gpu_rows: &[f32],
    frames: usize,
    last: bool,
    out: &mut Vec<f32>,
) -> usize {
    let width = gpu_row_width(spec);
    let mut raw: Vec<f32> = Vec::with_capacity(frames * spec.n_bins());
    match spec.output {
        OutputKind::Psd => return finish_psd(spec, gpu_rows, frames, out),
        OutputKind::Power | OutputKind::Magnitude => {
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
        }
        // The mel kernel has applied the guard and the log already.
        OutputKind::Mel | OutputKind::Logmel | OutputKind::Mfcc => {
            raw.extend_from_slice(gpu_rows);
        }
    }
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
