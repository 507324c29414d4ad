//! `sonograph vad` and `sonograph transcribe` end to end: the segments of silero-vad 6.2.3 at
//! every rate, the transcripts of onnx-asr 0.12.0, flags, errors, the missing runtime, and an
//! hour of audio in flat memory. The references are those of crates/model/tests (made by
//! scripts/vad_reference.py and scripts/asr_reference.py). Tests that need onnxruntime say
//! why they skipped without it (tests/shared/skip_ort.rs).

// Not every helper of the shared module is used here.
use crate::common;
#[cfg(feature = "failpoints")]
use crate::shared::publish_crash;
use common::{bin, repo, run_with_peak_rss, stderr, write_wav, Tmp};

use crate::shared::skip_ort;

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use sonograph_dsp::{CpuExtractor, FeatureSpec};
use sonograph_io::{decode_mono, DecodeOptions};

fn vad_ref() -> Value {
    let p = repo("crates/model/tests/data/vad/reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn asr_ref() -> Value {
    let p = repo("crates/model/tests/data/asr/reference.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The transcripts in a `transcribe` output folder: its parts' lines, part after part.
pub(crate) fn transcripts(out: &Path) -> Vec<Value> {
    parts(out, "jsonl").iter().flat_map(|p| lines(p)).collect()
}

/// The parts of an output folder with this extension, in order.
fn parts(out: &Path, extension: &str) -> Vec<std::path::PathBuf> {
    let mut parts: Vec<_> = std::fs::read_dir(out)
        .unwrap_or_else(|e| panic!("{}: {e}", out.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .collect();
    parts.sort();
    parts
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

/// `sonograph transcribe SOURCE --model MODEL --out OUT EXTRA...`.
fn transcribe(source: &Path, model: &Path, out: &Path, extra: &[&str]) -> Output {
    bin()
        .arg("transcribe")
        .arg(source)
        .arg("--model")
        .arg(model)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// `vad` over files at 8, 16, 32 and 48 kHz gives silero-vad's timestamps with the defaults
/// (in samples at 16 kHz: × 2 at 8 kHz, ÷ the decimation step above), and the flags reach the
/// parameters (the max-speech cases, both ways).
#[test]
fn vad_writes_silero_vads_timestamps_at_16_khz() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let r = vad_ref();
    let tmp = Tmp::new("vad-cli");
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("dialogue_16000", vec![], "{}"),
        ("dialogue_8000", vec![], "{}"),
        ("dialogue_32000", vec![], "{}"),
        ("espeak_48000", vec![], "{}"),
        (
            "tones_16000",
            vec!["--threshold", "0.1", "--neg-threshold", "0.05"],
            "",
        ),
        (
            "dialogue_16000",
            vec![
                "--max-speech-s",
                "2.0",
                "--use-max-poss-sil-at-max-speech",
                "false",
            ],
            "",
        ),
        (
            "dialogue_16000",
            vec![
                "--max-speech-s",
                "1.0",
                "--min-silence-at-max-speech-ms",
                "200",
            ],
            "",
        ),
        (
            "dialogue_16000",
            vec![
                "--min-speech-ms",
                "100",
                "--min-silence-ms",
                "50",
                "--speech-pad-ms",
                "0",
            ],
            "",
        ),
    ];
    for (k, (name, flags, _)) in cases.iter().enumerate() {
        let file = &r["files"][name];
        let rate = file["sample_rate"].as_u64().unwrap();
        let input = repo(file["path"].as_str().unwrap());
        let out = tmp.path(&format!("{k}.jsonl"));
        let mut args = vec![
            "vad",
            input.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(flags.iter().copied());
        let o = run(&args);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        // The reference case with the same parameters.
        let want_params: serde_json::Map<String, Value> = flags
            .chunks(2)
            .map(|f| {
                let key = match f[0] {
                    "--threshold" => "threshold",
                    "--neg-threshold" => "neg_threshold",
                    "--max-speech-s" => "max_speech_duration_s",
                    "--use-max-poss-sil-at-max-speech" => "use_max_poss_sil_at_max_speech",
                    "--min-silence-at-max-speech-ms" => "min_silence_at_max_speech",
                    "--min-speech-ms" => "min_speech_duration_ms",
                    "--min-silence-ms" => "min_silence_duration_ms",
                    "--speech-pad-ms" => "speech_pad_ms",
                    f => panic!("{f}"),
                };
                let v: Value = serde_json::from_str(f[1]).unwrap();
                (key.to_string(), v)
            })
            .collect();
        let case = r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["file"] == *name
                    && c["params"].as_object().unwrap().iter().all(|(k, v)| {
                        want_params
                            .get(k)
                            .is_some_and(|w| w.as_f64() == v.as_f64() && w.as_bool() == v.as_bool())
                    })
                    && c["params"].as_object().unwrap().len() == want_params.len()
            })
            .unwrap_or_else(|| panic!("no reference case for {name} {flags:?}"));
        let want: Vec<(u64, u64)> = case["timestamps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let (s, e) = (p[0].as_u64().unwrap(), p[1].as_u64().unwrap());
                (s * 16000 / rate, e * 16000 / rate)
            })
            .collect();
        let got: Vec<(u64, u64)> = lines(&out)
            .iter()
            .map(|l| {
                assert_eq!(l["source"], input.to_str().unwrap());
                let (s, e) = (l["start"].as_u64().unwrap(), l["end"].as_u64().unwrap());
                assert_eq!(l["start_s"].as_f64().unwrap(), s as f64 / 16000.0);
                assert_eq!(l["end_s"].as_f64().unwrap(), e as f64 / 16000.0);
                (s, e)
            })
            .collect();
        assert_eq!(got, want, "{name} {flags:?}");
    }
}

/// A folder of files at several rates, segmented in parallel, gives what one worker gives, in
/// the folder's order, each file as `vad` on it alone says.
#[test]
fn vad_over_a_folder_in_parallel_keeps_order_and_results() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("vad-folder");
    let corpus = tmp.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    let files = [
        "crates/model/tests/data/vad/dialogue_8000.flac",
        "crates/model/tests/data/vad/dialogue_32000.flac",
        "crates/model/tests/data/vad/silence_16000.flac",
        "tests/data/sample.flac",
        "tests/data/speech_44100_stereo.flac",
        "tests/data/speech_48000_mono_s16.wav",
    ];
    for (k, f) in files.iter().enumerate() {
        let name = Path::new(f).file_name().unwrap().to_str().unwrap();
        std::fs::copy(repo(f), corpus.join(format!("{k}_{name}"))).unwrap();
    }
    let mut outputs = Vec::new();
    for jobs in ["1", "3"] {
        let out = tmp.path(&format!("j{jobs}.jsonl"));
        let o = run(&[
            "vad",
            corpus.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--jobs",
            jobs,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        outputs.push(std::fs::read_to_string(&out).unwrap());
    }
    assert_eq!(outputs[0], outputs[1]);
    let mut expect = String::new();
    for entry in {
        let mut v: Vec<_> = std::fs::read_dir(&corpus)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    } {
        let out = tmp.path("one.jsonl");
        let o = run(&[
            "vad",
            entry.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        // The folder run names files by their path relative to the folder.
        let name = entry.file_name().unwrap().to_str().unwrap().to_string();
        for l in lines(&out) {
            let mut l = l.clone();
            l["source"] = Value::String(name.clone());
            expect.push_str(&format!("{l}\n"));
        }
    }
    assert_eq!(outputs[0], expect);
    assert!(expect.lines().count() >= 10);
}

/// Bad input: one line naming the file and the reason, exit 2, no output left behind.
#[test]
fn vad_refuses_bad_input_with_one_line() {
    let tmp = Tmp::new("vad-bad");
    let junk = tmp.path("junk.wav");
    std::fs::write(&junk, b"RIFF....WAVEnot really").unwrap();
    let mut nan = vec![0.1f32; 16000];
    nan[9000] = f32::NAN;
    let nan_wav = tmp.path("nan.wav");
    write_wav(&nan_wav, 16000, &nan, true);
    let out = tmp.path("s.jsonl");
    let good = repo("tests/data/sample.flac");
    for (args, needle) in [
        (
            vec![tmp.path("missing.wav").to_str().unwrap().to_string()],
            "missing.wav",
        ),
        (vec![junk.to_str().unwrap().to_string()], "junk.wav"),
        (
            vec![
                good.to_str().unwrap().to_string(),
                nan_wav.to_str().unwrap().to_string(),
            ],
            "sample 9000",
        ),
        (
            vec![
                good.to_str().unwrap().to_string(),
                "--threshold".into(),
                "1.5".into(),
            ],
            "threshold",
        ),
        (
            vec![
                good.to_str().unwrap().to_string(),
                "--ort-lib".into(),
                "/nonexistent/libonnxruntime.so".into(),
            ],
            "/nonexistent/libonnxruntime.so",
        ),
    ] {
        let mut a = vec!["vad".to_string()];
        a.extend(args);
        a.extend(["--out".to_string(), out.to_str().unwrap().to_string()]);
        let o = bin().args(&a).output().unwrap();
        let err = stderr(&o);
        if needle == "sample 9000" && err.contains("onnxruntime not found") {
            continue; // needs the runtime to reach the samples; the skip is recorded elsewhere
        }
        assert_eq!(o.status.code(), Some(2), "{a:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{a:?}: {err}");
        assert!(!out.exists(), "{a:?} left an output");
    }
    // An output that cannot be written is the user's to fix too: one line, exit 2.
    let nowhere = tmp.path("missing-folder/s.jsonl");
    let o = bin()
        .arg("vad")
        .arg(&good)
        .arg("--out")
        .arg(&nowhere)
        .output()
        .unwrap();
    let err = stderr(&o);
    if !err.contains("onnxruntime not found") {
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("missing-folder/s.jsonl: cannot write"),
            "{err}"
        );
    }
}

/// Without onnxruntime anywhere sonograph looks, the model commands say in one line how to
/// install it (and exit 2); the other commands are untouched.
#[test]
fn a_missing_runtime_says_how_to_install_it() {
    let tmp = Tmp::new("no-ort");
    let out = tmp.path("s.jsonl");
    let input = repo("tests/data/sample.flac");
    // No python3 on the PATH, no SONOGRAPH_ORT_LIB (bin() clears it), nothing next to the
    // binary (target/debug has no onnxruntime).
    for cmd in [
        vec![
            "vad",
            input.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        vec![
            "transcribe",
            input.to_str().unwrap(),
            "--model",
            "x",
            "--out",
            out.to_str().unwrap(),
        ],
    ] {
        let o = bin().args(&cmd).env("PATH", "").output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("pip install onnxruntime==1.31.1"), "{err}");
    }
    let o = bin().args(["presets"]).env("PATH", "").output().unwrap();
    assert!(o.status.success());
}

/// The ASR items cut from the committed audio, as the reference script cut them.
fn asr_items() -> Vec<Vec<f32>> {
    asr_ref()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let x = decode_mono(
                &repo(item["source"].as_str().unwrap()),
                &DecodeOptions::default(),
                16000,
            )
            .unwrap();
            let a = (item["start_s"].as_f64().unwrap() * 16000.0) as usize;
            let n = (item["duration_s"].as_f64().unwrap() * 16000.0) as usize;
            x[a..a + n].to_vec()
        })
        .collect()
}

/// `transcribe` of a folder of the five items, one window each, with the CTC, f16 CTC and TDT
/// models: onnx-asr's transcripts (text, tokens, timestamps); the same as Parquet.
#[test]
fn transcribe_gives_onnx_asrs_transcripts() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let r = asr_ref();
    let tmp = Tmp::new("transcribe");
    let corpus = tmp.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for (k, x) in asr_items().iter().enumerate() {
        write_wav(&corpus.join(format!("item{k}.wav")), 16000, x, true);
    }
    for name in ["ctc", "ctc-fp16", "tdt"] {
        let out = tmp.path(&format!("{name}.jsonl"));
        let model = repo("crates/model/tests/data/asr").join(name);
        let fixed = ["--segment", "fixed", "--window-s", "60", "--batch", "3"];
        let o = transcribe(&corpus, &model, &out, &fixed);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let rows = transcripts(&out);
        assert_eq!(rows.len(), 5);
        for (k, row) in rows.iter().enumerate() {
            let want = &r[name]["transcripts"][k];
            assert_eq!(row["id"], format!("item{k}.wav#0"));
            assert_eq!(row["text"], want["text"], "{name} item {k}");
            assert_eq!(row["tokens"], want["tokens"], "{name} item {k}");
            assert_eq!(row["timestamps"], want["timestamps"], "{name} item {k}");
        }
        // By default (speech segments for long items), items within the model's window are
        // transcribed whole, as onnx-asr transcribes them: the same transcripts.
        let default = tmp.path(&format!("{name}-default.jsonl"));
        let o = transcribe(&corpus, &model, &default, &[]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert_eq!(transcripts(&default), rows, "{name}: the default mode");
        let pq = tmp.path(&format!("{name}.parquet"));
        let o = transcribe(&corpus, &model, &pq, &["--segment", "fixed"]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        // The same rows as the JSON lines.
        let table: Vec<_> = parts(&pq, "parquet")
            .iter()
            .flat_map(|p| sonograph_io::transcripts::read_transcripts(p).unwrap())
            .collect();
        assert_eq!(table.len(), rows.len());
        for (t, row) in table.iter().zip(&rows) {
            assert_eq!(serde_json::json!(t.id), row["id"]);
            assert_eq!(serde_json::json!(t.text), row["text"]);
            assert_eq!(serde_json::json!(t.tokens), row["tokens"]);
            assert_eq!(serde_json::json!(t.timestamps), row["timestamps"]);
            assert_eq!(serde_json::json!(t.end_s), row["end_s"]);
        }
    }
}

/// `transcribe --segment vad` cuts a long file where `vad` (on the same 16 kHz audio) says and
/// gives each segment the transcript the model gives that cut alone: the streamed buffer hands
/// each segment exactly its samples. Token times are offset by the segment's start.
#[test]
fn transcribe_by_vad_segments_transcribes_each_cut() {
    let Some(rt) = skip_ort::runtime_or_skip() else {
        return;
    };
    let tmp = Tmp::new("transcribe-vad");
    let input = repo("crates/model/tests/data/vad/dialogue_16000.flac");
    let model_dir = repo("crates/model/tests/data/asr/tdt");
    let out = tmp.path("t.jsonl");
    let segs = tmp.path("s.jsonl");
    // A window shorter than the file: it is cut at its speech.
    let o = transcribe(
        &input,
        &model_dir,
        &out,
        &["--max-speech-s", "3", "--window-s", "5"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&[
        "vad",
        input.to_str().unwrap(),
        "--out",
        segs.to_str().unwrap(),
        "--max-speech-s",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = transcripts(&out);
    let segs = lines(&segs);
    assert!(rows.len() >= 6, "{} segments", rows.len());
    assert_eq!(rows.len(), segs.len());
    let x = decode_mono(&input, &DecodeOptions::default(), 16000).unwrap();
    let mut model = sonograph_model::AsrModel::open(rt, &model_dir, 1).unwrap();
    let spec = FeatureSpec::preset("nemo-128").unwrap();
    for (row, seg) in rows.iter().zip(&segs) {
        let (a, b) = (row["start"].as_u64().unwrap(), row["end"].as_u64().unwrap());
        assert_eq!(
            (a, b),
            (seg["start"].as_u64().unwrap(), seg["end"].as_u64().unwrap())
        );
        let mut f = Vec::new();
        CpuExtractor::new(&spec)
            .unwrap()
            .extract(&x[a as usize..b as usize], &mut f)
            .unwrap();
        let t = model.transcribe(&[&f]).unwrap().remove(0).unwrap();
        assert_eq!(row["text"], t.text.as_str());
        let start_s = a as f64 / 16000.0;
        let got: Vec<f64> = row["timestamps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(got.len(), t.timestamps.len());
        // serde_json's default float parser is not correctly rounded (it may read the
        // shortest repr back one ulp off), hence 1e-12 rather than equality.
        for (g, x) in got.iter().zip(&t.timestamps) {
            assert!((g - (start_s + x)).abs() < 1e-12, "{g} vs {}", start_s + x);
        }
    }
}

/// The five reference items and a WAV that does not decode, in a folder.
fn corpus_with_a_bad_item(tmp: &Tmp) -> std::path::PathBuf {
    let corpus = tmp.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for (k, x) in asr_items().iter().enumerate() {
        write_wav(&corpus.join(format!("item{k}.wav")), 16000, x, true);
    }
    std::fs::write(corpus.join("item2-bad.wav"), b"RIFF\x10\0\0\0WAVEjunkjunk").unwrap();
    corpus
}

/// `transcribe` is a job of the pipeline: an item that does not decode is listed (exit 3)
/// while the others are transcribed, parts hold whole items, a run again finds the shard
/// complete, and two shards into one folder give the one run's transcripts.
#[test]
fn transcribe_lists_a_bad_item_and_shards_and_resumes() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("transcribe-job");
    let corpus = corpus_with_a_bad_item(&tmp);
    let model = repo("crates/model/tests/data/asr/ctc");
    let out = tmp.path("out");
    let flags = ["--items-per-part", "2"];
    let o = transcribe(&corpus, &model, &out, &flags);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("failed: item2-bad.wav: ") && err.contains("item2-bad.wav"),
        "{err}"
    );
    assert!(err.contains("5 items ok, 1 failed"), "{err}");
    let rows = transcripts(&out);
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "item0.wav#0",
            "item1.wav#0",
            "item2.wav#0",
            "item3.wav#0",
            "item4.wav#0"
        ]
    );
    // Parts close after two items (the failed one counts): three parts.
    assert_eq!(parts(&out, "jsonl").len(), 3);
    let o = transcribe(&corpus, &model, &out, &flags);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("already complete"), "{}", stderr(&o));
    assert_eq!(transcripts(&out), rows);
    let sharded = tmp.path("sharded");
    for i in ["1", "0"] {
        let o = transcribe(
            &corpus,
            &model,
            &sharded,
            &["--shard-index", i, "--shard-count", "2"],
        );
        assert_eq!(
            o.status.code(),
            Some(if i == "1" { 0 } else { 3 }),
            "{}",
            stderr(&o)
        );
    }
    let mut got = transcripts(&sharded);
    got.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    assert_eq!(got, rows, "two shards");
    // A single file is shard 0's item: another shard has nothing to do.
    let one = tmp.path("one");
    let shard_1 = ["--shard-index", "1", "--shard-count", "2"];
    let o = transcribe(&corpus.join("item0.wav"), &model, &one, &shard_1);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("0 items ok, 0 failed"),
        "{}",
        stderr(&o)
    );
    assert!(parts(&one, "jsonl").is_empty());
}

/// A crash (by failpoint, as kill -9 or a power cut) at each step of publishing each file of
/// a `transcribe` run, and the same command run again gives the transcripts of a clean run,
/// each item's once. Needs the failpoints build:
/// `cargo test --features failpoints --test integration models::transcribe_after_a_crash`.
#[cfg(feature = "failpoints")]
#[test]
fn transcribe_after_a_crash_at_any_step_of_any_publish_equals_a_clean_run() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("transcribe-crash");
    let corpus = corpus_with_a_bad_item(&tmp);
    let model = repo("crates/model/tests/data/asr/ctc");
    let run = |out: &Path, failpoints: &str| {
        bin()
            .arg("transcribe")
            .arg(&corpus)
            .arg("--model")
            .arg(&model)
            .arg("--out")
            .arg(out)
            .args(["--items-per-part", "2"])
            .env("FAILPOINTS", failpoints)
            .output()
            .unwrap()
    };
    let clean = tmp.path("clean");
    assert_eq!(run(&clean, "").status.code(), Some(3));
    let reference = transcripts(&clean);
    // job.json, 3 parts, the report, the marker; a finished run lists the bad item (exit 3),
    // a rerun that finds the job complete says so (exit 0).
    let crashes = publish_crash::crash_at_every_publish(
        &tmp,
        [6, 6, 6],
        run,
        |o| o.status.code() == Some(3),
        |o| matches!(o.status.code(), Some(0 | 3)),
        |out, label| assert_eq!(transcripts(out), reference, "{label}"),
    );
    assert_eq!(crashes, 18);
}

/// Bad models and flags stop `transcribe` with one line naming the cause.
#[test]
fn transcribe_refuses_bad_models_and_flags() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("transcribe-bad");
    let out = tmp.path("t.jsonl");
    let input = repo("tests/data/sample.flac");
    let ctc = repo("crates/model/tests/data/asr/ctc");
    let nope = tmp.path("nope");
    for (model, extra, needle) in [
        (&nope, vec![], "not a model folder"),
        (
            &ctc,
            vec!["--segment", "fixed", "--window-s", "0"],
            "window-s must be > 0",
        ),
    ] {
        let o = transcribe(&input, model, &out, &extra);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
        assert!(!out.exists());
    }
}

/// A segment the model cannot take (a last window of 100 samples: no 10 ms frame) is named on
/// stderr, the others are written, and the command exits 3.
#[test]
fn transcribe_names_segments_it_cannot_take_and_exits_3() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let tmp = Tmp::new("transcribe-short");
    let out = tmp.path("t.jsonl");
    let input = repo("tests/data/speech_16000_mono_s16.wav"); // 32000 samples
    let model = repo("crates/model/tests/data/asr/ctc");
    // Two windows of 15950 samples and 100 left over.
    let o = transcribe(
        &input,
        &model,
        &out,
        &["--segment", "fixed", "--window-s", "0.996875"],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("speech_16000_mono_s16.wav#2") && err.contains("no frames"),
        "{err}"
    );
    let rows = transcripts(&out);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[1]["start"].as_u64(), rows[1]["end"].as_u64()),
        (Some(15950), Some(31900))
    );
}

/// An hour of speech (the dialogue, looped) through `vad` in flat memory: the peak RSS of the
/// hour is that of ten minutes, far below the 230 MB its samples would take as f32; the
/// segments come in order, about six per loop.
#[test]
fn an_hour_of_audio_is_segmented_in_flat_memory() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    if !Path::new("/proc/self/status").exists() {
        skip_ort::skip("no /proc to read the peak RSS from");
        return;
    }
    let tmp = Tmp::new("vad-hour");
    let dialogue = decode_mono(
        &repo("crates/model/tests/data/vad/dialogue_16000.flac"),
        &DecodeOptions::default(),
        16000,
    )
    .unwrap();
    let mut peaks = Vec::new();
    let mut counts = Vec::new();
    for minutes in [10usize, 60] {
        let n = minutes * 60 * 16000;
        let x: Vec<f32> = dialogue.iter().copied().cycle().take(n).collect();
        let wav = tmp.path(&format!("{minutes}.wav"));
        write_wav(&wav, 16000, &x, false);
        drop(x);
        let out = tmp.path(&format!("{minutes}.jsonl"));
        let (o, peak) = run_with_peak_rss(bin().args([
            "vad",
            wav.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]));
        assert!(o.status.success(), "{}", stderr(&o));
        let rows = lines(&out);
        let mut last = 0;
        for r in &rows {
            let (s, e) = (r["start"].as_u64().unwrap(), r["end"].as_u64().unwrap());
            assert!(last <= s && s < e && e <= n as u64, "{last} {s} {e}");
            last = e;
        }
        std::fs::remove_file(&wav).unwrap();
        peaks.push(peak);
        counts.push(rows.len());
    }
    eprintln!(
        "vad peak RSS: 10 min {:.0} MiB, 60 min {:.0} MiB; segments {counts:?}",
        peaks[0], peaks[1]
    );
    let loops = 3600.0 * 16000.0 / dialogue.len() as f64;
    assert!(
        (counts[1] as f64 - 6.0 * loops).abs() < loops,
        "{counts:?} for {loops:.0} loops"
    );
    assert!(peaks[1] < 150.0, "an hour took {:.0} MiB", peaks[1]);
    assert!(
        peaks[1] < peaks[0] + 10.0,
        "memory grows with length: {peaks:?}"
    );
}
