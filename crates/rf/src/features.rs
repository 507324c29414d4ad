//! RF features of a recording (or of a window of one): the Welch PSD and what is read from
//! it (noise floor, SNR, occupied bandwidth, carrier offset, spectral shape), and statistics of
//! the samples (RSSI, PAPR, M2M4, amplitude/phase/frequency moments, cumulants). docs/rf.md
//! gives every formula and its reference.

use std::sync::Arc;

use rustfft::num_complex::{Complex32, Complex64};
use rustfft::{Fft, FftPlanner};
use serde::{Deserialize, Serialize};
use sonograph_dsp::spec::WindowKind;
use sonograph_dsp::window::window;

use crate::error::{invalid, RfError};
use crate::math::atan2;

/// Welch's method as `scipy.signal.welch` (scipy 1.17) computes it for complex input: the
/// window (periodic), `noverlap` samples of overlap, optionally each segment's mean removed
/// (`detrend='constant'`), a two-sided `nperseg`-point FFT, `scaling='density'`
/// (|X|² / (fs Σw²)), and the mean over segments. Unlike scipy, sonograph does not detrend by
/// default (`detrend=False` in scipy's terms): at RF the mean is a carrier (AM, a tone at the
/// centre frequency) or a DC offset, which the features should see.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WelchConfig {
    pub nperseg: usize,
    pub noverlap: usize,
    pub window: WindowKind,
    /// Remove each segment's mean (scipy's `detrend='constant'`; off by default here).
    pub detrend: bool,
}

impl Default for WelchConfig {
    fn default() -> Self {
        WelchConfig {
            nperseg: 1024,
            noverlap: 512,
            window: WindowKind::Hann,
            detrend: false,
        }
    }
}

impl WelchConfig {
    pub fn validate(&self) -> Result<(), RfError> {
        if self.nperseg < 2 || self.nperseg > 1 << 20 {
            return Err(invalid("welch.nperseg", "must be 2..=2^20"));
        }
        if self.noverlap >= self.nperseg {
            return Err(invalid("welch.noverlap", "must be below nperseg"));
        }
        Ok(())
    }

    fn hop(&self) -> usize {
        self.nperseg - self.noverlap
    }

    /// Segments of a signal of `len` samples (scipy: `(len - noverlap) // hop`).
    pub fn segments(&self, len: usize) -> usize {
        if len < self.nperseg {
            0
        } else {
            (len - self.noverlap) / self.hop()
        }
    }
}

/// A two-sided power spectral density in fftshift order: bin `k` is the frequency
/// `(k − ⌊n/2⌋) · fs / n`, from −fs/2 up.
#[derive(Debug, Clone, PartialEq)]
pub struct Psd {
    pub fs: f64,
    /// Power per hertz (full scale² / Hz).
    pub density: Vec<f64>,
    /// Segments averaged, and the effective degrees of freedom of each bin (Welch 1967).
    pub segments: usize,
    pub dof: f64,
}

impl Psd {
    pub fn bin_hz(&self) -> f64 {
        self.fs / self.density.len() as f64
    }

    pub fn freq(&self, k: usize) -> f64 {
        (k as f64 - (self.density.len() / 2) as f64) * self.bin_hz()
    }

    /// The density in numpy's FFT order (what scipy returns), for comparisons.
    pub fn fft_order(&self) -> Vec<f64> {
        let n = self.density.len();
        let h = n / 2;
        self.density[h..]
            .iter()
            .chain(&self.density[..h])
            .copied()
            .collect()
    }
}

/// A reusable Welch plan (window, FFT, scratch).
pub struct Welch {
    cfg: WelchConfig,
    window: Vec<f64>,
    fft: Arc<dyn Fft<f64>>,
    buffer: Vec<Complex64>,
    scratch: Vec<Complex64>,
    acc: Vec<f64>,
}

/// Segments handed to one FFT call.
const SEGMENTS_PER_CALL: usize = 16;

impl Welch {
    pub fn new(cfg: &WelchConfig) -> Result<Self, RfError> {
        cfg.validate()?;
        let fft = FftPlanner::new().plan_fft_forward(cfg.nperseg);
        let scratch = vec![Complex64::default(); fft.get_inplace_scratch_len()];
        Ok(Welch {
            cfg: *cfg,
            window: window(cfg.window, cfg.nperseg, true),
            fft,
            buffer: Vec::with_capacity(cfg.nperseg * SEGMENTS_PER_CALL),
            scratch,
            acc: vec![0.0; cfg.nperseg],
        })
    }

    pub fn config(&self) -> &WelchConfig {
        &self.cfg
    }

    pub fn window(&self) -> &[f64] {
        &self.window
    }

    pub fn compute(&mut self, iq: &[Complex32], fs: f64) -> Result<Psd, RfError> {
        let n = self.cfg.nperseg;
        let hop = self.cfg.hop();
        let segments = self.cfg.segments(iq.len());
        if segments == 0 {
            return Err(RfError::TooShort(format!(
                "{} samples, fewer than one Welch segment of {n}",
                iq.len()
            )));
        }
        self.acc.iter_mut().for_each(|a| *a = 0.0);
        let mut first = 0;
        while first < segments {
            let count = SEGMENTS_PER_CALL.min(segments - first);
            self.buffer.clear();
            for s in first..first + count {
                let seg = &iq[s * hop..s * hop + n];
                let mean = if self.cfg.detrend {
                    let (re, im) = seg.iter().fold((0.0f64, 0.0f64), |(a, b), v| {
                        (a + f64::from(v.re), b + f64::from(v.im))
                    });
                    Complex64::new(re / n as f64, im / n as f64)
                } else {
                    Complex64::default()
                };
                self.buffer
                    .extend(seg.iter().zip(&self.window).map(|(v, &w)| {
                        Complex64::new(
                            (f64::from(v.re) - mean.re) * w,
                            (f64::from(v.im) - mean.im) * w,
                        )
                    }));
            }
            self.fft
                .process_with_scratch(&mut self.buffer, &mut self.scratch);
            for spectrum in self.buffer.chunks_exact(n) {
                for (a, x) in self.acc.iter_mut().zip(spectrum) {
                    *a += x.norm_sqr();
                }
            }
            first += count;
        }
        let wss: f64 = self.window.iter().map(|w| w * w).sum();
        let scale = 1.0 / (fs * wss * segments as f64);
        let h = n / 2;
        // fftshift: negative frequencies first.
        let density: Vec<f64> = self.acc[n - h..]
            .iter()
            .chain(&self.acc[..n - h])
            .map(|a| a * scale)
            .collect();
        Ok(Psd {
            fs,
            density,
            segments,
            dof: welch_dof(&self.window, hop, segments),
        })
    }
}

/// `welch` with a one-off plan.
pub fn welch(iq: &[Complex32], fs: f64, cfg: &WelchConfig) -> Result<Psd, RfError> {
    Welch::new(cfg)?.compute(iq, fs)
}

/// Degrees of freedom of a Welch estimate of white noise (Welch 1967, eq. 8):
/// ν = 2K / (1 + 2 Σ_{l≥1} (1 − l/K) ρ(l)²), ρ(l) the window's overlap correlation at l hops.
pub fn welch_dof(w: &[f64], hop: usize, k: usize) -> f64 {
    let wss: f64 = w.iter().map(|v| v * v).sum();
    let mut sum = 0.0;
    let mut l = 1;
    while l * hop < w.len() && l < k {
        let rho: f64 = w.iter().zip(&w[l * hop..]).map(|(a, b)| a * b).sum::<f64>() / wss;
        sum += (1.0 - l as f64 / k as f64) * rho * rho;
        l += 1;
    }
    2.0 * k as f64 / (1.0 + 2.0 * sum)
}

/// The normalised quantile `q` of a Welch bin of noise (χ²_ν / ν), by Wilson–Hilferty.
fn chi2_quantile_ratio(z: f64, dof: f64) -> f64 {
    let a = 2.0 / (9.0 * dof);
    (1.0 - a + z * a.sqrt()).powi(3)
}

fn median_of(v: &mut [f64]) -> f64 {
    let n = v.len();
    let mid = n / 2;
    v.select_nth_unstable_by(mid, f64::total_cmp);
    let hi = v[mid];
    if n % 2 == 1 {
        hi
    } else {
        let lo = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        0.5 * (lo + hi)
    }
}

/// The noise density (per Hz) under a PSD: the median of the noise bins, where the noise bins
/// are those under 1 + 4 standard deviations of the current estimate, starting from the 5th
/// percentile (so that a signal may fill 90 % of the band), corrected for the median-to-mean
/// ratio of a χ² bin with the PSD's degrees of freedom. Ten iterations at most.
pub fn noise_floor(psd: &Psd) -> f64 {
    let dof = psd.dof.max(2.0);
    let mut sorted = psd.density.clone();
    sorted.sort_unstable_by(f64::total_cmp);
    let n = sorted.len();
    // z of the 5th percentile is −1.645.
    let q5 = sorted[(n as f64 * 0.05) as usize];
    let mut floor = q5 / chi2_quantile_ratio(-1.645, dof);
    let limit = 1.0 + 4.0 * (2.0 / dof).sqrt();
    let median_ratio = chi2_quantile_ratio(0.0, dof);
    for _ in 0..10 {
        let end = sorted.partition_point(|&p| p <= floor * limit);
        if end == 0 {
            break;
        }
        let next = median_of(&mut sorted[..end].to_vec()) / median_ratio;
        if (next - floor).abs() <= 1e-12 * floor {
            floor = next;
            break;
        }
        floor = next;
    }
    floor
}

/// Occupied bandwidth (ITU-R SM.328 "β/2" method): the band outside which lies (1 − fraction)/2
/// of the power on each side, computed on the PSD minus the noise floor `floor` (per Hz).
///
/// With a floor, bins where a 9-bin moving average of the PSD stays within the noise's own
/// fluctuation (4 standard deviations of such an average, counting half the bins as
/// independent: Hann-windowed neighbours are correlated) count as zero: otherwise the noise
/// bins' zero-mean wander, summed over the whole band, would move the edges more than the
/// signal's tails do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Obw {
    pub bandwidth_hz: f64,
    pub low_hz: f64,
    pub high_hz: f64,
    /// Bin range [lo, hi] (inclusive) of the band.
    pub lo: usize,
    pub hi: usize,
}

/// Width of the moving average that tells signal bins from noise bins.
const GATE_BINS: usize = 9;

pub fn occupied_bandwidth(psd: &Psd, floor: f64, fraction: f64) -> Obw {
    let p = &psd.density;
    let n = p.len();
    let d: Vec<f64> = if floor > 0.0 {
        let limit =
            floor * (1.0 + 4.0 * (2.0 / psd.dof.max(2.0)).sqrt() / (GATE_BINS as f64 / 2.0).sqrt());
        let half = GATE_BINS / 2;
        let mut prefix = Vec::with_capacity(n + 1);
        prefix.push(0.0);
        for v in p {
            prefix.push(prefix.last().copied().unwrap_or(0.0) + v);
        }
        (0..n)
            .map(|k| {
                let (a, b) = (k.saturating_sub(half), (k + half + 1).min(n));
                let avg = (prefix[b] - prefix[a]) / (b - a) as f64;
                if avg > limit {
                    p[k] - floor
                } else {
                    0.0
                }
            })
            .collect()
    } else {
        p.clone()
    };
    let total: f64 = d.iter().sum();
    let tail = (1.0 - fraction) / 2.0 * total;
    let df = psd.bin_hz();
    let edge = |k: usize| psd.freq(k) - df / 2.0;
    // Without power above the floor the band is the whole spectrum.
    let (mut lo, mut hi, mut low, mut high) = (0, n - 1, edge(0), edge(n - 1) + df);
    if total > 0.0 {
        // Each edge is placed inside its bin where the running sum crosses the tail,
        // assuming the bin's power is spread evenly across it.
        let mut acc = 0.0;
        for (k, &v) in d.iter().enumerate() {
            if acc + v > tail {
                lo = k;
                low = edge(k) + df * ((tail - acc) / v).clamp(0.0, 1.0);
                break;
            }
            acc += v;
        }
        acc = 0.0;
        for (k, &v) in d.iter().enumerate().rev() {
            if acc + v > tail {
                hi = k;
                high = edge(k) + df - df * ((tail - acc) / v).clamp(0.0, 1.0);
                break;
            }
            acc += v;
        }
        if hi < lo {
            std::mem::swap(&mut lo, &mut hi);
            std::mem::swap(&mut low, &mut high);
        }
    }
    Obw {
        bandwidth_hz: high - low,
        low_hz: low,
        high_hz: high,
        lo,
        hi,
    }
}

/// What `rf-features` computes besides the PSD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FeatureConfig {
    pub welch: WelchConfig,
    /// Share of the power inside the occupied bandwidth.
    pub obw_fraction: f64,
    /// dBm of a full-scale sinusoid (adds `rssi_dbm`).
    pub calibration_db: Option<f64>,
}

impl Default for FeatureConfig {
    fn default() -> Self {
        FeatureConfig {
            welch: WelchConfig::default(),
            obw_fraction: 0.99,
            calibration_db: None,
        }
    }
}

/// Lowest SNR reported (dB): below it, or with no power above the noise floor, the estimate
/// is this floor rather than −∞ or NaN.
pub const SNR_FLOOR_DB: f64 = -50.0;

macro_rules! feature_vector {
    ($( $(#[doc = $doc:expr])* $name:ident ),* $(,)?) => {
        /// The feature vector of a recording or window (every value f64; docs/rf.md).
        #[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
        pub struct RfFeatures { $( $(#[doc = $doc])* pub $name: f64, )* }

        impl RfFeatures {
            /// Column names, in the order of [`RfFeatures::values`].
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            pub fn values(&self) -> Vec<f64> {
                vec![$(self.$name),*]
            }
        }
    };
}

feature_vector! {
    /// 10 log10 of the mean |x|² (dB relative to full scale).
    rssi_dbfs,
    /// `rssi_dbfs` + the calibration (NaN without one).
    rssi_dbm,
    /// The noise density, 10 log10 (per Hz), and the noise power in the sampled band.
    noise_floor_dbfs_hz,
    noise_power_dbfs,
    /// PSD-based SNR: signal power (the PSD's power minus the noise floor's) over the noise in
    /// the whole band, and over the noise in the occupied bandwidth.
    snr_fullband_db,
    snr_inband_db,
    /// M2M4 SNR (Pauluzzi & Beaulieu 2000) for constant-envelope signals in complex AWGN.
    snr_m2m4_db,
    /// 99 % occupied bandwidth (noise floor subtracted) and its edges.
    obw_hz,
    obw_low_hz,
    obw_high_hz,
    /// Carrier frequency offset: the power centroid of the occupied band (noise subtracted).
    cfo_hz,
    /// The frequency of the PSD's largest bin.
    peak_freq_hz,
    /// The PSD as a distribution over frequency: centroid, spread (standard deviation),
    /// kurtosis; and the flatness (geometric over arithmetic mean).
    spectral_centroid_hz,
    spectral_spread_hz,
    spectral_kurtosis,
    spectral_flatness,
    /// Peak-to-average power ratio (dB).
    papr_db,
    /// Moments of the amplitude normalised to unit RMS.
    amp_mean,
    amp_std,
    amp_skewness,
    amp_kurtosis,
    /// Moments of the instantaneous phase (radians, in (−π, π]).
    phase_mean,
    phase_std,
    phase_skewness,
    phase_kurtosis,
    /// Moments of the instantaneous frequency (Hz).
    freq_mean_hz,
    freq_std_hz,
    freq_skewness,
    freq_kurtosis,
    /// Cumulants of the mean-removed signal normalised by C21^(p/2) (Swami & Sadler 2000):
    /// magnitudes of the complex ones, the real ones as they are; `c21` is the power itself.
    c20_abs,
    c21,
    c40_abs,
    c41_abs,
    c42,
    c60_abs,
    c63,
}

/// Mean, standard deviation, skewness and kurtosis (not excess) of `values`, in two passes.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn moments(values: &[f64]) -> [f64; 4] {
    if values.is_empty() {
        return [f64::NAN; 4];
    }
    let n = values.len() as f64;
    let mean = lanes(values, |v| [v, 0.0, 0.0])[0] / n;
    let [m2, m3, m4] = lanes(values, |v| {
        let d = v - mean;
        let d2 = d * d;
        [d2, d2 * d, d2 * d2]
    });
    let (m2, m3, m4) = (m2 / n, m3 / n, m4 / n);
    let std = m2.sqrt();
    [mean, std, m3 / (m2 * std), m4 / (m2 * m2)]
}

/// Sums of `K` terms of every value, in four interleaved partial sums: strict f64 sums are one
/// dependent chain that the compiler may not reorder, four chains vectorise and overlap.
#[inline(always)]
fn lanes<T: Copy, const K: usize>(values: &[T], terms: impl Fn(T) -> [f64; K]) -> [f64; K] {
    let mut acc = [[0.0f64; K]; 4];
    let mut chunks = values.chunks_exact(4);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            for (x, t) in a.iter_mut().zip(terms(v)) {
                *x += t;
            }
        }
    }
    for &v in chunks.remainder() {
        for (x, t) in acc[0].iter_mut().zip(terms(v)) {
            *x += t;
        }
    }
    let mut out = [0.0; K];
    for a in acc {
        for (o, x) in out.iter_mut().zip(a) {
            *o += x;
        }
    }
    out
}

/// Σ I, Σ Q, Σ|x|², Σ|x|⁴ and max |x|².
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn power_sums(iq: &[Complex32]) -> [f64; 5] {
    let [re, im, power, m4] = lanes(iq, |v| {
        let (a, b) = (f64::from(v.re), f64::from(v.im));
        let p = a * a + b * b;
        [a, b, p, p * p]
    });
    let peak = iq
        .iter()
        .map(|v| f64::from(v.re).powi(2) + f64::from(v.im).powi(2))
        .fold(0.0f64, f64::max);
    [re, im, power, m4, peak]
}

/// |x| · scale of every sample.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn amplitudes(iq: &[Complex32], scale: f64, out: &mut Vec<f64>) {
    out.clear();
    out.extend(
        iq.iter()
            .map(|v| (f64::from(v.re).powi(2) + f64::from(v.im).powi(2)).sqrt() * scale),
    );
}

/// The instantaneous phase of every sample.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn phases(iq: &[Complex32], out: &mut Vec<f64>) {
    out.clear();
    out.extend(iq.iter().map(|v| atan2(f64::from(v.im), f64::from(v.re))));
}

/// The instantaneous frequency between neighbours, arg(x[n] conj(x[n−1])) · `to_hz`.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn frequencies(iq: &[Complex32], to_hz: f64, out: &mut Vec<f64>) {
    out.clear();
    if iq.is_empty() {
        return;
    }
    out.extend(iq.iter().zip(&iq[1..]).map(|(a, b)| {
        let re = f64::from(b.re) * f64::from(a.re) + f64::from(b.im) * f64::from(a.im);
        let im = f64::from(b.im) * f64::from(a.re) - f64::from(b.re) * f64::from(a.im);
        atan2(im, re) * to_hz
    }));
}

/// Sums of the moments Swami & Sadler's cumulants need, in one pass over the mean-removed
/// signal: E[z²], E|z|², E[z³], E[z|z|²], E[z⁴], E[z²|z|²], E|z|⁴, E[z⁶], E|z|⁶.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MomentSums {
    pub n: f64,
    pub m20: Complex64,
    pub m21: f64,
    pub m30: Complex64,
    pub m31: Complex64,
    pub m40: Complex64,
    pub m41: Complex64,
    pub m42: f64,
    pub m60: Complex64,
    pub m63: f64,
}

impl MomentSums {
    pub fn of(iq: &[Complex32], mean: Complex64) -> Self {
        moment_sums(iq, mean)
    }

    /// The normalised cumulants (c20_abs, c21, c40_abs, c41_abs, c42, c60_abs, c63).
    pub fn cumulants(&self) -> [f64; 7] {
        let n = self.n;
        let (m20, m21, m30, m31) = (self.m20 / n, self.m21 / n, self.m30 / n, self.m31 / n);
        let (m40, m41, m42) = (self.m40 / n, self.m41 / n, self.m42 / n);
        let (m60, m63) = (self.m60 / n, self.m63 / n);
        let m43 = m41.conj();
        let c40 = m40 - 3.0 * m20 * m20;
        let c41 = m41 - 3.0 * m20 * m21;
        let c42 = m42 - m20.norm_sqr() - 2.0 * m21 * m21;
        let c60 = m60 - 15.0 * m40 * m20 - 10.0 * m30 * m30 + 30.0 * m20 * m20 * m20;
        // All partitions of (x, x, x, x*, x*, x*) into blocks of two or more (zero mean).
        let c63 = m63
            - (3.0 * m20 * m43 + 3.0 * m20.conj() * m41).re
            - 9.0 * m21 * m42
            - m30.norm_sqr()
            - 9.0 * m31.norm_sqr()
            + 12.0 * m21 * m21 * m21
            + 18.0 * m20.norm_sqr() * m21;
        let p2 = m21 * m21;
        let p3 = p2 * m21;
        [
            m20.norm() / m21,
            m21,
            c40.norm() / p2,
            c41.norm() / p2,
            c42 / p2,
            c60.norm() / p3,
            c63 / p3,
        ]
    }
}

#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn moment_sums(iq: &[Complex32], mean: Complex64) -> MomentSums {
    // Four samples at a time, each quantity a [f64; 4] (structure of arrays), so that the
    // complex products vectorise across samples; 15 running sums of four lanes each.
    let mut acc = [[0.0f64; 4]; 15];
    let mut add = |zr: [f64; 4], zi: [f64; 4]| {
        for l in 0..4 {
            let (x, y) = (zr[l], zi[l]);
            let (z2r, z2i) = (x * x - y * y, 2.0 * x * y);
            let a = x * x + y * y;
            let (z3r, z3i) = (z2r * x - z2i * y, z2r * y + z2i * x);
            let (z4r, z4i) = (z2r * z2r - z2i * z2i, 2.0 * z2r * z2i);
            let (z6r, z6i) = (z4r * z2r - z4i * z2i, z4r * z2i + z4i * z2r);
            let terms = [
                z2r,
                z2i,
                a,
                z3r,
                z3i,
                x * a,
                y * a,
                z4r,
                z4i,
                z2r * a,
                z2i * a,
                a * a,
                z6r,
                z6i,
                a * a * a,
            ];
            for (s, t) in acc.iter_mut().zip(terms) {
                s[l] += t;
            }
        }
    };
    let centred = |v: &Complex32| (f64::from(v.re) - mean.re, f64::from(v.im) - mean.im);
    let mut chunks = iq.chunks_exact(4);
    for c in &mut chunks {
        let mut zr = [0.0; 4];
        let mut zi = [0.0; 4];
        for (l, v) in c.iter().enumerate() {
            (zr[l], zi[l]) = centred(v);
        }
        add(zr, zi);
    }
    for v in chunks.remainder() {
        // A lone sample in lane 0, zeros (which add nothing) in the others.
        let (x, y) = centred(v);
        add([x, 0.0, 0.0, 0.0], [y, 0.0, 0.0, 0.0]);
    }
    let t: Vec<f64> = acc.iter().map(|s| s.iter().sum()).collect();
    let c = |i: usize| Complex64::new(t[i], t[i + 1]);
    MomentSums {
        n: iq.len() as f64,
        m20: c(0),
        m21: t[2],
        m30: c(3),
        m31: c(5),
        m40: c(7),
        m41: c(9),
        m42: t[11],
        m60: c(12),
        m63: t[14],
    }
}

fn db(x: f64) -> f64 {
    10.0 * x.log10()
}

/// Clamped SNR in dB.
fn snr_db(signal: f64, noise: f64) -> f64 {
    if signal > 0.0 && noise > 0.0 {
        db(signal / noise).max(SNR_FLOOR_DB)
    } else {
        SNR_FLOOR_DB
    }
}

/// The features read off a PSD (shared by the CPU path and the GPU path, whose PSD is
/// computed on the device).
pub fn spectral_features(psd: &Psd, fraction: f64, f: &mut RfFeatures) {
    let fs = psd.fs;
    let df = psd.bin_hz();
    let floor = noise_floor(psd);
    let total: f64 = psd.density.iter().sum::<f64>() * df;
    let noise = floor * fs;
    let signal = total - noise;
    let obw = occupied_bandwidth(psd, floor, fraction);
    f.noise_floor_dbfs_hz = db(floor);
    f.noise_power_dbfs = db(noise);
    f.snr_fullband_db = snr_db(signal, noise);
    f.snr_inband_db = snr_db(signal, floor * obw.bandwidth_hz);
    f.obw_hz = obw.bandwidth_hz;
    f.obw_low_hz = obw.low_hz;
    f.obw_high_hz = obw.high_hz;
    let (mut wsum, mut fsum) = (0.0, 0.0);
    for k in obw.lo..=obw.hi {
        let d = (psd.density[k] - floor).max(0.0);
        wsum += d;
        fsum += d * psd.freq(k);
    }
    f.cfo_hz = if wsum > 0.0 { fsum / wsum } else { 0.0 };
    let peak = (0..psd.density.len())
        .max_by(|&a, &b| psd.density[a].total_cmp(&psd.density[b]))
        .unwrap_or(0);
    f.peak_freq_hz = psd.freq(peak);
    let p_sum: f64 = psd.density.iter().sum();
    let centroid = (0..psd.density.len())
        .map(|k| psd.freq(k) * psd.density[k])
        .sum::<f64>()
        / p_sum;
    let (mut m2, mut m4) = (0.0, 0.0);
    for (k, &p) in psd.density.iter().enumerate() {
        let d = psd.freq(k) - centroid;
        m2 += d * d * p;
        m4 += d * d * d * d * p;
    }
    let (m2, m4) = (m2 / p_sum, m4 / p_sum);
    f.spectral_centroid_hz = centroid;
    f.spectral_spread_hz = m2.sqrt();
    f.spectral_kurtosis = m4 / (m2 * m2);
    // Bins at exactly zero would send the geometric mean to zero: they count as 1e-30 of the
    // largest bin.
    let tiny = psd.density.iter().copied().fold(0.0, f64::max) * 1e-30;
    let n = psd.density.len() as f64;
    let log_mean = psd.density.iter().map(|&p| p.max(tiny).ln()).sum::<f64>() / n;
    f.spectral_flatness = log_mean.exp() / (p_sum / n);
}

/// The features read off the samples themselves.
pub fn sample_features(iq: &[Complex32], fs: f64, cfg: &FeatureConfig, f: &mut RfFeatures) {
    let n = iq.len() as f64;
    let [re, im, power, m4, peak] = power_sums(iq);
    let mean = Complex64::new(re / n, im / n);
    let m2 = power / n;
    let m4 = m4 / n;
    f.rssi_dbfs = db(m2);
    f.rssi_dbm = cfg.calibration_db.map_or(f64::NAN, |c| f.rssi_dbfs + c);
    f.papr_db = if m2 > 0.0 { db(peak / m2) } else { 0.0 };
    // M2M4 with ka = 1 (constant envelope) and kw = 2 (complex Gaussian noise).
    let s = (2.0 * m2 * m2 - m4).max(0.0).sqrt();
    f.snr_m2m4_db = snr_db(s, m2 - s);
    let rms = m2.sqrt();
    let scale = if rms > 0.0 { 1.0 / rms } else { 0.0 };
    let mut values = Vec::with_capacity(iq.len());
    amplitudes(iq, scale, &mut values);
    [f.amp_mean, f.amp_std, f.amp_skewness, f.amp_kurtosis] = moments(&values);
    phases(iq, &mut values);
    [
        f.phase_mean,
        f.phase_std,
        f.phase_skewness,
        f.phase_kurtosis,
    ] = moments(&values);
    frequencies(iq, fs / std::f64::consts::TAU, &mut values);
    [
        f.freq_mean_hz,
        f.freq_std_hz,
        f.freq_skewness,
        f.freq_kurtosis,
    ] = moments(&values);
    [
        f.c20_abs, f.c21, f.c40_abs, f.c41_abs, f.c42, f.c60_abs, f.c63,
    ] = MomentSums::of(iq, mean).cumulants();
}

/// Every feature of `iq` at `fs`, and the PSD they were read from.
pub fn features(
    iq: &[Complex32],
    fs: f64,
    cfg: &FeatureConfig,
) -> Result<(RfFeatures, Psd), RfError> {
    let mut welch = Welch::new(&cfg.welch)?;
    features_with(&mut welch, iq, fs, cfg)
}

/// [`features`] with a Welch plan reused across recordings.
pub fn features_with(
    welch: &mut Welch,
    iq: &[Complex32],
    fs: f64,
    cfg: &FeatureConfig,
) -> Result<(RfFeatures, Psd), RfError> {
    if !(fs.is_finite() && fs > 0.0) {
        return Err(invalid("sample_rate", "must be positive and finite"));
    }
    if let Some(i) = iq
        .iter()
        .position(|v| !(v.re.is_finite() && v.im.is_finite()))
    {
        return Err(RfError::NonFinite { index: i });
    }
    let psd = welch.compute(iq, fs)?;
    let mut f = RfFeatures::default();
    sample_features(iq, fs, cfg, &mut f);
    spectral_features(&psd, cfg.obw_fraction, &mut f);
    Ok((f, psd))
}
