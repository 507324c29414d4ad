//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
//! counter-based generator of Random123, cuRAND and JAX: a keyed bijection of a 128-bit counter.
//! Nothing is sequential, so any draw can be computed on its own, on any thread or device.
//!
//! sonograph keys it with the dataset seed and lays the counter out as
//! `[counter, stream, sample index low word, sample index high word]`: every draw depends only
//! on (seed, sample index, stream, counter), never on how samples were split over workers,
//! shards, runs or devices. kernels/rf_synth.wgsl in sonograph-gpu transcribes the same rounds.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// One Philox4x32 round: two 32x32→64 multiplies, xors with the key.
#[inline(always)]
fn round(c: [u32; 4], k: [u32; 2]) -> [u32; 4] {
    let p0 = u64::from(M0) * u64::from(c[0]);
    let p1 = u64::from(M1) * u64::from(c[2]);
    [
        (p1 >> 32) as u32 ^ c[1] ^ k[0],
        p1 as u32,
        (p0 >> 32) as u32 ^ c[3] ^ k[1],
        p0 as u32,
    ]
}

/// Philox4x32 with 10 rounds: four random words for `counter` under `key`.
#[inline(always)]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        c = round(c, k);
    }
    c
}

/// What a draw is for. Each stream is its own counter space, so adding draws to one stream
/// never moves another's: the noise of a sample is the same whatever its symbols, impairments
/// or modulation draw. The numbers are part of the dataset format (docs/rf.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Stream {
    /// Per-sample parameters: modulation, SNR, every impairment, each at a fixed slot.
    Params = 0,
    /// Symbols and bits (also OFDM subcarrier symbols).
    Symbols = 1,
    /// AWGN: word `2n` is the in-phase deviate of sample `n`, word `2n + 1` its quadrature.
    Noise = 2,
    /// Phase-noise increments.
    PhaseNoise = 3,
    /// Fading oscillators (Doppler frequencies and phases).
    Fading = 4,
    /// Multipath delays and gains.
    Multipath = 5,
    /// Message signals of the analogue modulations.
    Message = 6,
}

/// The draws of one (seed, sample index, stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rng {
    key: [u32; 2],
    stream: u32,
    sample: [u32; 2],
}

impl Rng {
    pub fn new(seed: u64, sample: u64, stream: Stream) -> Self {
        Rng {
            key: [seed as u32, (seed >> 32) as u32],
            stream: stream as u32,
            sample: [sample as u32, (sample >> 32) as u32],
        }
    }

    /// The four words of block `counter`.
    #[inline(always)]
    pub fn block(&self, counter: u32) -> [u32; 4] {
        philox4x32_10(
            [counter, self.stream, self.sample[0], self.sample[1]],
            self.key,
        )
    }

    /// Word `i` of the stream (block `i / 4`, lane `i % 4`); `i < 2^34`.
    #[inline]
    pub fn word(&self, i: u64) -> u32 {
        self.block((i >> 2) as u32)[(i & 3) as usize]
    }

    /// A uniform on (0, 1) from word `i`: `(w + 0.5) / 2^32`, never 0 or 1.
    #[inline]
    pub fn uniform(&self, i: u64) -> f64 {
        (f64::from(self.word(i)) + 0.5) / 4_294_967_296.0
    }

    /// Words `start..start + out.len()`, blocks computed sixteen (AVX-512) or eight at a time
    /// so that the rounds vectorise.
    pub fn fill_words(&self, start: u64, out: &mut [u32]) {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::has_avx512() {
            return fill_words_with(self, start, out, |first| {
                // SAFETY: AVX-512F was detected just above.
                unsafe { crate::simd::blocks16(self.key, self.stream, self.sample, first) }
            });
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return fill_words_with(self, start, out, |first| {
                // SAFETY: AVX2 was detected just above.
                unsafe { crate::simd::blocks8(self.key, self.stream, self.sample, first) }
            });
        }
        fill_words_with(self, start, out, |first| blocks8(self, first))
    }

    /// [`Rng::fill_words`] without the vector paths (for tests of them against it).
    pub fn fill_words_scalar(&self, start: u64, out: &mut [u32]) {
        fill_words_with(self, start, out, |first| blocks8(self, first))
    }
}

/// Fills `out` with words from `start`, whole runs of `W / 4` blocks from `blocks`.
#[inline(always)]
fn fill_words_with<const W: usize>(
    rng: &Rng,
    start: u64,
    out: &mut [u32],
    blocks: impl Fn(u32) -> [u32; W],
) {
    let mut i = 0usize;
    // Leading words up to a block boundary.
    while i < out.len() && !(start + i as u64).is_multiple_of(4) {
        out[i] = rng.word(start + i as u64);
        i += 1;
    }
    let mut block = ((start + i as u64) >> 2) as u32;
    while out.len() - i >= W {
        out[i..i + W].copy_from_slice(&blocks(block));
        i += W;
        block = block.wrapping_add((W / 4) as u32);
    }
    while i < out.len() {
        out[i] = rng.word(start + i as u64);
        i += 1;
    }
}

/// Eight consecutive blocks of `rng` from `first`, as 32 words in order.
#[inline(always)]
fn blocks8(rng: &Rng, first: u32) -> [u32; 32] {
    // Structure of arrays: each round is the same operation on eight lanes.
    let mut c0 = [0u32; 8];
    let mut c1 = [rng.stream; 8];
    let mut c2 = [rng.sample[0]; 8];
    let mut c3 = [rng.sample[1]; 8];
    for (l, c) in c0.iter_mut().enumerate() {
        *c = first.wrapping_add(l as u32);
    }
    let mut k = rng.key;
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        for l in 0..8 {
            let p0 = u64::from(M0) * u64::from(c0[l]);
            let p1 = u64::from(M1) * u64::from(c2[l]);
            let n0 = (p1 >> 32) as u32 ^ c1[l] ^ k[0];
            let n2 = (p0 >> 32) as u32 ^ c3[l] ^ k[1];
            c1[l] = p1 as u32;
            c3[l] = p0 as u32;
            c0[l] = n0;
            c2[l] = n2;
        }
    }
    let mut out = [0u32; 32];
    for l in 0..8 {
        out[4 * l] = c0[l];
        out[4 * l + 1] = c1[l];
        out[4 * l + 2] = c2[l];
        out[4 * l + 3] = c3[l];
    }
    out
}

/// Sequential draws from one stream, for the CPU-side parts whose draw count is data
/// dependent (the position in the stream is still a pure function of what came before in the
/// same sample, so the sample stays reproducible).
#[derive(Debug, Clone)]
pub struct Draws {
    rng: Rng,
    next: u64,
}

impl Draws {
    pub fn new(rng: Rng) -> Self {
        Draws { rng, next: 0 }
    }

    pub fn word(&mut self) -> u32 {
        let w = self.rng.word(self.next);
        self.next += 1;
        w
    }

    /// Uniform on (0, 1).
    pub fn uniform(&mut self) -> f64 {
        (f64::from(self.word()) + 0.5) / 4_294_967_296.0
    }

    /// A standard normal deviate ([`crate::normal::deviate`]).
    pub fn normal(&mut self) -> f64 {
        f64::from(crate::normal::deviate(self.word()))
    }

    /// Uniform integer in `0..n` (`n > 0`), by Lemire's multiply-shift (bias under 2^-32 n).
    pub fn below(&mut self, n: u32) -> u32 {
        ((u64::from(self.word()) * u64::from(n)) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's tests/kat_vectors, the three `philox4x32 10` lines (counter, key, result).
    #[test]
    fn known_answers_of_random123() {
        let cases = [
            (
                [0u32; 4],
                [0u32; 2],
                [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
            ),
            (
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ];
        for (ctr, key, want) in cases {
            assert_eq!(philox4x32_10(ctr, key), want);
        }
    }

    #[test]
    fn simd_and_scalar_blocks_agree() {
        for (seed, sample, first) in [
            (0u64, 0u64, 0u32),
            (u64::MAX, u64::MAX, u32::MAX - 3),
            (7, 1 << 40, 12345),
        ] {
            let rng = Rng::new(seed, sample, Stream::Noise);
            let (mut a, mut b) = (vec![0u32; 1000], vec![0u32; 1000]);
            rng.fill_words(u64::from(first), &mut a);
            rng.fill_words_scalar(u64::from(first), &mut b);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn bulk_fill_equals_word_by_word_from_any_start() {
        let rng = Rng::new(0xdead_beef_0123_4567, 987_654_321_012, Stream::Noise);
        for start in [0u64, 1, 3, 4, 37, 1 << 33] {
            let mut bulk = vec![0u32; 301];
            rng.fill_words(start, &mut bulk);
            for (i, &w) in bulk.iter().enumerate() {
                assert_eq!(w, rng.word(start + i as u64), "start {start} word {i}");
            }
        }
    }

    #[test]
    fn seed_sample_and_stream_each_change_the_words() {
        let a = Rng::new(1, 2, Stream::Symbols);
        assert_ne!(a.block(0), Rng::new(2, 2, Stream::Symbols).block(0));
        assert_ne!(a.block(0), Rng::new(1, 3, Stream::Symbols).block(0));
        assert_ne!(a.block(0), Rng::new(1, 2, Stream::Noise).block(0));
        assert_ne!(a.block(0), Rng::new(1 << 40, 2, Stream::Symbols).block(0));
        assert_ne!(
            a.block(0),
            Rng::new(1, 2 | 1 << 40, Stream::Symbols).block(0)
        );
        // Uniforms are in (0, 1) and average 1/2.
        let mut d = Draws::new(a);
        let mean = (0..100_000).map(|_| d.uniform()).sum::<f64>() / 1e5;
        assert!((mean - 0.5).abs() < 0.005, "{mean}");
        let counts = (0..60_000).fold([0u32; 3], |mut c, _| {
            c[d.below(3) as usize] += 1;
            c
        });
        assert!(
            counts.iter().all(|&c| (c as i32 - 20_000).abs() < 600),
            "{counts:?}"
        );
    }
}
