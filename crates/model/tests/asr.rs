//! The model runner and ASR decoding on tiny random-weight NeMo-style models (CTC in f32 and
//! f16, TDT with a decoder_joint), made by scripts/asr_reference.py with the real input and
//! output names, against Python onnxruntime 1.31.1 on the same features and onnx-asr 0.12.0's
//! own decoding. These test plumbing (shapes, padding, lengths, dtypes) and decoding, not
//! accuracy. They need onnxruntime; without it they say why they skipped.

#[path = "../../../tests/shared/skip_ort.rs"]
mod skip_ort;

#[path = "../../../tests/shared/model_outputs.rs"]
mod model_outputs;
use model_outputs::{floats, worst};

use std::path::{Path, PathBuf};

use serde_json::Value;
use sonograph_dsp::{CpuExtractor, FeatureSpec};
use sonograph_model::runner::{InputPrecision, OutputKind, RunnerOptions};
use sonograph_model::{AsrModel, ItemError, ModelDevice, ModelError, ModelRunner, Runtime};

fn data(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/asr")
        .join(p)
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(data("reference.json")).unwrap()).unwrap()
}

/// The committed features of the items (frames × n_mels each).
fn features(n_mels: usize) -> Vec<Vec<f32>> {
    (0..5)
        .map(|k| {
            let (shape, v) =
                sonograph_io::read_npy_f32(&data(&format!("features_{n_mels}_{k}.npy"))).unwrap();
            assert_eq!(shape[1], n_mels);
            v
        })
        .collect()
}

/// The features are sonograph's own: the CPU extractor on the same cuts of the committed audio
/// gives the committed arrays exactly (so `transcribe`, which computes them, feeds the models
/// what the references were made from).
#[test]
fn the_items_features_are_the_nemo_presets() {
    let r = reference();
    for (preset, n_mels) in [("nemo", 80), ("nemo-128", 128)] {
        let spec = FeatureSpec::preset(preset).unwrap();
        let expect = features(n_mels);
        for (k, item) in r["items"].as_array().unwrap().iter().enumerate() {
            let src = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(item["source"].as_str().unwrap());
            let x = sonograph_io::decode_mono(&src, &Default::default(), 16000).unwrap();
            // As the script cuts: int(start * sr), int(duration * sr) samples.
            let a = (item["start_s"].as_f64().unwrap() * 16000.0) as usize;
            let n = (item["duration_s"].as_f64().unwrap() * 16000.0) as usize;
            let mut rows = Vec::new();
            CpuExtractor::new(&spec)
                .unwrap()
                .extract(&x[a..a + n], &mut rows)
                .unwrap();
            assert_eq!(rows, expect[k], "{preset} item {k}");
        }
    }
}

fn runner(rt: &Runtime, path: &str) -> ModelRunner {
    ModelRunner::open(rt, &data(path), &RunnerOptions::default()).unwrap()
}

/// Each model's outputs, each item alone and all five in one padded batch, equal Python
/// onnxruntime's on the same features. Tolerance: f32 models within 1e-5 (relative to
/// max(1, |x|)): the same onnxruntime and graph, but its kernels are chosen by CPU (AVX2,
/// AVX-512), whose sums round differently on another machine (here they agree to the bit);
/// the f16 model within 2^-10, one f16 ulp, for the same reason at f16's precision.
#[test]
fn encoder_outputs_equal_python_onnxruntime_alone_and_padded() {
    let Some(rt) = skip_ort::runtime_or_skip() else {
        return;
    };
    let r = reference();
    for (name, path, n_mels, kind, precision, tol) in [
        (
            "ctc",
            "ctc/model.onnx",
            80,
            OutputKind::Logprobs,
            InputPrecision::F32,
            1e-5,
        ),
        (
            "ctc-fp16",
            "ctc-fp16/model.onnx",
            80,
            OutputKind::Logprobs,
            InputPrecision::F16,
            1.0 / 1024.0,
        ),
        (
            "tdt",
            "tdt/encoder-model.onnx",
            128,
            OutputKind::Encoder,
            InputPrecision::F32,
            1e-5,
        ),
    ] {
        let mut m = runner(rt, path);
        assert_eq!(
            (m.n_mels(), m.kind(), m.input_precision()),
            (n_mels, kind, precision)
        );
        let feats = features(n_mels);
        let rows: Vec<&[f32]> = feats.iter().map(|f| f.as_slice()).collect();
        let dim = r[name]["dim"].as_u64().unwrap() as usize;
        let frames: Vec<usize> = r[name]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        let batched = m.run_batch(&rows, n_mels).unwrap();
        assert_eq!(batched.len(), 5);
        let mut largest = 0.0f32;
        for k in 0..5 {
            // T' = (T - 1) // 8 + 1 valid frames, time-major.
            assert_eq!(frames[k], (feats[k].len() / n_mels - 1) / 8 + 1);
            let alone = m.run_batch(&rows[k..k + 1], n_mels).unwrap();
            let alone = alone.item(0).unwrap();
            let b = batched.item(k).unwrap();
            assert_eq!(
                (alone.frames, alone.dim),
                (frames[k], dim),
                "{name} item {k}"
            );
            assert_eq!((b.frames, b.dim), (frames[k], dim), "{name} item {k}");
            let e = worst(&alone.data, &floats(&r[name]["alone"][k]));
            let f = worst(&b.data, &floats(&r[name]["batched"][k]));
            largest = largest.max(e).max(f);
            assert!(
                e <= tol && f <= tol,
                "{name} item {k}: {e:e} alone, {f:e} batched"
            );
            // Padding is masked: in a batch an item's outputs are its own (to rounding).
            let g = worst(&b.data, &alone.data);
            assert!(
                g <= tol.max(1e-4),
                "{name} item {k}: batched vs alone {g:e}"
            );
        }
        eprintln!("{name}: largest difference from Python {largest:e}");
    }
}

fn transcript_eq(name: &str, k: usize, got: &sonograph_model::Transcript, want: &Value) {
    assert_eq!(got.text, want["text"].as_str().unwrap(), "{name} item {k}");
    let tokens: Vec<&str> = want["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(got.tokens, tokens, "{name} item {k}");
    let times: Vec<f64> = want["timestamps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    assert_eq!(got.timestamps, times, "{name} item {k}");
}

/// Greedy CTC (f32 and f16) and TDT transcripts of the padded batch equal onnx-asr's: text,
/// tokens and timestamps (frame × 0.08 s).
#[test]
fn transcripts_equal_onnx_asr() {
    let Some(rt) = skip_ort::runtime_or_skip() else {
        return;
    };
    let r = reference();
    let mut tokens = 0;
    for (name, n_mels) in [("ctc", 80), ("ctc-fp16", 80), ("tdt", 128)] {
        let mut model = AsrModel::open(rt, &data(name), 1).unwrap();
        assert_eq!(model.n_mels(), n_mels);
        let feats = features(n_mels);
        let rows: Vec<&[f32]> = feats.iter().map(|f| f.as_slice()).collect();
        let out = model.transcribe(&rows).unwrap();
        for (k, t) in out.iter().enumerate() {
            let t = t.as_ref().unwrap();
            transcript_eq(name, k, t, &r[name]["transcripts"][k]);
            tokens += t.tokens.len();
        }
    }
    assert!(tokens > 100, "the references decode to tokens ({tokens})");
}

/// Bad items get their own errors and the rest of the batch runs; a batch of nothing but bad
/// items runs nothing.
#[test]
fn bad_items_fail_alone() {
    let Some(rt) = skip_ort::runtime_or_skip() else {
        return;
    };
    let mut m = runner(rt, "ctc/model.onnx");
    let good = &features(80)[2];
    let mut nan = good.clone();
    nan[123] = f32::NAN;
    let ragged = &good[..good.len() - 3];
    let rows: Vec<&[f32]> = vec![&[], good, &nan, ragged, &good[..80]];
    let out = m.run_batch(&rows, 80).unwrap();
    assert_eq!(out.item(0), Err(&ItemError::Empty));
    assert!(matches!(
        out.item(2),
        Err(ItemError::NonFinite { index: 123, .. })
    ));
    assert!(matches!(out.item(3), Err(ItemError::Ragged { .. })));
    let alone = m.run_batch(&rows[1..2], 80).unwrap();
    assert!(worst(&out.item(1).unwrap().data, &alone.item(0).unwrap().data) <= 1e-4);
    // One frame: one output frame.
    assert_eq!(out.item(4).unwrap().frames, 1);
    // Features of another width are refused item by item.
    let out = m.run_batch(&[&good[..128 * 3]], 128).unwrap();
    assert!(matches!(
        out.item(0),
        Err(ItemError::Ragged { n_mels: 80, .. })
    ));
}

/// A model folder that is not one says which file and why, in one line.
#[test]
fn bad_model_folders_are_named() {
    let Some(rt) = skip_ort::runtime_or_skip() else {
        return;
    };
    let tmp = std::env::temp_dir().join(format!("sonograph-asr-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let err = |dir: &Path| match AsrModel::open(rt, dir, 1) {
        Err(e) => e,
        Ok(_) => panic!("{} opened", dir.display()),
    };
    // No vocabulary.
    let e = err(&tmp).to_string();
    assert!(e.contains("vocab.txt") && !e.contains('\n'), "{e}");
    // A vocabulary without a blank.
    std::fs::write(tmp.join("vocab.txt"), "a 0\nb 1\n").unwrap();
    let e = err(&tmp).to_string();
    assert!(e.contains("<blk>"), "{e}");
    // A CTC folder whose model is not an ONNX file.
    std::fs::write(tmp.join("vocab.txt"), "a 0\n<blk> 1\n").unwrap();
    std::fs::write(tmp.join("model.onnx"), b"not a model").unwrap();
    let e = err(&tmp);
    assert!(
        matches!(&e, ModelError::Model { path, .. } if path.ends_with("model.onnx")),
        "{e}"
    );
    // The Silero model is not an encoder: its inputs are named.
    std::fs::write(
        tmp.join("model.onnx"),
        sonograph_model::vad::SILERO_VAD_ONNX,
    )
    .unwrap();
    let e = err(&tmp).to_string();
    assert!(
        e.contains("not a NeMo encoder") && e.contains("input"),
        "{e}"
    );
    // A config whose mel bins disagree with the model's input.
    std::fs::copy(data("ctc/model.onnx"), tmp.join("model.onnx")).unwrap();
    std::fs::write(tmp.join("config.json"), r#"{"features_size": 128}"#).unwrap();
    let e = err(&tmp).to_string();
    assert!(e.contains("80 mel bins") && e.contains("128"), "{e}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// Asked for a GPU, a runner opens on onnxruntime's CUDA provider and gives the CPU's outputs
/// (within 1e-3: cuDNN's kernels round differently; TF32 is off), or fails saying why: it never
/// runs on the CPU in silence. Here (the CPU wheel, or a build without `cuda`) it fails; under
/// SONOGRAPH_REQUIRE_CUDA=1 (bench/gpu/model_cuda.sh) a refusal fails the test.
#[test]
fn a_gpu_model_device_runs_there_or_says_why() {
    let Some(rt) = skip_ort::runtime_or_skip() else {
        return;
    };
    let path = data("ctc/model.onnx");
    let gpu = RunnerOptions {
        device: ModelDevice::Cuda(0),
        ..RunnerOptions::default()
    };
    match ModelRunner::open(rt, &path, &gpu) {
        Ok(mut m) => {
            assert_eq!(m.device(), "gpu:0 (CUDA)");
            let feats = features(80);
            let rows: Vec<&[f32]> = feats.iter().map(|f| f.as_slice()).collect();
            let on_gpu = m.run_batch(&rows, 80).unwrap();
            let on_cpu = runner(rt, "ctc/model.onnx").run_batch(&rows, 80).unwrap();
            for k in 0..rows.len() {
                let (g, c) = (on_gpu.item(k).unwrap(), on_cpu.item(k).unwrap());
                let e = worst(&g.data, &c.data);
                assert!(e <= 1e-3, "item {k}: {e:e}");
            }
        }
        Err(e) => {
            let e = e.to_string();
            let why = if cfg!(feature = "cuda") {
                "CUDA provider did not start"
            } else {
                "CPU only"
            };
            // The refusal says why, and the run counts it as what it is: the GPU path untested.
            assert!(e.contains("gpu:0") && e.contains(why), "{e}");
            skip_ort::skip_cuda(&format!("gpu:0 refused: {e}"));
        }
    }
}
