//! RF features of a recording (or of a window of one): the Welch PSD and what is read from
//! it (noise floor, SNR, occupied bandwidth, carrier offset, spectral shape), and statistics of
//! the samples (RSSI, PAPR, M2M4, amplitude/phase/frequency moments, cumulants). docs/rf.md
//! gives every formula and its reference.

use std::f64::consts::{PI, TAU};
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
    /// Windowed segments, and their spectra: the FFT runs out of place, which rustfft's AVX
    /// algorithms do natively (in place, they transpose through the scratch and copy back).
    buffer: Vec<Complex64>,
    spectra: Vec<Complex64>,
    scratch: Vec<Complex64>,
    acc: Vec<f64>,
}

/// Segments handed to one FFT call.
const SEGMENTS_PER_CALL: usize = 16;

impl Welch {
    pub fn new(cfg: &WelchConfig) -> Result<Self, RfError> {
        cfg.validate()?;
        let fft = FftPlanner::new().plan_fft_forward(cfg.nperseg);
        let scratch = vec![Complex64::default(); fft.get_outofplace_scratch_len()];
        Ok(Welch {
            cfg: *cfg,
            window: window(cfg.window, cfg.nperseg, true),
            fft,
            buffer: Vec::with_capacity(cfg.nperseg * SEGMENTS_PER_CALL),
            spectra: Vec::with_capacity(cfg.nperseg * SEGMENTS_PER_CALL),
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
            self.buffer.resize(count * n, Complex64::default());
            for (s, out) in (first..first + count).zip(self.buffer.chunks_exact_mut(n)) {
                let seg = &iq[s * hop..s * hop + n];
                let mean = if self.cfg.detrend {
                    let (re, im) = seg.iter().fold((0.0f64, 0.0f64), |(a, b), v| {
                        (a + f64::from(v.re), b + f64::from(v.im))
                    });
                    Complex64::new(re / n as f64, im / n as f64)
                } else {
                    Complex64::default()
                };
                windowed(seg, &self.window, mean, out);
            }
            self.spectra.resize(count * n, Complex64::default());
            self.fft.process_outofplace_with_scratch(
                &mut self.buffer,
                &mut self.spectra,
                &mut self.scratch,
            );
            add_power(&mut self.acc, &self.spectra);
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

/// `out = (seg − mean) · window`, written into place (an `extend` here ran the generic,
/// un-vectorised copy loop).
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn windowed(seg: &[Complex32], window: &[f64], mean: Complex64, out: &mut [Complex64]) {
    for ((o, v), &w) in out.iter_mut().zip(seg).zip(window) {
        o.re = (f64::from(v.re) - mean.re) * w;
        o.im = (f64::from(v.im) - mean.im) * w;
    }
}

/// Adds |X|² of each spectrum in `spectra` (each `acc.len()` bins) to `acc`.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn add_power(acc: &mut [f64], spectra: &[Complex64]) {
    for spectrum in spectra.chunks_exact(acc.len()) {
        for (a, x) in acc.iter_mut().zip(spectrum) {
            *a += x.norm_sqr();
        }
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

/// Count, mean and the sums of the 2nd, 3rd and 4th powers of the deviations from the mean of
/// a stream of values (what its mean, spread, skewness and kurtosis need), kept for one block
/// and merged block by block by the pairwise update for p = 2…4 of Pébay, "Formulas for
/// robust, one-pass parallel computation of covariances and arbitrary-order statistical
/// moments" (Sandia SAND2008-6212, 2008). One pass over the samples, each block's values held
/// in cache, is then as exact as two passes over stored values.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct CentralSums {
    n: f64,
    mean: f64,
    m2: f64,
    m3: f64,
    m4: f64,
}

impl CentralSums {
    /// A block's sums, in two passes over the block.
    #[inline(always)]
    fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return CentralSums::default();
        }
        let n = values.len() as f64;
        let mean = lanes(values, |v| [v])[0] / n;
        let [m2, m3, m4] = lanes(values, |v| {
            let d = v - mean;
            let d2 = d * d;
            [d2, d2 * d, d2 * d2]
        });
        CentralSums {
            n,
            mean,
            m2,
            m3,
            m4,
        }
    }

    /// The sums of both streams together.
    fn merge(self, b: CentralSums) -> Self {
        let a = self;
        if a.n == 0.0 {
            return b;
        }
        if b.n == 0.0 {
            return a;
        }
        let n = a.n + b.n;
        let d = b.mean - a.mean;
        let (d2, na, nb) = (d * d, a.n, b.n);
        CentralSums {
            n,
            mean: a.mean + d * nb / n,
            m2: a.m2 + b.m2 + d2 * na * nb / n,
            m3: a.m3
                + b.m3
                + d2 * d * na * nb * (na - nb) / (n * n)
                + 3.0 * d * (na * b.m2 - nb * a.m2) / n,
            m4: a.m4
                + b.m4
                + d2 * d2 * na * nb * (na * na - na * nb + nb * nb) / (n * n * n)
                + 6.0 * d2 * (na * na * b.m2 + nb * nb * a.m2) / (n * n)
                + 4.0 * d * (na * b.m3 - nb * a.m3) / n,
        }
    }

    /// Mean, standard deviation, skewness and kurtosis (not excess).
    fn moments(&self) -> [f64; 4] {
        if self.n == 0.0 {
            return [f64::NAN; 4];
        }
        let (m2, m3, m4) = (self.m2 / self.n, self.m3 / self.n, self.m4 / self.n);
        let std = m2.sqrt();
        [self.mean, std, m3 / (m2 * std), m4 / (m2 * m2)]
    }
}

/// Partial sums `lanes` keeps of each term: two AVX-512 registers, four AVX2 ones.
const SUM_LANES: usize = 16;

/// Sums of `K` terms of every value, in `SUM_LANES` interleaved partial sums: strict f64 sums
/// are one dependent chain that the compiler may not reorder; independent partial sums, each
/// term's contiguous, vectorise and overlap. (Four lanes are one AVX-512 half-register, one
/// chain that waits on the adder; sixteen are two to four chains.)
#[inline(always)]
fn lanes<T: Copy, const K: usize>(values: &[T], terms: impl Fn(T) -> [f64; K]) -> [f64; K] {
    let mut acc = [[0.0f64; SUM_LANES]; K];
    let mut chunks = values.chunks_exact(SUM_LANES);
    for c in &mut chunks {
        let c: &[T; SUM_LANES] = c.try_into().expect("chunks of SUM_LANES");
        for (l, &v) in c.iter().enumerate() {
            for (a, t) in acc.iter_mut().zip(terms(v)) {
                a[l] += t;
            }
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        for (a, t) in acc.iter_mut().zip(terms(v)) {
            a[l] += t;
        }
    }
    acc.map(|a| a.iter().sum())
}

/// The largest of `values` (all ≥ 0), eight at a time: `max` is exact in any order, and eight
/// running maxima vectorise where one does not.
#[inline(always)]
fn max_of(values: &[f64]) -> f64 {
    let mut m = [0.0f64; 8];
    let mut chunks = values.chunks_exact(8);
    for c in &mut chunks {
        for (m, &v) in m.iter_mut().zip(c) {
            *m = m.max(v);
        }
    }
    chunks
        .remainder()
        .iter()
        .chain(&m)
        .fold(0.0, |a, &b| a.max(b))
}

/// Samples one block of [`sample_pass`] works on: its three f64 values a sample (24 KiB) stay
/// in the core's cache between computing them and summing them.
const BLOCK: usize = 1024;

/// What one pass over the samples gives: Σ I, Σ Q, Σ|x|², Σ|x|⁴, max |x|², and the central
/// sums of the amplitude |x|, the phase atan2(Q, I) and the frequency arg(x[n] x*[n−1]) in
/// radians a sample.
#[derive(Debug, Clone, Copy, Default)]
struct SamplePass {
    power: [f64; 4],
    peak: f64,
    amplitude: CentralSums,
    phase: CentralSums,
    frequency: CentralSums,
}

/// The whole pass, a block at a time: the values of a block are computed into arrays on the
/// stack (vectorised: `atan2` has no branches), summed there, and merged into the totals, so
/// that nothing the size of the recording is stored or read again.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn sample_pass(iq: &[Complex32]) -> SamplePass {
    let mut out = SamplePass::default();
    let (mut amp, mut phase, mut freq) = ([0.0f64; BLOCK], [0.0f64; BLOCK], [0.0f64; BLOCK]);
    // The phase and |x|² of the last sample of the block before.
    let mut before: Option<(f64, f64)> = None;
    for start in (0..iq.len()).step_by(BLOCK) {
        let block = &iq[start..(start + BLOCK).min(iq.len())];
        let len = block.len();
        // |x|² into `amp` first: the power sums and the peak read it there.
        for ((a, p), v) in amp.iter_mut().zip(phase.iter_mut()).zip(block) {
            let (x, y) = (f64::from(v.re), f64::from(v.im));
            *a = x * x + y * y;
            *p = atan2(y, x);
        }
        let [re, im] = lanes(block, |v| [f64::from(v.re), f64::from(v.im)]);
        let [power, p2] = lanes(&amp[..len], |p| [p, p * p]);
        for (total, s) in out.power.iter_mut().zip([re, im, power, p2]) {
            *total += s;
        }
        out.peak = out.peak.max(max_of(&amp[..len]));
        // arg(x[n] x*[n−1]) is the phase's step, phase[n] − phase[n−1] wrapped into (−π, π]:
        // one atan2 a sample instead of two. A zero sample makes the product 0, whose arg is 0.
        // (The step carries the rounding of two phases, a few 1e-16 rad, against the
        // product's one rounding; the f32 samples' own rounding is 6e-8 of their size.)
        let step = |p: f64, p_before: f64, a: f64, a_before: f64| -> f64 {
            let d = p - p_before;
            let d = if d > PI {
                d - TAU
            } else if d <= -PI {
                d + TAU
            } else {
                d
            };
            if a * a_before == 0.0 {
                0.0
            } else {
                d
            }
        };
        if let Some((p_before, a_before)) = before {
            freq[0] = step(phase[0], p_before, amp[0], a_before);
        }
        for (((f, p), a), (p_before, a_before)) in freq[1..len]
            .iter_mut()
            .zip(&phase[1..len])
            .zip(&amp[1..len])
            .zip(phase[..len - 1].iter().zip(&amp[..len - 1]))
        {
            *f = step(*p, *p_before, *a, *a_before);
        }
        // The first sample of the recording has no sample before it, nor a frequency.
        let first = usize::from(before.is_none());
        out.frequency = out.frequency.merge(CentralSums::of(&freq[first..len]));
        before = Some((phase[len - 1], amp[len - 1]));
        for a in &mut amp[..len] {
            *a = a.sqrt();
        }
        out.amplitude = out.amplitude.merge(CentralSums::of(&amp[..len]));
        out.phase = out.phase.merge(CentralSums::of(&phase[..len]));
    }
    out
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

/// Lanes of `moment_sums`' running sums: eight f64, one AVX-512 register (two AVX2 ones).
const MOMENT_LANES: usize = 8;

/// Adds the terms of `MOMENT_LANES` samples (real parts `x`, imaginary `y`, contiguous) to
/// `moment_sums`' running sums. Always inlined, and fed from arrays rather than from the
/// interleaved samples: the closure it replaces was compiled out of line and mostly scalar
/// (perf showed its name and `vmulsd`s).
#[inline(always)]
fn add_moment_terms(
    acc: &mut [[f64; MOMENT_LANES]; 15],
    x: &[f64; MOMENT_LANES],
    y: &[f64; MOMENT_LANES],
) {
    for l in 0..MOMENT_LANES {
        let (x, y) = (x[l], y[l]);
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
}

#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn moment_sums(iq: &[Complex32], mean: Complex64) -> MomentSums {
    // The samples a block at a time, centred into separate real and imaginary arrays (a
    // vectorised deinterleave), then eight at a time into 15 running sums of eight lanes
    // each (structure of arrays), so that the complex products vectorise across samples.
    const BLOCK: usize = 256;
    let mut acc = [[0.0f64; MOMENT_LANES]; 15];
    let (mut xs, mut ys) = ([0.0f64; BLOCK], [0.0f64; BLOCK]);
    for block in iq.chunks(BLOCK) {
        for ((x, y), v) in xs.iter_mut().zip(ys.iter_mut()).zip(block) {
            *x = f64::from(v.re) - mean.re;
            *y = f64::from(v.im) - mean.im;
        }
        // A short last block is padded with zeros, which add nothing to any sum.
        let used = block.len().next_multiple_of(MOMENT_LANES);
        xs[block.len()..used].fill(0.0);
        ys[block.len()..used].fill(0.0);
        for (x, y) in xs[..used]
            .chunks_exact(MOMENT_LANES)
            .zip(ys[..used].chunks_exact(MOMENT_LANES))
        {
            let x = x.try_into().expect("chunks of MOMENT_LANES");
            let y = y.try_into().expect("chunks of MOMENT_LANES");
            add_moment_terms(&mut acc, x, y);
        }
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

/// The features read off the samples themselves. `fs` must be positive and finite
/// ([`features_with`] checks it; the frequency's moments are scaled by fs/2π).
pub fn sample_features(iq: &[Complex32], fs: f64, cfg: &FeatureConfig, f: &mut RfFeatures) {
    let n = iq.len() as f64;
    let pass = sample_pass(iq);
    let [re, im, power, m4] = pass.power;
    let mean = Complex64::new(re / n, im / n);
    let m2 = power / n;
    let m4 = m4 / n;
    f.rssi_dbfs = db(m2);
    f.rssi_dbm = cfg.calibration_db.map_or(f64::NAN, |c| f.rssi_dbfs + c);
    f.papr_db = if m2 > 0.0 { db(pass.peak / m2) } else { 0.0 };
    // M2M4 with ka = 1 (constant envelope) and kw = 2 (complex Gaussian noise).
    let s = (2.0 * m2 * m2 - m4).max(0.0).sqrt();
    f.snr_m2m4_db = snr_db(s, m2 - s);
    // The amplitude normalised to unit RMS, and the frequency in hertz: a mean and a standard
    // deviation scale with their values; skewness and kurtosis do not change.
    let rms = m2.sqrt();
    let scale = if rms > 0.0 { 1.0 / rms } else { 0.0 };
    let [mean_a, std_a, skew_a, kurt_a] = pass.amplitude.moments();
    [f.amp_mean, f.amp_std, f.amp_skewness, f.amp_kurtosis] =
        [mean_a * scale, std_a * scale, skew_a, kurt_a];
    [
        f.phase_mean,
        f.phase_std,
        f.phase_skewness,
        f.phase_kurtosis,
    ] = pass.phase.moments();
    let to_hz = fs / std::f64::consts::TAU;
    let [mean_f, std_f, skew_f, kurt_f] = pass.frequency.moments();
    [
        f.freq_mean_hz,
        f.freq_std_hz,
        f.freq_skewness,
        f.freq_kurtosis,
    ] = [mean_f * to_hz, std_f * to_hz, skew_f, kurt_f];
    [
        f.c20_abs, f.c21, f.c40_abs, f.c41_abs, f.c42, f.c60_abs, f.c63,
    ] = MomentSums::of(iq, mean).cumulants();
}

/// The index of the first sample with an infinite or NaN part. Whole chunks are checked
/// without a branch a sample (a vectorised test, 64 samples at a time), and only a chunk that
/// fails is searched.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn first_non_finite(iq: &[Complex32]) -> Option<usize> {
    const CHUNK: usize = 64;
    let finite = |v: &Complex32| v.re.is_finite() & v.im.is_finite();
    iq.chunks(CHUNK).enumerate().find_map(|(c, chunk)| {
        if chunk.iter().fold(true, |ok, v| ok & finite(v)) {
            return None;
        }
        chunk.iter().position(|v| !finite(v)).map(|i| c * CHUNK + i)
    })
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
    if let Some(i) = first_non_finite(iq) {
        return Err(RfError::NonFinite { index: i });
    }
    let psd = welch.compute(iq, fs)?;
    let mut f = RfFeatures::default();
    sample_features(iq, fs, cfg, &mut f);
    spectral_features(&psd, cfg.obw_fraction, &mut f);
    Ok((f, psd))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mean, std, skewness, kurtosis by the textbook two passes over all values.
    fn two_pass(v: &[f64]) -> [f64; 4] {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let m = |p: i32| v.iter().map(|x| (x - mean).powi(p)).sum::<f64>() / n;
        let (m2, m3, m4) = (m(2), m(3), m(4));
        [mean, m2.sqrt(), m3 / m2.powf(1.5), m4 / (m2 * m2)]
    }

    /// A noisy signal whose level and carrier change half-way: block sums that are merged
    /// wrongly, or blocks with different means, show in its moments.
    fn signal(len: usize) -> Vec<Complex32> {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut uniform = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        (0..len)
            .map(|i| {
                let (level, turn) = if i < len / 2 { (0.3, 0.01) } else { (2.0, 0.2) };
                let phase = turn * i as f64;
                Complex32::new(
                    (level * phase.cos() + 0.1 * uniform() + 0.05) as f32,
                    (level * phase.sin() + 0.1 * uniform()) as f32,
                )
            })
            .collect()
    }

    fn assert_close(got: [f64; 4], want: [f64; 4], what: &str) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            if g.is_nan() && w.is_nan() {
                continue; // One value has no spread: 0/0 both ways.
            }
            // A mean near zero is compared against the spread of the values, a skewness near
            // zero against 1 (its unit: the third moment's terms are of the size of std³).
            let scale = match i {
                0 => w.abs().max(want[1]),
                2 => w.abs().max(1.0),
                _ => w.abs(),
            };
            assert!(
                (g - w).abs() <= 1e-12 * scale,
                "{what}[{i}]: {g} vs {w} (want {want:?})"
            );
        }
    }

    #[test]
    fn block_sums_merge_into_the_two_pass_moments() {
        let values: Vec<f64> = signal(5000)
            .iter()
            .map(|v| f64::from(v.re) * 3.0 + 7.0)
            .collect();
        // Uneven blocks, an empty one among them.
        let mut sums = CentralSums::default();
        for range in [0..1, 1..1, 1..1024, 1024..1500, 1500..5000] {
            sums = sums.merge(CentralSums::of(&values[range]));
        }
        assert_eq!(sums.n, 5000.0);
        assert_close(sums.moments(), two_pass(&values), "merged");
        assert!(CentralSums::default().moments()[0].is_nan());
    }

    #[test]
    fn the_one_pass_sample_features_equal_two_passes_over_every_value() {
        // Lengths around the pass's block and the sums' lanes.
        for len in [1, 2, 7, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17, 40_000] {
            let iq = signal(len);
            let fs = 200_000.0;
            let mut f = RfFeatures::default();
            sample_features(&iq, fs, &FeatureConfig::default(), &mut f);
            let c = |v: &Complex32| (f64::from(v.re), f64::from(v.im));
            let power: Vec<f64> = iq.iter().map(|v| c(v).0.powi(2) + c(v).1.powi(2)).collect();
            let rms = (power.iter().sum::<f64>() / len as f64).sqrt();
            let amp: Vec<f64> = power.iter().map(|p| p.sqrt() / rms).collect();
            let phase: Vec<f64> = iq.iter().map(|v| c(v).1.atan2(c(v).0)).collect();
            let freq: Vec<f64> = iq
                .windows(2)
                .map(|w| {
                    let ((ar, ai), (br, bi)) = (c(&w[0]), c(&w[1]));
                    (bi * ar - br * ai).atan2(br * ar + bi * ai) * fs / std::f64::consts::TAU
                })
                .collect();
            let what = format!("{len} samples");
            assert_close(
                [f.amp_mean, f.amp_std, f.amp_skewness, f.amp_kurtosis],
                two_pass(&amp),
                &format!("{what}: amplitude"),
            );
            assert_close(
                [
                    f.phase_mean,
                    f.phase_std,
                    f.phase_skewness,
                    f.phase_kurtosis,
                ],
                two_pass(&phase),
                &format!("{what}: phase"),
            );
            assert_close(
                [
                    f.freq_mean_hz,
                    f.freq_std_hz,
                    f.freq_skewness,
                    f.freq_kurtosis,
                ],
                two_pass(&freq),
                &format!("{what}: frequency"),
            );
            let peak = power.iter().copied().fold(0.0, f64::max);
            // In dB: relative to its size, or to 1 dB near 0 dB (one sample).
            let papr = 10.0 * (peak / (rms * rms)).log10();
            assert!(
                (f.papr_db - papr).abs() <= 1e-12 * papr.abs().max(1.0),
                "{what}: papr {}",
                f.papr_db
            );
        }
    }

    /// The frequency from the phase's steps equals the arg of x[n] x*[n−1] where it is
    /// delicate: zero samples (a zero product has arg 0), half turns (arg π, from either side),
    /// steps across the negative real axis (wrapped), and each of these at a block's edge.
    #[test]
    fn the_frequency_from_phase_steps_equals_the_products_arg() {
        let mut iq = signal(3 * BLOCK + 5);
        let special = [
            (Complex32::new(0.0, 0.0), Complex32::new(0.5, -0.2)),
            (Complex32::new(0.3, 0.1), Complex32::new(0.0, 0.0)),
            (Complex32::new(1.0, 0.0), Complex32::new(-1.0, 0.0)),
            (Complex32::new(-1.0, 0.0), Complex32::new(1.0, 0.0)),
            (Complex32::new(-1.0, 1e-3), Complex32::new(-1.0, -1e-3)),
            (Complex32::new(-1.0, -1e-3), Complex32::new(-1.0, 1e-3)),
            (Complex32::new(0.0, 0.0), Complex32::new(0.0, 0.0)),
        ];
        for (k, (a, b)) in special.iter().enumerate() {
            (iq[40 + 9 * k], iq[41 + 9 * k]) = (*a, *b);
        }
        // A zero sample and half turns either way across the blocks' edges.
        for (edge, k) in [(BLOCK, 0), (2 * BLOCK, 2), (3 * BLOCK, 3)] {
            (iq[edge - 1], iq[edge]) = special[k];
        }
        let c = |v: &Complex32| (f64::from(v.re), f64::from(v.im));
        let freq: Vec<f64> = iq
            .windows(2)
            .map(|w| {
                let ((ar, ai), (br, bi)) = (c(&w[0]), c(&w[1]));
                // As the features define it: 0 for a zero sample (libm's atan2 of the signed
                // zeros of such a product may be ±π), and in (−π, π] (libm's is −π for a
                // product of −1 + (−0)i, a half turn from −1 to 1).
                if w[0] == Complex32::default() || w[1] == Complex32::default() {
                    return 0.0;
                }
                match (bi * ar - br * ai).atan2(br * ar + bi * ai) {
                    f if f == -PI => PI,
                    f => f,
                }
            })
            .collect();
        assert!(freq.contains(&0.0) && freq.iter().filter(|&&f| f == PI).count() >= 2);
        let pass = sample_pass(&iq);
        assert_close(pass.frequency.moments(), two_pass(&freq), "frequency");
    }

    #[test]
    fn no_samples_give_undefined_moments_not_a_panic() {
        let mut f = RfFeatures::default();
        sample_features(&[], 1e3, &FeatureConfig::default(), &mut f);
        for v in [
            f.amp_mean,
            f.amp_kurtosis,
            f.phase_std,
            f.freq_mean_hz,
            f.freq_skewness,
        ] {
            assert!(v.is_nan(), "{f:?}");
        }
    }

    #[test]
    fn moment_sums_cover_every_sample_of_a_ragged_recording() {
        for len in [1, 9, 255, 257, 1000] {
            let iq = signal(len);
            let mean = Complex64::new(0.01, -0.02);
            let got = MomentSums::of(&iq, mean);
            let z: Vec<Complex64> = iq
                .iter()
                .map(|v| Complex64::new(f64::from(v.re), f64::from(v.im)) - mean)
                .collect();
            let sum =
                |f: &dyn Fn(Complex64) -> Complex64| z.iter().map(|&v| f(v)).sum::<Complex64>();
            let want = [
                (got.m20, sum(&|v| v * v)),
                (Complex64::new(got.m21, 0.0), sum(&|v| v * v.conj())),
                (got.m30, sum(&|v| v * v * v)),
                (got.m31, sum(&|v| v * v * v.conj())),
                (got.m40, sum(&|v| v.powi(4))),
                (got.m41, sum(&|v| v.powi(3) * v.conj())),
                (
                    Complex64::new(got.m42, 0.0),
                    sum(&|v| (v * v.conj()).powi(2)),
                ),
                (got.m60, sum(&|v| v.powi(6))),
                (
                    Complex64::new(got.m63, 0.0),
                    sum(&|v| (v * v.conj()).powi(3)),
                ),
            ];
            for (i, (g, w)) in want.iter().enumerate() {
                assert!(
                    (g - w).norm() <= 1e-12 * w.norm().max(1e-9),
                    "{len} samples, moment {i}: {g} vs {w}"
                );
            }
            assert_eq!(got.n, len as f64);
        }
    }

    #[test]
    fn the_first_non_finite_sample_is_found_in_any_chunk() {
        let clean = signal(200);
        assert_eq!(first_non_finite(&clean), None);
        assert_eq!(first_non_finite(&[]), None);
        for (at, bad) in [
            (0, Complex32::new(f32::NAN, 0.0)),
            (63, Complex32::new(0.0, f32::INFINITY)),
            (64, Complex32::new(f32::NEG_INFINITY, 0.0)),
            (130, Complex32::new(0.0, f32::NAN)),
            (199, Complex32::new(f32::NAN, f32::NAN)),
        ] {
            let mut iq = clean.clone();
            iq[at] = bad;
            // A later bad sample does not hide the first.
            if at + 5 < iq.len() {
                iq[at + 5] = Complex32::new(f32::NAN, 0.0);
            }
            assert_eq!(first_non_finite(&iq), Some(at), "{bad} at {at}");
        }
    }
}
