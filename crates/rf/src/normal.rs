//! Normal deviates that any device reproduces bit for bit.
//!
//! Box–Muller and the ziggurat need `ln`, `sqrt`, `cos`, whose last bits differ between libm,
//! GPU drivers and WGSL (which promises no correctly rounded transcendental). Here a deviate is
//! the inverse normal CDF of one Philox word, interpolated in **integers** on a table of
//! `scipy.special.ndtri` (crates/rf/src/ndtri_table.rs, made by scripts/rf_reference.py):
//!
//! - the top bit is the sign; the other 31 bits `m` give `u = (m + 1/2) / 2^32` in (0, 1/2);
//! - `m`'s octave `e` (the position of its leading one) and the next 7 bits pick one of 128
//!   sub-intervals of that octave, the 16 bits after them interpolate linearly inside it, in
//!   fixed point with 20 fractional bits (the tails are resolved as finely as the middle: the
//!   smallest |u| is 2^-33, about 6.4 sigma);
//! - the result is rounded to 12 significant bits and scaled by 2^-20.
//!
//! Everything up to the last step is integer arithmetic; the conversion is exact (under
//! 2^24) and the scale a power of two. The 12-bit rounding makes every deviate times a 12-bit
//! amplitude an exact f32 product, so `signal + sigma * n` is the same single rounding with or
//! without a fused multiply-add (which GPU compilers may or may not use). Rounding perturbs
//! a deviate by at most 2^-13 of itself (78 dB under the noise) and the linear interpolation
//! of the quantile by under 2e-6: the moments match a normal's to the precision any test can
//! see (crates/rf/tests/normal.rs).

use crate::ndtri_table::NDTRI_Q20;

/// Fractional bits of the fixed-point deviate.
pub const FRAC_BITS: u32 = 20;
/// Significant bits kept in a deviate and in amplitudes that multiply deviates.
pub const SIG_BITS: u32 = 12;

/// Rounds a non-negative integer to [`SIG_BITS`] significant bits (half up).
#[inline(always)]
pub fn round_sig_int(a: u32) -> u32 {
    let bits = 32 - a.leading_zeros();
    if bits <= SIG_BITS {
        return a;
    }
    let sh = bits - SIG_BITS;
    ((a + (1 << (sh - 1))) >> sh) << sh
}

/// The position of the leading one of `v` (0 < v < 2^31), from the exponent of its exact f64
/// conversion: unlike `leading_zeros`, this vectorises on x86 without AVX-512.
#[inline(always)]
fn log2_floor(v: u32) -> u32 {
    (((f64::from(v).to_bits() >> 52) as u32) & 0x7ff) - 1023
}

/// The deviate of word `w` in fixed point (value × 2^20). Branch-free, so that loops over
/// words vectorise; equal to the table interpolation described above (checked against a
/// plain transcription in the tests).
#[inline(always)]
pub fn deviate_q20(w: u32) -> i32 {
    // m = 0 would be u = 2^-33 / 2; it shares m = 1's value (probability 2^-31).
    let m = (w & 0x7fff_ffff).max(1);
    let e = log2_floor(m); // 0..=30
    let t = m << (30 - e);
    let s = ((t >> 23) & 0x7f) as usize;
    let f = ((t >> 7) & 0xffff) as i32;
    let at = e as usize * TABLE_ROW + s;
    let (a0, a1) = (TABLE[at], TABLE[at + 1]);
    // |a1 - a0| < 2^13 (checked by a test), so the product fits in 29 bits.
    let a = (a0 + (((a1 - a0) * f) >> 16)) as u32;
    // Round to 12 significant bits: a < 2^23, so its f64 exponent is exact; a shift of 0
    // (a already short) adds 0.
    let bits = log2_floor(a.max(1)) + 1;
    let sh = bits.saturating_sub(SIG_BITS);
    let a = (((a + ((1u32 << sh) >> 1)) >> sh) << sh) as i32;
    // The sign from the top bit, without a branch.
    let neg = (w >> 31) as i32;
    (a ^ -neg) + neg
}

/// The table flattened (octave-major), as the kernels and [`deviate_q20`] index it.
pub(crate) static TABLE: [i32; 31 * TABLE_ROW] = flatten();

const fn flatten() -> [i32; 31 * TABLE_ROW] {
    let mut out = [0i32; 31 * TABLE_ROW];
    let mut e = 0;
    while e < 31 {
        let mut s = 0;
        while s < TABLE_ROW {
            out[e * TABLE_ROW + s] = NDTRI_Q20[e][s];
            s += 1;
        }
        e += 1;
    }
    out
}

/// A standard normal deviate from one Philox word (exact in f32, 12 significant bits).
#[inline(always)]
pub fn deviate(w: u32) -> f32 {
    deviate_q20(w) as f32 * (1.0 / (1u32 << FRAC_BITS) as f32)
}

/// Rounds a positive f32 amplitude to [`SIG_BITS`] significant bits (half up on the
/// mantissa), so that its product with any deviate is exact.
pub fn round_sig_f32(x: f32) -> f32 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let bits = x.to_bits();
    let drop = 23 - (SIG_BITS - 1);
    let rounded = (bits + (1 << (drop - 1))) & !((1 << drop) - 1);
    f32::from_bits(rounded)
}

/// The table as one flat slice (octave-major), for the GPU kernels.
pub fn table_flat() -> Vec<i32> {
    TABLE.to_vec()
}

/// Nodes per octave in [`table_flat`].
pub const TABLE_ROW: usize = 129;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_monotone_continuous_and_has_small_steps() {
        for (e, row) in NDTRI_Q20.iter().enumerate() {
            for w in row.windows(2) {
                assert!(w[1] <= w[0], "octave {e} is not decreasing");
                assert!(w[0] - w[1] < 1 << 13, "octave {e} step too large");
            }
            if e + 1 < NDTRI_Q20.len() {
                assert_eq!(row[128], NDTRI_Q20[e + 1][0], "octave {e} joins the next");
            }
        }
    }

    /// The table against an independent quantile (Acklam's rational approximation, relative
    /// error 1.15e-9, refined by one Halley step on erfc): every node within one fixed-point
    /// unit of it.
    #[test]
    fn table_matches_an_independent_quantile() {
        for (e, row) in NDTRI_Q20.iter().enumerate() {
            for (s, &v) in row.iter().enumerate() {
                let m = 2f64.powi(e as i32) * (1.0 + s as f64 / 128.0);
                let u = (m + 0.5) / 2f64.powi(32);
                let want = -acklam(u) * f64::from(1u32 << FRAC_BITS);
                assert!(
                    (f64::from(v) - want).abs() <= 1.0,
                    "[{e}][{s}] {v} vs {want}"
                );
            }
        }
    }

    fn acklam(p: f64) -> f64 {
        const A: [f64; 6] = [
            -3.969683028665376e+01,
            2.209460984245205e+02,
            -2.759285104469687e+02,
            1.383_577_518_672_69e2,
            -3.066479806614716e+01,
            2.506628277459239e+00,
        ];
        const B: [f64; 5] = [
            -5.447609879822406e+01,
            1.615858368580409e+02,
            -1.556989798598866e+02,
            6.680131188771972e+01,
            -1.328068155288572e+01,
        ];
        const C: [f64; 6] = [
            -7.784894002430293e-03,
            -3.223964580411365e-01,
            -2.400758277161838e+00,
            -2.549732539343734e+00,
            4.374664141464968e+00,
            2.938163982698783e+00,
        ];
        const D: [f64; 4] = [
            7.784695709041462e-03,
            3.224671290700398e-01,
            2.445134137142996e+00,
            3.754408661907416e+00,
        ];
        let x = if p < 0.02425 {
            let q = (-2.0 * p.ln()).sqrt();
            (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
                / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
        } else {
            let q = p - 0.5;
            let r = q * q;
            (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
                / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
        };
        // One Halley step: e = Phi(x) - p.
        let e = 0.5 * erfc(-x / std::f64::consts::SQRT_2) - p;
        let u = e * (2.0 * std::f64::consts::PI).sqrt() * (x * x / 2.0).exp();
        x - u / (1.0 + x * u / 2.0)
    }

    /// erfc by its continued fraction (x > 2) or Taylor series of erf, to ~1e-15 relative.
    fn erfc(x: f64) -> f64 {
        if x < 0.0 {
            return 2.0 - erfc(-x);
        }
        if x < 2.0 {
            let mut sum = x;
            let mut term = x;
            let mut n = 0.0;
            while term.abs() > 1e-17 * sum.abs() {
                n += 1.0;
                term *= -x * x / n;
                sum += term / (2.0 * n + 1.0);
            }
            return 1.0 - 2.0 / std::f64::consts::PI.sqrt() * sum;
        }
        // Lentz's continued fraction: erfc x = exp(-x^2)/sqrt(pi) / (x + 1/2/(x + 1/(x + ...))).
        let mut f = 0.0;
        for k in (1..200).rev() {
            f = f64::from(k) / 2.0 / (x + f);
        }
        (-x * x).exp() / std::f64::consts::PI.sqrt() / (x + f)
    }

    /// The branch-free deviate against a plain transcription of the documented steps.
    #[test]
    fn branch_free_deviate_equals_the_plain_steps() {
        let plain = |w: u32| -> i32 {
            let m = (w & 0x7fff_ffff).max(1);
            let e = 31 - m.leading_zeros();
            let t = m << (30 - e);
            let s = ((t >> 23) & 0x7f) as usize;
            let f = ((t >> 7) & 0xffff) as i32;
            let row = &NDTRI_Q20[e as usize];
            let a = row[s] + (((row[s + 1] - row[s]) * f) >> 16);
            let a = round_sig_int(a as u32) as i32;
            if w >> 31 == 1 {
                -a
            } else {
                a
            }
        };
        let rng = crate::philox::Rng::new(5, 6, crate::philox::Stream::Noise);
        let mut words = vec![0u32; 1 << 20];
        rng.fill_words(0, &mut words);
        words.extend([0, 1, 2, 3, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, u32::MAX]);
        words.extend((0..31).map(|e| 1u32 << e));
        for w in words {
            assert_eq!(deviate_q20(w), plain(w), "word {w:#x}");
        }
    }

    #[test]
    fn deviates_are_exact_twelve_bit_floats_and_symmetric() {
        for w in [
            0u32,
            1,
            2,
            0x4000_0000,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            12345,
        ] {
            let d = deviate(w);
            let q = deviate_q20(w);
            assert_eq!(f64::from(d), f64::from(q) / 1_048_576.0);
            assert!(round_sig_int(q.unsigned_abs()) == q.unsigned_abs());
            assert_eq!(deviate(w ^ 0x8000_0000), -d);
        }
        // The extremes: m = 1 is u = 1.5 / 2^32, about 6.2 sigma; the largest m is near 0.
        assert!(
            (f64::from(deviate(1)) - 6.16).abs() < 0.05,
            "{}",
            deviate(1)
        );
        assert!(deviate(0x7fff_ffff).abs() < 1e-6);
        assert_eq!(round_sig_f32(1.0), 1.0);
        assert_eq!(round_sig_f32(1.0 + 2f32.powi(-12)), 1.0 + 2f32.powi(-11));
        let r = round_sig_f32(0.123_456_79);
        assert!((r - 0.123_456_79).abs() <= 0.123_456_79 * 2f32.powi(-12));
        assert_eq!(r.to_bits() & ((1 << 12) - 1), 0);
    }
}
