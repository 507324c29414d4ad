//! Audio that is 16-bit PCM in f32 clothing: every sample `k / 32768` for an integer `k` in
//! i16's range, as a 16-bit (or 8-bit) WAV or FLAC decodes without resampling or mixing.
//! Such a signal goes to a GPU as its 16-bit integers, half the bytes of its f32 samples, and
//! the kernels turn each back into the same f32 (`k · 2^-15` is exact), so the features are
//! the same bits either way.

/// 2^15: one 16-bit step is `1 / FULL_SCALE`.
const FULL_SCALE: f32 = 32_768.0;

/// True when every sample is `k / 32768` for an integer `k` in -32768..=32767 (no NaN, no
/// infinity; an empty signal is).
pub fn is_pcm16(samples: &[f32]) -> bool {
    // Branch-free within a block, so that the compiler vectorises the scan; a block with one
    // sample off the grid ends it.
    samples
        .chunks(256)
        .all(|block| block.iter().fold(true, |exact, &x| exact & on_grid(x)))
}

/// True when `x · 32768` is an i16 (`as` saturates and turns NaN into 0: the comparison
/// refuses whatever it changed).
#[inline]
fn on_grid(x: f32) -> bool {
    let q = x * FULL_SCALE;
    f32::from(q as i16) == q
}

/// Writes `samples` as their 16-bit integers into `out` (the same length); the index of the
/// first sample that is not on the 16-bit grid where one is not (`out` is then partly written).
pub fn to_pcm16_into(samples: &[f32], out: &mut [i16]) -> Result<(), usize> {
    debug_assert_eq!(samples.len(), out.len());
    let mut exact = true;
    for (o, &x) in out.iter_mut().zip(samples) {
        let q = x * FULL_SCALE;
        let k = q as i16;
        exact &= f32::from(k) == q;
        *o = k;
    }
    if exact {
        Ok(())
    } else {
        Err(samples.iter().position(|&x| !on_grid(x)).unwrap_or(0))
    }
}

/// The f32 sample of 16-bit integer `k`: what the GPU kernels compute from it
/// (`f32(k) * 2^-15`, exact), and what a 16-bit decode gives.
pub fn from_pcm16(k: i16) -> f32 {
    f32::from(k) / FULL_SCALE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_16_bit_value_is_on_the_grid_and_round_trips() {
        let all: Vec<f32> = (i16::MIN..=i16::MAX).map(from_pcm16).collect();
        assert!(is_pcm16(&all));
        let mut back = vec![0i16; all.len()];
        to_pcm16_into(&all, &mut back).unwrap();
        assert!(back.iter().copied().eq(i16::MIN..=i16::MAX));
        assert!(is_pcm16(&[]));
    }

    #[test]
    fn off_grid_out_of_range_and_non_finite_samples_are_not_pcm16() {
        let base: Vec<f32> = (0..1000).map(|i| from_pcm16(i * 31 - 15_000)).collect();
        for (at, bad) in [
            (0, 1.0f32),                  // 32768 is past i16::MAX
            (999, -1.0 - 1.0 / 32_768.0), // under i16::MIN
            (500, 0.5 + 1.0 / 65_536.0),  // half a step
            (257, f32::NAN),
            (3, f32::INFINITY),
            (700, 1e-7), // under one step, not zero
        ] {
            let mut x = base.clone();
            x[at] = bad;
            assert!(!is_pcm16(&x), "{bad:e} at {at}");
            let mut out = vec![0i16; x.len()];
            assert_eq!(to_pcm16_into(&x, &mut out), Err(at), "{bad:e}");
        }
        assert!(is_pcm16(&[-1.0, 0.0, 32_767.0 / 32_768.0]));
    }
}
