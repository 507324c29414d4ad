//! Spectra of complex (IQ) input: two-sided, many frames per FFT call.
//!
//! RF recordings are complex baseband; their spectrum has no symmetry to exploit, so each
//! frame takes a full complex FFT and yields `n_fft` bins, optionally reordered so that the
//! zero frequency sits in the middle (numpy's `fftshift`). The samples come as they travel
//! through sonograph's sample buffers: interleaved, I then Q. This is the spectral core of
//! the CPU extractor for specs with `input = "complex"`.

use std::sync::Arc;

use rustfft::num_complex::Complex;
use rustfft::{Fft, FftPlanner};

use crate::float::{cast, Real};
use crate::spec::{FeatureSpec, WindowKind};
use crate::window::window;

/// Frames handed to rustfft per call: enough to amortise the call, small enough for L2.
const FRAMES_PER_CALL: usize = 64;

/// Power spectrogram of complex input with Kaldi-style framing (whole frames only): frame `f`
/// reads samples `f·hop … f·hop + win_length`, windowed and zero-padded to `n_fft`.
pub struct ComplexStft<T: Real> {
    n_fft: usize,
    win_length: usize,
    hop: usize,
    shift: bool,
    scale: f32,
    window: Vec<T>,
    fft: Arc<dyn Fft<T>>,
    buffer: Vec<Complex<T>>,
    scratch: Vec<Complex<T>>,
    /// One frame's `|X|²`, in output order.
    power: Vec<T>,
}

impl<T: Real> ComplexStft<T> {
    /// # Panics
    /// When `n_fft`, `win_length` or `hop` is zero, or the window is longer than `n_fft`.
    pub fn new(
        n_fft: usize,
        win_length: usize,
        hop: usize,
        kind: WindowKind,
        periodic: bool,
        shift: bool,
    ) -> Self {
        assert!(
            n_fft > 0 && hop > 0 && (1..=n_fft).contains(&win_length),
            "n_fft and hop must be positive, the window in 1..=n_fft"
        );
        let fft = FftPlanner::new().plan_fft_forward(n_fft);
        let scratch = vec![Complex::new(T::zero(), T::zero()); fft.get_inplace_scratch_len()];
        ComplexStft {
            n_fft,
            win_length,
            hop,
            shift,
            scale: 1.0,
            window: window(kind, win_length, periodic)
                .into_iter()
                .map(cast)
                .collect(),
            fft,
            buffer: Vec::with_capacity(n_fft * FRAMES_PER_CALL),
            scratch,
            power: vec![T::zero(); n_fft],
        }
    }

    /// The plan of a (valid) complex spec: its frames, window, shift and input scale.
    pub fn for_spec(spec: &FeatureSpec) -> Self {
        let mut stft = Self::new(
            spec.n_fft,
            spec.win_length,
            spec.hop_length,
            spec.window,
            spec.periodic,
            spec.fftshift,
        );
        stft.scale = spec.input_scale;
        stft
    }

    /// Number of frames for `len` samples.
    pub fn n_frames(&self, len: usize) -> usize {
        if len < self.win_length {
            0
        } else {
            1 + (len - self.win_length) / self.hop
        }
    }

    /// Computes `frames` frames from the interleaved I/Q values `iq` (sample `k` is
    /// `iq[2k] + j·iq[2k + 1]`) and hands each frame's `|X|²` to `row`, `n_fft` values in
    /// output order (DC first, or in the middle when shifted).
    ///
    /// # Panics
    /// When `iq` holds fewer samples than the frames read.
    pub fn frames(&mut self, iq: &[f32], frames: usize, mut row: impl FnMut(&[T])) {
        if frames > 0 {
            let need = (frames - 1) * self.hop + self.win_length;
            assert!(iq.len() >= 2 * need, "{frames} frames read {need} samples");
        }
        let n = self.n_fft;
        // Output bin k is FFT bin (k + n − half) mod n: the upper half first when shifted.
        let half = if self.shift { n / 2 } else { 0 };
        let scale = self.scale;
        let mut first = 0;
        while first < frames {
            let count = FRAMES_PER_CALL.min(frames - first);
            self.buffer.clear();
            for f in first..first + count {
                let start = 2 * f * self.hop;
                let seg = &iq[start..start + 2 * self.win_length];
                self.buffer
                    .extend(seg.chunks_exact(2).zip(&self.window).map(|(s, &w)| {
                        let z = Complex::new(
                            cast::<T>(f64::from(s[0] * scale)),
                            cast::<T>(f64::from(s[1] * scale)),
                        );
                        z * w
                    }));
                self.buffer.resize(
                    self.buffer.len() + n - self.win_length,
                    Complex::new(T::zero(), T::zero()),
                );
            }
            // One call transforms every frame in the buffer.
            self.fft
                .process_with_scratch(&mut self.buffer, &mut self.scratch);
            for spectrum in self.buffer.chunks_exact(n) {
                let (lo, hi) = spectrum.split_at(n - half);
                for (p, c) in self.power.iter_mut().zip(hi.iter().chain(lo)) {
                    *p = c.norm_sqr();
                }
                row(&self.power);
            }
            first += count;
        }
    }

    /// Appends the `|X|²` of every whole frame of the interleaved `iq` to `out` as f32
    /// (`frames × n_fft`); returns the frame count.
    pub fn power(&mut self, iq: &[f32], out: &mut Vec<f32>) -> usize {
        let frames = self.n_frames(iq.len() / 2);
        out.reserve(frames * self.n_fft);
        self.frames(iq, frames, |row| {
            out.extend(row.iter().map(|p| p.to_f32().unwrap_or(f32::NAN)))
        });
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// |DFT|² of `n_fft` points of `x` (zero beyond its end), in f64 from the definition.
    fn naive_power(x: &[(f64, f64)], n: usize) -> Vec<f64> {
        (0..n)
            .map(|k| {
                let (mut re, mut im) = (0.0f64, 0.0f64);
                for (t, &(sr, si)) in x.iter().enumerate() {
                    let a = -2.0 * std::f64::consts::PI * (k * t % n) as f64 / n as f64;
                    re += sr * a.cos() - si * a.sin();
                    im += sr * a.sin() + si * a.cos();
                }
                re * re + im * im
            })
            .collect()
    }

    /// A two-tone IQ signal plus a deterministic pseudo-random part, interleaved.
    fn signal(n: usize) -> Vec<f32> {
        (0..n)
            .flat_map(|t| {
                let p = 2.0 * std::f32::consts::PI * t as f32;
                let r = ((t * 7919) % 101) as f32 / 101.0 - 0.5;
                [
                    (p * 0.1).cos() + 0.1 * r,
                    (p * 0.1).sin() - 0.3 * (p * 0.23).sin(),
                ]
            })
            .collect()
    }

    fn check<T: Real>(rtol: f64) {
        // n_fft 100 (radices 2 and 5) over a Hann window of 90, scaled by 3.
        let (n_fft, win, hop) = (100, 90, 37);
        let iq = signal(1000);
        let mut stft = ComplexStft::<T>::new(n_fft, win, hop, WindowKind::Hann, true, false);
        stft.scale = 3.0;
        let mut out = Vec::new();
        let frames = stft.power(&iq, &mut out);
        assert_eq!(frames, 1 + (1000 - 90) / 37);
        assert_eq!(out.len(), frames * n_fft);
        let w = window(WindowKind::Hann, win, true);
        for f in [0, 5, frames - 1] {
            let x: Vec<(f64, f64)> = (0..win)
                .map(|m| {
                    let s = f * hop + m;
                    let g = 3.0 * w[m];
                    (g * f64::from(iq[2 * s]), g * f64::from(iq[2 * s + 1]))
                })
                .collect();
            let expect = naive_power(&x, n_fft);
            let peak = expect.iter().cloned().fold(0.0, f64::max);
            for (k, &e) in expect.iter().enumerate() {
                let got = f64::from(out[f * n_fft + k]);
                assert!(
                    (got - e).abs() <= rtol * peak,
                    "frame {f} bin {k}: {got} vs {e}"
                );
            }
        }
    }

    #[test]
    fn complex_power_matches_a_naive_dft_in_both_precisions() {
        check::<f32>(1e-5);
        // f64 is held to the f32 output's own rounding.
        check::<f64>(1e-7);
    }

    /// A tone at +10 cycles per frame lands in bin 10, or bin 60 after the shift (numpy's
    /// fftshift order, −50 … 49); on an odd size the shift puts DC at n / 2 too.
    #[test]
    fn the_shift_puts_dc_in_the_middle() {
        for (n, cycles, plain, shifted) in [(100usize, 10.0, 10, 60), (99, -3.0, 96, 46)] {
            let tone: Vec<f32> = (0..n)
                .flat_map(|t| {
                    let a = 2.0 * std::f64::consts::PI * cycles * t as f64 / n as f64;
                    [a.cos() as f32, a.sin() as f32]
                })
                .collect();
            for (shift, expect) in [(false, plain), (true, shifted)] {
                let mut stft =
                    ComplexStft::<f64>::new(n, n, n, WindowKind::Rectangular, true, shift);
                let mut out = Vec::new();
                assert_eq!(stft.power(&tone, &mut out), 1);
                let argmax = (0..n).max_by(|&a, &b| out[a].total_cmp(&out[b])).unwrap();
                assert_eq!(argmax, expect, "n {n} shift {shift}");
            }
        }
    }
}
