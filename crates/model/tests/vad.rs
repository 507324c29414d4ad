//! Silero VAD against silero-vad 6.2.3's own `get_speech_timestamps(..., onnx=True)`: the
//! references in tests/data/vad were computed by scripts/vad_reference.py on the committed
//! audio (real espeak-ng speech at 8, 16, 32 and 48 kHz, speech in noise, silence, white noise,
//! music-like tones), with the defaults and with parameter sets that reach every branch
//! (max-speech cuts both ways, padding that splits gaps, thresholds on both sides).
//!
//! The state machine alone is checked against `get_speech_timestamps_from_probs` on 160
//! random probability sequences (runs of speech, silence, values between the thresholds and
//! exactly on them), which needs no runtime. The model tests need onnxruntime; without it they
//! say why they skipped (tests/shared/skip_ort.rs), and fail under SONOGRAPH_REQUIRE_ORT=1.

#[path = "../../../tests/shared/skip_ort.rs"]
mod skip_ort;

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use sonograph_model::vad::{SpeechTimestamps, SILERO_VAD_ONNX};
use sonograph_model::{Segment, VadParams, VadSegmenter};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn load(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/vad")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The Python keyword arguments of a case as [`VadParams`].
fn params(p: &Value) -> VadParams {
    let mut v = VadParams::default();
    for (k, x) in p.as_object().unwrap() {
        let f = x.as_f64();
        match k.as_str() {
            "threshold" => v.threshold = f.unwrap(),
            "neg_threshold" => v.neg_threshold = f,
            "min_speech_duration_ms" => v.min_speech_duration_ms = f.unwrap(),
            "max_speech_duration_s" => v.max_speech_duration_s = f.unwrap(),
            "min_silence_duration_ms" => v.min_silence_duration_ms = f.unwrap(),
            "speech_pad_ms" => v.speech_pad_ms = f.unwrap(),
            "min_silence_at_max_speech" => v.min_silence_at_max_speech_ms = f.unwrap(),
            "use_max_poss_sil_at_max_speech" => {
                v.use_max_poss_sil_at_max_speech = x.as_bool().unwrap()
            }
            other => panic!("a parameter this test does not know: {other}"),
        }
    }
    v
}

fn pairs(v: &Value) -> Vec<(u64, u64)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_u64().unwrap(), p[1].as_u64().unwrap()))
        .collect()
}

fn as_pairs(s: &[Segment]) -> Vec<(u64, u64)> {
    s.iter().map(|s| (s.start, s.end)).collect()
}

#[test]
fn the_state_machine_matches_get_speech_timestamps_from_probs() {
    let reference = load("timestamps_from_probs.json");
    let cases = reference["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 160);
    let mut segments = 0;
    for (n, case) in cases.iter().enumerate() {
        let sr = case["sample_rate"].as_u64().unwrap() as u32;
        let step = case["step"].as_u64().unwrap() as u32;
        let mut machine = SpeechTimestamps::new(&params(&case["params"]), sr, step).unwrap();
        let mut out = Vec::new();
        for p in case["probs"].as_array().unwrap() {
            // Each value is a float32 the script stored as a Python float: exact.
            machine.push(p.as_f64().unwrap() as f32, &mut out);
        }
        machine.finish(case["samples"].as_u64().unwrap(), &mut out);
        let expect = pairs(&case["timestamps"]);
        segments += expect.len();
        assert_eq!(as_pairs(&out), expect, "case {n}: {}", case["params"]);
    }
    // The cases reach segments at all (a suite of empty lists would prove nothing).
    assert!(segments > 300, "{segments} segments in all");
}

#[test]
fn the_vendored_model_is_the_wheels() {
    let hex = |b: &[u8]| format!("{:x}", Sha256::digest(b));
    let reference = load("reference.json");
    let vendored = hex(SILERO_VAD_ONNX);
    assert_eq!(
        vendored,
        "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"
    );
    assert_eq!(reference["model_sha256"].as_str(), Some(vendored.as_str()));
    // The installed package's file, where python3 has silero-vad (CI installs it).
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import importlib.util,os;s=importlib.util.find_spec('silero_vad');\
             print(os.path.join(os.path.dirname(s.origin),'data','silero_vad.onnx') if s else '')",
        ])
        .output();
    match out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()) {
        Ok(path) if !path.is_empty() => {
            assert_eq!(hex(&std::fs::read(&path).unwrap()), vendored, "{path}");
        }
        _ => skip_ort::skip("python3 has no silero-vad package to compare the vendored model with"),
    }
}

/// Decodes a reference file at its own rate, in the chunks the decoder gives.
fn samples(rel: &str) -> (Vec<f32>, u32) {
    let path = root().join(rel);
    let reader =
        sonograph_io::AudioReader::open(&path, &sonograph_io::DecodeOptions::default()).unwrap();
    let rate = reader.info().sample_rate;
    (sonograph_io::decode_reader(reader, rate).unwrap(), rate)
}

/// Runs the segmenter over `x` in chunks of `chunk` samples; returns segments and probabilities.
fn segment(
    rt: &sonograph_model::Runtime,
    p: &VadParams,
    x: &[f32],
    rate: u32,
    chunk: usize,
) -> (Vec<Segment>, Vec<f32>) {
    let mut seg = VadSegmenter::new(rt, p, rate).unwrap();
    let (mut out, mut probs) = (Vec::new(), Vec::new());
    for c in x.chunks(chunk) {
        seg.push_inspect(c, &mut out, &mut |p| probs.push(p))
            .unwrap();
    }
    seg.finish_inspect(&mut out, &mut |p| probs.push(p))
        .unwrap();
    (out, probs)
}

/// Probabilities within 1e-5 of Python's: the same onnxruntime and model, but onnxruntime picks
/// its kernels by CPU (AVX2, AVX-512, ...), whose sums may round differently on CI's machine
/// (here they are equal to the last bit). The closest a reference probability comes to a
/// threshold of its cases is 9.8e-5, so within 1e-5 every decision is the reference's, and
/// the timestamps must be equal exactly.
#[test]
fn probabilities_and_timestamps_match_silero_vad_on_real_audio() {
    let Some(rt) = skip_ort::runtime_or_skip() else {
        return;
    };
    let reference = load("reference.json");
    let files = reference["files"].as_object().unwrap();
    let mut checked = 0;
    let mut worst = 0.0f32;
    for (name, file) in files {
        let (x, rate) = samples(file["path"].as_str().unwrap());
        assert_eq!(rate as u64, file["sample_rate"].as_u64().unwrap(), "{name}");
        assert_eq!(x.len() as u64, file["samples"].as_u64().unwrap(), "{name}");
        let expect: Vec<f64> = file["probs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        for case in reference["cases"].as_array().unwrap() {
            if case["file"] != name.as_str() {
                continue;
            }
            // Odd chunk sizes: windows and decimation across chunk boundaries.
            let chunk = [1000, 333, 4096][checked % 3];
            let (segs, probs) = segment(rt, &params(&case["params"]), &x, rate, chunk);
            assert_eq!(probs.len(), expect.len(), "{name}: windows");
            for (i, (&p, &e)) in probs.iter().zip(&expect).enumerate() {
                let d = (f64::from(p) - e).abs() as f32;
                worst = worst.max(d);
                assert!(d <= 1e-5, "{name}: window {i}: {p} vs {e}");
            }
            assert_eq!(
                as_pairs(&segs),
                pairs(&case["timestamps"]),
                "{name} {}",
                case["params"]
            );
            checked += 1;
        }
    }
    assert_eq!(checked, reference["cases"].as_array().unwrap().len());
    eprintln!("{checked} cases; largest probability difference {worst:e}");
}

/// A segmenter is reset by `finish` (and by `reset` after an error): the same file twice gives
/// the same segments; a 44.1 kHz stream is refused, 8 and 48 kHz taken as documented.
#[test]
fn a_segmenter_starts_each_stream_afresh_and_refuses_rates_it_cannot_take() {
    let Some(rt) = skip_ort::runtime_or_skip() else {
        return;
    };
    let (x, rate) = samples("tests/data/sample.flac");
    let mut seg = VadSegmenter::new(rt, &VadParams::default(), rate).unwrap();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut out = Vec::new();
        seg.push(&x, &mut out).unwrap();
        seg.finish(&mut out).unwrap();
        runs.push(out);
    }
    assert_eq!(runs[0], runs[1]);
    assert!(!runs[0].is_empty());
    let e = VadSegmenter::new(rt, &VadParams::default(), 44100)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("44100") && e.contains("resample"), "{e}");
    assert_eq!(VadSegmenter::model_rate(48000), Some((16000, 3)));
    assert_eq!(VadSegmenter::model_rate(8000), Some((8000, 1)));
    // NaN samples are the input's fault, named with their index.
    let mut bad = vec![0.0f32; 2000];
    bad[1500] = f32::NAN;
    let e = seg.push(&bad, &mut Vec::new()).unwrap_err().to_string();
    assert!(e.contains("sample 1500"), "{e}");
    // Left mid-stream by the error, it is reset and segments the file as before.
    seg.reset();
    let mut out = Vec::new();
    seg.push(&x, &mut out).unwrap();
    seg.finish(&mut out).unwrap();
    assert_eq!(out, runs[0]);
}
