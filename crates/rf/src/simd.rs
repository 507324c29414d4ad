//! AVX2 and AVX-512 versions of the two hot loops of synthesis: eight (sixteen) Philox blocks
//! at once, and the exact noise stage eight (sixteen) values at once. They compute the scalar
//! code's bits (tested against it word for word and value for value), chosen at run time by
//! what the CPU has. The AVX-512 ones halve the instructions a value; on a core with 512-bit
//! data paths (AMD Zen 5, Intel since Ice Lake) they halve the time too.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

use crate::normal::{FRAC_BITS, SIG_BITS, TABLE_ROW};

// Philox's multipliers and key increments, as in philox.rs (which calls into this module, so
// importing them from there would make an import circle; the tests compare every word).
const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// The next round's key.
#[inline(always)]
fn next_key(k: [u32; 2]) -> [u32; 2] {
    [k[0].wrapping_add(W0), k[1].wrapping_add(W1)]
}

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
    let m0 = _mm256_set1_epi64x(i64::from(M0));
    let m1 = _mm256_set1_epi64x(i64::from(M1));
    let mut k = key;
    for r in 0..10 {
        if r > 0 {
            k = next_key(k);
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

/// The quantisation grid of `bits` bits: its scale 2^(bits − 1) and the inverse (both 0
/// without quantisation). The scale is a power of two, so a product by the inverse is
/// `math::quantize`'s division exactly.
fn grid(bits: u32) -> (f32, f32) {
    if bits > 0 {
        let scale = (1u32 << (bits - 1)) as f32;
        (scale, 1.0 / scale)
    } else {
        (0.0, 0.0)
    }
}

/// `synth::noise_chunk` on interleaved values: `values[j] += sigma · deviate(words[j])`, then
/// the quantisation; the same operations in the same order as the scalar code (no fused
/// multiply-add: the product is exact anyway).
#[target_feature(enable = "avx2")]
pub(crate) fn noise(values: &mut [f32], words: &[u32], sigma: f32, bits: u32, table: &[i32]) {
    assert_eq!(values.len(), words.len());
    let unit = _mm256_set1_ps(1.0 / (1u32 << FRAC_BITS) as f32);
    let sig = _mm256_set1_ps(sigma);
    let (scale, inv) = grid(bits);
    let (vs, vmin, vmax, half, inv) = (
        _mm256_set1_ps(scale),
        _mm256_set1_ps(-scale),
        _mm256_set1_ps(scale - 1.0),
        _mm256_set1_ps(0.5),
        _mm256_set1_ps(inv),
    );
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

/// [`mulhilo`] on sixteen lanes.
#[inline]
#[target_feature(enable = "avx512f")]
fn mulhilo16(m: __m512i, c: __m512i) -> (__m512i, __m512i) {
    let even = _mm512_mul_epu32(c, m);
    let odd = _mm512_mul_epu32(_mm512_srli_epi64::<32>(c), m);
    let lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64::<32>(odd));
    let hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64::<32>(even), odd);
    (hi, lo)
}

/// [`blocks8`] for the sixteen counters from `first`, as 64 words in block order.
#[target_feature(enable = "avx512f")]
pub(crate) fn blocks16(key: [u32; 2], stream: u32, sample: [u32; 2], first: u32) -> [u32; 64] {
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let mut c0 = _mm512_add_epi32(_mm512_set1_epi32(first as i32), lanes);
    let mut c1 = _mm512_set1_epi32(stream as i32);
    let mut c2 = _mm512_set1_epi32(sample[0] as i32);
    let mut c3 = _mm512_set1_epi32(sample[1] as i32);
    let m0 = _mm512_set1_epi64(i64::from(M0));
    let m1 = _mm512_set1_epi64(i64::from(M1));
    let mut k = key;
    for r in 0..10 {
        if r > 0 {
            k = next_key(k);
        }
        let (hi0, lo0) = mulhilo16(m0, c0);
        let (hi1, lo1) = mulhilo16(m1, c2);
        let n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(k[0] as i32));
        let n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(k[1] as i32));
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    // Word j of block l is lane l of c_j; the output wants block after block. The unpacks put
    // block 4i + j, its four words in order, in 128-bit lane i of u_j; the shuffles then
    // transpose the four registers' 128-bit lanes.
    let (t0, t1) = (_mm512_unpacklo_epi32(c0, c1), _mm512_unpackhi_epi32(c0, c1));
    let (t2, t3) = (_mm512_unpacklo_epi32(c2, c3), _mm512_unpackhi_epi32(c2, c3));
    let (u0, u1) = (_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2));
    let (u2, u3) = (_mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3));
    // u0 holds blocks 0, 4, 8, 12; u1 1, 5, 9, 13; u2 2, 6, 10, 14; u3 3, 7, 11, 15.
    let v0 = _mm512_shuffle_i32x4::<0x44>(u0, u1); // 0, 4, 1, 5
    let v1 = _mm512_shuffle_i32x4::<0x44>(u2, u3); // 2, 6, 3, 7
    let v2 = _mm512_shuffle_i32x4::<0xEE>(u0, u1); // 8, 12, 9, 13
    let v3 = _mm512_shuffle_i32x4::<0xEE>(u2, u3); // 10, 14, 11, 15
    let rows = [
        _mm512_shuffle_i32x4::<0x88>(v0, v1),
        _mm512_shuffle_i32x4::<0xDD>(v0, v1),
        _mm512_shuffle_i32x4::<0x88>(v2, v3),
        _mm512_shuffle_i32x4::<0xDD>(v2, v3),
    ];
    let mut out = [0u32; 64];
    for (o, r) in out.chunks_exact_mut(16).zip(rows) {
        // SAFETY: `o` is 16 u32 = 64 bytes, exactly one unaligned 512-bit store.
        unsafe { _mm512_storeu_si512(o.as_mut_ptr().cast(), r) };
    }
    out
}

/// Sixteen `normal::deviate_q20` at once: [`deviates`]' steps, the octaves from `lzcnt`.
#[inline]
#[target_feature(enable = "avx512f,avx512cd")]
fn deviates16(w: __m512i, table: &[i32]) -> __m512i {
    let one = _mm512_set1_epi32(1);
    let m = _mm512_max_epu32(_mm512_and_si512(w, _mm512_set1_epi32(0x7fff_ffff)), one);
    // The position of the leading one: 31 − lzcnt (m > 0).
    let e = _mm512_sub_epi32(_mm512_set1_epi32(31), _mm512_lzcnt_epi32(m));
    let t = _mm512_sllv_epi32(m, _mm512_sub_epi32(_mm512_set1_epi32(30), e));
    let s = _mm512_and_si512(_mm512_srli_epi32::<23>(t), _mm512_set1_epi32(0x7f));
    let f = _mm512_and_si512(_mm512_srli_epi32::<7>(t), _mm512_set1_epi32(0xffff));
    let idx = _mm512_add_epi32(
        _mm512_mullo_epi32(e, _mm512_set1_epi32(TABLE_ROW as i32)),
        s,
    );
    assert!(table.len() == 31 * TABLE_ROW);
    // SAFETY: as in `deviates`: idx ≤ 30·129 + 127, so idx and idx + 1 are inside `table`.
    let (a0, a1) = unsafe {
        (
            _mm512_i32gather_epi32::<4>(idx, table.as_ptr()),
            _mm512_i32gather_epi32::<4>(idx, table.as_ptr().add(1)),
        )
    };
    let a = _mm512_add_epi32(
        a0,
        _mm512_srai_epi32::<16>(_mm512_mullo_epi32(_mm512_sub_epi32(a1, a0), f)),
    );
    // 12 significant bits: a has 32 − lzcnt(a) of them (a ≥ 1 here as in the scalar code).
    let bits = _mm512_sub_epi32(
        _mm512_set1_epi32(32),
        _mm512_lzcnt_epi32(_mm512_max_epi32(a, one)),
    );
    let sh = _mm512_max_epi32(
        _mm512_sub_epi32(bits, _mm512_set1_epi32(SIG_BITS as i32)),
        _mm512_setzero_si512(),
    );
    let half = _mm512_srli_epi32::<1>(_mm512_sllv_epi32(one, sh));
    let a = _mm512_sllv_epi32(_mm512_srlv_epi32(_mm512_add_epi32(a, half), sh), sh);
    let neg = _mm512_srli_epi32::<31>(w);
    _mm512_add_epi32(
        _mm512_xor_si512(a, _mm512_sub_epi32(_mm512_setzero_si512(), neg)),
        neg,
    )
}

/// [`noise`] sixteen values at a time (the last few through [`noise`]).
#[target_feature(enable = "avx512f,avx512cd,avx2")]
pub(crate) fn noise16(values: &mut [f32], words: &[u32], sigma: f32, bits: u32, table: &[i32]) {
    assert_eq!(values.len(), words.len());
    let unit = _mm512_set1_ps(1.0 / (1u32 << FRAC_BITS) as f32);
    let sig = _mm512_set1_ps(sigma);
    let (scale, inv) = grid(bits);
    let (vs, vmin, vmax, half, inv) = (
        _mm512_set1_ps(scale),
        _mm512_set1_ps(-scale),
        _mm512_set1_ps(scale - 1.0),
        _mm512_set1_ps(0.5),
        _mm512_set1_ps(inv),
    );
    let whole = values.len() / 16 * 16;
    for (v16, w16) in values[..whole]
        .chunks_exact_mut(16)
        .zip(words[..whole].chunks_exact(16))
    {
        // SAFETY: both chunks hold exactly 16 four-byte lanes: one unaligned 512-bit load
        // each, and one store back into `v16`.
        let (w, v) = unsafe {
            (
                _mm512_loadu_si512(w16.as_ptr().cast()),
                _mm512_loadu_ps(v16.as_ptr()),
            )
        };
        let d = _mm512_mul_ps(_mm512_cvtepi32_ps(deviates16(w, table)), unit);
        let mut v = _mm512_add_ps(v, _mm512_mul_ps(sig, d));
        if bits > 0 {
            let q = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(
                _mm512_add_ps(_mm512_mul_ps(v, vs), half),
            );
            v = _mm512_mul_ps(_mm512_min_ps(_mm512_max_ps(q, vmin), vmax), inv);
        }
        // SAFETY: see the loads above.
        unsafe { _mm512_storeu_ps(v16.as_mut_ptr(), v) };
    }
    noise(&mut values[whole..], &words[whole..], sigma, bits, table);
}

/// Whether the CPU runs [`blocks16`] and [`noise16`].
pub(crate) fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512cd")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words that reach every branch of the deviate: both signs, m = 0 and 1, every octave's
    /// edges, the largest words, and a spread of others.
    fn edge_words() -> Vec<u32> {
        let mut w = vec![
            0,
            1,
            2,
            127,
            128,
            129,
            0x7fff_ffff,
            0x8000_0000,
            0x8000_0001,
            u32::MAX,
        ];
        for e in 0..31 {
            for d in [0u32, 1, 2] {
                let v = (1u32 << e).wrapping_sub(1) + d;
                w.extend([v, v | 0x8000_0000]);
            }
        }
        let mut x = 0x9E37_79B9u32;
        while w.len() < 16 * 1000 + 5 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            w.push(x);
        }
        w
    }

    #[test]
    fn sixteen_lane_blocks_equal_two_runs_of_eight() {
        if !has_avx512() {
            eprintln!("skipped: this CPU has no AVX-512F/CD (the eight-lane path is tested)");
            return;
        }
        for (key, stream, sample, first) in [
            ([0u32, 0], 0u32, [0u32, 0], 0u32),
            ([u32::MAX, u32::MAX], 2, [u32::MAX, u32::MAX], u32::MAX - 7),
            ([7, 1], 2, [0, 1 << 8], 12345),
        ] {
            // SAFETY: AVX-512F/CD and AVX2 (implied by AVX-512F) were detected above.
            let (wide, lo, hi) = unsafe {
                (
                    blocks16(key, stream, sample, first),
                    blocks8(key, stream, sample, first),
                    blocks8(key, stream, sample, first.wrapping_add(8)),
                )
            };
            assert_eq!(wide[..32], lo, "first {first}");
            assert_eq!(wide[32..], hi, "first {first}");
        }
    }

    #[test]
    fn sixteen_lane_noise_equals_the_eight_lane_and_scalar_stages() {
        if !has_avx512() {
            eprintln!("skipped: this CPU has no AVX-512F/CD (the eight-lane path is tested)");
            return;
        }
        let words = edge_words();
        let table = &crate::normal::TABLE;
        for bits in [0u32, 2, 9, 16] {
            for len in [words.len(), 16, 15, 1, 0] {
                let start: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin() * 0.7).collect();
                let (mut wide, mut narrow) = (start.clone(), start.clone());
                // SAFETY: AVX-512F/CD and AVX2 were detected above.
                unsafe {
                    noise16(&mut wide, &words[..len], 0.25, bits, table);
                    noise(&mut narrow, &words[..len], 0.25, bits, table);
                }
                let scalar: Vec<f32> = start
                    .iter()
                    .zip(&words)
                    .map(|(v, &w)| {
                        crate::math::quantize(v + 0.25 * crate::normal::deviate(w), bits)
                    })
                    .collect();
                for (i, ((a, b), c)) in wide.iter().zip(&narrow).zip(&scalar).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "bits {bits}, value {i}");
                    assert_eq!(a.to_bits(), c.to_bits(), "bits {bits}, value {i}");
                }
            }
        }
    }
}
