//! [`ModelRunner`]: an ONNX model on batches of feature rows.
//!
//! The model is a NeMo FastConformer export: inputs `audio_signal` [B, n_mels, T] and `length`
//! [B]; outputs either `outputs` [B, D, T′] with `encoded_lengths` [B] (an encoder) or
//! `logprobs` [B, T′, V] (a CTC model, whose lengths are `(T − 1) // subsampling + 1`, as
//! onnx-asr computes them). Items are rows of `frames × n_mels` values (row-major, as
//! `sonograph_dsp::FeatureBatch` holds them); a batch is padded with zeros to its longest item
//! and each item's length passed, so each item's valid outputs are what it gives alone (up to
//! the arithmetic of a different batch shape). Outputs come back time-major, `frames × dim`.
//!
//! Precision follows the model: an f16 `audio_signal` is given f16 features (rounded to
//! nearest), f16 outputs are widened to f32; `length` is int64 or int32 as declared.
//!
//! Errors: an item that cannot run (no frames, not whole frames, NaN) gets its own error in the
//! [`ModelBatch`] and the others run; a batch that cannot run returns `Err` — out of memory
//! (split it and retry), or a failure (move it elsewhere) — and nothing of it is kept.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use half::f16;
use ort::session::Session;
use ort::value::{DynValue, Tensor, TensorElementType, ValueType};

use crate::error::{DeviceError, ItemError, ModelError};
use crate::runtime::{ModelDevice, Runtime};

/// One item's output: `frames × dim` values, time-major.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOutput {
    pub frames: usize,
    pub dim: usize,
    pub data: Vec<f32>,
}

impl ModelOutput {
    /// Frame `t`'s `dim` values.
    pub fn frame(&self, t: usize) -> &[f32] {
        &self.data[t * self.dim..(t + 1) * self.dim]
    }
}

/// The outputs of a batch, one result per item, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelBatch {
    items: Vec<Result<ModelOutput, ItemError>>,
}

impl ModelBatch {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    pub fn item(&self, i: usize) -> Result<&ModelOutput, &ItemError> {
        self.items[i].as_ref()
    }
    pub fn push(&mut self, item: Result<ModelOutput, ItemError>) {
        self.items.push(item);
    }
    pub fn clear(&mut self) {
        self.items.clear();
    }
    /// Records an item that no device could run.
    pub fn push_no_device(&mut self, why: String) {
        self.items.push(Err(ItemError::NoDevice(why)));
    }
    /// Moves every item of `other` to the end of this batch.
    pub fn append(&mut self, other: &mut ModelBatch) {
        self.items.append(&mut other.items);
    }
    pub fn into_items(self) -> Vec<Result<ModelOutput, ItemError>> {
        self.items
    }
}

/// What the model gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// `outputs` [B, D, T′] and `encoded_lengths` [B].
    Encoder,
    /// `logprobs` [B, T′, V].
    Logprobs,
}

/// Element type of the features the model takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputPrecision {
    F32,
    F16,
}

/// How to open a model.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    /// onnxruntime intra-op threads (0: one per core).
    pub threads: usize,
    /// Mel bins, where the model's input shape leaves them open (NeMo exports fix them).
    pub n_mels: Option<usize>,
    /// Frames per output frame, for CTC lengths (FastConformer: 8).
    pub subsampling: usize,
    /// Where it runs.
    pub device: ModelDevice,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            threads: 0,
            n_mels: None,
            subsampling: 8,
            device: ModelDevice::Cpu,
        }
    }
}

/// An ONNX encoder or CTC model, on the CPU or a CUDA device.
pub struct ModelRunner {
    session: Session,
    device: ModelDevice,
    path: PathBuf,
    n_mels: usize,
    kind: OutputKind,
    input: InputPrecision,
    length_i32: bool,
    subsampling: usize,
}

impl std::fmt::Debug for ModelRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRunner")
            .field("path", &self.path)
            .field("n_mels", &self.n_mels)
            .field("kind", &self.kind)
            .field("input", &self.input)
            .finish()
    }
}

fn tensor_type(v: &ValueType) -> Option<(TensorElementType, Vec<i64>)> {
    match v {
        ValueType::Tensor { ty, shape, .. } => Some((*ty, shape.iter().copied().collect())),
        _ => None,
    }
}

impl ModelRunner {
    /// Opens `path` and checks its inputs and outputs.
    pub fn open(rt: &Runtime, path: &Path, opts: &RunnerOptions) -> Result<Self, ModelError> {
        let session = rt.session_on(path, opts.threads, opts.device)?;
        Self::from_session(session, path, opts)
    }

    fn from_session(
        session: Session,
        path: &Path,
        opts: &RunnerOptions,
    ) -> Result<Self, ModelError> {
        let bad = |reason: String| ModelError::Model {
            path: path.to_path_buf(),
            reason,
        };
        let names = |outlets: &[ort::value::Outlet]| {
            outlets
                .iter()
                .map(|o| o.name().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let input = |name: &str| {
            session
                .inputs()
                .iter()
                .find(|o| o.name() == name)
                .and_then(|o| tensor_type(o.dtype()))
        };
        let (Some((signal_ty, signal_shape)), Some((length_ty, _))) =
            (input("audio_signal"), input("length"))
        else {
            return Err(bad(format!(
                "not a NeMo encoder: it takes [{}], not audio_signal and length",
                names(session.inputs())
            )));
        };
        let precision = match signal_ty {
            TensorElementType::Float32 => InputPrecision::F32,
            TensorElementType::Float16 => InputPrecision::F16,
            t => {
                return Err(bad(format!(
                    "audio_signal is {t:?}; f32 and f16 are supported"
                )))
            }
        };
        let length_i32 = match length_ty {
            TensorElementType::Int64 => false,
            TensorElementType::Int32 => true,
            t => {
                return Err(bad(format!(
                    "length is {t:?}; int64 and int32 are supported"
                )))
            }
        };
        let declared = signal_shape.get(1).copied().filter(|&d| d > 0);
        let n_mels = match (declared, opts.n_mels) {
            (Some(d), Some(n)) if d as usize != n => {
                return Err(bad(format!(
                    "the model takes {d} mel bins, the configuration says {n}"
                )))
            }
            (Some(d), _) => d as usize,
            (None, Some(n)) => n,
            (None, None) => {
                return Err(bad(
                    "the model leaves its mel bins open and no configuration gives them".into(),
                ))
            }
        };
        let has = |name: &str| session.outputs().iter().any(|o| o.name() == name);
        let kind = if has("outputs") && has("encoded_lengths") {
            OutputKind::Encoder
        } else if has("logprobs") {
            OutputKind::Logprobs
        } else {
            return Err(bad(format!(
                "not a NeMo encoder or CTC model: it gives [{}], not outputs and encoded_lengths, or logprobs",
                names(session.outputs())
            )));
        };
        if opts.subsampling == 0 {
            return Err(bad("a subsampling factor of 0".into()));
        }
        Ok(ModelRunner {
            session,
            device: opts.device,
            path: path.to_path_buf(),
            n_mels,
            kind,
            input: precision,
            length_i32,
            subsampling: opts.subsampling,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn n_mels(&self) -> usize {
        self.n_mels
    }
    pub fn kind(&self) -> OutputKind {
        self.kind
    }
    pub fn input_precision(&self) -> InputPrecision {
        self.input
    }
    /// Where it runs, for reports.
    pub fn device(&self) -> String {
        self.device.to_string()
    }
    /// Output frames of an item of `frames` feature frames: `(frames − 1) // s + 1`.
    pub fn output_frames(&self, frames: usize) -> usize {
        frames.saturating_sub(1) / self.subsampling + 1
    }

    /// Runs the model on `features` (each `frames × n_mels`, row-major); one result per item.
    pub fn run_batch(
        &mut self,
        features: &[&[f32]],
        n_mels: usize,
    ) -> Result<ModelBatch, DeviceError> {
        let mut results: Vec<Option<Result<ModelOutput, ItemError>>> = features
            .iter()
            .map(|f| self.check(f, n_mels).err().map(Err))
            .collect();
        let valid: Vec<usize> = (0..features.len())
            .filter(|&i| results[i].is_none())
            .collect();
        if !valid.is_empty() {
            fail::fail_point!("model::lost", |_| Err(DeviceError::Failed(
                "injected: the model device was lost".into()
            )));
            // A batch that fails as a whole where each of its rows runs alone (as one row the
            // model cannot take would make it fail).
            fail::fail_point!("model::batch-fails", valid.len() > 1, |_| Err(
                DeviceError::Failed("injected: a batch of several rows failed".into())
            ));
            #[cfg(feature = "failpoints")]
            if let Some(Some(fits)) = fail::eval("model::oom", |arg| {
                arg.and_then(|a| a.parse::<usize>().ok())
            }) {
                if valid.len() > fits {
                    return Err(DeviceError::OutOfMemory(format!(
                        "injected: a batch of {} rows, {fits} fit",
                        valid.len()
                    )));
                }
            }
            let rows: Vec<&[f32]> = valid.iter().map(|&i| features[i]).collect();
            for (i, out) in valid.iter().zip(self.run_valid(&rows)?) {
                results[*i] = Some(Ok(out));
            }
        }
        let mut batch = ModelBatch::new();
        for r in results {
            batch.push(r.expect("every item has a result: an error, or an output from the run"));
        }
        Ok(batch)
    }

    fn check(&self, item: &[f32], n_mels: usize) -> Result<(), ItemError> {
        if n_mels != self.n_mels || !item.len().is_multiple_of(n_mels) {
            return Err(ItemError::Ragged {
                values: item.len(),
                n_mels: self.n_mels,
            });
        }
        if item.is_empty() {
            return Err(ItemError::Empty);
        }
        if let Some((index, &value)) = item.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(ItemError::NonFinite { index, value });
        }
        Ok(())
    }

    /// The model on items that passed [`check`](Self::check).
    fn run_valid(&mut self, rows: &[&[f32]]) -> Result<Vec<ModelOutput>, DeviceError> {
        let m = self.n_mels;
        let frames: Vec<usize> = rows.iter().map(|r| r.len() / m).collect();
        let t_max = frames.iter().copied().max().unwrap_or(0);
        let b = rows.len();
        // [B, n_mels, T]: each item transposed, zeros past its length.
        let mut signal = vec![0.0f32; b * m * t_max];
        for (k, row) in rows.iter().enumerate() {
            let base = k * m * t_max;
            for (t, frame) in row.chunks_exact(m).enumerate() {
                for (j, &v) in frame.iter().enumerate() {
                    signal[base + j * t_max + t] = v;
                }
            }
        }
        let shape = [b, m, t_max];
        let fail = |e: ort::Error| DeviceError::Failed(e.to_string());
        let signal: DynValue = match self.input {
            InputPrecision::F32 => Tensor::from_array((shape, signal))
                .map_err(fail)?
                .into_dyn(),
            InputPrecision::F16 => {
                let half: Vec<f16> = signal.iter().map(|&v| f16::from_f32(v)).collect();
                Tensor::from_array((shape, half)).map_err(fail)?.into_dyn()
            }
        };
        let length: DynValue = if self.length_i32 {
            let l: Vec<i32> = frames.iter().map(|&f| f as i32).collect();
            Tensor::from_array(([b], l)).map_err(fail)?.into_dyn()
        } else {
            let l: Vec<i64> = frames.iter().map(|&f| f as i64).collect();
            Tensor::from_array(([b], l)).map_err(fail)?.into_dyn()
        };
        let kind = self.kind;
        let expected: Vec<usize> = frames.iter().map(|&f| self.output_frames(f)).collect();
        let outputs = self
            .session
            .run(ort::inputs!["audio_signal" => signal, "length" => length])
            .map_err(|e| DeviceError::from_ort(&e))?;
        let bad = |what: String| DeviceError::Failed(format!("the model gave {what}"));
        match kind {
            OutputKind::Encoder => {
                let (shape, data) = floats(&outputs["outputs"]).map_err(bad)?;
                let lengths = ints(&outputs["encoded_lengths"]).map_err(bad)?;
                let [ob, d, t] = shape[..] else {
                    return Err(bad(format!("outputs of shape {shape:?}, not [B, D, T]")));
                };
                if ob != b || lengths.len() != b {
                    return Err(bad(format!(
                        "{ob} outputs and {} lengths for {b} items",
                        lengths.len()
                    )));
                }
                (0..b)
                    .map(|k| {
                        let n = usize::try_from(lengths[k])
                            .ok()
                            .filter(|&n| n <= t)
                            .ok_or_else(|| {
                                bad(format!(
                                    "an encoded length of {} for {t} frames",
                                    lengths[k]
                                ))
                            })?;
                        // [D, T′] → time-major [n × D].
                        let item = &data[k * d * t..(k + 1) * d * t];
                        let mut out = Vec::with_capacity(n * d);
                        for tt in 0..n {
                            out.extend((0..d).map(|j| item[j * t + tt]));
                        }
                        Ok(ModelOutput {
                            frames: n,
                            dim: d,
                            data: out,
                        })
                    })
                    .collect()
            }
            OutputKind::Logprobs => {
                let (shape, data) = floats(&outputs["logprobs"]).map_err(bad)?;
                let [ob, t, v] = shape[..] else {
                    return Err(bad(format!("logprobs of shape {shape:?}, not [B, T, V]")));
                };
                if ob != b || expected.iter().any(|&n| n > t) {
                    return Err(bad(format!(
                        "logprobs of shape {shape:?} for {b} items of up to {t_max} frames"
                    )));
                }
                Ok((0..b)
                    .map(|k| ModelOutput {
                        frames: expected[k],
                        dim: v,
                        data: data[k * t * v..(k * t + expected[k]) * v].to_vec(),
                    })
                    .collect())
            }
        }
    }
}

/// A float tensor's shape and values as f32 (f16 widened).
fn floats(v: &DynValue) -> Result<(Vec<usize>, Cow<'_, [f32]>), String> {
    let shape_of = |s: &ort::value::Shape| s.iter().map(|&d| d.max(0) as usize).collect();
    if let Ok((s, data)) = v.try_extract_tensor::<f32>() {
        return Ok((shape_of(s), Cow::Borrowed(data)));
    }
    if let Ok((s, data)) = v.try_extract_tensor::<f16>() {
        return Ok((
            shape_of(s),
            Cow::Owned(data.iter().map(|x| x.to_f32()).collect()),
        ));
    }
    Err(format!(
        "a {:?} output where floats were expected",
        v.dtype()
    ))
}

/// An integer tensor's values as i64.
fn ints(v: &DynValue) -> Result<Vec<i64>, String> {
    if let Ok((_, data)) = v.try_extract_tensor::<i64>() {
        return Ok(data.to_vec());
    }
    if let Ok((_, data)) = v.try_extract_tensor::<i32>() {
        return Ok(data.iter().map(|&x| i64::from(x)).collect());
    }
    Err(format!(
        "a {:?} output where integers were expected",
        v.dtype()
    ))
}
