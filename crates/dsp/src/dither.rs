//! Dither noise from a counter-based hash of (seed, frame, sample) instead of a sequential
//! generator: a frame's noise does not depend on how its item was chunked, streamed or
//! batched, and the GPU kernels (`unit_noise` in crates/gpu/kernels/framing.wgsl) draw the
//! same values bit for bit, with 32-bit integer arithmetic and exact sums.
//!
//! Each value is the sum of twelve uniform variates on (0, 1) minus 6 (Irwin–Hall): zero mean
//! and unit variance like a standard normal, bounded at ±6. Dither only has to be small,
//! zero-mean and uncorrelated with the signal; its exact shape does not matter, so no one can
//! match another tool's dithered output anyway.

/// Chris Wellons' `lowbias32` integer hash: a bijection on u32 with good avalanche.
pub fn lowbias32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

const GOLDEN: u32 = 0x9e37_79b9;

/// Unit-variance noise for sample `m` of frame `frame` (counted from the item's first frame)
/// with `seed`. The value has at most 21 significant bits, so it is exact in f32.
pub fn unit_noise(seed: u64, frame: u32, m: u32) -> f32 {
    let mut h = lowbias32(GOLDEN ^ seed as u32);
    h = lowbias32(h ^ (seed >> 32) as u32);
    h = lowbias32(h ^ frame);
    h = lowbias32(h ^ m);
    // Twelve 16-bit uniforms from six hashes; their integer sum is exact.
    let mut sum = 0u32;
    for k in 0..6u32 {
        let r = lowbias32(h.wrapping_add(k.wrapping_mul(GOLDEN)));
        sum += (r & 0xffff) + (r >> 16);
    }
    // Uniform i is (u_i + 0.5) / 65536, so the twelve sum to (sum + 6) / 65536.
    (sum as f32 + 6.0) / 65536.0 - 6.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_zero_mean_unit_variance_and_keyed_by_seed_frame_and_sample() {
        let n = 200_000u32;
        let values: Vec<f64> = (0..n)
            .map(|i| f64::from(unit_noise(7, i / 400, i % 400)))
            .collect();
        let mean = values.iter().sum::<f64>() / f64::from(n);
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / f64::from(n);
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
        assert!(values.iter().all(|v| v.abs() <= 6.0));
        // A standard normal has 31.7% of its mass beyond one sigma; Irwin-Hall(12) 31.5%.
        let beyond = values.iter().filter(|v| v.abs() > 1.0).count() as f64 / f64::from(n);
        assert!((beyond - 0.317).abs() < 0.01, "{beyond}");
        // Neighbouring keys are uncorrelated.
        let lag: f64 = values.windows(2).map(|w| w[0] * w[1]).sum::<f64>() / f64::from(n);
        assert!(lag.abs() < 0.01, "lag-1 correlation {lag}");
        assert_eq!(unit_noise(7, 3, 5), unit_noise(7, 3, 5));
        assert_ne!(unit_noise(7, 3, 5), unit_noise(8, 3, 5));
        assert_ne!(unit_noise(7, 3, 5), unit_noise(7, 4, 5));
        assert_ne!(unit_noise(7, 3, 5), unit_noise(7, 3, 6));
        assert_ne!(
            unit_noise(1 << 40, 3, 5),
            unit_noise(0, 3, 5),
            "the high seed bits count"
        );
    }

    /// Dithered datasets stay reproducible across versions: these values (k / 65536, exact in
    /// f32) come from an independent Python transcription of the hash (masking to 32 bits by
    /// hand), so a change to the formula here or a platform difference fails this test.
    #[test]
    fn noise_matches_an_independent_transcription() {
        assert_eq!(unit_noise(0, 0, 0), -51_424.0 / 65_536.0);
        assert_eq!(unit_noise(42, 7, 399), 50_099.0 / 65_536.0);
        assert_eq!(
            unit_noise(0x1234_5678_9abc_def0, 100_000, 1),
            -3_384.0 / 65_536.0
        );
    }
}
