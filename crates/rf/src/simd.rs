//! AVX2 versions of the two hot loops of synthesis: eight Philox blocks at once, and the
//! exact noise stage eight values at once. They compute the scalar code's bits (tested against
//! it word for word and value for value), chosen at run time where the CPU has AVX2.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use crate::normal::{FRAC_BITS, SIG_BITS, TABLE_ROW};

/// The 32-bit products `m · c` of eight lanes as (hi, lo) words.
#[inline]
#[target_feature(enable = "avx2")]
fn mulhilo(m: __m256i, c: __m256i) -> (__m256i, __m256i) {
    // Even lanes multiply in place; odd lanes after a shift down.
    let even = _mm256_mul_epu32(c, m);
    let odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(c), m);
    let lo = _mm256_blend_epi32::<0b1010_1010>(even, _mm256_slli_epi64::<32>(odd));
    let hi = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd);
    (hi, lo)
}

/// Philox4x32-10 of the eight counters `[first + l, stream, s0, s1]`, as 32 words in block
/// order (`out[4l + j]` is word j of block l), like `philox::blocks8`.
#[target_feature(enable = "avx2")]
pub(crate) fn blocks8(key: [u32; 2], stream: u32, sample: [u32; 2], first: u32) -> [u32; 32] {
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mut c0 = _mm256_add_epi32(_mm256_set1_epi32(first as i32), lanes);
    let mut c1 = _mm256_set1_epi32(stream as i32);
    let mut c2 = _mm256_set1_epi32(sample[0] as i32);
    let mut c3 = _mm256_set1_epi32(sample[1] as i32);
    let m0 = _mm256_set1_epi64x(0xD251_1F53);
    let m1 = _mm256_set1_epi64x(0xCD9E_8D57);
    let mut k = key;
    for r in 0..10 {
        if r > 0 {
            k = [
                k[0].wrapping_add(0x9E37_79B9),
                k[1].wrapping_add(0xBB67_AE85),
            ];
        }
        let (hi0, lo0) = mulhilo(m0, c0);
        let (hi1, lo1) = mulhilo(m1, c2);
        let n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(k[0] as i32));
        let n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(k[1] as i32));
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    let mut words = [[0u32; 8]; 4];
    for (w, c) in words.iter_mut().zip([c0, c1, c2, c3]) {
        // SAFETY: `w` is 8 u32 = 32 bytes, exactly one unaligned 256-bit store.
        unsafe { _mm256_storeu_si256(w.as_mut_ptr().cast(), c) };
    }
    let mut out = [0u32; 32];
    for l in 0..8 {
        for j in 0..4 {
            out[4 * l + j] = words[j][l];
        }
    }
    out
}

/// The exponent (position of the leading one) of eight positive lanes under 2^24, from their
/// exact f32 conversions.
#[inline]
#[target_feature(enable = "avx2")]
fn exponent(v: __m256i) -> __m256i {
    let bits = _mm256_castps_si256(_mm256_cvtepi32_ps(v));
    _mm256_sub_epi32(_mm256_srli_epi32::<23>(bits), _mm256_set1_epi32(127))
}

/// Eight `normal::deviate_q20` at once.
#[inline]
#[target_feature(enable = "avx2")]
fn deviates(w: __m256i, table: &[i32]) -> __m256i {
    let m = _mm256_max_epu32(
        _mm256_and_si256(w, _mm256_set1_epi32(0x7fff_ffff)),
        _mm256_set1_epi32(1),
    );
    // m < 2^31: its top 24 bits convert exactly, and so does m itself below 2^24.
    let e_hi = _mm256_add_epi32(exponent(_mm256_srli_epi32::<7>(m)), _mm256_set1_epi32(7));
    let e_lo = exponent(m);
    let big = _mm256_cmpgt_epi32(m, _mm256_set1_epi32(127));
    let e = _mm256_blendv_epi8(e_lo, e_hi, big);
    let t = _mm256_sllv_epi32(m, _mm256_sub_epi32(_mm256_set1_epi32(30), e));
    let s = _mm256_and_si256(_mm256_srli_epi32::<23>(t), _mm256_set1_epi32(0x7f));
    let f = _mm256_and_si256(_mm256_srli_epi32::<7>(t), _mm256_set1_epi32(0xffff));
    let idx = _mm256_add_epi32(
        _mm256_mullo_epi32(e, _mm256_set1_epi32(TABLE_ROW as i32)),
        s,
    );
    assert!(table.len() == 31 * TABLE_ROW);
    // SAFETY: e ≤ 30 and s ≤ 127, so idx ≤ 30·129 + 127 and idx + 1 ≤ 31·129 − 1: both
    // gathers read inside `table` (its length is asserted above).
    let (a0, a1) = unsafe {
        (
            _mm256_i32gather_epi32::<4>(table.as_ptr(), idx),
            _mm256_i32gather_epi32::<4>(table.as_ptr().add(1), idx),
        )
    };
    let a = _mm256_add_epi32(
        a0,
        _mm256_srai_epi32::<16>(_mm256_mullo_epi32(_mm256_sub_epi32(a1, a0), f)),
    );
    // 12 significant bits (a < 2^23, so exponent() is exact).
    let bits = _mm256_add_epi32(
        exponent(_mm256_max_epi32(a, _mm256_set1_epi32(1))),
        _mm256_set1_epi32(1),
    );
    let sh = _mm256_max_epi32(
        _mm256_sub_epi32(bits, _mm256_set1_epi32(SIG_BITS as i32)),
        _mm256_setzero_si256(),
    );
    let half = _mm256_srli_epi32::<1>(_mm256_sllv_epi32(_mm256_set1_epi32(1), sh));
    let a = _mm256_sllv_epi32(_mm256_srlv_epi32(_mm256_add_epi32(a, half), sh), sh);
    let neg = _mm256_srli_epi32::<31>(w);
    _mm256_add_epi32(
        _mm256_xor_si256(a, _mm256_sub_epi32(_mm256_setzero_si256(), neg)),
        neg,
    )
}

/// `synth::noise_chunk` on interleaved values: `values[j] += sigma · deviate(words[j])`, then
/// the quantisation; the same operations in the same order as the scalar code (no fused
/// multiply-add: the product is exact anyway).
#[target_feature(enable = "avx2")]
pub(crate) fn noise(values: &mut [f32], words: &[u32], sigma: f32, bits: u32, table: &[i32]) {
    assert_eq!(values.len(), words.len());
    let unit = _mm256_set1_ps(1.0 / (1u32 << FRAC_BITS) as f32);
    let sig = _mm256_set1_ps(sigma);
    let scale = if bits > 0 {
        (1u32 << (bits - 1)) as f32
    } else {
        0.0
    };
    let (vs, vmin, vmax, half) = (
        _mm256_set1_ps(scale),
        _mm256_set1_ps(-scale),
        _mm256_set1_ps(scale - 1.0),
        _mm256_set1_ps(0.5),
    );
    let inv = _mm256_set1_ps(if bits > 0 { 1.0 / scale } else { 0.0 });
    let whole = values.len() / 8 * 8;
    for (v8, w8) in values[..whole]
        .chunks_exact_mut(8)
        .zip(words[..whole].chunks_exact(8))
    {
        // SAFETY: both chunks hold exactly 8 four-byte lanes: one unaligned 256-bit load each,
        // and one store back into `v8`.
        let (w, v) = unsafe {
            (
                _mm256_loadu_si256(w8.as_ptr().cast()),
                _mm256_loadu_ps(v8.as_ptr()),
            )
        };
        let d = _mm256_mul_ps(_mm256_cvtepi32_ps(deviates(w, table)), unit);
        let mut v = _mm256_add_ps(v, _mm256_mul_ps(sig, d));
        if bits > 0 {
            let q = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(v, vs), half));
            v = _mm256_mul_ps(_mm256_min_ps(_mm256_max_ps(q, vmin), vmax), inv);
        }
        // SAFETY: see the loads above.
        unsafe { _mm256_storeu_ps(v8.as_mut_ptr(), v) };
    }
    for (v, &w) in values[whole..].iter_mut().zip(&words[whole..]) {
        *v = crate::math::quantize(*v + sigma * crate::normal::deviate(w), bits);
    }
}
