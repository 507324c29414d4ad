//! Frame windows, computed in f64 and rounded once.

use std::f64::consts::PI;

use crate::spec::WindowKind;

/// The `len`-point window of `kind`. A periodic window divides by `len` (DFT-even, as
/// torch.hann_window and scipy's `fftbins=True`); a symmetric one by `len - 1`.
pub fn window(kind: WindowKind, len: usize, periodic: bool) -> Vec<f64> {
    if len == 1 {
        return vec![1.0];
    }
    let denom = if periodic && kind != WindowKind::Povey {
        len as f64
    } else {
        (len - 1) as f64
    };
    (0..len)
        .map(|n| {
            let c = (2.0 * PI * n as f64 / denom).cos();
            match kind {
                WindowKind::Hann => 0.5 - 0.5 * c,
                WindowKind::Hamming => 0.54 - 0.46 * c,
                WindowKind::Povey => (0.5 - 0.5 * c).powf(0.85),
                WindowKind::Rectangular => 1.0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hann_periodic_and_symmetric_match_their_definitions() {
        let p = window(WindowKind::Hann, 4, true);
        let expect = [0.0, 0.5, 1.0, 0.5];
        for (a, b) in p.iter().zip(expect) {
            assert!((a - b).abs() < 1e-15);
        }
        let s = window(WindowKind::Hann, 5, false);
        let expect = [0.0, 0.5, 1.0, 0.5, 0.0];
        for (a, b) in s.iter().zip(expect) {
            assert!((a - b).abs() < 1e-15);
        }
    }

    #[test]
    fn povey_is_symmetric_hann_to_the_085() {
        let w = window(WindowKind::Povey, 400, false);
        let h = window(WindowKind::Hann, 400, false);
        for (a, b) in w.iter().zip(&h) {
            assert!((a - b.powf(0.85)).abs() < 1e-15);
        }
        assert_eq!(w[0], 0.0);
        assert!((w[0] - w[399]).abs() < 1e-15);
    }

    #[test]
    fn hamming_edges_are_008() {
        let w = window(WindowKind::Hamming, 11, false);
        assert!((w[0] - 0.08).abs() < 1e-12 && (w[10] - 0.08).abs() < 1e-12);
        assert!((w[5] - 1.0).abs() < 1e-12);
        assert!(window(WindowKind::Rectangular, 3, true)
            .iter()
            .all(|&v| v == 1.0));
    }
}
