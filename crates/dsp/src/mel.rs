//! Mel filterbanks (librosa's, Kaldi's and SpeechBrain's constructions) stored sparsely: each filter keeps
//! only the run of FFT bins where its weight is non-zero.

use crate::spec::{FeatureSpec, MelNorm, MelScale};

const SLANEY_F_SP: f64 = 200.0 / 3.0;
const SLANEY_MIN_LOG_HZ: f64 = 1000.0;
const SLANEY_MIN_LOG_MEL: f64 = SLANEY_MIN_LOG_HZ / SLANEY_F_SP;

fn slaney_logstep() -> f64 {
    6.4f64.ln() / 27.0
}

/// Hz → mel on `scale`.
pub fn hz_to_mel(hz: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk | MelScale::SpeechBrain => 2595.0 * (1.0 + hz / 700.0).log10(),
        MelScale::Kaldi => 1127.0 * (1.0 + hz / 700.0).ln(),
        MelScale::Slaney if hz >= SLANEY_MIN_LOG_HZ => {
            SLANEY_MIN_LOG_MEL + (hz / SLANEY_MIN_LOG_HZ).ln() / slaney_logstep()
        }
        MelScale::Slaney => hz / SLANEY_F_SP,
    }
}

/// mel → Hz on `scale`.
pub fn mel_to_hz(mel: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk | MelScale::SpeechBrain => 700.0 * (10f64.powf(mel / 2595.0) - 1.0),
        MelScale::Kaldi => 700.0 * ((mel / 1127.0).exp() - 1.0),
        MelScale::Slaney if mel >= SLANEY_MIN_LOG_MEL => {
            SLANEY_MIN_LOG_HZ * (slaney_logstep() * (mel - SLANEY_MIN_LOG_MEL)).exp()
        }
        MelScale::Slaney => mel * SLANEY_F_SP,
    }
}

/// One triangular filter: weights for FFT bins `start .. start + weights.len()`.
#[derive(Debug, Clone, PartialEq)]
pub struct MelFilter {
    pub start: usize,
    pub weights: Vec<f64>,
}

/// A filterbank over `n_bins` one-sided FFT bins.
#[derive(Debug, Clone, PartialEq)]
pub struct MelBank {
    pub n_bins: usize,
    pub filters: Vec<MelFilter>,
}

impl MelBank {
    /// The filterbank `spec` describes, over `n_fft / 2 + 1` bins. Each filter is computed
    /// as a dense row and made sparse before the next: the dense matrix is never held (at the
    /// largest valid spec, 4096 mels over 32,769 bins, it would be 1 GiB).
    pub fn new(spec: &FeatureSpec) -> Self {
        let n_bins = spec.n_fft / 2 + 1;
        let filters = match spec.mel_scale {
            MelScale::Kaldi => kaldi_filters(spec, n_bins),
            scale => librosa_filters(spec, n_bins, scale),
        };
        MelBank { n_bins, filters }
    }

    /// Dense `[n_mels][n_bins]` weights (for tests and the GPU upload).
    pub fn to_dense(&self) -> Vec<Vec<f64>> {
        self.filters
            .iter()
            .map(|f| {
                let mut row = vec![0.0; self.n_bins];
                row[f.start..f.start + f.weights.len()].copy_from_slice(&f.weights);
                row
            })
            .collect()
    }

    /// Total number of stored weights.
    pub fn nnz(&self) -> usize {
        self.filters.iter().map(|f| f.weights.len()).sum()
    }
}

fn sparsify(row: Vec<f64>) -> MelFilter {
    match row.iter().position(|&w| w != 0.0) {
        None => MelFilter {
            start: 0,
            weights: Vec::new(),
        },
        Some(first) => {
            let last = row.iter().rposition(|&w| w != 0.0).unwrap_or(first);
            MelFilter {
                start: first,
                weights: row[first..=last].to_vec(),
            }
        }
    }
}

/// librosa.filters.mel: triangles in Hz between mel-spaced points, optionally Slaney-normalised.
fn librosa_filters(spec: &FeatureSpec, n_bins: usize, scale: MelScale) -> Vec<MelFilter> {
    let n_mels = spec.n_mels;
    let sr = f64::from(spec.sample_rate);
    let fft_freqs: Vec<f64> = (0..n_bins)
        .map(|k| k as f64 * sr / spec.n_fft as f64)
        .collect();
    let mel_min = hz_to_mel(f64::from(spec.fmin), scale);
    let mel_max = hz_to_mel(spec.fmax_hz(), scale);
    let step = (mel_max - mel_min) / (n_mels + 1) as f64;
    let mel_f: Vec<f64> = (0..n_mels + 2)
        .map(|i| {
            // numpy.linspace ends exactly on the stop value.
            let m = if i == n_mels + 1 {
                mel_max
            } else {
                mel_min + i as f64 * step
            };
            mel_to_hz(m, scale)
        })
        .collect();
    (0..n_mels)
        .map(|i| {
            let lower_width = mel_f[i + 1] - mel_f[i];
            // SpeechBrain's `Filterbank._triangular_filters`: `1 - |f - centre| / band` with
            // the band below the centre on both sides, so its right foot falls short of (or
            // past) the next centre: not librosa's triangle.
            let (upper_foot, upper_width) = match scale {
                MelScale::SpeechBrain => (mel_f[i + 1] + lower_width, lower_width),
                _ => (mel_f[i + 2], mel_f[i + 2] - mel_f[i + 1]),
            };
            let enorm = match spec.mel_norm {
                MelNorm::Slaney => 2.0 / (mel_f[i + 2] - mel_f[i]),
                MelNorm::None => 1.0,
            };
            fft_freqs
                .iter()
                .map(|&f| {
                    let lower = (f - mel_f[i]) / lower_width;
                    let upper = (upper_foot - f) / upper_width;
                    lower.min(upper).max(0.0) * enorm
                })
                .collect()
        })
        .map(sparsify)
        .collect()
}

/// Kaldi's MelBanks: triangles in the mel domain; the Nyquist bin is never used.
fn kaldi_filters(spec: &FeatureSpec, n_bins: usize) -> Vec<MelFilter> {
    let n_mels = spec.n_mels;
    let bin_width = f64::from(spec.sample_rate) / spec.n_fft as f64;
    let mel_low = hz_to_mel(f64::from(spec.fmin), MelScale::Kaldi);
    let mel_high = hz_to_mel(spec.fmax_hz(), MelScale::Kaldi);
    let delta = (mel_high - mel_low) / (n_mels + 1) as f64;
    let num_fft_bins = spec.n_fft / 2;
    (0..n_mels)
        .map(|m| {
            let left = mel_low + m as f64 * delta;
            let center = left + delta;
            let right = center + delta;
            let mut row = vec![0.0; n_bins];
            for (k, w) in row.iter_mut().enumerate().take(num_fft_bins) {
                let mel = hz_to_mel(bin_width * k as f64, MelScale::Kaldi);
                if mel > left && mel < right {
                    *w = if mel <= center {
                        (mel - left) / (center - left)
                    } else {
                        (right - mel) / (right - center)
                    };
                }
            }
            let mel_norm_is_slaney = spec.mel_norm == MelNorm::Slaney;
            if mel_norm_is_slaney {
                let enorm =
                    2.0 / (mel_to_hz(right, MelScale::Kaldi) - mel_to_hz(left, MelScale::Kaldi));
                row.iter_mut().for_each(|w| *w *= enorm);
            }
            row
        })
        .map(sparsify)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_round_trip_and_hit_known_points() {
        for scale in [MelScale::Slaney, MelScale::Htk, MelScale::Kaldi] {
            for hz in [0.0, 100.0, 999.0, 1000.0, 4000.0, 11025.0] {
                let back = mel_to_hz(hz_to_mel(hz, scale), scale);
                assert!((back - hz).abs() < 1e-9 * hz.max(1.0), "{scale:?} {hz}");
            }
        }
        assert!((hz_to_mel(1000.0, MelScale::Slaney) - 15.0).abs() < 1e-12);
        assert!((hz_to_mel(700.0, MelScale::Htk) - 2595.0 * 2f64.log10()).abs() < 1e-9);
    }

    #[test]
    fn sparse_bank_equals_dense_and_is_much_smaller() {
        let spec = FeatureSpec::whisper(80);
        let bank = MelBank::new(&spec);
        assert_eq!(bank.filters.len(), 80);
        let dense = bank.to_dense();
        let nnz = dense.iter().flatten().filter(|&&w| w != 0.0).count();
        assert!(bank.nnz() >= nnz);
        assert!(bank.nnz() < 80 * 201 / 10, "nnz {}", bank.nnz());
        // Slaney-normalised filters integrate to about 1 over frequency (in Hz units × bin width).
        let bin_hz = 16_000.0 / 400.0;
        let area: f64 = dense[40].iter().sum::<f64>() * bin_hz;
        assert!((area - 1.0).abs() < 0.1, "area {area}");
    }

    #[test]
    fn kaldi_bank_leaves_nyquist_and_below_fmin_empty() {
        let bank = MelBank::new(&FeatureSpec::kaldi(80));
        let dense = bank.to_dense();
        for row in &dense {
            assert_eq!(row[256], 0.0);
            assert_eq!(row[0], 0.0);
            assert!(row.iter().all(|&w| (0.0..=1.0).contains(&w)));
        }
        assert!(dense.iter().all(|r| r.iter().any(|&w| w > 0.0)));
    }
}
