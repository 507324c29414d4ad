//! DCT-II with orthonormal scaling (scipy's `dct(type=2, norm="ortho")`), truncated to the
//! first `n_out` coefficients, with librosa's or Kaldi's optional lifter.

use std::f64::consts::PI;

use crate::spec::{FeatureSpec, LifterStart, OutputKind};

/// A precomputed `[n_out][n_in]` DCT-II matrix (lifter folded in).
#[derive(Debug, Clone)]
pub struct Dct {
    n_in: usize,
    matrix: Vec<f64>,
}

impl Dct {
    /// `lifter > 0` multiplies coefficient `i` by `1 + lifter/2 · sin(π (i + 1) / lifter)`,
    /// as librosa.feature.mfcc does, or by `1 + lifter/2 · sin(π i / lifter)` from
    /// [`LifterStart::Zero`], as Kaldi does.
    pub fn new(n_in: usize, n_out: usize, lifter: f64, start: LifterStart) -> Self {
        let start = match start {
            LifterStart::One => 1,
            LifterStart::Zero => 0,
        };
        let mut matrix = Vec::with_capacity(n_in * n_out);
        for k in 0..n_out {
            let scale = if k == 0 {
                (1.0 / n_in as f64).sqrt()
            } else {
                (2.0 / n_in as f64).sqrt()
            };
            let lift = if lifter > 0.0 {
                1.0 + lifter / 2.0 * (PI * (k + start) as f64 / lifter).sin()
            } else {
                1.0
            };
            for n in 0..n_in {
                let c = (PI * k as f64 * (2 * n + 1) as f64 / (2 * n_in) as f64).cos();
                matrix.push(scale * lift * c);
            }
        }
        Dct { n_in, matrix }
    }

    /// The DCT an MFCC spec takes its log-mel rows through; `None` for any other output.
    pub fn of_spec(spec: &FeatureSpec) -> Option<Self> {
        (spec.output == OutputKind::Mfcc).then(|| {
            Self::new(
                spec.n_mels,
                spec.n_mfcc,
                f64::from(spec.lifter),
                spec.lifter_start,
            )
        })
    }

    pub fn n_out(&self) -> usize {
        self.matrix.len() / self.n_in
    }

    /// `out[k] = Σ_n M[k][n] · input[n]`.
    pub fn apply(&self, input: &[f64], out: &mut [f64]) {
        for (o, row) in out.iter_mut().zip(self.matrix.chunks_exact(self.n_in)) {
            *o = row.iter().zip(input).map(|(m, x)| m * x).sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_orthonormal_dct_preserves_energy_and_inverts() {
        let n = 16;
        let dct = Dct::new(n, n, 0.0, LifterStart::One);
        let x: Vec<f64> = (0..n).map(|i| ((i * 7 + 3) % 11) as f64 - 5.0).collect();
        let mut y = vec![0.0; n];
        dct.apply(&x, &mut y);
        let ex: f64 = x.iter().map(|v| v * v).sum();
        let ey: f64 = y.iter().map(|v| v * v).sum();
        assert!((ex - ey).abs() < 1e-9 * ex);
        // Orthonormal: the transpose inverts it.
        for (n_idx, &xn) in x.iter().enumerate() {
            let back: f64 = (0..n).map(|k| dct.matrix[k * n + n_idx] * y[k]).sum();
            assert!((back - xn).abs() < 1e-9);
        }
    }

    #[test]
    fn dc_input_lands_in_coefficient_zero() {
        let dct = Dct::new(8, 4, 0.0, LifterStart::One);
        let mut y = vec![0.0; 4];
        dct.apply(&[1.0; 8], &mut y);
        assert!((y[0] - 8f64.sqrt()).abs() < 1e-12);
        assert!(y[1..].iter().all(|v| v.abs() < 1e-12));
    }
}
