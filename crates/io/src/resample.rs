//! Streaming resampling with rubato's FFT resampler.
//!
//! Quality: rubato's `FftFixedIn` multiplies the spectrum by a BlackmanHarris2-windowed sinc
//! as long as its FFT (here at least [`MIN_FFT_INPUT`] input samples), cut off just below the
//! lower Nyquist. The `tests/resample.rs` suite measures it: tones up to 0.9 × the output
//! Nyquist come through within 0.01 dB with distortion below −100 dB, and tones above the
//! output Nyquist are attenuated by more than 100 dB. The output is aligned (the filter's
//! delay is removed) and has `ceil(n · out / in)` samples, as librosa/soxr produce.

use rubato::{FftFixedIn, Resampler};

/// Input chunk of the FFT resampler: longer means a sharper filter and fewer calls.
const MIN_FFT_INPUT: usize = 4096;

/// Input length of one FFT: a whole number of the ratio's periods, at least `MIN_FFT_INPUT`,
/// chosen so that both FFTs have even length. The filter delays by half the output FFT; an
/// odd length of either would put the output half a sample off the grid (of the input's, for
/// the input's: 17.6 kHz → 16 kHz, speed perturbation's 1.1, took 4,103 samples an FFT and
/// came out 0.45 samples late), which no trimming fixes. The number of periods has no prime factor over 13, so that the FFTs' lengths have none but
/// the ratio's own: rustfft computes a length with a large prime factor by Rader's algorithm,
/// several times slower (48 kHz → 16 kHz took 4,098 = 2 · 3 · 683 samples an FFT, and resampled
/// 570 s of audio a second against 44.1 kHz's 4,700).
fn fft_input_len(rate_in: u32, rate_out: u32) -> usize {
    let (mut a, mut b) = (rate_in as usize, rate_out as usize);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    let (per_in, per_out) = (rate_in as usize / a, rate_out as usize / a);
    let mut periods = MIN_FFT_INPUT.div_ceil(per_in);
    while periods * per_out % 2 == 1 || periods * per_in % 2 == 1 || !smooth(periods) {
        periods += 1;
    }
    periods * per_in
}

/// Whether `n` has no prime factor over 13.
fn smooth(mut n: usize) -> bool {
    for p in [2, 3, 5, 7, 11, 13] {
        while n.is_multiple_of(p) {
            n /= p;
        }
    }
    n == 1
}

/// A mono resampler that takes chunks of any length.
pub struct StreamResampler {
    inner: Option<FftFixedIn<f32>>,
    rate_in: u32,
    rate_out: u32,
    pending: Vec<f32>,
    input: Vec<Vec<f32>>,
    output: Vec<Vec<f32>>,
    delay_left: usize,
    consumed: u64,
    produced: u64,
}

impl StreamResampler {
    /// `Err` carries rubato's reason (e.g. a zero rate).
    pub fn new(rate_in: u32, rate_out: u32) -> Result<Self, String> {
        let inner = if rate_in == rate_out {
            None
        } else {
            Some(
                FftFixedIn::<f32>::new(
                    rate_in as usize,
                    rate_out as usize,
                    fft_input_len(rate_in, rate_out),
                    1,
                    1,
                )
                .map_err(|e| e.to_string())?,
            )
        };
        let (input, output, delay_left) = match &inner {
            Some(r) => (
                r.input_buffer_allocate(false),
                r.output_buffer_allocate(true),
                r.output_delay(),
            ),
            None => (Vec::new(), Vec::new(), 0),
        };
        Ok(StreamResampler {
            inner,
            rate_in,
            rate_out,
            pending: Vec::new(),
            input,
            output,
            delay_left,
            consumed: 0,
            produced: 0,
        })
    }

    /// Ready for a new stream, as made (the filter kept: making it is most of the cost of a
    /// short stream).
    pub fn reset(&mut self) {
        if let Some(r) = &mut self.inner {
            r.reset();
            self.delay_left = r.output_delay();
        }
        self.pending.clear();
        self.consumed = 0;
        self.produced = 0;
    }

    pub fn is_passthrough(&self) -> bool {
        self.inner.is_none()
    }

    /// Output samples owed for the input seen so far: `ceil(n · out / in)`.
    fn target_len(&self) -> u64 {
        (self.consumed * u64::from(self.rate_out)).div_ceil(u64::from(self.rate_in))
    }

    /// Resamples `samples` and appends what is ready to `out`.
    pub fn process(&mut self, samples: &[f32], out: &mut Vec<f32>) {
        self.consumed += samples.len() as u64;
        let Some(r) = &mut self.inner else {
            out.extend_from_slice(samples);
            self.produced += samples.len() as u64;
            return;
        };
        self.pending.extend_from_slice(samples);
        let mut used = 0;
        while self.pending.len() - used >= r.input_frames_next() {
            let n = r.input_frames_next();
            self.input[0].clear();
            self.input[0].extend_from_slice(&self.pending[used..used + n]);
            let (_, written) = r
                .process_into_buffer(&self.input, &mut self.output, None)
                .expect("buffers come from the resampler itself");
            used += n;
            Self::emit(
                &self.output[0][..written],
                &mut self.delay_left,
                &mut self.produced,
                u64::MAX,
                out,
            );
        }
        self.pending.drain(..used);
    }

    /// Flushes the tail (zero-padded through the filter) and appends the last samples.
    pub fn finish(&mut self, out: &mut Vec<f32>) {
        let target = self.target_len();
        let Some(r) = &mut self.inner else {
            return;
        };
        let mut rest = std::mem::take(&mut self.pending);
        while self.produced < target {
            // rubato rejects an empty slice here; `None` means "zeros only".
            let input = [std::mem::take(&mut rest)];
            let input = (!input[0].is_empty()).then_some(&input[..]);
            let (_, written) = r
                .process_partial_into_buffer(input, &mut self.output, None)
                .expect("buffers come from the resampler itself");
            Self::emit(
                &self.output[0][..written],
                &mut self.delay_left,
                &mut self.produced,
                target,
                out,
            );
        }
    }

    fn emit(
        chunk: &[f32],
        delay_left: &mut usize,
        produced: &mut u64,
        cap: u64,
        out: &mut Vec<f32>,
    ) {
        let skip = (*delay_left).min(chunk.len());
        *delay_left -= skip;
        let room = cap.saturating_sub(*produced) as usize;
        let take = (chunk.len() - skip).min(room);
        out.extend_from_slice(&chunk[skip..skip + take]);
        *produced += take as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every FFT length of the rates a corpus and the speed perturbation bring has no prime
    /// factor over 13 (nor does the ratio's), the input one at least `MIN_FFT_INPUT`, both
    /// even; where the nearest whole number of periods was smooth already (44.1
    /// kHz and 8 kHz to 16 kHz), the length is the one it always was.
    #[test]
    fn fft_lengths_are_smooth_long_enough_and_even() {
        for (from, to, before) in [
            (44_100, 16_000, Some(4410)),
            (8_000, 16_000, Some(4096)),
            (22_050, 16_000, Some(4410)),
            (48_000, 16_000, None),
            (14_400, 16_000, None),
            (17_600, 16_000, None),
            (16_000, 22_050, None),
            (32_000, 16_000, Some(4096)),
        ] {
            let n_in = fft_input_len(from, to);
            let n_out = n_in * to as usize / from as usize;
            assert_eq!(n_out * from as usize, n_in * to as usize, "{from} -> {to}");
            assert!(
                n_in >= MIN_FFT_INPUT && n_in.is_multiple_of(2) && n_out.is_multiple_of(2),
                "{from} -> {to}: {n_in}"
            );
            assert!(
                smooth(n_in) && smooth(n_out),
                "{from} -> {to}: {n_in} / {n_out}"
            );
            if let Some(before) = before {
                assert_eq!(n_in, before, "{from} -> {to}");
            }
        }
        assert!(!smooth(4098) && smooth(4116) && !smooth(4103));
    }
}
