//! `get_speech_timestamps` of silero-vad 6.2.3 (`silero_vad/utils_vad.py`,
//! `get_speech_timestamps_from_probs`), transcribed so that it consumes the probabilities one
//! window at a time: memory is flat however long the audio, and a segment comes out as soon as
//! the next one starts (its end padding depends on the gap to the next).
//!
//! What a port must keep to give the same samples:
//! - probabilities are Python floats: thresholds are compared in f64 (`prob as f64 >= t`);
//! - every duration is a float of samples (`sr * ms / 1000`), compared with integer samples;
//! - `temp_end`, `prev_end` and `next_start` use 0 for "none", as Python's truthiness does;
//! - the longest silence of a segment that reached `max_speech` is the first of ties
//!   (`max(possible_ends, key=...)`), kept as a running best instead of a list;
//! - no `continue` after a max-speech cut (but one after the aggressive cut without a
//!   silence): the same window goes on to the silence check;
//! - padding splits gaps shorter than 2 · pad at `gap // 2` (floor) and truncates with `int()`;
//! - positions are samples of the (decimated) audio, multiplied back by the decimation step.

use serde::{Deserialize, Serialize};

use crate::error::ModelError;

/// The parameters of `get_speech_timestamps`, with its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VadParams {
    /// Speech when the probability is at least this.
    pub threshold: f64,
    /// Silence (while in speech) when the probability is below this; `None`:
    /// `max(threshold - 0.15, 0.01)`.
    pub neg_threshold: Option<f64>,
    /// Speech shorter than this (strictly: a segment must be longer) is dropped.
    pub min_speech_duration_ms: f64,
    /// Speech longer than this is cut (infinite: never).
    pub max_speech_duration_s: f64,
    /// Silence this long ends a segment.
    pub min_silence_duration_ms: f64,
    /// Padding added to each side of a segment.
    pub speech_pad_ms: f64,
    /// Silences longer than this are the candidates where a too-long segment is cut.
    pub min_silence_at_max_speech_ms: f64,
    /// Cut a too-long segment at its longest silence (else at its last one).
    pub use_max_poss_sil_at_max_speech: bool,
}

impl Default for VadParams {
    fn default() -> Self {
        VadParams {
            threshold: 0.5,
            neg_threshold: None,
            min_speech_duration_ms: 250.0,
            max_speech_duration_s: f64::INFINITY,
            min_silence_duration_ms: 100.0,
            speech_pad_ms: 30.0,
            min_silence_at_max_speech_ms: 98.0,
            use_max_poss_sil_at_max_speech: true,
        }
    }
}

impl VadParams {
    /// The negative threshold in use.
    pub fn neg_threshold(&self) -> f64 {
        self.neg_threshold
            .unwrap_or_else(|| (self.threshold - 0.15).max(0.01))
    }

    /// Refuses NaN, negative durations and thresholds outside [0, 1].
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |what: &str, v: f64| Err(ModelError::Invalid(format!("{what} is {v}")));
        for (name, v) in [
            ("threshold", self.threshold),
            ("neg_threshold", self.neg_threshold()),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(&format!("{name} must be within [0, 1], but it"), v);
            }
        }
        for (name, v) in [
            ("min_speech_duration_ms", self.min_speech_duration_ms),
            ("min_silence_duration_ms", self.min_silence_duration_ms),
            ("speech_pad_ms", self.speech_pad_ms),
            (
                "min_silence_at_max_speech_ms",
                self.min_silence_at_max_speech_ms,
            ),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(&format!("{name} must be finite and >= 0, but it"), v);
            }
        }
        let max = self.max_speech_duration_s;
        if max.is_nan() || max <= 0.0 {
            return bad(
                "max_speech_duration_s must be > 0 (inf: no limit), but it",
                max,
            );
        }
        Ok(())
    }
}

/// A speech segment: samples `start..end` of the audio at the rate it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
}

/// The state machine of `get_speech_timestamps_from_probs`, fed one probability per window.
#[derive(Debug, Clone)]
pub struct SpeechTimestamps {
    window: i64,
    step: u64,
    threshold: f64,
    neg_threshold: f64,
    min_speech: f64,
    pad: f64,
    max_speech: f64,
    min_silence: f64,
    min_silence_at_max: f64,
    use_max_poss: bool,
    // The loop's state, named as in Python.
    index: i64,
    triggered: bool,
    current_start: Option<i64>,
    temp_end: i64,
    prev_end: i64,
    next_start: i64,
    /// The first longest of `possible_ends` (end, silence).
    longest_end: Option<(i64, i64)>,
    // Padding: the last segment not yet written (its end depends on the next one, until the
    // next can no longer start within two pads of it).
    pending: Option<(i64, i64)>,
}

impl SpeechTimestamps {
    /// For probabilities of `sampling_rate` audio (8000 or 16000) that was decimated by `step`
    /// (1, or `rate / 16000` for multiples of 16 kHz).
    pub fn new(params: &VadParams, sampling_rate: u32, step: u32) -> Result<Self, ModelError> {
        params.validate()?;
        let sr = match sampling_rate {
            8000 | 16000 => f64::from(sampling_rate),
            r => {
                return Err(ModelError::Invalid(format!(
                    "Silero VAD runs at 8000 or 16000 Hz, not {r}"
                )))
            }
        };
        let window = if sampling_rate == 16000 { 512 } else { 256 };
        let pad = sr * params.speech_pad_ms / 1000.0;
        Ok(SpeechTimestamps {
            window,
            step: u64::from(step.max(1)),
            threshold: params.threshold,
            neg_threshold: params.neg_threshold(),
            min_speech: sr * params.min_speech_duration_ms / 1000.0,
            pad,
            max_speech: sr * params.max_speech_duration_s - window as f64 - 2.0 * pad,
            min_silence: sr * params.min_silence_duration_ms / 1000.0,
            min_silence_at_max: sr * params.min_silence_at_max_speech_ms / 1000.0,
            use_max_poss: params.use_max_poss_sil_at_max_speech,
            index: 0,
            triggered: false,
            current_start: None,
            temp_end: 0,
            prev_end: 0,
            next_start: 0,
            longest_end: None,
            pending: None,
        })
    }

    /// Samples per window (512 at 16 kHz, 256 at 8 kHz).
    pub fn window(&self) -> usize {
        self.window as usize
    }

    /// The earliest sample (of the given audio, before decimation) that a segment not yet
    /// written can start at: a caller that keeps audio for the segments may drop what is before.
    pub fn earliest_open_sample(&self) -> u64 {
        let now = self.index * self.window;
        let mut earliest = (now as f64 - self.pad).max(0.0) as i64;
        if let Some(s) = self.current_start {
            earliest = earliest.min((s as f64 - self.pad).max(0.0) as i64);
        }
        if let Some((s, _)) = self.pending {
            earliest = earliest.min(s);
        }
        earliest as u64 * self.step
    }

    /// The loop body for the next window's probability; appends the segments it completes.
    pub fn push(&mut self, speech_prob: f32, out: &mut Vec<Segment>) {
        self.step(speech_prob, out);
        self.settle(out);
    }

    /// Writes the pending segment as soon as its padded end is decided: once the next segment
    /// cannot start within two pads of its end (it starts at `current_start` if speech is under
    /// way, else at a window not yet seen), Python's padding gives it `end + pad`, whatever
    /// comes later. Without this a segment followed by an hour of silence would hold the
    /// hour's audio for its caller ([`earliest_open_sample`](Self::earliest_open_sample)).
    fn settle(&mut self, out: &mut Vec<Segment>) {
        let Some((start, end)) = self.pending else {
            return;
        };
        // Without speech under way, the next segment starts at a window not yet seen; the
        // last window seen may be the zero-padded end of the audio, so count it as one sample
        // (then `end + pad` stays within the audio, as Python's `min(len, end + pad)` keeps it).
        let next_start = self
            .current_start
            .unwrap_or((self.index - 1).max(0) * self.window + 1);
        if ((next_start - end) as f64) >= 2.0 * self.pad {
            self.pending = None;
            self.emit(start, (end as f64 + self.pad) as i64, out);
        }
    }

    fn step(&mut self, speech_prob: f32, out: &mut Vec<Segment>) {
        let p = f64::from(speech_prob);
        let cur_sample = self.window * self.index;
        self.index += 1;

        // Speech returns after a temp_end: a candidate silence if long enough.
        if p >= self.threshold && self.temp_end != 0 {
            let sil_dur = cur_sample - self.temp_end;
            if sil_dur as f64 > self.min_silence_at_max {
                // max() keeps the first of equal silences.
                if self.longest_end.is_none_or(|(_, d)| sil_dur > d) {
                    self.longest_end = Some((self.temp_end, sil_dur));
                }
            }
            self.temp_end = 0;
            if self.next_start < self.prev_end {
                self.next_start = cur_sample;
            }
        }

        // Start of speech.
        if p >= self.threshold && !self.triggered {
            self.triggered = true;
            self.current_start = Some(cur_sample);
            return;
        }

        // Max speech length reached: decide where to cut.
        if let (true, Some(start)) = (self.triggered, self.current_start) {
            if (cur_sample - start) as f64 > self.max_speech {
                match (self.use_max_poss, self.longest_end) {
                    (true, Some((end, dur))) => {
                        self.prev_end = end;
                        self.raw_segment(start, end, out);
                        self.current_start = None;
                        self.next_start = self.prev_end + dur;
                        if self.next_start < self.prev_end + cur_sample {
                            self.current_start = Some(self.next_start);
                        } else {
                            self.triggered = false;
                        }
                        self.clear_candidates();
                    }
                    _ if self.prev_end != 0 => {
                        self.raw_segment(start, self.prev_end, out);
                        self.current_start = None;
                        if self.next_start < self.prev_end {
                            self.triggered = false;
                        } else {
                            self.current_start = Some(self.next_start);
                        }
                        self.clear_candidates();
                    }
                    _ => {
                        // No silence to cut at: cut here, and this is the one `continue`.
                        self.raw_segment(start, cur_sample, out);
                        self.current_start = None;
                        self.clear_candidates();
                        self.triggered = false;
                        return;
                    }
                }
            }
        }

        // Silence while in speech.
        if p < self.neg_threshold && self.triggered {
            if self.temp_end == 0 {
                self.temp_end = cur_sample;
            }
            let sil_dur_now = cur_sample - self.temp_end;
            if !self.use_max_poss && sil_dur_now as f64 > self.min_silence_at_max {
                self.prev_end = self.temp_end;
            }
            if (sil_dur_now as f64) < self.min_silence {
                return;
            }
            let end = self.temp_end;
            if let Some(start) = self.current_start.take() {
                if (end - start) as f64 > self.min_speech {
                    self.raw_segment(start, end, out);
                }
            }
            self.clear_candidates();
            self.triggered = false;
        }
    }

    /// `prev_end = next_start = temp_end = 0; possible_ends = []`.
    fn clear_candidates(&mut self) {
        self.prev_end = 0;
        self.next_start = 0;
        self.temp_end = 0;
        self.longest_end = None;
    }

    /// Ends the audio, `audio_length_samples` long (after decimation); appends the last
    /// segments and resets for the next file.
    pub fn finish(&mut self, audio_length_samples: u64, out: &mut Vec<Segment>) {
        let len = audio_length_samples as i64;
        if let Some(start) = self.current_start.take() {
            if (len - start) as f64 > self.min_speech {
                self.raw_segment(start, len, out);
            }
        }
        if let Some((start, end)) = self.pending.take() {
            let end = (end as f64 + self.pad).min(len as f64) as i64;
            self.emit(start, end, out);
        }
        self.reset();
    }

    /// Forgets the stream so far (what `finish` does last), for a new one.
    pub fn reset(&mut self) {
        self.index = 0;
        self.triggered = false;
        self.current_start = None;
        self.pending = None;
        self.clear_candidates();
    }

    /// A segment of the unpadded list (`speeches.append`): pads the one before it, which is
    /// now final, and keeps this one until the next.
    fn raw_segment(&mut self, start: i64, end: i64, out: &mut Vec<Segment>) {
        let mut start = start;
        match self.pending.take() {
            // The first segment, or one more than two pads after the one before (written by
            // `settle`): `int(max(0, start - pad))`.
            None => start = (start as f64 - self.pad).max(0.0) as i64,
            Some((prev_start, mut prev_end)) => {
                let silence = start - prev_end;
                if (silence as f64) < 2.0 * self.pad {
                    let half = silence.div_euclid(2);
                    prev_end += half;
                    start = (start - half).max(0);
                } else {
                    // min(audio_length, end + pad) never takes the length here: the next
                    // segment starts before the end of the audio, more than 2 pads later.
                    prev_end = (prev_end as f64 + self.pad) as i64;
                    start = (start as f64 - self.pad).max(0.0) as i64;
                }
                self.emit(prev_start, prev_end, out);
            }
        }
        self.pending = Some((start, end));
    }

    fn emit(&mut self, start: i64, end: i64, out: &mut Vec<Segment>) {
        out.push(Segment {
            start: start as u64 * self.step,
            end: end as u64 * self.step,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(params: &VadParams, probs: &[f32], len: u64) -> Vec<(u64, u64)> {
        let mut m = SpeechTimestamps::new(params, 16000, 1).unwrap();
        let mut out = Vec::new();
        for &p in probs {
            m.push(p, &mut out);
        }
        m.finish(len, &mut out);
        out.iter().map(|s| (s.start, s.end)).collect()
    }

    /// Worked by hand from utils_vad.py: speech at windows 2..=10, silence after.
    #[test]
    fn one_segment_is_padded_on_both_sides() {
        let mut probs = vec![0.0f32; 20];
        for p in &mut probs[2..=10] {
            *p = 0.9;
        }
        // Silence from window 11 (temp_end 5632); 100 ms = 1600 samples are reached at window
        // 15 (7680 - 5632 = 2048 >= 1600): end 5632, start 1024; padded by 480.
        assert_eq!(
            run(&VadParams::default(), &probs, 20 * 512),
            vec![(544, 6112)]
        );
    }

    /// A segment followed by silence is written as soon as no next segment can reach its
    /// padding (as padded at the end), and the audio it kept is let go: a caller holding audio
    /// from `earliest_open_sample` holds a window or two of the silence, not all of it.
    #[test]
    fn a_segment_is_written_once_the_silence_after_it_is_two_pads_long() {
        let mut m = SpeechTimestamps::new(&VadParams::default(), 16000, 1).unwrap();
        let mut out = Vec::new();
        for k in 0..10_000 {
            m.push(if (2..=10).contains(&k) { 0.9 } else { 0.0 }, &mut out);
            if k == 20 {
                // The segment of `one_segment_is_padded_on_both_sides`, already out.
                assert_eq!(as_pairs(&out), vec![(544, 6112)]);
            }
        }
        assert!(m.earliest_open_sample() >= 10_000 * 512 - 2 * 512);
        m.finish(10_000 * 512, &mut out);
        assert_eq!(as_pairs(&out), vec![(544, 6112)]);
    }

    fn as_pairs(s: &[Segment]) -> Vec<(u64, u64)> {
        s.iter().map(|s| (s.start, s.end)).collect()
    }

    /// The threshold compares the probability widened to f64 with a f64 threshold: an f32
    /// that prints as 0.5 but is 0.5 exactly counts; one ulp below does not.
    #[test]
    fn thresholds_compare_in_f64() {
        let below = f32::from_bits(0.5f32.to_bits() - 1);
        let mut probs = vec![0.5f32; 40];
        probs.extend(vec![0.0; 10]);
        assert_eq!(run(&VadParams::default(), &probs, 50 * 512).len(), 1);
        let probs: Vec<f32> = probs
            .iter()
            .map(|&p| if p == 0.5 { below } else { p })
            .collect();
        assert!(run(&VadParams::default(), &probs, 50 * 512).is_empty());
        // neg_threshold = max(0.5 - 0.15, 0.01) in f64 is the double nearest 0.35; 0.35f32
        // widened is 0.3499999940395355, below it: silence, where an f32 compare says equal.
        let p = VadParams::default();
        assert_eq!(p.neg_threshold(), 0.5 - 0.15);
        assert!(f64::from(0.35f32) < p.neg_threshold());
    }

    /// Two segments whose gap is shorter than two pads share it at gap // 2.
    #[test]
    fn a_short_gap_is_split_at_its_floor_half() {
        let params = VadParams {
            min_silence_duration_ms: 50.0,
            speech_pad_ms: 40.0, // 640 samples: gaps under 1280 are split
            ..Default::default()
        };
        let mut probs = vec![0.0f32; 40];
        for i in (1..10).chain(12..30) {
            probs[i] = 0.9;
        }
        // A 2-window gap (1024 samples) is shorter than 50 ms of silence: one segment.
        let out = run(&params, &probs, 40 * 512);
        assert_eq!(
            out.len(),
            1,
            "{out:?}: a 2-window gap under min_silence joins them"
        );
        let params = VadParams {
            min_silence_duration_ms: 30.0, // 480: one window of silence (512) ends speech
            ..params
        };
        let out = run(&params, &probs, 40 * 512);
        // Raw: (512, 5120) and (6144, 15360); gap 1024 < 1280: 5120 + 512, 6144 - 512.
        assert_eq!(out, vec![(0, 5632), (5632, 16000)]);
    }

    /// With max_speech, a long segment is cut at its longest silence, the first of equal
    /// ones, and the rest goes on as speech.
    #[test]
    fn max_speech_cuts_at_the_first_longest_silence() {
        let params = VadParams {
            max_speech_duration_s: 1.0,
            min_silence_duration_ms: 300.0,
            min_silence_at_max_speech_ms: 50.0,
            speech_pad_ms: 0.0,
            ..Default::default()
        };
        // Speech with two 2-window silences (windows 5-6 and 12-13) and a 1-window one (20).
        let mut probs = vec![0.9f32; 60];
        for i in [5, 6, 12, 13, 20] {
            probs[i] = 0.0;
        }
        probs.extend(vec![0.0; 20]);
        let out = run(&params, &probs, 80 * 512);
        // max_speech = 16000 - 512 = 15488: reached at window 31 (15872 > 15488) with
        // candidates (2560, 1024), (6144, 1024), (10240, 512): the first longest is 2560.
        assert_eq!(out[0], (0, 2560));
        assert_eq!(out[1].0, 2560 + 1024);
    }

    #[test]
    fn decimated_positions_are_multiplied_back() {
        let mut m = SpeechTimestamps::new(&VadParams::default(), 16000, 3).unwrap();
        let mut out = Vec::new();
        for i in 0..30 {
            m.push(if (2..=12).contains(&i) { 0.9 } else { 0.0 }, &mut out);
        }
        m.finish(30 * 512, &mut out);
        assert_eq!(
            out,
            vec![Segment {
                start: 544 * 3,
                end: 7136 * 3
            }]
        );
    }

    #[test]
    fn bad_parameters_are_refused() {
        for p in [
            VadParams {
                threshold: f64::NAN,
                ..Default::default()
            },
            VadParams {
                threshold: 1.5,
                ..Default::default()
            },
            VadParams {
                speech_pad_ms: -1.0,
                ..Default::default()
            },
            VadParams {
                max_speech_duration_s: 0.0,
                ..Default::default()
            },
        ] {
            assert!(p.validate().is_err(), "{p:?}");
        }
        assert!(SpeechTimestamps::new(&VadParams::default(), 44100, 1).is_err());
    }
}
