//! NeMo Parakeet / FastConformer ASR exports in the layout onnx-asr 0.12.0 reads:
//!
//! - CTC: `model.onnx` (`audio_signal`, `length` → `logprobs`), `vocab.txt`;
//! - TDT and RNN-T: `encoder-model.onnx` (→ `outputs`, `encoded_lengths`) and
//!   `decoder_joint-model.onnx` (`encoder_outputs` [1, D, 1], `targets` [1, 1],
//!   `target_length` [1], `input_states_1/2` → `outputs`, `output_states_1/2`), `vocab.txt`;
//! - `config.json` (optional): `model_type` (`nemo-conformer-ctc`, `-rnnt`, `-tdt`),
//!   `features_size` (80), `subsampling_factor` (8), `max_tokens_per_step` (10).
//!
//! Decoding is greedy, as onnx-asr's (see [`crate::decode`]); a token's timestamp is its
//! output frame × 10 ms × the subsampling factor, from the item's start.

use std::path::{Path, PathBuf};

use ort::session::Session;
use ort::value::{Tensor, TensorElementType};
use serde::Deserialize;

use crate::decode::{ctc_greedy, transducer_greedy, Joint, Vocab};
use crate::error::{DeviceError, ItemError, ModelError};
use crate::runner::{ModelOutput, ModelRunner, OutputKind, RunnerOptions};
use crate::runtime::Runtime;

/// `config.json`, with onnx-asr's defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct AsrConfig {
    pub model_type: Option<String>,
    pub features_size: usize,
    pub subsampling_factor: usize,
    pub max_tokens_per_step: usize,
}

impl Default for AsrConfig {
    fn default() -> Self {
        AsrConfig {
            model_type: None,
            features_size: 80,
            subsampling_factor: 8,
            max_tokens_per_step: 10,
        }
    }
}

/// One item's transcript.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Transcript {
    pub text: String,
    /// The tokens, `▁` shown as a space.
    pub tokens: Vec<String>,
    /// Each token's time in seconds from the item's start.
    pub timestamps: Vec<f64>,
}

/// Which decoder a model has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsrKind {
    Ctc,
    /// TDT when the joint gives more values than there are tokens (the durations), else RNN-T.
    Transducer,
}

/// An ASR model folder, opened.
pub struct AsrModel {
    dir: PathBuf,
    config: AsrConfig,
    vocab: Vocab,
    blank: usize,
    kind: AsrKind,
    encoder: ModelRunner,
    joint: Option<DecoderJoint>,
}

impl AsrModel {
    /// Opens the model in `dir` with `threads` onnxruntime threads (0: one per core).
    pub fn open(rt: &Runtime, dir: &Path, threads: usize) -> Result<Self, ModelError> {
        let bad = |path: PathBuf, reason: String| ModelError::Model { path, reason };
        if !dir.is_dir() {
            return Err(bad(dir.to_path_buf(), "not a model folder".into()));
        }
        let config_path = dir.join("config.json");
        let config: AsrConfig = if config_path.is_file() {
            let text = std::fs::read_to_string(&config_path)
                .map_err(|e| bad(config_path.clone(), e.to_string()))?;
            serde_json::from_str(&text).map_err(|e| bad(config_path.clone(), e.to_string()))?
        } else {
            AsrConfig::default()
        };
        let vocab = Vocab::read(&dir.join("vocab.txt"))?;
        let blank = vocab.blank().ok_or_else(|| {
            bad(
                dir.join("vocab.txt"),
                "no <blk> token (the blank) in the vocabulary".into(),
            )
        })?;
        let kind = match config.model_type.as_deref() {
            Some("nemo-conformer-ctc") => AsrKind::Ctc,
            Some("nemo-conformer-tdt" | "nemo-conformer-rnnt") => AsrKind::Transducer,
            Some(other) => {
                return Err(bad(
                    config_path,
                    format!(
                        "model_type {other:?}: nemo-conformer-ctc, -tdt and -rnnt are supported"
                    ),
                ))
            }
            None if dir.join("model.onnx").is_file() => AsrKind::Ctc,
            None => AsrKind::Transducer,
        };
        let opts = RunnerOptions {
            threads,
            n_mels: Some(config.features_size),
            subsampling: config.subsampling_factor,
            ..RunnerOptions::default()
        };
        let (encoder, joint) = match kind {
            AsrKind::Ctc => (ModelRunner::open(rt, &dir.join("model.onnx"), &opts)?, None),
            AsrKind::Transducer => {
                let encoder = ModelRunner::open(rt, &dir.join("encoder-model.onnx"), &opts)?;
                let path = dir.join("decoder_joint-model.onnx");
                let joint = DecoderJoint::new(rt.session(&path, 1)?, &path)?;
                (encoder, Some(joint))
            }
        };
        let want = if kind == AsrKind::Ctc {
            OutputKind::Logprobs
        } else {
            OutputKind::Encoder
        };
        if encoder.kind() != want {
            return Err(bad(
                encoder.path().to_path_buf(),
                format!(
                    "a {want:?} model was expected here, this one gives {:?}",
                    encoder.kind()
                ),
            ));
        }
        Ok(AsrModel {
            dir: dir.to_path_buf(),
            config,
            vocab,
            blank,
            kind,
            encoder,
            joint,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn kind(&self) -> AsrKind {
        self.kind
    }
    pub fn config(&self) -> &AsrConfig {
        &self.config
    }
    pub fn n_mels(&self) -> usize {
        self.encoder.n_mels()
    }
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }
    /// The encoder (or CTC model), for running batches through a batcher.
    pub fn runner(&mut self) -> &mut ModelRunner {
        &mut self.encoder
    }

    /// Runs and decodes a batch of feature rows (`frames × n_mels` each): one transcript or
    /// item error per item; `Err` when the batch as a whole failed.
    pub fn transcribe(
        &mut self,
        features: &[&[f32]],
    ) -> Result<Vec<Result<Transcript, ItemError>>, DeviceError> {
        let n_mels = self.n_mels();
        let batch = self.encoder.run_batch(features, n_mels)?;
        batch
            .into_items()
            .into_iter()
            .map(|item| match item {
                Ok(out) => self.decode(&out).map(Ok),
                Err(e) => Ok(Err(e)),
            })
            .collect()
    }

    /// Decodes one item's encoder output (CTC: its log-probabilities).
    pub fn decode(&mut self, out: &ModelOutput) -> Result<Transcript, DeviceError> {
        let v = self.vocab.len();
        let (ids, frames) = match (&mut self.joint, self.kind) {
            (None, _) | (_, AsrKind::Ctc) => {
                if out.dim > v {
                    return Err(DeviceError::Failed(format!(
                        "logprobs over {} tokens, the vocabulary has {v}",
                        out.dim
                    )));
                }
                ctc_greedy(&out.data, out.dim, out.frames, self.blank)
            }
            (Some(joint), AsrKind::Transducer) => transducer_greedy(
                joint,
                &out.data,
                out.dim,
                out.frames,
                v,
                self.blank,
                self.config.max_tokens_per_step,
            )
            .map_err(DeviceError::Failed)?,
        };
        // onnx-asr: window_step (0.01) × subsampling × index, in that order.
        let step = 0.01 * self.config.subsampling_factor as f64;
        Ok(Transcript {
            text: self.vocab.text(&ids),
            tokens: ids
                .iter()
                .map(|&i| self.vocab.token(i).to_string())
                .collect(),
            timestamps: frames.iter().map(|&t| step * t as f64).collect(),
        })
    }
}

/// The decoder + joint network of a NeMo transducer export, one step per call.
struct DecoderJoint {
    session: Session,
    targets_i32: bool,
    /// `input_states_1` and `_2` as [layers, 1, hidden].
    states: [(usize, usize); 2],
}

impl DecoderJoint {
    fn new(session: Session, path: &Path) -> Result<Self, ModelError> {
        let bad = |reason: String| ModelError::Model {
            path: path.to_path_buf(),
            reason,
        };
        let input = |name: &str| {
            session
                .inputs()
                .iter()
                .find(|o| o.name() == name)
                .and_then(|o| match o.dtype() {
                    ort::value::ValueType::Tensor { ty, shape, .. } => {
                        Some((*ty, shape.iter().copied().collect::<Vec<i64>>()))
                    }
                    _ => None,
                })
                .ok_or_else(|| {
                    bad(format!(
                        "no tensor input {name:?}: not a NeMo decoder_joint"
                    ))
                })
        };
        let (enc_ty, _) = input("encoder_outputs")?;
        if enc_ty != TensorElementType::Float32 {
            return Err(bad(format!(
                "encoder_outputs is {enc_ty:?}; only f32 decoder_joint models are supported"
            )));
        }
        let (targets_ty, _) = input("targets")?;
        let targets_i32 = match targets_ty {
            TensorElementType::Int32 => true,
            TensorElementType::Int64 => false,
            t => return Err(bad(format!("targets is {t:?}, not an integer type"))),
        };
        input("target_length")?;
        let mut states = [(0, 0); 2];
        for (k, name) in ["input_states_1", "input_states_2"].iter().enumerate() {
            let (ty, shape) = input(name)?;
            match (ty, shape.as_slice()) {
                (TensorElementType::Float32, &[l, _, h]) if l > 0 && h > 0 => {
                    states[k] = (l as usize, h as usize)
                }
                _ => {
                    return Err(bad(format!(
                        "{name} is {ty:?} {shape:?}, not f32 [layers, batch, hidden] with fixed layers and hidden"
                    )))
                }
            }
        }
        Ok(DecoderJoint {
            session,
            targets_i32,
            states,
        })
    }
}

impl Joint for DecoderJoint {
    type State = (Vec<f32>, Vec<f32>);

    fn initial(&mut self) -> Result<Self::State, String> {
        let [(l1, h1), (l2, h2)] = self.states;
        Ok((vec![0.0; l1 * h1], vec![0.0; l2 * h2]))
    }

    fn step(
        &mut self,
        frame: &[f32],
        prev: usize,
        state: &Self::State,
    ) -> Result<(Vec<f32>, Self::State), String> {
        let e = |e: ort::Error| format!("decoder_joint: {e}");
        let [(l1, h1), (l2, h2)] = self.states;
        let enc = Tensor::from_array(([1usize, frame.len(), 1], frame.to_vec())).map_err(e)?;
        let s1 = Tensor::from_array(([l1, 1, h1], state.0.clone())).map_err(e)?;
        let s2 = Tensor::from_array(([l2, 1, h2], state.1.clone())).map_err(e)?;
        let outputs = if self.targets_i32 {
            let t = Tensor::from_array(([1usize, 1], vec![prev as i32])).map_err(e)?;
            let tl = Tensor::from_array(([1usize], vec![1i32])).map_err(e)?;
            self.session.run(ort::inputs![
                "encoder_outputs" => enc, "targets" => t, "target_length" => tl,
                "input_states_1" => s1, "input_states_2" => s2,
            ])
        } else {
            let t = Tensor::from_array(([1usize, 1], vec![prev as i64])).map_err(e)?;
            let tl = Tensor::from_array(([1usize], vec![1i64])).map_err(e)?;
            self.session.run(ort::inputs![
                "encoder_outputs" => enc, "targets" => t, "target_length" => tl,
                "input_states_1" => s1, "input_states_2" => s2,
            ])
        }
        .map_err(e)?;
        let get = |name: &str| -> Result<Vec<f32>, String> {
            let (_, data) = outputs[name]
                .try_extract_tensor::<f32>()
                .map_err(|err| format!("decoder_joint {name}: {err}"))?;
            Ok(data.to_vec())
        };
        Ok((
            get("outputs")?,
            (get("output_states_1")?, get("output_states_2")?),
        ))
    }
}
