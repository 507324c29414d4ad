//! The Silero VAD model (vendored from silero-vad 6.2.3) on onnxruntime, one window at a time,
//! as silero-vad's `OnnxWrapper` runs it: the input is the last `context` samples of the
//! previous window (zeros at first) followed by the window, the recurrent state goes from one
//! call to the next, both reset per file. One intra-op thread, as the wrapper sets: the model
//! is small enough that threads cost more than they give, and the CPU keeps its
//! probabilities those of the reference (a GPU or TF32 would shift them).

use std::path::Path;

use ort::session::Session;
use ort::value::TensorRef;

use crate::error::ModelError;
use crate::runtime::Runtime;

/// The vendored model (models/silero_vad/silero_vad.onnx), in the binary: one file to ship.
pub const SILERO_VAD_ONNX: &[u8] = include_bytes!("../../models/silero_vad/silero_vad.onnx");

const STATE_LEN: usize = 2 * 128;

/// Silero VAD on one stream of 8 or 16 kHz audio.
pub struct SileroVad {
    session: Session,
    rate: u32,
    window: usize,
    context: usize,
    /// `[context | window]`, the model's input.
    input: Vec<f32>,
    state: Vec<f32>,
}

impl SileroVad {
    /// The vendored model at `rate` (8000 or 16000).
    pub fn new(rt: &Runtime, rate: u32) -> Result<Self, ModelError> {
        let session = rt.session_from_memory(SILERO_VAD_ONNX, Path::new("silero_vad.onnx"), 1)?;
        Self::with_session(session, rate)
    }

    fn with_session(session: Session, rate: u32) -> Result<Self, ModelError> {
        let (window, context) = match rate {
            16000 => (512, 64),
            8000 => (256, 32),
            r => {
                return Err(ModelError::Invalid(format!(
                    "Silero VAD runs at 8000 or 16000 Hz, not {r}"
                )))
            }
        };
        Ok(SileroVad {
            session,
            rate,
            window,
            context,
            input: vec![0.0; context + window],
            state: vec![0.0; STATE_LEN],
        })
    }

    /// Samples per call: 512 at 16 kHz, 256 at 8 kHz.
    pub fn window(&self) -> usize {
        self.window
    }

    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// Zero state and context, for a new stream.
    pub fn reset(&mut self) {
        self.input.fill(0.0);
        self.state.fill(0.0);
    }

    /// The speech probability of the next `window()` samples.
    pub fn probability(&mut self, chunk: &[f32]) -> Result<f32, ModelError> {
        if chunk.len() != self.window {
            return Err(ModelError::Invalid(format!(
                "a Silero window at {} Hz is {} samples, not {}",
                self.rate,
                self.window,
                chunk.len()
            )));
        }
        self.input[self.context..].copy_from_slice(chunk);
        let err = |e: ort::Error| ModelError::Runtime(format!("silero_vad: {e}"));
        let sr = [i64::from(self.rate)];
        let outputs = self
            .session
            .run(ort::inputs![
                "input" => TensorRef::from_array_view(([1usize, self.input.len()], &self.input[..])).map_err(err)?,
                "state" => TensorRef::from_array_view(([2usize, 1, 128], &self.state[..])).map_err(err)?,
                "sr" => TensorRef::from_array_view(((), &sr[..])).map_err(err)?,
            ])
            .map_err(err)?;
        let (_, prob) = outputs["output"].try_extract_tensor::<f32>().map_err(err)?;
        let (_, state) = outputs["stateN"].try_extract_tensor::<f32>().map_err(err)?;
        let (Some(&prob), true) = (prob.first(), state.len() == STATE_LEN) else {
            return Err(ModelError::Runtime(format!(
                "silero_vad gave {} probabilities and {} state values (expected 1 and {STATE_LEN})",
                prob.len(),
                state.len()
            )));
        };
        self.state.copy_from_slice(state);
        // The next context: the last samples of this input (`x[..., -context_size:]`).
        let n = self.input.len();
        self.input.copy_within(n - self.context.., 0);
        Ok(prob)
    }
}
