//! Clean baseband waveforms of every modulation, before any impairment or noise. Each is
//! a pure function of (spec, seed, sample index): symbols come from the Symbols stream,
//! messages from the Message stream, free phases from the Params stream's modulation slots.

use std::f64::consts::{PI, SQRT_2};

use rustfft::num_complex::Complex64;
use rustfft::FftPlanner;

use crate::math::{frac, phasors, sincos_cycles};
use crate::philox::{Draws, Rng, Stream};
use crate::pool;
use crate::spec::{ModKind, ModParams, ModulationSpec, Pulse};

/// Params-stream slots of the modulations' own draws (see synth.rs for the others).
pub(crate) const SLOT_MOD_PHASE: u64 = 32;
pub(crate) const SLOT_MOD_OFFSET: u64 = 33;

/// The constellation of a linear modulation, scaled to unit average power.
pub fn constellation(kind: ModKind) -> Vec<Complex64> {
    let psk = |m: usize, offset: f64| -> Vec<Complex64> {
        (0..m)
            .map(|k| Complex64::from_polar(1.0, 2.0 * PI * k as f64 / m as f64 + offset))
            .collect()
    };
    let square = |m: usize| -> Vec<Complex64> {
        let side = (m as f64).sqrt() as i32;
        let mut pts = Vec::with_capacity(m);
        for i in 0..side {
            for q in 0..side {
                pts.push(Complex64::new(
                    f64::from(2 * i - side + 1),
                    f64::from(2 * q - side + 1),
                ));
            }
        }
        pts
    };
    let rings = |rings: &[(usize, f64, f64)]| -> Vec<Complex64> {
        rings
            .iter()
            .flat_map(|&(n, r, offset)| {
                (0..n)
                    .map(move |k| Complex64::from_polar(r, 2.0 * PI * k as f64 / n as f64 + offset))
            })
            .collect()
    };
    let pts = match kind {
        ModKind::Ook => vec![Complex64::new(0.0, 0.0), Complex64::new(1.0, 0.0)],
        ModKind::Ask4 => (0..4)
            .map(|k| Complex64::new(f64::from(2 * k - 3), 0.0))
            .collect(),
        ModKind::Ask8 => (0..8)
            .map(|k| Complex64::new(f64::from(2 * k - 7), 0.0))
            .collect(),
        ModKind::Bpsk => psk(2, 0.0),
        ModKind::Qpsk | ModKind::Oqpsk => psk(4, PI / 4.0),
        ModKind::Psk8 => psk(8, 0.0),
        ModKind::Psk16 => psk(16, 0.0),
        ModKind::Qam16 => square(16),
        ModKind::Qam64 => square(64),
        ModKind::Qam256 => square(256),
        // The cross constellation: a 6x6 square without its four corners.
        ModKind::Qam32 => square(36)
            .into_iter()
            .filter(|c| !(c.re.abs() == 5.0 && c.im.abs() == 5.0))
            .collect(),
        // DVB-S2 4+12 and 4+12+16 APSK with the ring ratios of code rate 3/4.
        ModKind::Apsk16 => rings(&[(4, 1.0, PI / 4.0), (12, 2.85, PI / 12.0)]),
        ModKind::Apsk32 => rings(&[(4, 1.0, PI / 4.0), (12, 2.84, PI / 12.0), (16, 5.27, 0.0)]),
        other => panic!("{} has no constellation", other.label()),
    };
    let power = pts.iter().map(|c| c.norm_sqr()).sum::<f64>() / pts.len() as f64;
    let scale = 1.0 / power.sqrt();
    pts.into_iter().map(|c| c * scale).collect()
}

/// Pulse-shaping taps for `sps` samples per symbol, scaled so that unit-power symbols give a
/// unit-power signal (sum of squares = sps).
pub fn pulse_taps(pulse: Pulse, sps: usize, rolloff: f64, bt: f64, span: usize) -> Vec<f64> {
    let taps: Vec<f64> = match pulse {
        Pulse::Rect => vec![1.0; sps],
        Pulse::Rrc => {
            let len = span * sps + 1;
            let mid = (len / 2) as f64;
            (0..len)
                .map(|i| rrc(((i as f64) - mid) / sps as f64, rolloff))
                .collect()
        }
        Pulse::Gaussian => gaussian(sps, bt, span),
    };
    let energy: f64 = taps.iter().map(|t| t * t).sum();
    let scale = (sps as f64 / energy).sqrt();
    taps.into_iter().map(|t| t * scale).collect()
}

/// The root-raised-cosine impulse response at `t` symbols (unnormalised).
fn rrc(t: f64, b: f64) -> f64 {
    if t.abs() < 1e-12 {
        return 1.0 - b + 4.0 * b / PI;
    }
    if (t.abs() - 1.0 / (4.0 * b)).abs() < 1e-9 {
        return b / SQRT_2
            * ((1.0 + 2.0 / PI) * (PI / (4.0 * b)).sin()
                + (1.0 - 2.0 / PI) * (PI / (4.0 * b)).cos());
    }
    let num = (PI * t * (1.0 - b)).sin() + 4.0 * b * t * (PI * t * (1.0 + b)).cos();
    let den = PI * t * (1.0 - (4.0 * b * t).powi(2));
    num / den
}

/// A Gaussian filter of bandwidth-time product `bt` over `span` symbols (unnormalised):
/// h(t) ∝ exp(-t² / 2σ²), σ = sqrt(ln 2) / (2π BT) symbols.
fn gaussian(sps: usize, bt: f64, span: usize) -> Vec<f64> {
    let len = span * sps + 1;
    let mid = (len / 2) as f64;
    let sigma = (2f64.ln()).sqrt() / (2.0 * PI * bt);
    (0..len)
        .map(|i| {
            let t = (i as f64 - mid) / sps as f64;
            (-t * t / (2.0 * sigma * sigma)).exp()
        })
        .collect()
}

/// Sums `symbols[k] * taps` centred on sample `k·sps − first` for every symbol; `n` outputs.
/// `taps` has its centre at `taps.len() / 2`. Every output adds its symbols' terms in
/// ascending k, one rounded product and one rounded sum each, so the bits are the definition's
/// (`shape_scatter`) whichever way they are computed: the usual samples per symbol take a
/// gather over one symbol period at a time, its sums in registers (half the time of the
/// scatter, whose every output is loaded and stored once per symbol).
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn shape(
    symbols: &[Complex64],
    sps: usize,
    taps: &[f64],
    first: isize,
    n: usize,
) -> Vec<Complex64> {
    let mut out = pool::complex(n);
    match sps {
        2 => shape_periods::<2>(symbols, taps, first, &mut out),
        4 => shape_periods::<4>(symbols, taps, first, &mut out),
        8 => shape_periods::<8>(symbols, taps, first, &mut out),
        16 => shape_periods::<16>(symbols, taps, first, &mut out),
        _ => shape_scatter(symbols, sps, taps, first, &mut out),
    }
    out
}

/// [`shape`] as its definition: each symbol's taps added into the zeroed outputs, symbols in
/// ascending order.
#[inline(always)]
fn shape_scatter(
    symbols: &[Complex64],
    sps: usize,
    taps: &[f64],
    first: isize,
    out: &mut [Complex64],
) {
    let n = out.len();
    let centre = (taps.len() / 2) as isize;
    for (k, &a) in symbols.iter().enumerate() {
        let start = k as isize * sps as isize - first - centre;
        let lo = (-start).max(0) as usize;
        let hi = ((n as isize - start).max(0) as usize).min(taps.len());
        if lo >= hi {
            continue;
        }
        let base = (start + lo as isize) as usize;
        for (o, &h) in out[base..base + (hi - lo)].iter_mut().zip(&taps[lo..hi]) {
            o.re += a.re * h;
            o.im += a.im * h;
        }
    }
}

/// [`shape`] for `S` samples per symbol, one symbol period of outputs at a time. Output `o`
/// reads tap `q − k·S` of symbol k, with `q = o + first + taps.len() / 2`: in the period
/// `q div S = kq` at phase `p = q mod S`, symbol `kq − m` gives tap `p + m·S` (row m of the
/// taps). Rows are added from the last (the smallest k) on, as the scatter adds them; the last
/// row's taps past the end are zeros, added first, to +0.0: they change no bit.
#[inline(always)]
fn shape_periods<const S: usize>(
    symbols: &[Complex64],
    taps: &[f64],
    first: isize,
    out: &mut [Complex64],
) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let rows = taps.len().div_ceil(S);
    let mut padded = vec![0.0; rows * S];
    padded[..taps.len()].copy_from_slice(taps);
    let c0 = first + (taps.len() / 2) as isize;
    let s = S as isize;
    let count = symbols.len() as isize;
    for kq in c0.div_euclid(s)..=(n as isize - 1 + c0).div_euclid(s) {
        let mut re = [0.0f64; S];
        let mut im = [0.0f64; S];
        for m in (0..rows).rev() {
            let k = kq - m as isize;
            if k < 0 || k >= count {
                continue;
            }
            let a = symbols[k as usize];
            let row: &[f64; S] = padded[m * S..m * S + S]
                .try_into()
                .expect("a row of S taps");
            for p in 0..S {
                re[p] += a.re * row[p];
                im[p] += a.im * row[p];
            }
        }
        let o0 = kq * s - c0;
        if o0 >= 0 && o0 + s <= n as isize {
            for (o, (&r, &i)) in out[o0 as usize..][..S].iter_mut().zip(re.iter().zip(&im)) {
                *o = Complex64::new(r, i);
            }
        } else {
            // The first and last periods: only their outputs inside 0..n.
            for p in 0..S {
                let o = o0 + p as isize;
                if (0..n as isize).contains(&o) {
                    out[o as usize] = Complex64::new(re[p], im[p]);
                }
            }
        }
    }
}

/// Symbols `0..count` of `points`, drawn from the Symbols stream from word `first_word`.
fn draw_symbols(rng: &Rng, first_word: u64, count: usize, points: &[Complex64]) -> Vec<Complex64> {
    let mut words = vec![0u32; count];
    rng.fill_words(first_word, &mut words);
    let m = points.len() as u64;
    words
        .iter()
        .map(|&w| points[((u64::from(w) * m) >> 32) as usize])
        .collect()
}

/// The symbols a pulse of `taps_len` taps needs so that `n` samples are all in steady state:
/// (how many, the sample offset of the first symbol's centre before sample 0).
fn symbol_span(n: usize, sps: usize, taps_len: usize) -> (usize, isize) {
    let half = taps_len / 2 + 1;
    let before = half.div_ceil(sps);
    let count = before + n.div_ceil(sps) + half.div_ceil(sps) + 1;
    (count, (before * sps) as isize)
}

/// A linearly modulated signal: the constellation through the pulse.
fn linear(kind: ModKind, p: &ModParams, rng: &Rng, n: usize) -> Vec<Complex64> {
    let sps = p.samples_per_symbol.unwrap_or(8) as usize;
    let taps = taps_of(p, sps);
    let (count, first) = symbol_span(n, sps, taps.len());
    let symbols = draw_symbols(rng, 0, count, &constellation(kind));
    shape(&symbols, sps, &taps, first, n)
}

fn taps_of(p: &ModParams, sps: usize) -> Vec<f64> {
    pulse_taps(
        p.pulse.unwrap_or(Pulse::Rrc),
        sps,
        p.rolloff.unwrap_or(0.35),
        p.bt.unwrap_or(0.5),
        p.span_symbols.unwrap_or(8) as usize,
    )
}

/// OQPSK: QPSK whose quadrature branch is delayed by half a symbol.
fn oqpsk(p: &ModParams, rng: &Rng, n: usize) -> Vec<Complex64> {
    let sps = p.samples_per_symbol.unwrap_or(8) as usize;
    let taps = taps_of(p, sps);
    let (count, first) = symbol_span(n + sps, sps, taps.len());
    let symbols = draw_symbols(rng, 0, count, &constellation(ModKind::Qpsk));
    let re: Vec<Complex64> = symbols.iter().map(|s| Complex64::new(s.re, 0.0)).collect();
    let im: Vec<Complex64> = symbols.iter().map(|s| Complex64::new(s.im, 0.0)).collect();
    let i = shape(&re, sps, &taps, first, n);
    let q = shape(&im, sps, &taps, first - (sps / 2) as isize, n);
    i.iter()
        .zip(&q)
        .map(|(a, b)| Complex64::new(a.re, b.re))
        .collect()
}

/// Continuous-phase FSK (2/4-FSK, MSK, GFSK, GMSK): symbols ±1 (±3) through a frequency
/// pulse (rectangular, or Gaussian-filtered), integrated into phase: each symbol turns the
/// phase by π·h·a.
fn cpfsk(kind: ModKind, p: &ModParams, rng: &Rng, phase0: f64, n: usize) -> Vec<Complex64> {
    let sps = p.samples_per_symbol.unwrap_or(8) as usize;
    let (levels, h): (Vec<f64>, f64) = match kind {
        ModKind::Fsk4 => (
            vec![-3.0, -1.0, 1.0, 3.0],
            p.modulation_index.unwrap_or(1.0),
        ),
        ModKind::Msk | ModKind::Gmsk => (vec![-1.0, 1.0], 0.5),
        _ => (vec![-1.0, 1.0], p.modulation_index.unwrap_or(1.0)),
    };
    let mut pulse = vec![1.0; sps];
    if matches!(kind, ModKind::Gfsk | ModKind::Gmsk) {
        let g = gaussian(
            sps,
            p.bt.unwrap_or(0.5),
            p.span_symbols.unwrap_or(4) as usize,
        );
        pulse = convolve(&pulse, &g);
    }
    let sum: f64 = pulse.iter().sum();
    let pulse: Vec<f64> = pulse.iter().map(|v| v * sps as f64 / sum).collect();
    let points: Vec<Complex64> = levels.iter().map(|&l| Complex64::new(l, 0.0)).collect();
    let (count, first) = symbol_span(n, sps, pulse.len());
    let symbols = draw_symbols(rng, 0, count, &points);
    let freq = shape(&symbols, sps, &pulse, first, n);
    let out = integrate_freq(&freq, h, sps, phase0);
    pool::give_complex(freq);
    out
}

fn integrate_freq(freq: &[Complex64], h: f64, sps: usize, phase0: f64) -> Vec<Complex64> {
    // Phase in cycles: π h a / sps radians per sample = h a / (2 sps) cycles; the running sum
    // first (sequential), then the phasors (vectorised).
    let step = h / (2.0 * sps as f64);
    integrate(phase0, freq.iter().map(|f| step * f.re))
}

/// e^{2πiφ[n]} with φ[0] = `phase0` and φ[n+1] = φ[n] + steps[n] (in cycles). The sum is not
/// wrapped: 2^31 samples of half a cycle are 2^30 cycles, where an f64 still resolves 1e-7
/// of a cycle, and `sincos_cycles` reduces it.
fn integrate(phase0: f64, steps: impl Iterator<Item = f64>) -> Vec<Complex64> {
    let mut cycles = pool::real(steps.size_hint().0);
    let mut c = phase0;
    for d in steps {
        cycles.push(c);
        c += d;
    }
    to_phasors(cycles)
}

/// The phasors of `cycles` in a pooled buffer (`cycles` goes back to the pool).
fn to_phasors(cycles: Vec<f64>) -> Vec<Complex64> {
    let mut out = pool::complex(0);
    phasors(&cycles, &mut out);
    pool::give_real(cycles);
    out
}

fn convolve(a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; a.len() + b.len() - 1];
    for (i, x) in a.iter().enumerate() {
        for (j, y) in b.iter().enumerate() {
            out[i + j] += x * y;
        }
    }
    out
}

/// OFDM: symbols of the subcarrier modulation on the used subcarriers (centred, DC empty),
/// an oversampled IFFT, and a cyclic prefix; unit power.
fn ofdm(p: &ModParams, rng: &Rng, n: usize) -> Vec<Complex64> {
    let nsc = p.subcarriers.unwrap_or(64) as usize;
    let used = p.used_subcarriers.unwrap_or(52) as usize;
    let os = p.oversample.unwrap_or(4) as usize;
    let cp = p.cyclic_prefix.unwrap_or(16) as usize * os;
    let size = nsc * os;
    let points = constellation(p.subcarrier_modulation.unwrap_or(ModKind::Qpsk));
    let bins: Vec<usize> = (1..=used.div_ceil(2))
        .chain((1..=used / 2).map(|k| size - k))
        .take(used)
        .collect();
    let ifft = FftPlanner::new().plan_fft_inverse(size);
    let mut out = Vec::with_capacity(n + size + cp);
    let mut buf = vec![Complex64::new(0.0, 0.0); size];
    let scale = 1.0 / (used as f64).sqrt();
    let mut word = 0u64;
    while out.len() < n {
        buf.iter_mut().for_each(|b| *b = Complex64::new(0.0, 0.0));
        let symbols = draw_symbols(rng, word, used, &points);
        word += used as u64;
        for (&b, s) in bins.iter().zip(symbols) {
            buf[b] = s * scale;
        }
        ifft.process(&mut buf);
        out.extend_from_slice(&buf[size - cp..]);
        out.extend_from_slice(&buf);
    }
    out.truncate(n);
    out
}

/// The message of the analogue modulations: four tones at random frequencies up to the
/// message bandwidth, random amplitudes in [1/2, 1] and phases; peak at most 1. Returned as
/// the analytic tones (their real part is the message).
struct Message {
    tones: Vec<(f64, f64, f64)>, // (cycles per sample, amplitude, phase in cycles)
}

impl Message {
    fn new(seed: u64, index: u64, bandwidth: f64, fs: f64) -> Self {
        let mut d = Draws::new(Rng::new(seed, index, Stream::Message));
        let mut tones: Vec<(f64, f64, f64)> = (0..4)
            .map(|_| {
                let f = bandwidth * (0.05 + 0.95 * d.uniform()) / fs;
                let a = 0.5 + 0.5 * d.uniform();
                (f, a, d.uniform())
            })
            .collect();
        let total: f64 = tones.iter().map(|t| t.1).sum();
        for t in &mut tones {
            t.1 /= total;
        }
        Message { tones }
    }

    /// The analytic message Σ a e^{j(2π f n + φ)} for n in 0..len, by rotators resynchronised
    /// every 256 samples (so that rounding does not accumulate).
    fn analytic(&self, len: usize) -> Vec<Complex64> {
        let mut out = pool::complex(len);
        let steps: Vec<Complex64> = self
            .tones
            .iter()
            .map(|&(f, _, _)| {
                let (s, c) = sincos_cycles(f);
                Complex64::new(c, s)
            })
            .collect();
        let mut z = vec![Complex64::new(0.0, 0.0); self.tones.len()];
        for (block, chunk) in out.chunks_mut(256).enumerate() {
            let n0 = (block * 256) as f64;
            for (zt, &(f, a, ph)) in z.iter_mut().zip(&self.tones) {
                let (s, c) = sincos_cycles(frac(f * n0 + ph));
                *zt = Complex64::new(c, s) * a;
            }
            // The tones' rotations are independent chains, interleaved sample by sample.
            for o in chunk {
                for (zt, st) in z.iter_mut().zip(&steps) {
                    *o += *zt;
                    *zt *= st;
                }
            }
        }
        out
    }
}

/// The clean waveform of one modulation (resolved parameters), before normalisation.
pub fn waveform(m: &ModulationSpec, fs: f64, n: usize, seed: u64, index: u64) -> Vec<Complex64> {
    let p = &m.params;
    let symbols = Rng::new(seed, index, Stream::Symbols);
    let params = Rng::new(seed, index, Stream::Params);
    let phase0 = params.uniform(SLOT_MOD_PHASE);
    match m.kind {
        k if k.is_linear() => linear(k, p, &symbols, n),
        ModKind::Oqpsk => oqpsk(p, &symbols, n),
        k @ (ModKind::Fsk2 | ModKind::Fsk4 | ModKind::Msk | ModKind::Gfsk | ModKind::Gmsk) => {
            cpfsk(k, p, &symbols, phase0, n)
        }
        ModKind::Ofdm => ofdm(p, &symbols, n),
        ModKind::Tone => {
            let f = p.frequency_hz.unwrap_or(0.0) / fs;
            let mut cycles = pool::real(n);
            cycles.extend((0..n).map(|i| frac(f * i as f64 + phase0)));
            to_phasors(cycles)
        }
        ModKind::Lfm => {
            let b = p.bandwidth_hz.unwrap_or(50_000.0) / fs; // cycles per sample
            let period = p.period_s.unwrap_or(0.001) * fs; // samples
            let sign = if p.up.unwrap_or(true) { 1.0 } else { -1.0 };
            let t0 = params.uniform(SLOT_MOD_OFFSET) * period;
            let mut cycles = pool::real(n);
            cycles.extend((0..n).map(|i| {
                let t = period * frac((i as f64 + t0) / period);
                frac(sign * (-b / 2.0 * t + b / (2.0 * period) * t * t))
            }));
            to_phasors(cycles)
        }
        k => {
            let bw = p.message_bandwidth_hz.unwrap_or(5_000.0);
            let mut msg = Message::new(seed, index, bw, fs).analytic(n);
            // The analogue modulations rewrite the analytic message in place.
            match k {
                ModKind::AmDsb => {
                    let mu = p.modulation_index.unwrap_or(0.5);
                    msg.iter_mut()
                        .for_each(|z| *z = Complex64::new(1.0 + mu * z.re, 0.0));
                    msg
                }
                ModKind::AmDsbSc => {
                    msg.iter_mut().for_each(|z| *z = Complex64::new(z.re, 0.0));
                    msg
                }
                ModKind::SsbUsb => msg,
                ModKind::SsbLsb => {
                    msg.iter_mut().for_each(|z| *z = z.conj());
                    msg
                }
                ModKind::Fm => {
                    let dev = p.deviation_hz.unwrap_or(5_000.0) / fs;
                    let out = integrate(phase0, msg.iter().map(|z| dev * z.re));
                    pool::give_complex(msg);
                    out
                }
                other => unreachable!("{} is handled above", other.label()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The period-at-a-time shaper gives the scatter's bits for every period length it takes,
    /// pulse, offset and length, symbols of both signs and zero (OOK) included.
    #[test]
    fn shaping_by_periods_gives_the_scatters_bits() {
        let rng = Rng::new(5, 0, Stream::Symbols);
        let mut word = 0u64;
        let mut uniform = || {
            word += 1;
            f64::from(rng.word(word)) / f64::from(u32::MAX) * 2.0 - 1.0
        };
        for sps in [2usize, 4, 8, 16] {
            let rrc = pulse_taps(Pulse::Rrc, sps, 0.35, 0.5, 8);
            let gauss = pulse_taps(Pulse::Gaussian, sps, 0.35, 0.3, 4);
            let rect = pulse_taps(Pulse::Rect, sps, 0.35, 0.5, 8);
            for taps in [&rrc, &gauss, &rect] {
                for (n, first) in [
                    (1000usize, 37isize),
                    (997, -5),
                    (3, 0),
                    (64, 200),
                    (500, -(sps as isize) / 2),
                ] {
                    let symbols: Vec<Complex64> = (0..n / sps + 40)
                        .map(|i| {
                            if i % 7 == 3 {
                                Complex64::new(0.0, -0.0)
                            } else {
                                Complex64::new(uniform(), uniform())
                            }
                        })
                        .collect();
                    let fast = shape(&symbols, sps, taps, first, n);
                    let mut slow = vec![Complex64::new(0.0, 0.0); n];
                    shape_scatter(&symbols, sps, taps, first, &mut slow);
                    for (o, (f, s)) in fast.iter().zip(&slow).enumerate() {
                        assert!(
                            f.re.to_bits() == s.re.to_bits() && f.im.to_bits() == s.im.to_bits(),
                            "sps {sps}, {} taps, n {n}, first {first}: output {o} {f} vs {s}",
                            taps.len()
                        );
                    }
                }
            }
        }
    }

    use super::*;

    #[test]
    fn constellations_have_unit_power_and_their_sizes() {
        for (k, m) in [
            (ModKind::Ook, 2),
            (ModKind::Ask8, 8),
            (ModKind::Psk16, 16),
            (ModKind::Qam32, 32),
            (ModKind::Qam256, 256),
            (ModKind::Apsk16, 16),
            (ModKind::Apsk32, 32),
        ] {
            let c = constellation(k);
            assert_eq!(c.len(), m, "{}", k.label());
            let p = c.iter().map(|z| z.norm_sqr()).sum::<f64>() / m as f64;
            assert!((p - 1.0).abs() < 1e-12);
        }
    }

    /// An RRC pulse convolved with itself is a raised cosine: zero at every other symbol
    /// centre (no inter-symbol interference after the matched filter).
    #[test]
    fn rrc_squared_is_nyquist() {
        let sps = 8;
        let h = pulse_taps(Pulse::Rrc, sps, 0.35, 0.0, 16);
        let rc = convolve(&h, &h);
        let mid = rc.len() / 2;
        for k in 1..6 {
            assert!(
                rc[mid + k * sps].abs() < 0.01 * rc[mid],
                "{k}: {}",
                rc[mid + k * sps]
            );
        }
    }
}
