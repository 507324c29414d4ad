//! Small numeric kernels shared by synthesis and features.

use std::f64::consts::{FRAC_PI_2, TAU};

/// (sin 2πc, cos 2πc) for a phase `c` in cycles, by reduction to an octant and Taylor
/// polynomials of degree 15/14 (error under 1e-14 for |c| ≤ 1, where callers keep phases): faster than libm's `sin_cos`
/// and the same on every platform, which a dataset that is meant to reproduce wants.
#[inline(always)]
pub fn sincos_cycles(c: f64) -> (f64, f64) {
    // Quarter turns: c = (k + r) / 4 with |r| <= 1/2.
    let q = c * 4.0;
    let k = round_fast(q);
    let x = (q - k) * FRAC_PI_2;
    let x2 = x * x;
    let s = x
        * (1.0
            + x2 * (-1.0 / 6.0
                + x2 * (1.0 / 120.0
                    + x2 * (-1.0 / 5040.0
                        + x2 * (1.0 / 362_880.0
                            + x2 * (-1.0 / 39_916_800.0
                                + x2 * (1.0 / 6_227_020_800.0 - x2 / 1_307_674_368_000.0)))))));
    let co = 1.0
        + x2 * (-0.5
            + x2 * (1.0 / 24.0
                + x2 * (-1.0 / 720.0
                    + x2 * (1.0 / 40_320.0
                        + x2 * (-1.0 / 3_628_800.0
                            + x2 * (1.0 / 479_001_600.0 - x2 / 87_178_291_200.0))))));
    // The quadrant by selects rather than a branch, so that loops over phases vectorise.
    let quadrant = (k as i64) & 3;
    let (s, co) = if quadrant & 1 == 1 { (co, -s) } else { (s, co) };
    if quadrant & 2 == 2 {
        (-s, -co)
    } else {
        (s, co)
    }
}

/// `out[i] = e^{2πi·cycles[i]}` for phases in cycles.
#[multiversion::multiversion(targets("x86_64+avx2+fma", "aarch64+neon"))]
pub fn phasors(cycles: &[f64], out: &mut Vec<rustfft::num_complex::Complex64>) {
    out.clear();
    out.resize(cycles.len(), rustfft::num_complex::Complex64::new(0.0, 0.0));
    for (o, &c) in out.iter_mut().zip(cycles) {
        let (s, co) = sincos_cycles(c);
        o.re = co;
        o.im = s;
    }
}

/// 1.5 · 2^52: adding and subtracting it rounds an f64 of magnitude under 2^51 to an integer
/// (ties to even) in two additions, where `f64::round` is a libm call on baseline x86-64.
const ROUNDER: f64 = 6_755_399_441_055_744.0;

/// `x` rounded to an integer (|x| < 2^51; ties to even).
#[inline(always)]
pub fn round_fast(x: f64) -> f64 {
    (x + ROUNDER) - ROUNDER
}

/// The fractional part of `c` in [0, 1) (|c| < 2^51), without libm's `fmod` or `floor`.
#[inline(always)]
pub fn frac(c: f64) -> f64 {
    let r = c - round_fast(c);
    if r < 0.0 {
        r + 1.0
    } else {
        r
    }
}

/// (sin x, cos x) for x in radians.
#[inline(always)]
pub fn sincos(x: f64) -> (f64, f64) {
    sincos_cycles(x / TAU)
}

/// atan2(y, x) in (−π, π], by Cephes' reduction (|t| ≤ 0.66, or around tan(π/4)) and its
/// rational approximation of atan (relative error about 1e-16). Written without branches on
/// the data (the octant is chosen by selects), so loops over samples vectorise; several times
/// faster than libm's, and the same on every platform.
#[inline(always)]
pub fn atan2(y: f64, x: f64) -> f64 {
    use std::f64::consts::{FRAC_PI_2, FRAC_PI_4, PI};
    let (ax, ay) = (x.abs(), y.abs());
    let (mx, mn) = (ax.max(ay), ax.min(ay));
    // Ratios above 0.66 are taken around tan(π/4): atan t = π/4 + atan((t − 1)/(t + 1)).
    let b = if mn > 0.66 * mx { 1.0 } else { 0.0 };
    let den = mx + b * mn;
    let u = if den > 0.0 { (mn - b * mx) / den } else { 0.0 };
    const P: [f64; 5] = [
        -8.750_608_600_031_904e-1,
        -1.615_753_718_733_365e1,
        -7.500_855_792_314_705e1,
        -1.228_866_684_490_136e2,
        -6.485_021_904_942_025e1,
    ];
    const Q: [f64; 5] = [
        2.485_846_490_142_306e1,
        1.650_270_098_316_988e2,
        4.328_810_604_912_903e2,
        4.853_903_996_359_137e2,
        1.945_506_571_482_614e2,
    ];
    let z = u * u;
    let p = (((P[0] * z + P[1]) * z + P[2]) * z + P[3]) * z + P[4];
    let q = ((((z + Q[0]) * z + Q[1]) * z + Q[2]) * z + Q[3]) * z + Q[4];
    let mut a = b * FRAC_PI_4 + (u + u * z * p / q);
    a = if ay > ax { FRAC_PI_2 - a } else { a };
    a = if x < 0.0 { PI - a } else { a };
    if y < 0.0 {
        -a
    } else {
        a
    }
}

/// Cubic Lagrange interpolation of `x` at fractional position `t` (0 ≤ t < len − 1); samples
/// outside `x` are zero. Used for fractional delays and sample-rate offsets.
#[inline]
pub fn lagrange3(x: &[[f64; 2]], t: f64) -> [f64; 2] {
    let i = t.floor();
    let d = t - i;
    let i = i as isize;
    let at = |j: isize| -> [f64; 2] {
        if j < 0 || j as usize >= x.len() {
            [0.0, 0.0]
        } else {
            x[j as usize]
        }
    };
    // Nodes i-1, i, i+1, i+2 at offsets -1, 0, 1, 2 from i.
    let w = [
        -d * (d - 1.0) * (d - 2.0) / 6.0,
        (d + 1.0) * (d - 1.0) * (d - 2.0) / 2.0,
        -(d + 1.0) * d * (d - 2.0) / 2.0,
        (d + 1.0) * d * (d - 1.0) / 6.0,
    ];
    let mut out = [0.0, 0.0];
    for (k, wk) in w.iter().enumerate() {
        let v = at(i - 1 + k as isize);
        out[0] += wk * v[0];
        out[1] += wk * v[1];
    }
    out
}

/// `v` rounded to a signed `bits`-bit grid over [-1, 1) (0 bits: as it is), as an ADC of that
/// many bits would give it; the noise stage's last step on the CPU and on the GPU.
#[inline(always)]
pub(crate) fn quantize(v: f32, bits: u32) -> f32 {
    if bits == 0 {
        return v;
    }
    let scale = (1u32 << (bits - 1)) as f32;
    ((v * scale + 0.5).floor().clamp(-scale, scale - 1.0)) / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sincos_matches_libm() {
        let mut worst = 0.0f64;
        for i in -20_000..20_000 {
            let c = i as f64 * 0.000_049_7 + 0.0123;
            let (s, co) = sincos_cycles(c);
            let (ws, wc) = (TAU * c).sin_cos();
            worst = worst.max((s - ws).abs()).max((co - wc).abs());
        }
        assert!(worst < 1e-14, "{worst}");
    }

    #[test]
    fn frac_and_round_match_std() {
        for c in [
            0.0,
            0.25,
            0.5,
            0.75,
            1.0,
            -0.25,
            -1.5,
            2.5,
            1e6 + 0.125,
            -3.999_999,
            123.456,
        ] {
            assert_eq!(frac(c), c.rem_euclid(1.0), "{c}");
        }
        assert_eq!(round_fast(2.4), 2.0);
        assert_eq!(round_fast(-2.6), -3.0);
    }

    #[test]
    fn atan2_matches_libm() {
        let mut worst = 0.0f64;
        for i in 0..20_000 {
            let a = (i as f64 - 10_000.0) * 0.000_314;
            for r in [1e-3, 1.0, 7.5e4] {
                let (y, x) = (r * a.sin(), r * a.cos());
                worst = worst.max((atan2(y, x) - y.atan2(x)).abs());
            }
        }
        assert!(worst < 1e-14, "{worst}");
        assert_eq!(atan2(0.0, 0.0), 0.0);
        assert!((atan2(0.0, -1.0) - std::f64::consts::PI).abs() < 1e-15);
        assert!((atan2(-1.0, 0.0) + std::f64::consts::FRAC_PI_2).abs() < 1e-15);
    }

    #[test]
    fn lagrange_is_exact_on_cubics_and_at_nodes() {
        let x: Vec<[f64; 2]> = (0..10)
            .map(|i| {
                let t = i as f64;
                [t * t * t - 2.0 * t, 0.5 * t * t]
            })
            .collect();
        for t in [2.0, 3.25, 5.5, 6.9] {
            let v = lagrange3(&x, t);
            assert!((v[0] - (t * t * t - 2.0 * t)).abs() < 1e-9, "{t}");
            assert!((v[1] - 0.5 * t * t).abs() < 1e-9);
        }
        assert_eq!(lagrange3(&x, 4.0), x[4]);
    }
}
