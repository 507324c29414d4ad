//! A recording from (spec, seed, index): the modulation's clean waveform, the channel and
//! receiver impairments, then AWGN and quantisation.
//!
//! The last two steps ([`add_noise`]) are the **exact stage**: integer Philox words, the
//! integer normal table, one exact product (a 12-bit deviate times a 12-bit sigma) and one
//! correctly rounded addition per value, and quantisation by a power of two. Every IEEE
//! device computes them bit for bit alike, so sonograph-gpu's `rf_synth.wgsl` runs them on
//! the GPU and returns the CPU's bits. The steps before use transcendental functions (carrier
//! rotation, FM phase, fading), which WGSL does not compute to the last bit; they run on the
//! CPU, itself deterministic (no libm in the per-sample loops: `math::sincos_cycles`).

use rustfft::num_complex::{Complex32, Complex64};
use serde::{Deserialize, Serialize};

use crate::error::RfError;
use crate::features::{occupied_bandwidth, welch, WelchConfig};
use crate::math::{frac, lagrange3, phasors, quantize, sincos_cycles};
use crate::modulate::waveform;
use crate::normal::{deviate, round_sig_f32};
use crate::philox::{Draws, Rng, Stream};
use crate::pool;
use crate::spec::{Fading, ModKind, ModulationSpec, Range, SnrDefinition, SynthSpec};

// Params-stream slots: each per-sample parameter has its own word, so that switching one
// impairment on or off never changes another's draw.
const SLOT_MODULATION: u64 = 0;
const SLOT_SNR: u64 = 1;
const SLOT_CFO: u64 = 2;
const SLOT_DRIFT: u64 = 3;
const SLOT_PHASE_NOISE: u64 = 4;
const SLOT_IQ_AMPLITUDE: u64 = 5;
const SLOT_IQ_PHASE: u64 = 6;
const SLOT_DC: u64 = 7;
const SLOT_DC_ANGLE: u64 = 8;
const SLOT_SRO: u64 = 9;
const SLOT_PATHS: u64 = 10;
const SLOT_DOPPLER: u64 = 11;
const SLOT_RICIAN_K: u64 = 12;

/// Fading oscillators per path (sum of sinusoids) and the grid they are evaluated on.
const FADING_OSCILLATORS: usize = 16;
const FADING_GRID: usize = 64;

/// What was drawn for one recording: the ground truth written beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Truth {
    pub index: u64,
    pub label: String,
    pub sample_rate: f64,
    pub n_samples: usize,
    pub snr_db: f64,
    pub snr_definition: SnrDefinition,
    /// The bandwidth `in_band` SNR refers to (the modulation's 99 % occupied bandwidth).
    pub in_band_hz: f64,
    /// Standard deviation of each of I and Q of the noise, as applied (12 significant bits).
    pub noise_sigma: f32,
    pub level_dbfs: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol_rate_hz: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples_per_symbol: Option<u32>,
    pub cfo_hz: f64,
    pub cfo_drift_hz_per_s: f64,
    pub phase_noise_linewidth_hz: f64,
    pub iq_amplitude_db: f64,
    pub iq_phase_deg: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dc_offset_dbc: Option<f64>,
    pub sample_rate_offset_ppm: f64,
    /// Path delays (s) and mean powers (linear, summing to 1); one path when off.
    pub path_delays_s: Vec<f64>,
    pub path_powers: Vec<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fading: Option<Fading>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doppler_hz: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rician_k_db: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantize_bits: Option<u32>,
}

/// The exact stage's inputs for one recording.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseJob {
    pub seed: u64,
    pub index: u64,
    /// Per-component noise standard deviation, already rounded to 12 significant bits.
    pub sigma: f32,
    /// 0: no quantisation.
    pub quantize_bits: u32,
}

/// Where the exact (noise and quantisation) stage of many recordings runs at once (a GPU,
/// through the gpu crate); without one, a job runs [`add_noise`] on the CPU.
pub trait NoiseDevice: Send {
    /// The device as messages name it (`gpu:0 ...`).
    fn name(&self) -> String;

    /// [`add_noise`] on every recording, to the same bits; an error means the device cannot
    /// go on.
    fn add_noise(&mut self, items: &mut [Vec<Complex32>], jobs: &[NoiseJob]) -> Result<(), String>;
}

/// A finished recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub iq: Vec<Complex32>,
    pub truth: Truth,
}

/// A validated spec with what is computed once per spec (the in-band bandwidths).
#[derive(Debug, Clone)]
pub struct Synth {
    spec: SynthSpec,
    in_band: Vec<f64>,
}

impl Synth {
    pub fn new(spec: &SynthSpec) -> Result<Self, RfError> {
        spec.validate()?;
        let spec = spec.resolved();
        let in_band = spec
            .modulations
            .iter()
            .map(|m| in_band_bandwidth(m, spec.sample_rate))
            .collect::<Result<_, _>>()?;
        Ok(Synth { spec, in_band })
    }

    pub fn spec(&self) -> &SynthSpec {
        &self.spec
    }

    /// The bandwidth that in-band SNR refers to for modulation `i` of the spec.
    pub fn in_band_hz(&self, i: usize) -> f64 {
        self.in_band[i]
    }

    /// Recording `index` of the dataset `seed`, entirely on the CPU.
    pub fn sample(&self, seed: u64, index: u64) -> Sample {
        let mut iq = Vec::new();
        let truth = self.sample_into(seed, index, &mut iq);
        Sample { iq, truth }
    }

    /// [`Synth::sample`] into `iq`, whose allocation is reused: a fresh multi-megabyte buffer
    /// for every recording had the kernel zero its pages again (29 % of `synth-iq`'s CPU time
    /// on a disk, in `perf`, once the hash was fast).
    pub fn sample_into(&self, seed: u64, index: u64, iq: &mut Vec<Complex32>) -> Truth {
        let (truth, job) = self.clean_into(seed, index, iq);
        add_noise(iq, &job);
        truth
    }

    /// Everything before the exact stage: the impaired signal at its level, the truth, and
    /// the noise job that [`add_noise`] (or the GPU) finishes it with.
    pub fn clean(&self, seed: u64, index: u64) -> (Vec<Complex32>, Truth, NoiseJob) {
        let mut iq = Vec::new();
        let (truth, job) = self.clean_into(seed, index, &mut iq);
        (iq, truth, job)
    }

    /// [`Synth::clean`]'s signal into `iq` (what it held replaced, its allocation reused).
    pub fn clean_into(&self, seed: u64, index: u64, iq: &mut Vec<Complex32>) -> (Truth, NoiseJob) {
        let spec = &self.spec;
        let fs = spec.sample_rate;
        let n = spec.n_samples;
        let params = Rng::new(seed, index, Stream::Params);
        let draw = |range: &Option<Range>, slot: u64| range.map(|r| r.at(params.uniform(slot)));
        let which = ((u64::from(params.word(SLOT_MODULATION)) * spec.modulations.len() as u64)
            >> 32) as usize;
        let m = &spec.modulations[which];
        let imp = &spec.impairments;
        let snr_db = spec.snr_db.at(params.uniform(SLOT_SNR));
        let sro_ppm = draw(&imp.sample_rate_offset_ppm, SLOT_SRO).unwrap_or(0.0);
        let paths = draw(&imp.multipath_paths, SLOT_PATHS).map_or(1, |p| p.floor() as usize);
        let channel = Channel::draw(spec, seed, index, paths, &params);

        // The waveform with room for the delays and the resampling.
        let pre = channel.max_delay_samples.ceil() as usize + 2;
        let stretch = (n as f64 * sro_ppm.abs() * 1e-6).ceil() as usize;
        let total = pre + n + stretch + 4;
        let x = waveform(m, fs, total, seed, index);
        let ratio = 1.0 + sro_ppm * 1e-6;
        let cfo = draw(&imp.cfo_hz, SLOT_CFO).unwrap_or(0.0);
        let drift = draw(&imp.cfo_drift_hz_per_s, SLOT_DRIFT).unwrap_or(0.0);
        let linewidth = draw(&imp.phase_noise_linewidth_hz, SLOT_PHASE_NOISE).unwrap_or(0.0);
        let rotate = cfo != 0.0 || drift != 0.0 || linewidth > 0.0;
        let iq_db = draw(&imp.iq_amplitude_db, SLOT_IQ_AMPLITUDE).unwrap_or(0.0);
        let iq_deg = draw(&imp.iq_phase_deg, SLOT_IQ_PHASE).unwrap_or(0.0);
        let dc_dbc = draw(&imp.dc_offset_dbc, SLOT_DC);
        let imbalance = iq_db != 0.0 || iq_deg != 0.0;
        let level = 10f64.powf(spec.level_dbfs / 10.0);

        // Without any impairment before the noise the waveform is used where it is; otherwise
        // the channel writes a buffer of its own, which the carrier and front end change.
        let y = if channel.is_identity(ratio) && !rotate && !imbalance && dc_dbc.is_none() {
            None
        } else {
            let mut y = channel.apply(&x, pre, n, ratio);
            if rotate {
                // Carrier offset, drift and phase noise as one phase (in cycles) per sample. A
                // Wiener process of linewidth Δν has increments of variance 2π Δν / fs rad².
                let step = (2.0 * std::f64::consts::PI * linewidth / fs).sqrt()
                    / (2.0 * std::f64::consts::PI);
                let mut pn = Draws::new(Rng::new(seed, index, Stream::PhaseNoise));
                let mut wander = 0.0;
                let mut cycles = pool::real(n);
                cycles.extend((0..n).map(|i| {
                    let t = i as f64 / fs;
                    let c = frac(frac(cfo * t) + frac(0.5 * drift * t * t) + wander);
                    if linewidth > 0.0 {
                        wander = frac(wander + step * pn.normal());
                    }
                    c
                }));
                let mut rot = pool::complex(0);
                phasors(&cycles, &mut rot);
                y.iter_mut().zip(&rot).for_each(|(v, r)| *v *= r);
                pool::give_real(cycles);
                pool::give_complex(rot);
            }
            Some(y)
        };
        let signal: &[Complex64] = y.as_deref().unwrap_or(&x[pre..pre + n]);

        // The level: the realised power of this recording, so that its SNR is exact.
        let power = signal.iter().map(|v| v.norm_sqr()).sum::<f64>() / n as f64;
        let gain = if power > 0.0 {
            (level / power).sqrt()
        } else {
            0.0
        };

        // Receiver front end (IQ imbalance, then DC offset) on the signal at its level.
        let (mut mu, mut nu) = (Complex64::new(gain, 0.0), Complex64::new(0.0, 0.0));
        if imbalance {
            let g = 10f64.powf(iq_db / 20.0);
            let phi = iq_deg.to_radians();
            mu = (Complex64::new(1.0, 0.0) + Complex64::from_polar(g, -phi)) * (0.5 * gain);
            nu = (Complex64::new(1.0, 0.0) - Complex64::from_polar(g, phi)) * (0.5 * gain);
        }
        let dc = match dc_dbc {
            Some(dbc) => {
                let (s, c) = sincos_cycles(params.uniform(SLOT_DC_ANGLE));
                Complex64::new(c, s) * (level * 10f64.powf(dbc / 10.0)).sqrt()
            }
            None => Complex64::new(0.0, 0.0),
        };
        front_end(signal, gain, dc, imbalance.then_some((mu, nu)), iq);
        if let Some(y) = y {
            pool::give_complex(y);
        }
        pool::give_complex(x);

        // Noise power from the SNR definition.
        let snr = 10f64.powf(snr_db / 10.0);
        let sps = m.params.samples_per_symbol;
        let symbol_rate = sps
            .filter(|_| m.kind.has_symbols())
            .map(|s| fs / f64::from(s));
        let noise_power = match spec.snr_definition {
            SnrDefinition::FullBand => level / snr,
            SnrDefinition::InBand => level * fs / (self.in_band[which] * snr),
            // Validation refuses es_n0 without symbols; OFDM's "symbol" is a subcarrier symbol.
            SnrDefinition::EsN0 => level * fs / (symbol_rate.unwrap_or(fs) * snr),
        };
        let sigma = round_sig_f32((noise_power / 2.0).sqrt() as f32);
        let job = NoiseJob {
            seed,
            index,
            sigma,
            quantize_bits: imp.quantize_bits.unwrap_or(0),
        };
        let truth = Truth {
            index,
            label: m.kind.label().to_string(),
            sample_rate: fs,
            n_samples: n,
            snr_db,
            snr_definition: spec.snr_definition,
            in_band_hz: self.in_band[which],
            noise_sigma: sigma,
            level_dbfs: spec.level_dbfs,
            symbol_rate_hz: symbol_rate,
            samples_per_symbol: sps,
            cfo_hz: cfo,
            cfo_drift_hz_per_s: drift,
            phase_noise_linewidth_hz: linewidth,
            iq_amplitude_db: iq_db,
            iq_phase_deg: iq_deg,
            dc_offset_dbc: dc_dbc,
            sample_rate_offset_ppm: sro_ppm,
            path_delays_s: channel.delays.iter().map(|d| d / fs).collect(),
            path_powers: channel.powers.clone(),
            fading: imp.fading,
            doppler_hz: channel.doppler,
            rician_k_db: channel.k_db,
            quantize_bits: imp.quantize_bits,
        };
        (truth, job)
    }
}

/// The receiver's output in f32, into `iq`: `to_f32(v · gain + dc)`, or with an IQ imbalance
/// `to_f32(mu · v + nu · v* + dc)`. The same operations on every target (Rust does not fuse a
/// product and a sum), so the same bits, in a loop compiled for the CPU's vectors: the
/// `extend` it replaces ran the baseline build's scalar conversion.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn front_end(
    signal: &[Complex64],
    gain: f64,
    dc: Complex64,
    imbalance: Option<(Complex64, Complex64)>,
    iq: &mut Vec<Complex32>,
) {
    iq.clear();
    iq.resize(signal.len(), Complex32::default());
    match imbalance {
        Some((mu, nu)) => {
            for (o, v) in iq.iter_mut().zip(signal) {
                *o = to_f32(mu * v + nu * v.conj() + dc);
            }
        }
        None => {
            for (o, v) in iq.iter_mut().zip(signal) {
                *o = to_f32(v * gain + dc);
            }
        }
    }
}

/// The f32 sample, subnormal parts made zero: GPUs may flush them, and the exact stage must
/// see the same inputs everywhere.
#[inline(always)]
fn to_f32(v: Complex64) -> Complex32 {
    let flush = |x: f32| if x.is_subnormal() { 0.0 } else { x };
    Complex32::new(flush(v.re as f32), flush(v.im as f32))
}

/// The exact stage: AWGN then quantisation. Value `j` of the interleaved I/Q sequence gets the
/// deviate of Noise-stream word `j`: `v + sigma * n` (the product is exact, so fused or not it
/// rounds once), then with `b` bits `clamp(floor(v·2^(b−1) + 1/2), −2^(b−1), 2^(b−1) − 1) / 2^(b−1)`.
pub fn add_noise(iq: &mut [Complex32], job: &NoiseJob) {
    let rng = Rng::new(job.seed, job.index, Stream::Noise);
    let mut words = vec![0u32; 2 * 4096];
    for (c, chunk) in iq.chunks_mut(4096).enumerate() {
        let w = &mut words[..2 * chunk.len()];
        rng.fill_words((c * 2 * 4096) as u64, w);
        noise_chunk(chunk, w, job.sigma, job.quantize_bits);
    }
}

fn noise_chunk(chunk: &mut [Complex32], words: &[u32], sigma: f32, bits: u32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: Complex32 is `#[repr(C)] { re, im }` (num-complex documents it), so a slice
        // of n of them is 2n consecutive f32 with the same alignment, borrowed mutably once.
        let values = unsafe {
            std::slice::from_raw_parts_mut(chunk.as_mut_ptr().cast::<f32>(), 2 * chunk.len())
        };
        let table = &crate::normal::TABLE;
        if crate::simd::has_avx512() {
            // SAFETY: AVX-512F/CD (and so AVX2) were detected.
            unsafe { crate::simd::noise16(values, words, sigma, bits, table) };
        } else {
            // SAFETY: AVX2 was detected just above.
            unsafe { crate::simd::noise(values, words, sigma, bits, table) };
        }
        return;
    }
    noise_chunk_scalar(chunk, words, sigma, bits);
}

/// The exact stage without the AVX2 path (the reference the SIMD code is tested against).
pub fn noise_chunk_scalar(chunk: &mut [Complex32], words: &[u32], sigma: f32, bits: u32) {
    for (v, pair) in chunk.iter_mut().zip(words.chunks_exact(2)) {
        v.re = quantize(v.re + sigma * deviate(pair[0]), bits);
        v.im = quantize(v.im + sigma * deviate(pair[1]), bits);
    }
}

/// The in-band bandwidth of a modulation: the 99 % occupied bandwidth of a clean 2^16-sample
/// realisation (seed 0, index 0) through the feature extractor's default Welch PSD. It is a
/// property of the modulation's parameters, computed once per spec.
pub fn in_band_bandwidth(m: &ModulationSpec, fs: f64) -> Result<f64, RfError> {
    let n = 1 << 16;
    let x: Vec<Complex32> = waveform(&m.resolved(), fs, n, 0, 0)
        .iter()
        .map(|v| Complex32::new(v.re as f32, v.im as f32))
        .collect();
    let psd = welch(&x, fs, &WelchConfig::default())?;
    let obw = occupied_bandwidth(&psd, 0.0, 0.99);
    // A pure tone's band is the window's main lobe: at least one bin.
    Ok(obw.bandwidth_hz.max(psd.bin_hz()))
}

/// Multipath and fading of one recording.
struct Channel {
    /// Delays in samples, and mean powers.
    delays: Vec<f64>,
    powers: Vec<f64>,
    /// Per path: the static complex gain, and its fading oscillators (Doppler in cycles per
    /// sample, phase in cycles) with the Rician line-of-sight share.
    gains: Vec<Complex64>,
    oscillators: Vec<Vec<(f64, f64)>>,
    los: Vec<Option<(f64, f64, f64)>>,
    max_delay_samples: f64,
    doppler: Option<f64>,
    k_db: Option<f64>,
}

impl Channel {
    fn draw(spec: &SynthSpec, seed: u64, index: u64, paths: usize, params: &Rng) -> Channel {
        let fs = spec.sample_rate;
        let imp = &spec.impairments;
        let paths = paths.max(1);
        let mut mp = Draws::new(Rng::new(seed, index, Stream::Multipath));
        let max_delay = imp.multipath_max_delay_s.unwrap_or(0.0) * fs;
        let rms = imp
            .multipath_rms_delay_s
            .map(|r| r * fs)
            .unwrap_or(max_delay / 2.0)
            .max(1e-9);
        let mut delays = vec![0.0];
        for _ in 1..paths {
            delays.push(mp.uniform() * max_delay);
        }
        delays[1..].sort_by(f64::total_cmp);
        let mut powers: Vec<f64> = delays.iter().map(|d| (-d / rms).exp()).collect();
        let total: f64 = powers.iter().sum();
        powers.iter_mut().for_each(|p| *p /= total);
        let gains = powers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                // The first path keeps phase 0 (the carrier phase is the modulation's own).
                let angle = if i == 0 { 0.0 } else { mp.uniform() };
                let (s, c) = sincos_cycles(angle);
                Complex64::new(c, s) * p.sqrt()
            })
            .collect();
        let doppler = imp
            .fading
            .and(imp.doppler_hz.map(|r| r.at(params.uniform(SLOT_DOPPLER))));
        let k_db = match imp.fading {
            Some(Fading::Rician) => imp.rician_k_db.map(|r| r.at(params.uniform(SLOT_RICIAN_K))),
            _ => None,
        };
        let mut fd = Draws::new(Rng::new(seed, index, Stream::Fading));
        let mut oscillators = Vec::new();
        let mut los = Vec::new();
        if let Some(fd_hz) = doppler {
            let f = fd_hz / fs;
            for p in 0..paths {
                // Sum of sinusoids: random arrival angles and phases.
                oscillators.push(
                    (0..FADING_OSCILLATORS)
                        .map(|_| {
                            let (_, cos_a) = sincos_cycles(fd.uniform());
                            (f * cos_a, fd.uniform())
                        })
                        .collect(),
                );
                let los_angle = fd.uniform();
                let los_phase = fd.uniform();
                los.push(match k_db {
                    Some(k) if p == 0 => {
                        let k = 10f64.powf(k / 10.0);
                        let (_, cos_a) = sincos_cycles(los_angle);
                        Some((f * cos_a, los_phase, k / (k + 1.0)))
                    }
                    _ => None,
                });
            }
        }
        Channel {
            max_delay_samples: delays.iter().copied().fold(0.0, f64::max),
            delays,
            powers,
            gains,
            oscillators,
            los,
            doppler,
            k_db,
        }
    }

    /// The fading gain of path `p` at sample `t` (1 when there is no fading).
    fn fading_gain(&self, p: usize, t: f64) -> Complex64 {
        let Some(osc) = self.oscillators.get(p) else {
            return Complex64::new(1.0, 0.0);
        };
        let mut g = Complex64::new(0.0, 0.0);
        for &(f, ph) in osc {
            let (s, c) = sincos_cycles(frac(f * t + ph));
            g += Complex64::new(c, s);
        }
        g /= (osc.len() as f64).sqrt();
        match self.los[p] {
            Some((f, ph, share)) => {
                let (s, c) = sincos_cycles(frac(f * t + ph));
                Complex64::new(c, s) * share.sqrt() + g * (1.0 - share).sqrt()
            }
            None => g,
        }
    }

    /// True when the channel passes the waveform through unchanged: one path, no fading, no
    /// resampling (the first path's gain is 1).
    fn is_identity(&self, ratio: f64) -> bool {
        self.delays.len() == 1 && ratio == 1.0 && self.oscillators.is_empty()
    }

    /// Output sample `i` reads the waveform at `pre + i·ratio − delay` on every path.
    fn apply(&self, x: &[Complex64], pre: usize, n: usize, ratio: f64) -> Vec<Complex64> {
        let mut y = pool::complex(n);
        if self.is_identity(ratio) {
            y.iter_mut()
                .zip(&x[pre..pre + n])
                .for_each(|(o, v)| *o = v * self.gains[0]);
            return y;
        }
        let xs: Vec<[f64; 2]> = x.iter().map(|v| [v.re, v.im]).collect();
        for (p, (&d, &g)) in self.delays.iter().zip(&self.gains).enumerate() {
            // Fading changes slowly: evaluate it on a grid and interpolate linearly.
            let grid: Vec<Complex64> = (0..=n.div_ceil(FADING_GRID))
                .map(|k| self.fading_gain(p, (k * FADING_GRID) as f64))
                .collect();
            for (i, out) in y.iter_mut().enumerate() {
                let v = lagrange3(&xs, pre as f64 + i as f64 * ratio - d);
                let k = i / FADING_GRID;
                let frac = (i % FADING_GRID) as f64 / FADING_GRID as f64;
                let fade = grid[k] * (1.0 - frac) + grid[k + 1] * frac;
                *out += Complex64::new(v[0], v[1]) * g * fade;
            }
        }
        y
    }
}

/// Noise-free check used by tests: the label of recording `index` (the modulation draw).
pub fn modulation_of(spec: &SynthSpec, seed: u64, index: u64) -> ModKind {
    let params = Rng::new(seed, index, Stream::Params);
    let which =
        ((u64::from(params.word(SLOT_MODULATION)) * spec.modulations.len() as u64) >> 32) as usize;
    spec.modulations[which].kind
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectorised front end gives the bits of the per-sample formula, with and without an
    /// IQ imbalance, subnormals flushed.
    #[test]
    fn the_front_end_has_the_formulas_bits() {
        let signal: Vec<Complex64> = (0..1000)
            .map(|i| {
                let t = f64::from(i) * 0.37;
                Complex64::new(t.sin() * 1e-3, (1.3 * t).cos() * 1e-3)
            })
            .chain([Complex64::new(1e-42, -1e-41)])
            .collect();
        let (gain, dc) = (0.731, Complex64::new(1e-4, -3e-5));
        let (mu, nu) = (Complex64::new(0.9, 0.05), Complex64::new(0.01, -0.02));
        let bits = |v: &[Complex32]| -> Vec<(u32, u32)> {
            v.iter().map(|c| (c.re.to_bits(), c.im.to_bits())).collect()
        };
        let mut got = Vec::new();
        front_end(&signal, gain, Complex64::new(0.0, 0.0), None, &mut got);
        assert_eq!(got[1000], Complex32::new(0.0, 0.0), "subnormals flushed");
        front_end(&signal, gain, dc, None, &mut got);
        let want: Vec<Complex32> = signal.iter().map(|v| to_f32(v * gain + dc)).collect();
        assert_eq!(bits(&got), bits(&want));
        front_end(&signal, gain, dc, Some((mu, nu)), &mut got);
        let want: Vec<Complex32> = signal
            .iter()
            .map(|v| to_f32(mu * v + nu * v.conj() + dc))
            .collect();
        assert_eq!(bits(&got), bits(&want));
        assert_eq!(got.len(), signal.len());
    }
}
