//! `extract --model` and `extract --vad`. A model run on every row's features inside the job,
//! its outputs in the model columns, equal to Python onnxruntime's on the same features (the
//! references of crates/model/tests, made by scripts/asr_reference.py); the report's model
//! side; items cut at the speech segments silero-vad 6.2.3 finds (scripts/vad_reference.py),
//! one row each; the errors; and, with `--features failpoints`, out-of-memory model batches, a
//! lost model device, and a crash mid-way through a VAD job, with nothing lost or doubled.
//! Tests that need onnxruntime say why they skipped without it.

use crate::common;
use common::{bin, repo, run_with_peak_rss, stderr, write_wav, Tmp};

use crate::shared::skip_ort;

use crate::shared::model_outputs;
use model_outputs::{floats, worst};

use std::collections::{BTreeMap, HashMap};
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
    manifest_of(tmp, 1)
}

/// The five clips `copies` times over (`item0` … `item{5 × copies − 1}`).
fn manifest_of(tmp: &Tmp, copies: usize) -> std::path::PathBuf {
    let mut csv = String::from("id,path,offset,duration\n");
    let items = asr_ref()["items"].as_array().unwrap().clone();
    for (k, item) in items.iter().cycle().take(items.len() * copies).enumerate() {
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
        .args(["--workers", "1"])
        .args(args);
    if !args.contains(&"--device") {
        cmd.args(["--device", "cpu"]);
    }
    if let Some(f) = failpoints {
        cmd.env("FAILPOINTS", f);
    }
    cmd.output().unwrap()
}

/// Every row of the output, by id and offset (in µs); each at most once.
fn dataset(out: &Path, model: bool) -> BTreeMap<(String, i64), FeatureRow> {
    let mut rows = BTreeMap::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "parquet") {
            let (part, meta) = read_part(&path).unwrap();
            assert_eq!(meta.contains_key(META_MODEL), model, "{meta:?}");
            for r in part {
                let key = (r.id.clone(), (r.offset_s * 1e6).round() as i64);
                assert!(rows.insert(key, r).is_none(), "a row twice");
            }
        }
    }
    rows
}

/// One row per item, by id.
fn rows(out: &Path) -> HashMap<String, FeatureRow> {
    dataset(out, true)
        .into_values()
        .map(|r| (r.id.clone(), r))
        .collect()
}

/// Each `(args, says)` makes `extract` exit 2 with one line that says `says`, before it
/// writes anything to the output folder (one folder for all: a refused run must not make it
/// another job's).
fn each_is_one_clear_error(source: &Path, tmp: &Tmp, cases: &[(&[&str], &str)]) {
    let out = tmp.path("refused");
    for (args, says) in cases {
        let o = extract(source, &out, args, None);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            !out.join("__sonograph/job.json").exists(),
            "{args:?} left a job behind"
        );
    }
}

fn report(out: &Path) -> Value {
    let p = out.join("__sonograph/report.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Each row's model columns are what the model gives the row's features alone (within 1e-4:
/// a batch of other lengths pads differently).
fn outputs_are_the_models_on_each_row<'a>(
    rt: &sonograph_model::Runtime,
    model: &Path,
    rows: impl IntoIterator<Item = &'a FeatureRow>,
) {
    let mut runner = sonograph_model::ModelRunner::open(
        rt,
        model,
        &sonograph_model::runner::RunnerOptions::default(),
    )
    .unwrap();
    for row in rows {
        let alone = runner
            .run_batch(&[&row.features], row.num_bins as usize)
            .unwrap();
        let alone = alone.item(0).unwrap();
        let m = row.model.as_ref().unwrap();
        assert_eq!(
            (m.frames as usize, m.dim as usize),
            (alone.frames, alone.dim)
        );
        let e = worst(&m.values, &alone.data);
        assert!(e <= 1e-4, "{} at {} s: {e:e}", row.id, row.offset_s);
    }
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
        let e = worst(&model.values, &floats(&r[name]["alone"][k]));
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
    for (name, model, preset, precision, tol, batch) in [
        ("tdt", "tdt/encoder-model.onnx", "nemo-128", "f32", 1e-4, 8),
        ("ctc", "ctc/model.onnx", "nemo", "f32", 1e-4, 2),
        (
            "ctc-fp16",
            "ctc-fp16/model.onnx",
            "nemo",
            "f16",
            2.0 / 1024.0,
            2,
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
                &batch.to_string(),
            ],
            None,
        );
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        check_outputs(&out, name, tol);
        let rep = report(&out);
        let m = &rep["model"];
        // Which precision ran where: the features' on the feature devices, the model's input.
        assert!(["f32", "f64"].contains(&rep["precision"].as_str().unwrap()));
        assert_eq!(m["device"], "cpu", "{m}");
        assert_eq!(m["input_precision"], precision, "{m}");
        assert_eq!(m["kind"], if name == "tdt" { "encoder" } else { "ctc" });
        assert_eq!(m["rows"], 5);
        assert_eq!(m["rows_failed"], 0);
        assert!(m["busy_s"].as_f64().unwrap() > 0.0);
        assert!(!m["queue_depth"].as_array().unwrap().is_empty());
        assert_eq!(
            m["queue_capacity"].as_u64(),
            Some(8.max(2 * batch)),
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
    let cases: [(&[&str], &str); 6] = [
        (
            &["--model", tdt, "--preset", "nemo"],
            "takes 128 mel bins, and the spec gives 80 bins: use the preset",
        ),
        (
            &[
                "--model",
                tdt,
                "--preset",
                "nemo-128",
                "--model-device",
                "gpu:0",
            ],
            if cfg!(feature = "cuda") {
                "CUDA provider did not start"
            } else {
                "CPU only"
            },
        ),
        (
            &[
                "--model",
                tdt,
                "--preset",
                "nemo-128",
                "--model-device",
                "tpu",
            ],
            "expected cpu, gpu or gpu:N",
        ),
        (
            &["--model", tdt, "--preset", "nemo-128", "--model-batch", "0"],
            "model-batch 0 is outside 1..=4096",
        ),
        (
            &[
                "--model",
                tdt,
                "--preset",
                "nemo-128",
                "--model-batch",
                "5000",
            ],
            "model-batch 5000 is outside 1..=4096",
        ),
        (
            &["--preset", "nemo-128", "--model", "/nonexistent.onnx"],
            "no such model file",
        ),
    ];
    each_is_one_clear_error(&source, &tmp, &cases);
}

/// Model batches that run out of memory are split and retried; a lost model device (one
/// whose rows fail alone too) leaves its rows to a fresh CPU session of the model; a batch
/// that fails as a whole while each of its rows runs alone is run row by row on the same
/// device, which keeps its work. Every row comes out once, with the outputs the model gives
/// it (`--features failpoints`).
#[cfg(feature = "failpoints")]
#[test]
fn model_faults_lose_nothing() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("extract-model-faults");
    let source = manifest(&tmp);
    let model = repo("crates/model/tests/data/asr/tdt/encoder-model.onnx");
    for (k, failpoints) in [
        "model::oom=return(1)",
        // The first batch of 4 fails, and each of its rows alone: 5 failures, then none.
        "model::lost=5*return",
        "model::batch-fails=return",
    ]
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
        match k {
            0 => {
                assert!(m["out_of_memory"].as_u64().unwrap() >= 1, "{m}");
                assert!(m["splits"].as_u64().unwrap() >= 1, "{m}");
            }
            // Every row failed alone too: the device is lost, its rows go to the CPU session.
            1 => {
                assert_eq!(m["device_lost"], true, "{m}");
                assert_eq!(m["moved_to_fallback"].as_u64(), Some(5), "{m}");
            }
            // Batches fail, their rows alone do not: rows, not the device, are at fault, and
            // the device keeps its work.
            _ => {
                assert_eq!(m["device_lost"], false, "{m}");
                assert_eq!(m["moved_to_fallback"].as_u64(), Some(0), "{m}");
            }
        }
    }
}

fn vad_ref() -> Value {
    let p = repo("crates/model/tests/data/vad/reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// silero-vad's segments of `file` at its defaults, in seconds.
fn reference_segments(file: &str) -> Vec<(f64, f64)> {
    let r = vad_ref();
    let rate = r["files"][file]["sample_rate"].as_f64().unwrap();
    let case = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["file"] == file && c["params"] == serde_json::json!({}))
        .unwrap();
    case["timestamps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t[0].as_f64().unwrap() / rate, t[1].as_f64().unwrap() / rate))
        .collect()
}

/// A folder of the VAD test files (speech at 16 and 32 kHz; silence, noise, tones).
fn vad_corpus(tmp: &Tmp, copies: usize) -> std::path::PathBuf {
    let corpus = tmp.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for name in [
        "dialogue_16000",
        "dialogue_32000",
        "silence_16000",
        "noise_16000",
        "tones_16000",
    ] {
        let from = repo(&format!("crates/model/tests/data/vad/{name}.flac"));
        for c in 0..copies {
            let to = match c {
                0 => format!("{name}.flac"),
                _ => format!("{name}-{c}.flac"),
            };
            std::fs::copy(&from, corpus.join(to)).unwrap();
        }
    }
    corpus
}

/// Each item's rows are its speech segments, as silero-vad finds them at 16 kHz and at
/// 32 kHz (decimated: the job decodes at the spec's 16 kHz, and a 32 kHz file's segments fall
/// on even samples), each row the features of the segment's samples alone. Silence, noise and
/// tones are done with no row. With a model too, each segment's row has the model's outputs.
#[test]
fn vad_rows_are_silero_vads_segments_each_computed_alone() {
    let Some(rt) = skip_ort::runtime_or_skip() else {
        return;
    };
    let tmp = Tmp::new("extract-vad");
    let corpus = vad_corpus(&tmp, 1);
    let out = tmp.path("out");
    let o = extract(&corpus, &out, &["--preset", "nemo", "--vad"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = dataset(&out, false);
    let rep = report(&out);
    assert_eq!(
        (rep["items_ok"].as_u64(), rep["items_failed"].as_u64()),
        (Some(5), Some(0))
    );
    assert_eq!(rep["rows"].as_u64(), Some(rows.len() as u64));
    let spec = sonograph_dsp::FeatureSpec::preset("nemo").unwrap();
    for file in [
        "dialogue_16000",
        "dialogue_32000",
        "silence_16000",
        "noise_16000",
        "tones_16000",
    ] {
        let id = format!("{file}.flac");
        let got: Vec<&FeatureRow> = rows.values().filter(|r| r.id == id).collect();
        let want = reference_segments(file);
        assert_eq!(got.len(), want.len(), "{file}");
        let samples =
            sonograph_io::decode_mono(&corpus.join(&id), &Default::default(), 16000).unwrap();
        for (row, (start, end)) in got.iter().zip(&want) {
            assert!(
                (row.offset_s - start).abs() < 1e-9,
                "{file}: {} vs {start}",
                row.offset_s
            );
            assert!((row.duration_s - (end - start)).abs() < 1e-9, "{file}");
            let a = (start * 16000.0).round() as usize;
            let b = (end * 16000.0).round() as usize;
            let mut expect = Vec::new();
            sonograph_dsp::CpuExtractor::new(&spec)
                .unwrap()
                .extract(&samples[a..b], &mut expect)
                .unwrap();
            assert_eq!(row.features, expect, "{file} at {start} s");
        }
    }
    let again = extract(&corpus, &out, &["--preset", "nemo", "--vad"], None);
    assert!(
        stderr(&again).contains("already complete"),
        "{}",
        stderr(&again)
    );
    // The job names the onnxruntime its segments came from: a resume with another is refused.
    let job: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("__sonograph/job.json")).unwrap())
            .unwrap();
    let library = job["onnxruntime"].as_str().unwrap();
    assert!(library.starts_with("libonnxruntime"), "{job}");

    // Segments through a model: each row's outputs are what the model gives its features.
    let model_path = repo("crates/model/tests/data/asr/ctc/model.onnx");
    let with_model = tmp.path("with-model");
    let o = extract(
        &corpus,
        &with_model,
        &[
            "--preset",
            "nemo",
            "--vad",
            "--model",
            model_path.to_str().unwrap(),
        ],
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let modelled = dataset(&with_model, true);
    assert_eq!(modelled.len(), rows.len());
    for (key, row) in &modelled {
        assert_eq!(row.features, rows[key].features);
    }
    outputs_are_the_models_on_each_row(rt, &model_path, modelled.values());
}

#[test]
fn vad_settings_that_cannot_work_are_one_clear_error() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("extract-vad-errors");
    let corpus = vad_corpus(&tmp, 1);
    let cases: [(&[&str], &str); 3] = [
        (
            &["--preset", "nemo", "--vad", "--max-speech-s", "90"],
            "over max-seconds",
        ),
        (
            &["--preset", "iq-power", "--vad", "--sample-rate", "16000"],
            "for audio",
        ),
        (
            &["--preset", "nemo", "--vad", "--threshold", "1.5"],
            "threshold",
        ),
    ];
    each_is_one_clear_error(&corpus, &tmp, &cases);
}

/// A VAD job that dies as under kill -9 between writing a part and committing it, then runs
/// again, ends with the rows of a clean run, each once: the segments are numbered the same
/// on every run, and the ledger keeps which were written (`--features failpoints`).
#[cfg(feature = "failpoints")]
#[test]
fn a_vad_job_crashed_and_resumed_equals_a_clean_run() {
    use std::os::unix::process::ExitStatusExt;
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("extract-vad-crash");
    let corpus = vad_corpus(&tmp, 4);
    let args = [
        "--preset",
        "nemo",
        "--vad",
        "--part-mb",
        "1",
        "--batch-items",
        "2",
    ];
    let clean = tmp.path("clean");
    let o = extract(&corpus, &clean, &args, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let expect = dataset(&clean, false);
    assert!(
        report(&clean)["parts"].as_u64().unwrap() >= 2,
        "the crash falls mid-job"
    );
    let resumed = tmp.path("resumed");
    for point in ["writer-before-rename", "writer-before-commit"] {
        let o = extract(&corpus, &resumed, &args, Some(&format!("{point}=return")));
        assert_eq!(o.status.signal(), Some(6), "{point}: {}", stderr(&o));
    }
    let o = extract(&corpus, &resumed, &args, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = dataset(&resumed, false);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expect.keys().collect::<Vec<_>>()
    );
    for (key, row) in &got {
        assert_eq!(row, &expect[key], "{key:?}");
    }
    assert_eq!(report(&resumed)["items_ok"].as_u64(), Some(20));
}

/// The dialogue at 16 kHz, or `None` after recording why a peak-RSS test cannot run here.
fn dialogue_for_memory_test() -> Option<Vec<f32>> {
    skip_ort::runtime_or_skip()?;
    if !Path::new("/proc/self/status").exists() {
        skip_ort::skip("no /proc to read the peak RSS from");
        return None;
    }
    let path = repo("crates/model/tests/data/vad/dialogue_16000.flac");
    Some(sonograph_io::decode_mono(&path, &Default::default(), 16000).unwrap())
}

/// `extract --vad` of `x` as one 16 kHz WAV in `tmp/name`: its rows and the peak RSS (MiB).
fn vad_job_peak(tmp: &Tmp, name: &str, x: Vec<f32>) -> (BTreeMap<(String, i64), FeatureRow>, f64) {
    let corpus = tmp.path(&format!("corpus-{name}"));
    std::fs::create_dir_all(&corpus).unwrap();
    write_wav(&corpus.join("long.wav"), 16000, &x, false);
    drop(x);
    let out = tmp.path(&format!("out-{name}"));
    let (o, peak) = run_with_peak_rss(
        bin()
            .arg("extract")
            .arg(&corpus)
            .arg("--out")
            .arg(&out)
            .args(["--preset", "nemo", "--vad", "--device", "cpu"]),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_dir_all(&corpus).unwrap();
    (dataset(&out, false), peak)
}

/// An hour of speech (the dialogue, looped) through `extract --vad` in flat memory: the peak
/// RSS of the hour is that of half an hour (within the 40 MiB run-to-run spread of a job's
/// peak measured by the flat-memory test of tests/extract.rs), far below the 230 MB its
/// samples would take as f32; about six segments per loop, in order, each once. (Half an hour,
/// not ten minutes: measured here, debug build, the peak grows up to about half an hour and
/// not after — 10 min 174–177 MiB, 30 min 201–223 MiB, 60 min 210–227 MiB — which fits the
/// writer's part buffers (64 MiB parts, about 35 minutes of speech as `nemo` features) filling
/// up; not profiled.)
#[test]
fn an_hour_is_cut_at_its_speech_in_flat_memory() {
    let Some(dialogue) = dialogue_for_memory_test() else {
        return;
    };
    let tmp = Tmp::new("extract-vad-hour");
    let mut peaks = Vec::new();
    for minutes in [30usize, 60] {
        let n = minutes * 60 * 16000;
        let x: Vec<f32> = dialogue.iter().copied().cycle().take(n).collect();
        let (rows, peak) = vad_job_peak(&tmp, &minutes.to_string(), x);
        let loops = n as f64 / dialogue.len() as f64;
        assert!(
            (rows.len() as f64 - 6.0 * loops).abs() < loops,
            "{} rows for {loops:.0} loops",
            rows.len()
        );
        let mut end = 0.0;
        for r in rows.values() {
            assert!(r.offset_s >= end, "segments overlap at {}", r.offset_s);
            end = r.offset_s + r.duration_s;
        }
        assert!(end <= n as f64 / 16000.0 + 1e-9);
        peaks.push(peak);
    }
    eprintln!(
        "extract --vad peak RSS: 30 min {:.0} MiB, 60 min {:.0} MiB",
        peaks[0], peaks[1]
    );
    assert!(
        peaks[1] < peaks[0] + 40.0,
        "memory grows with length: {peaks:?}"
    );
}

/// Speech, then a long silence: what a segment's end may still need is let go as soon as the
/// silence is two pads long, so half an hour of silence after the dialogue takes the memory of
/// two minutes (before, the job held the silence until the file ended: 256 against 116 MiB),
/// and the segments are the dialogue's alone.
#[test]
fn silence_after_speech_is_not_held() {
    let Some(dialogue) = dialogue_for_memory_test() else {
        return;
    };
    let tmp = Tmp::new("extract-vad-silence");
    let mut peaks = Vec::new();
    for minutes in [2usize, 30] {
        let mut x = dialogue.clone();
        x.resize(dialogue.len() + minutes * 60 * 16000, 0.0);
        let (rows, peak) = vad_job_peak(&tmp, &minutes.to_string(), x);
        assert_eq!(rows.len(), reference_segments("dialogue_16000").len());
        peaks.push(peak);
    }
    eprintln!(
        "extract --vad peak RSS: dialogue + 2 min of silence {:.0} MiB, + 30 min {:.0} MiB",
        peaks[0], peaks[1]
    );
    assert!(
        peaks[1] < peaks[0] + 40.0,
        "the silence was held: {peaks:?}"
    );
}

/// A data device and a model device: the features on the GPU (lavapipe here, in CI too), the
/// model on the CPU behind its queue; each row's model outputs are what the model gives that
/// row's features, and the report names both devices.
#[cfg(feature = "gpu")]
#[test]
fn features_on_the_gpu_feed_the_model_on_the_cpu() {
    let Some(rt) = skip_ort::runtime_or_skip() else {
        return;
    };
    if !common::has_gpu_adapter() {
        return;
    }
    let tmp = Tmp::new("extract-model-gpu");
    let source = manifest(&tmp);
    let out = tmp.path("out");
    let model_path = repo("crates/model/tests/data/asr/ctc/model.onnx");
    let o = extract(
        &source,
        &out,
        &[
            "--preset",
            "nemo",
            "--device",
            "gpu",
            "--model",
            model_path.to_str().unwrap(),
        ],
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let rep = report(&out);
    let devices: Vec<&str> = rep["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["device"].as_str().unwrap())
        .collect();
    assert!(devices.iter().all(|d| d.starts_with("gpu")), "{devices:?}");
    assert_eq!(rep["model"]["device"], "cpu");
    assert_eq!(rep["model"]["rows"], 5);
    let rows = rows(&out);
    assert_eq!(rows.len(), 5);
    outputs_are_the_models_on_each_row(rt, &model_path, rows.values());
}

/// The report says which side waits. A slow model (50 ms a batch) behind a fast data side
/// finds its queue full and is hardly ever starved of rows once warm; a slow data side (80 ms
/// per feature batch) leaves a fast model starved most of the job (`--features failpoints`).
#[cfg(feature = "failpoints")]
#[test]
fn the_report_shows_which_side_waits() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("extract-model-sides");
    let source = manifest_of(&tmp, 8);
    let model = repo("crates/model/tests/data/asr/ctc/model.onnx");
    let args = [
        "--preset",
        "nemo",
        "--model",
        model.to_str().unwrap(),
        "--model-batch",
        "2",
        "--batch-items",
        "4",
    ];
    let slow_model = tmp.path("slow-model");
    let o = extract(
        &source,
        &slow_model,
        &args,
        Some("model-stage::run=sleep(50)"),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let m = &report(&slow_model)["model"];
    let (busy, starved) = (
        m["busy_s"].as_f64().unwrap(),
        m["starved_s"].as_f64().unwrap(),
    );
    eprintln!("slow model: busy {busy:.2} s, starved {starved:.3} s");
    assert!(busy >= 20.0 * 0.05, "{m}");
    assert!(
        starved < 0.2 * busy,
        "a fed model starved {starved} s of {busy} s: {m}"
    );
    let depths: Vec<u64> = m["queue_depth"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["depth"].as_u64().unwrap())
        .collect();
    let full = depths.iter().filter(|&&d| d >= 4).count();
    assert!(2 * full >= depths.len(), "the queue ran low: {depths:?}");

    let slow_data = tmp.path("slow-data");
    let o = extract(
        &source,
        &slow_data,
        &args,
        Some("executor::batch=sleep(80)"),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let m = &report(&slow_data)["model"];
    let (busy, starved) = (
        m["busy_s"].as_f64().unwrap(),
        m["starved_s"].as_f64().unwrap(),
    );
    eprintln!("slow data: busy {busy:.2} s, starved {starved:.3} s");
    assert!(starved > busy, "a model behind a slow data side: {m}");
    assert!(starved >= 0.08 * 5.0, "{m}");
}

/// Speech segments computed on the GPU (lavapipe here, in CI too): the same rows as on the
/// CPU, the same features (NeMo's preset runs at f64 on both; within 1e-5 in case a driver
/// rounds differently).
#[cfg(feature = "gpu")]
#[test]
fn vad_segments_on_the_gpu_are_the_cpus() {
    if skip_ort::runtime_or_skip().is_none() || !common::has_gpu_adapter() {
        return;
    }
    let tmp = Tmp::new("extract-vad-gpu");
    let corpus = vad_corpus(&tmp, 1);
    let mut runs = Vec::new();
    for device in ["cpu", "gpu"] {
        let out = tmp.path(device);
        let o = extract(
            &corpus,
            &out,
            &["--preset", "nemo", "--vad", "--device", device],
            None,
        );
        assert!(o.status.success(), "{device}: {}", stderr(&o));
        runs.push(dataset(&out, false));
    }
    let (cpu, gpu) = (&runs[0], &runs[1]);
    assert_eq!(
        cpu.keys().collect::<Vec<_>>(),
        gpu.keys().collect::<Vec<_>>()
    );
    for (key, row) in gpu {
        let e = worst(&row.features, &cpu[key].features);
        assert!(e <= 1e-5, "{key:?}: {e:e}");
    }
}
