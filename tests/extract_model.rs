//! `extract --model`: an ONNX model run on every row's features inside the job, its outputs
//! in the model columns, equal to Python onnxruntime's on the same features (the references
//! of crates/model/tests, made by scripts/asr_reference.py); the report's model side; the
//! errors; and, with `--features failpoints`, out-of-memory model batches and a lost model
//! device with nothing lost. Tests that need onnxruntime say why they skipped without it.

#[allow(dead_code)]
mod common;
use common::{bin, repo, stderr, Tmp};

#[path = "shared/skip_ort.rs"]
mod skip_ort;

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use serde_json::Value;
use sonograph_io::parquet::{read_part, FeatureRow, META_MODEL};

fn asr_ref() -> Value {
    let p = repo("crates/model/tests/data/asr/reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// A CSV manifest of the reference's five clips (`item0` … `item4`).
fn manifest(tmp: &Tmp) -> std::path::PathBuf {
    let mut csv = String::from("id,path,offset,duration\n");
    for (k, item) in asr_ref()["items"].as_array().unwrap().iter().enumerate() {
        csv += &format!(
            "item{k},{},{},{}\n",
            repo(item["source"].as_str().unwrap()).display(),
            item["start_s"],
            item["duration_s"]
        );
    }
    let path = tmp.path("items.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

fn extract(source: &Path, out: &Path, args: &[&str], failpoints: Option<&str>) -> Output {
    let mut cmd = bin();
    cmd.arg("extract")
        .arg(source)
        .arg("--out")
        .arg(out)
        .args(["--device", "cpu", "--workers", "1"])
        .args(args);
    if let Some(f) = failpoints {
        cmd.env("FAILPOINTS", f);
    }
    cmd.output().unwrap()
}

fn rows(out: &Path) -> HashMap<String, FeatureRow> {
    let mut rows = HashMap::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "parquet") {
            let (part, meta) = read_part(&path).unwrap();
            assert!(meta.contains_key(META_MODEL), "{meta:?}");
            for r in part {
                assert!(rows.insert(r.id.clone(), r).is_none(), "a row twice");
            }
        }
    }
    rows
}

fn report(out: &Path) -> Value {
    let p = out.join("__sonograph/report.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Largest |a − b| / max(1, |b|).
fn worst(a: &[f32], b: &Value) -> f32 {
    let b: Vec<f32> = b
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
        .fold(0.0, f32::max)
}

/// Every row has the model's output on its own features, as Python onnxruntime gives it on
/// the same clip alone: f32 models within 1e-4 (a batch of other lengths pads differently; the
/// crate's own test bounds batched against alone so), the f16 model within 2^-9 (two f16
/// ulps: one for the batch shape, one for the CPU's kernels).
fn check_outputs(out: &Path, name: &str, tol: f32) {
    let r = asr_ref();
    let rows = rows(out);
    assert_eq!(rows.len(), 5, "one row per clip");
    let dim = r[name]["dim"].as_u64().unwrap() as u32;
    for k in 0..5 {
        let row = &rows[&format!("item{k}")];
        let model = row.model.as_ref().expect("model columns");
        let frames = r[name]["frames"][k].as_u64().unwrap() as u32;
        assert_eq!((model.frames, model.dim), (frames, dim), "{name} item {k}");
        assert_eq!(model.frames, (row.num_frames - 1) / 8 + 1);
        let e = worst(&model.values, &r[name]["alone"][k]);
        assert!(e <= tol, "{name} item {k}: {e:e}");
    }
}

#[test]
fn model_outputs_equal_python_onnxruntime_and_the_report_has_the_model_side() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("extract-model");
    let source = manifest(&tmp);
    for (name, model, preset, precision, tol) in [
        ("tdt", "tdt/encoder-model.onnx", "nemo-128", "f32", 1e-4),
        ("ctc", "ctc/model.onnx", "nemo", "f32", 1e-4),
        (
            "ctc-fp16",
            "ctc-fp16/model.onnx",
            "nemo",
            "f16",
            2.0 / 1024.0,
        ),
    ] {
        let out = tmp.path(name);
        let model = repo(&format!("crates/model/tests/data/asr/{model}"));
        let o = extract(
            &source,
            &out,
            &[
                "--preset",
                preset,
                "--model",
                model.to_str().unwrap(),
                "--model-batch",
                "2",
            ],
            None,
        );
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        check_outputs(&out, name, tol);
        let rep = report(&out);
        let m = &rep["model"];
        assert_eq!(m["device"], "cpu", "{m}");
        assert_eq!(m["input_precision"], precision, "{m}");
        assert_eq!(m["kind"], if name == "tdt" { "encoder" } else { "ctc" });
        assert_eq!(m["rows"], 5);
        assert_eq!(m["rows_failed"], 0);
        assert!(m["busy_s"].as_f64().unwrap() > 0.0);
        assert!(!m["queue_depth"].as_array().unwrap().is_empty());
        assert_eq!(
            m["queue_capacity"], 8,
            "two batches, at least the row queue's 8"
        );
        assert!(stderr(&o).contains("model (") && stderr(&o).contains("5 rows"));
        // The same command again finds the shard done: nothing runs twice.
        let again = extract(
            &source,
            &out,
            &["--preset", preset, "--model", model.to_str().unwrap()],
            None,
        );
        assert!(again.status.success(), "{}", stderr(&again));
        assert!(stderr(&again).contains("already complete"));
    }
}

#[test]
fn a_model_that_does_not_fit_the_features_or_the_device_is_one_clear_error() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("extract-model-errors");
    let source = manifest(&tmp);
    let tdt = repo("crates/model/tests/data/asr/tdt/encoder-model.onnx");
    let tdt = tdt.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--model", tdt, "--preset", "nemo"], "takes 128 mel bins"),
        (
            &[
                "--model",
                tdt,
                "--preset",
                "nemo-128",
                "--model-device",
                "gpu:0",
            ],
            "CPU only",
        ),
        (
            &["--model", tdt, "--preset", "nemo-128", "--model-batch", "0"],
            "at least 1",
        ),
        (
            &["--preset", "nemo-128", "--model", "/nonexistent.onnx"],
            "no such model file",
        ),
    ];
    for (k, (args, says)) in cases.iter().enumerate() {
        let out = tmp.path(&format!("out{k}"));
        let all = args.to_vec();
        let o = extract(&source, &out, &all, None);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
}

/// Model batches that run out of memory are split and retried; a lost model device leaves
/// its rows to a fresh CPU session of the model. Either way every row comes out once, with
/// the outputs the model gives it (`--features failpoints`).
#[cfg(feature = "failpoints")]
#[test]
fn model_faults_lose_nothing() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("extract-model-faults");
    let source = manifest(&tmp);
    let model = repo("crates/model/tests/data/asr/tdt/encoder-model.onnx");
    for (k, failpoints) in ["model::oom=return(1)", "model::lost=1*return"]
        .iter()
        .enumerate()
    {
        let out = tmp.path(&format!("out{k}"));
        let o = extract(
            &source,
            &out,
            &[
                "--preset",
                "nemo-128",
                "--model",
                model.to_str().unwrap(),
                "--model-batch",
                "4",
            ],
            Some(failpoints),
        );
        assert!(o.status.success(), "{failpoints}: {}", stderr(&o));
        check_outputs(&out, "tdt", 1e-4);
        let m = &report(&out)["model"];
        if k == 0 {
            assert!(m["out_of_memory"].as_u64().unwrap() >= 1, "{m}");
            assert!(m["splits"].as_u64().unwrap() >= 1, "{m}");
        } else {
            assert_eq!(m["device_lost"], true, "{m}");
            assert!(m["moved_to_fallback"].as_u64().unwrap() >= 1, "{m}");
        }
    }
}
