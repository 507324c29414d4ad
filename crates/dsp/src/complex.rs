//! Spectra of complex (IQ) input: two-sided, many frames per FFT call.
//!
//! RF recordings are complex baseband; their spectrum has no symmetry to exploit, so each
//! frame takes a full complex FFT and yields `n_fft` bins, optionally reordered so that the
//! zero frequency sits in the middle (numpy's `fftshift`).

use std::sync::Arc;

use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftPlanner};

use crate::spec::WindowKind;
use crate::window::window;

/// Frames handed to rustfft per call: enough to amortise the call, small enough for L2.
const FRAMES_PER_CALL: usize = 64;

/// Power spectrogram of complex input with Kaldi-style framing (whole frames only).
pub struct ComplexStft {
    n_fft: usize,
    hop: usize,
    shift: bool,
    window: Vec<f32>,
    fft: Arc<dyn Fft<f32>>,
    buffer: Vec<Complex32>,
    scratch: Vec<Complex32>,
}

impl ComplexStft {
    /// # Panics
    /// When `n_fft` or `hop` is zero.
    pub fn new(n_fft: usize, hop: usize, kind: WindowKind, periodic: bool, shift: bool) -> Self {
        assert!(n_fft > 0 && hop > 0, "n_fft and hop must be positive");
        let fft = FftPlanner::new().plan_fft_forward(n_fft);
        let scratch = vec![Complex32::default(); fft.get_inplace_scratch_len()];
        ComplexStft {
            n_fft,
            hop,
            shift,
            window: window(kind, n_fft, periodic)
                .into_iter()
                .map(|w| w as f32)
                .collect(),
            fft,
            buffer: Vec::with_capacity(n_fft * FRAMES_PER_CALL),
            scratch,
        }
    }

    /// Number of frames for `len` samples.
    pub fn n_frames(&self, len: usize) -> usize {
        if len < self.n_fft {
            0
        } else {
            1 + (len - self.n_fft) / self.hop
        }
    }

    /// Appends `frames × n_fft` power values to `out`; returns the frame count.
    pub fn power(&mut self, iq: &[Complex32], out: &mut Vec<f32>) -> usize {
        let frames = self.n_frames(iq.len());
        out.reserve(frames * self.n_fft);
        let mut first = 0;
        while first < frames {
            let count = FRAMES_PER_CALL.min(frames - first);
            self.buffer.clear();
            for f in first..first + count {
                let start = f * self.hop;
                let seg = &iq[start..start + self.n_fft];
                self.buffer
                    .extend(seg.iter().zip(&self.window).map(|(&s, &w)| s * w));
            }
            // One call transforms every frame in the buffer.
            self.fft
                .process_with_scratch(&mut self.buffer, &mut self.scratch);
            for spectrum in self.buffer.chunks_exact(self.n_fft) {
                let half = if self.shift { self.n_fft / 2 } else { 0 };
                let (lo, hi) = spectrum.split_at(self.n_fft - half);
                out.extend(hi.iter().chain(lo).map(|c| c.norm_sqr()));
            }
            first += count;
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_power(x: &[Complex32]) -> Vec<f64> {
        let n = x.len();
        (0..n)
            .map(|k| {
                let (mut re, mut im) = (0.0f64, 0.0f64);
                for (t, s) in x.iter().enumerate() {
                    let a = -2.0 * std::f64::consts::PI * (k * t % n) as f64 / n as f64;
                    let (sr, si) = (f64::from(s.re), f64::from(s.im));
                    re += sr * a.cos() - si * a.sin();
                    im += sr * a.sin() + si * a.cos();
                }
                re * re + im * im
            })
            .collect()
    }

    #[test]
    fn complex_power_matches_a_naive_dft() {
        // A two-tone IQ signal plus a deterministic pseudo-random part.
        let n_fft = 100;
        let iq: Vec<Complex32> = (0..1000)
            .map(|t| {
                let p = 2.0 * std::f32::consts::PI * t as f32;
                let r = ((t * 7919) % 101) as f32 / 101.0 - 0.5;
                Complex32::new(
                    (p * 0.1).cos() + 0.1 * r,
                    (p * 0.1).sin() - 0.3 * (p * 0.23).sin(),
                )
            })
            .collect();
        let mut stft = ComplexStft::new(n_fft, 37, WindowKind::Rectangular, true, false);
        let mut out = Vec::new();
        let frames = stft.power(&iq, &mut out);
        assert_eq!(frames, 1 + (1000 - 100) / 37);
        for f in [0, 5, frames - 1] {
            let expect = naive_power(&iq[f * 37..f * 37 + n_fft]);
            let peak = expect.iter().cloned().fold(0.0, f64::max);
            for (k, &e) in expect.iter().enumerate() {
                let got = f64::from(out[f * n_fft + k]);
                assert!(
                    (got - e).abs() <= 1e-5 * peak,
                    "frame {f} bin {k}: {got} vs {e}"
                );
            }
        }
        // A pure tone at +10 cycles/frame lands in bin 10, or bin 60 after the shift.
        let tone: Vec<Complex32> = (0..100)
            .map(|t| {
                Complex32::from_polar(1.0, 2.0 * std::f32::consts::PI * 10.0 * t as f32 / 100.0)
            })
            .collect();
        let mut shifted = ComplexStft::new(100, 100, WindowKind::Rectangular, true, true);
        let mut out = Vec::new();
        shifted.power(&tone, &mut out);
        let argmax = (0..100).max_by(|&a, &b| out[a].total_cmp(&out[b])).unwrap();
        assert_eq!(argmax, 60);
    }
}
