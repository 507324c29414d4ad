//! Voice activity: Silero VAD and `get_speech_timestamps`, as a stream.
//!
//! [`VadSegmenter`] takes the samples of one file in chunks of any size and yields its speech
//! segments as they are decided. It holds one window of audio and a few counters whatever the
//! length of the file: the probabilities are computed window by window and consumed by the
//! timestamp state machine at once, never kept.
//!
//! Rates: 16 kHz and 8 kHz audio go to the model as they are; a multiple of 16 kHz is
//! decimated by `x[::step]` as silero-vad does (no filter: that is what its reference does);
//! any other rate must be resampled to 16 kHz by the caller ([`VadSegmenter::model_rate`]
//! says which). Segments are in samples of the audio as given.

mod silero;
mod timestamps;

pub use silero::{SileroVad, SILERO_VAD_ONNX};
pub use timestamps::{Segment, SpeechTimestamps, VadParams};

use crate::error::ModelError;
use crate::runtime::Runtime;

/// Speech segments of a stream of samples.
pub struct VadSegmenter {
    model: SileroVad,
    machine: SpeechTimestamps,
    input_rate: u32,
    step: u64,
    /// Samples given so far (at the input rate).
    seen: u64,
    /// Samples after decimation so far.
    decimated: u64,
    /// Decimated samples not yet a whole window.
    window: Vec<f32>,
}

impl VadSegmenter {
    /// The rate the model runs at for audio at `input_rate` and the decimation step, or `None`
    /// when the audio must be resampled to 16 kHz first.
    pub fn model_rate(input_rate: u32) -> Option<(u32, u32)> {
        match input_rate {
            8000 => Some((8000, 1)),
            r if r > 0 && r % 16000 == 0 => Some((16000, r / 16000)),
            _ => None,
        }
    }

    pub fn new(rt: &Runtime, params: &VadParams, input_rate: u32) -> Result<Self, ModelError> {
        let (rate, step) = Self::model_rate(input_rate).ok_or_else(|| {
            ModelError::Invalid(format!(
                "Silero VAD takes 8000 Hz or a multiple of 16000 Hz, not {input_rate} Hz: resample to 16000 Hz first"
            ))
        })?;
        let machine = SpeechTimestamps::new(params, rate, step)?;
        let model = SileroVad::new(rt, rate)?;
        Ok(VadSegmenter {
            window: Vec::with_capacity(model.window()),
            model,
            machine,
            input_rate,
            step: u64::from(step),
            seen: 0,
            decimated: 0,
        })
    }

    /// The rate of the samples it takes.
    pub fn input_rate(&self) -> u32 {
        self.input_rate
    }

    /// Samples given since the stream began.
    pub fn samples_seen(&self) -> u64 {
        self.seen
    }

    /// The earliest sample a segment not yet given out can start at (see
    /// [`SpeechTimestamps::earliest_open_sample`]).
    pub fn earliest_open_sample(&self) -> u64 {
        self.machine.earliest_open_sample()
    }

    /// Takes the next samples; appends the segments they complete to `out`.
    pub fn push(&mut self, samples: &[f32], out: &mut Vec<Segment>) -> Result<(), ModelError> {
        self.push_inspect(samples, out, &mut |_| {})
    }

    /// [`push`](Self::push), handing each window's probability to `on_prob` as well.
    pub fn push_inspect(
        &mut self,
        samples: &[f32],
        out: &mut Vec<Segment>,
        on_prob: &mut dyn FnMut(f32),
    ) -> Result<(), ModelError> {
        let window = self.model.window();
        for (i, &x) in samples.iter().enumerate() {
            let index = self.seen + i as u64;
            if !x.is_finite() {
                return Err(ModelError::Invalid(format!(
                    "sample {index} is {x} (NaN or infinite)"
                )));
            }
            // `audio[::step]`: the samples whose index is a multiple of the step.
            if !index.is_multiple_of(self.step) {
                continue;
            }
            self.window.push(x);
            self.decimated += 1;
            if self.window.len() == window {
                let p = self.model.probability(&self.window)?;
                on_prob(p);
                self.machine.push(p, out);
                self.window.clear();
            }
        }
        self.seen += samples.len() as u64;
        Ok(())
    }

    /// Ends the stream: the last window zero-padded, the last segments appended to `out`; the
    /// segmenter is ready for the next stream (state, context and counters reset).
    pub fn finish(&mut self, out: &mut Vec<Segment>) -> Result<(), ModelError> {
        self.finish_inspect(out, &mut |_| {})
    }

    /// [`finish`](Self::finish), handing the last probability to `on_prob` as well.
    pub fn finish_inspect(
        &mut self,
        out: &mut Vec<Segment>,
        on_prob: &mut dyn FnMut(f32),
    ) -> Result<(), ModelError> {
        if !self.window.is_empty() {
            self.window.resize(self.model.window(), 0.0);
            let p = self.model.probability(&self.window)?;
            on_prob(p);
            self.machine.push(p, out);
            self.window.clear();
        }
        self.machine.finish(self.decimated, out);
        self.reset();
        Ok(())
    }

    /// Forgets the stream so far (state, context, counters, the partial window), so that a
    /// segmenter left mid-stream by an error can take a new one; `finish` does it too.
    pub fn reset(&mut self) {
        self.machine.reset();
        self.model.reset();
        self.window.clear();
        self.seen = 0;
        self.decimated = 0;
    }
}
