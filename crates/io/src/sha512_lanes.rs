//! SHA-512 of up to eight messages of one length at once: one message a 64-bit lane of
//! AVX-512 where the CPU has it (the rounds are the same for every message, so one instruction
//! stream serves eight), else one `sha2` hasher a message. SigMF's
//! `core:sha512` of every recording was 40–53 % of `synth-iq`'s CPU time one message at a
//! time (sha2 and OpenSSL alike hash about half a GB a second a core); no maintained crate
//! hashes several messages at once.

use sha2::{Digest, Sha512};

/// The most messages hashed side by side.
pub const LANES: usize = 8;

/// SHA-512 of `lanes` messages fed the same number of bytes at a time.
pub struct Sha512Lanes {
    inner: Inner,
}

enum Inner {
    Scalar(Vec<Sha512>),
    #[cfg(target_arch = "x86_64")]
    Wide(Box<Wide>),
}

impl Sha512Lanes {
    /// Hashers for `lanes` messages (1 to [`LANES`]): side by side where the CPU has AVX-512
    /// and there are at least two (one alone is faster with `sha2`).
    pub fn new(lanes: usize) -> Self {
        assert!((1..=LANES).contains(&lanes), "{lanes} lanes");
        #[cfg(target_arch = "x86_64")]
        if lanes >= 2 && wide_supported() {
            return Sha512Lanes {
                inner: Inner::Wide(Box::new(Wide::new(lanes))),
            };
        }
        Self::scalar(lanes)
    }

    /// One `sha2` hasher a message, whatever the CPU.
    pub fn scalar(lanes: usize) -> Self {
        assert!((1..=LANES).contains(&lanes), "{lanes} lanes");
        Sha512Lanes {
            inner: Inner::Scalar((0..lanes).map(|_| Sha512::new()).collect()),
        }
    }

    /// Whether the messages are hashed side by side.
    #[cfg(test)]
    fn is_wide(&self) -> bool {
        !matches!(self.inner, Inner::Scalar(_))
    }

    /// The next bytes of each message: `chunks[l]` for message `l`, every chunk of one length.
    pub fn update(&mut self, chunks: &[&[u8]]) {
        let lanes = match &self.inner {
            Inner::Scalar(h) => h.len(),
            #[cfg(target_arch = "x86_64")]
            Inner::Wide(w) => w.lanes,
        };
        assert_eq!(chunks.len(), lanes, "a chunk a message");
        assert!(
            chunks.iter().all(|c| c.len() == chunks[0].len()),
            "chunks of one length"
        );
        match &mut self.inner {
            Inner::Scalar(hashers) => {
                for (h, c) in hashers.iter_mut().zip(chunks) {
                    h.update(c);
                }
            }
            #[cfg(target_arch = "x86_64")]
            Inner::Wide(w) => w.update(chunks),
        }
    }

    /// The digest of each message, in lane order.
    pub fn finalize(self) -> Vec<[u8; 64]> {
        match self.inner {
            Inner::Scalar(hashers) => hashers.into_iter().map(|h| h.finalize().into()).collect(),
            #[cfg(target_arch = "x86_64")]
            Inner::Wide(w) => w.finalize(),
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn wide_supported() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

#[cfg(target_arch = "x86_64")]
const BLOCK: usize = 128;

/// FIPS 180-4's initial hash value for SHA-512.
#[cfg(target_arch = "x86_64")]
const IV: [u64; 8] = [
    0x6a09_e667_f3bc_c908,
    0xbb67_ae85_84ca_a73b,
    0x3c6e_f372_fe94_f82b,
    0xa54f_f53a_5f1d_36f1,
    0x510e_527f_ade6_82d1,
    0x9b05_688c_2b3e_6c1f,
    0x1f83_d9ab_fb41_bd6b,
    0x5be0_cd19_137e_2179,
];

/// FIPS 180-4's round constants for SHA-512.
#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
const K: [u64; 80] = [
    0x428a2f98d728ae22, 0x7137449123ef65cd, 0xb5c0fbcfec4d3b2f, 0xe9b5dba58189dbbc,
    0x3956c25bf348b538, 0x59f111f1b605d019, 0x923f82a4af194f9b, 0xab1c5ed5da6d8118,
    0xd807aa98a3030242, 0x12835b0145706fbe, 0x243185be4ee4b28c, 0x550c7dc3d5ffb4e2,
    0x72be5d74f27b896f, 0x80deb1fe3b1696b1, 0x9bdc06a725c71235, 0xc19bf174cf692694,
    0xe49b69c19ef14ad2, 0xefbe4786384f25e3, 0x0fc19dc68b8cd5b5, 0x240ca1cc77ac9c65,
    0x2de92c6f592b0275, 0x4a7484aa6ea6e483, 0x5cb0a9dcbd41fbd4, 0x76f988da831153b5,
    0x983e5152ee66dfab, 0xa831c66d2db43210, 0xb00327c898fb213f, 0xbf597fc7beef0ee4,
    0xc6e00bf33da88fc2, 0xd5a79147930aa725, 0x06ca6351e003826f, 0x142929670a0e6e70,
    0x27b70a8546d22ffc, 0x2e1b21385c26c926, 0x4d2c6dfc5ac42aed, 0x53380d139d95b3df,
    0x650a73548baf63de, 0x766a0abb3c77b2a8, 0x81c2c92e47edaee6, 0x92722c851482353b,
    0xa2bfe8a14cf10364, 0xa81a664bbc423001, 0xc24b8b70d0f89791, 0xc76c51a30654be30,
    0xd192e819d6ef5218, 0xd69906245565a910, 0xf40e35855771202a, 0x106aa07032bbd1b8,
    0x19a4c116b8d2d0c8, 0x1e376c085141ab53, 0x2748774cdf8eeb99, 0x34b0bcb5e19b48a8,
    0x391c0cb3c5c95a63, 0x4ed8aa4ae3418acb, 0x5b9cca4f7763e373, 0x682e6ff3d6b2b8a3,
    0x748f82ee5defb2fc, 0x78a5636f43172f60, 0x84c87814a1f0ab72, 0x8cc702081a6439ec,
    0x90befffa23631e28, 0xa4506cebde82bde9, 0xbef9a3f7b2c67915, 0xc67178f2e372532b,
    0xca273eceea26619c, 0xd186b8c721c0c207, 0xeada7dd6cde0eb1e, 0xf57d4f7fee6ed178,
    0x06f067aa72176fba, 0x0a637dc5a2c898a6, 0x113f9804bef90dae, 0x1b710b35131c471b,
    0x28db77f523047d84, 0x32caab7b40c72493, 0x3c9ebe0a15c9bebc, 0x431d67c49c100d4c,
    0x4cc5d4becb3e42b6, 0x597f299cfc657e2a, 0x5fcb6fab3ad6faec, 0x6c44198c4a475817,
];

/// Eight lanes of state in AVX-512 registers' order: `state[i][l]` is word `i` of message
/// `l` (lanes past `lanes` hash zeros, unread).
#[cfg(target_arch = "x86_64")]
struct Wide {
    lanes: usize,
    state: [[u64; LANES]; 8],
    /// Each message's bytes short of a whole block (the same count in every lane).
    pending: [[u8; BLOCK]; LANES],
    pending_len: usize,
    /// Bytes of each message so far.
    total: u128,
}

#[cfg(target_arch = "x86_64")]
impl Wide {
    fn new(lanes: usize) -> Self {
        Wide {
            lanes,
            state: IV.map(|w| [w; LANES]),
            pending: [[0; BLOCK]; LANES],
            pending_len: 0,
            total: 0,
        }
    }

    fn compress(&mut self, blocks: &[&[u8]]) {
        // SAFETY: a `Wide` exists only where `wide_supported` found AVX-512F (`new`).
        unsafe { compress_x8(&mut self.state, blocks) }
    }

    fn update(&mut self, chunks: &[&[u8]]) {
        let len = chunks[0].len();
        self.total += len as u128;
        let mut at = 0;
        if self.pending_len > 0 {
            let take = (BLOCK - self.pending_len).min(len);
            for (p, c) in self.pending.iter_mut().zip(chunks) {
                p[self.pending_len..self.pending_len + take].copy_from_slice(&c[..take]);
            }
            self.pending_len += take;
            at = take;
            if self.pending_len < BLOCK {
                return;
            }
            let pending = self.pending;
            let blocks: Vec<&[u8]> = pending[..self.lanes].iter().map(|p| &p[..]).collect();
            self.compress(&blocks);
            self.pending_len = 0;
        }
        let whole = (len - at) / BLOCK * BLOCK;
        if whole > 0 {
            let blocks: Vec<&[u8]> = chunks.iter().map(|c| &c[at..at + whole]).collect();
            self.compress(&blocks);
            at += whole;
        }
        let rest = len - at;
        for (p, c) in self.pending.iter_mut().zip(chunks) {
            p[..rest].copy_from_slice(&c[at..]);
        }
        self.pending_len = rest;
    }

    fn finalize(mut self) -> Vec<[u8; 64]> {
        // FIPS 180-4 §5.1.2: a 1 bit, zeros to 112 bytes of the last block, the length in bits
        // as 128 bits big-endian; the same for every lane, whose lengths are equal.
        let mut tail = [0u8; 2 * BLOCK];
        let n = self.pending_len;
        let tail_len = if n < BLOCK - 16 { BLOCK } else { 2 * BLOCK };
        tail[n] = 0x80;
        tail[tail_len - 16..tail_len].copy_from_slice(&(self.total * 8).to_be_bytes());
        let tails: Vec<[u8; 2 * BLOCK]> = self.pending[..self.lanes]
            .iter()
            .map(|p| {
                let mut t = tail;
                t[..n].copy_from_slice(&p[..n]);
                t
            })
            .collect();
        let blocks: Vec<&[u8]> = tails.iter().map(|t| &t[..tail_len]).collect();
        self.compress(&blocks);
        (0..self.lanes)
            .map(|l| {
                let mut digest = [0u8; 64];
                for (i, out) in digest.chunks_exact_mut(8).enumerate() {
                    out.copy_from_slice(&self.state[i][l].to_be_bytes());
                }
                digest
            })
            .collect()
    }
}

/// SHA-512's compression of whole blocks, `blocks[l]` into lane `l` of `state` (every slice
/// of one length, a multiple of 128 bytes; at most eight).
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn compress_x8(state: &mut [[u64; LANES]; 8], blocks: &[&[u8]]) {
    use std::arch::x86_64::*;
    debug_assert!(blocks.len() <= LANES);
    let len = blocks.first().map_or(0, |b| b.len());
    debug_assert!(len.is_multiple_of(BLOCK) && blocks.iter().all(|b| b.len() == len));
    // SAFETY: `state` is 8 rows of 8 u64, 64 bytes each: whole unaligned loads.
    let mut s: [__m512i; 8] =
        std::array::from_fn(|i| unsafe { _mm512_loadu_si512(state[i].as_ptr().cast()) });
    // The block's words transposed, `words[t][l]` word t of lane l, so that each is one load.
    let mut words = [[0u64; LANES]; BLOCK / 8];
    for at in (0..len).step_by(BLOCK) {
        for (l, b) in blocks.iter().enumerate() {
            for (t, bytes) in b[at..at + BLOCK].chunks_exact(8).enumerate() {
                words[t][l] = u64::from_be_bytes(bytes.try_into().expect("8 bytes"));
            }
        }
        // SAFETY: each row of `words` is 8 u64, 64 bytes: a whole unaligned load.
        let mut w: [__m512i; 16] =
            std::array::from_fn(|t| unsafe { _mm512_loadu_si512(words[t].as_ptr().cast()) });
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = s;
        for (t, &k) in K.iter().enumerate() {
            let wt = if t < 16 {
                w[t]
            } else {
                // W[t] = σ1(W[t−2]) + W[t−7] + σ0(W[t−15]) + W[t−16], in a ring of 16.
                let w15 = w[(t + 1) % 16];
                let w2 = w[(t + 14) % 16];
                let s0 = _mm512_ternarylogic_epi64::<0x96>(
                    _mm512_ror_epi64::<1>(w15),
                    _mm512_ror_epi64::<8>(w15),
                    _mm512_srli_epi64::<7>(w15),
                );
                let s1 = _mm512_ternarylogic_epi64::<0x96>(
                    _mm512_ror_epi64::<19>(w2),
                    _mm512_ror_epi64::<61>(w2),
                    _mm512_srli_epi64::<6>(w2),
                );
                let next = _mm512_add_epi64(
                    _mm512_add_epi64(w[t % 16], s0),
                    _mm512_add_epi64(w[(t + 9) % 16], s1),
                );
                w[t % 16] = next;
                next
            };
            // 0x96: x ^ y ^ z; 0xCA: Ch(e, f, g); 0xE8: Maj(a, b, c).
            let big_s1 = _mm512_ternarylogic_epi64::<0x96>(
                _mm512_ror_epi64::<14>(e),
                _mm512_ror_epi64::<18>(e),
                _mm512_ror_epi64::<41>(e),
            );
            let ch = _mm512_ternarylogic_epi64::<0xCA>(e, f, g);
            let t1 = _mm512_add_epi64(
                _mm512_add_epi64(h, big_s1),
                _mm512_add_epi64(ch, _mm512_add_epi64(_mm512_set1_epi64(k as i64), wt)),
            );
            let big_s0 = _mm512_ternarylogic_epi64::<0x96>(
                _mm512_ror_epi64::<28>(a),
                _mm512_ror_epi64::<34>(a),
                _mm512_ror_epi64::<39>(a),
            );
            let t2 = _mm512_add_epi64(big_s0, _mm512_ternarylogic_epi64::<0xE8>(a, b, c));
            h = g;
            g = f;
            f = e;
            e = _mm512_add_epi64(d, t1);
            d = c;
            c = b;
            b = a;
            a = _mm512_add_epi64(t1, t2);
        }
        for (si, v) in s.iter_mut().zip([a, b, c, d, e, f, g, h]) {
            *si = _mm512_add_epi64(*si, v);
        }
    }
    for (row, v) in state.iter_mut().zip(s) {
        // SAFETY: as the loads above.
        unsafe { _mm512_storeu_si512(row.as_mut_ptr().cast(), v) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(lane: usize, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8 ^ (lane as u8).wrapping_mul(37))
            .collect()
    }

    fn digests(hasher: &mut Sha512Lanes, messages: &[Vec<u8>], step: usize) {
        let len = messages[0].len();
        let mut at = 0;
        while at < len {
            let end = (at + step).min(len);
            let chunks: Vec<&[u8]> = messages.iter().map(|m| &m[at..end]).collect();
            hasher.update(&chunks);
            at = end;
        }
    }

    /// Every lane's digest is `sha2`'s of its message, for lengths at each padding edge (a
    /// last block with room for the length and without), fed whole and in pieces that do and
    /// do not meet the block edges, with 1 to 8 lanes.
    #[test]
    fn every_lane_is_sha2s_digest() {
        #[cfg(target_arch = "x86_64")]
        if !wide_supported() {
            eprintln!("this CPU has no AVX-512: only the sha2 path is checked");
        }
        for len in [
            0,
            1,
            111,
            112,
            127,
            128,
            129,
            239,
            240,
            255,
            256,
            1000,
            65_536 + 17,
        ] {
            for lanes in 1..=LANES {
                let messages: Vec<Vec<u8>> = (0..lanes).map(|l| message(l, len)).collect();
                let want: Vec<[u8; 64]> =
                    messages.iter().map(|m| Sha512::digest(m).into()).collect();
                for step in [1, 7, 128, 300, usize::MAX] {
                    if step == 1 && len > 1000 {
                        continue;
                    }
                    let mut hasher = Sha512Lanes::new(lanes);
                    digests(&mut hasher, &messages, step.min(len.max(1)));
                    assert_eq!(
                        hasher.finalize(),
                        want,
                        "len {len}, {lanes} lanes, step {step}"
                    );
                }
            }
        }
    }

    /// A known answer: FIPS 180-2's "abc" in every lane.
    #[test]
    fn abc_in_every_lane() {
        let mut hasher = Sha512Lanes::new(LANES);
        hasher.update(&[b"abc".as_slice(); LANES]);
        let want = "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
                    2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f";
        for d in hasher.finalize() {
            let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, want);
        }
    }

    /// Where the CPU has AVX-512, two or more lanes go side by side (so the test above checked
    /// the wide path, not `sha2` twice).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn lanes_go_wide_where_the_cpu_can() {
        assert_eq!(Sha512Lanes::new(2).is_wide(), wide_supported());
        assert!(!Sha512Lanes::new(1).is_wide());
        assert!(!Sha512Lanes::scalar(8).is_wide());
    }
}
