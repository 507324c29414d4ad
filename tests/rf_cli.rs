//! `sonograph synth-iq` and `sonograph rf-features` end to end: bit-identical datasets for any
//! worker count, shard split, resume or device; Parquet rows; features of what was written;
//! exit codes and messages on bad input.

use crate::common;
#[cfg(feature = "failpoints")]
use crate::shared::publish_crash;
use common::{bin, repo, stderr, Tmp};

use std::collections::BTreeMap;
use std::path::Path;

use sha2::Digest;
use sonograph_io::table::{read_table, Column};

/// Every file under `dir` (relative name → bytes), dataset.json included.
/// A dataset folder's files by name, its runs' reports (`__sonograph/`) left out.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() == "__sonograph" {
            continue;
        }
        out.insert(
            p.file_name().unwrap().to_string_lossy().into_owned(),
            std::fs::read(&p).unwrap(),
        );
    }
    out
}

const BASE: &[&str] = &[
    "synth-iq",
    "--count",
    "12",
    "--samples",
    "8192",
    "--modulation",
    "qpsk,gmsk,16qam,ofdm,fm",
    "--snr-db",
    "-5:30",
    "--seed",
    "42",
];

fn synth(out: &Path, extra: &[&str]) -> std::process::Output {
    bin()
        .args(BASE)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn synth_iq_is_identical_for_any_workers_shards_and_resume() {
    let tmp = Tmp::new("rf-synth");
    let one = tmp.path("one");
    let o = synth(&one, &["--workers", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let reference = files(&one);
    assert_eq!(reference.len(), 1 + 2 * 12);
    // Each recording's `core:sha512` is its own data's (the group's hashes are computed side
    // by side, so a lane mixed up would still give the same files every run).
    for (name, meta) in reference.iter().filter(|(n, _)| n.ends_with(".sigmf-meta")) {
        let data = &reference[&name.replace(".sigmf-meta", ".sigmf-data")];
        let meta: serde_json::Value = serde_json::from_slice(meta).unwrap();
        let want: String = sha2::Sha512::digest(data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(meta["global"]["core:sha512"], want.as_str(), "{name}");
    }

    let two = tmp.path("two");
    assert!(synth(&two, &["--workers", "2"]).status.success());
    assert_eq!(files(&two), reference, "two workers");

    // Three shards into one folder, one of them through the Kubernetes variable.
    let sharded = tmp.path("sharded");
    for i in ["0", "2"] {
        let o = synth(&sharded, &["--shard-index", i, "--shard-count", "3"]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = bin()
        .args(BASE)
        .arg("--out")
        .arg(&sharded)
        .args(["--shard-count", "3"])
        .env("JOB_COMPLETION_INDEX", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(files(&sharded), reference, "three shards");

    // Resume: recordings deleted (and a torn data file left behind) are made again.
    std::fs::remove_file(sharded.join("sample-000000005.sigmf-meta")).unwrap();
    std::fs::write(sharded.join("sample-000000005.sigmf-data"), b"torn").unwrap();
    std::fs::remove_file(sharded.join("sample-000000011.sigmf-meta")).unwrap();
    let o = synth(&sharded, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("2 recordings written, 10 already there"),
        "{}",
        stderr(&o)
    );
    assert_eq!(files(&sharded), reference, "resumed");
    // Each run's report, beside the recordings: the shards' under their index, the resume's
    // (one shard) as report.json.
    let resumed = report(&sharded);
    assert_eq!(resumed["recordings"], 12);
    assert_eq!(resumed["written"], 2);
    assert_eq!(resumed["already_there"], 10);
    assert_eq!(resumed["noise_device"], "cpu");
    assert_eq!(resumed["seed"], 42);
    for i in 0..3 {
        let text = std::fs::read_to_string(sharded.join(format!("__sonograph/report-{i:05}.json")))
            .unwrap();
        let shard: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(shard["written"], 4, "shard {i}: {shard}");
        assert_eq!(shard["shard_index"], i);
    }
}

/// A crash (by failpoint, as kill -9 or a power cut) at each step of publishing each file —
/// a recording's data, its metadata, dataset.json — and the same command run again gives the
/// dataset of a clean run, byte for byte, with no temporary file left: a recording whose
/// metadata exists is never a torn one. Needs the failpoints build:
/// `cargo test --features failpoints --test integration rf_cli::`.
#[cfg(feature = "failpoints")]
#[test]
fn synth_iq_after_a_crash_at_any_step_of_any_publish_equals_a_clean_run() {
    let tmp = Tmp::new("rf-publish-crash");
    let run = |out: &Path, failpoints: &str| {
        bin()
            .args([
                "synth-iq",
                "--count",
                "3",
                "--samples",
                "4096",
                "--seed",
                "7",
            ])
            .arg("--out")
            .arg(out)
            .env("FAILPOINTS", failpoints)
            .output()
            .unwrap()
    };
    let clean = tmp.path("clean");
    assert!(run(&clean, "").status.success());
    let reference = files(&clean);
    // dataset.json, 3 × (data, metadata) and the run's report, each synced and renamed;
    // folder syncs for dataset.json, the group's data, the group's metadata and the report.
    let crashes = publish_crash::crash_at_every_publish(
        &tmp,
        [8, 8, 4],
        run,
        |o| o.status.success(),
        |o| o.status.success(),
        |out, label| {
            assert_eq!(files(out), reference, "{label}");
            let reports: Vec<String> = std::fs::read_dir(out.join("__sonograph"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(reports, ["report.json"], "{label}: nothing else left there");
        },
    );
    assert_eq!(crashes, 20);
}

#[cfg(feature = "gpu")]
#[test]
fn synth_iq_on_the_gpu_writes_the_cpus_bytes() {
    if !common::has_gpu_adapter() {
        return;
    }
    let tmp = Tmp::new("rf-synth-gpu");
    let cpu = tmp.path("cpu");
    let gpu = tmp.path("gpu");
    assert!(synth(&cpu, &["--datatype", "ci16"]).status.success());
    let o = synth(&gpu, &["--datatype", "ci16", "--device", "gpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("noise on gpu:"), "{}", stderr(&o));
    assert_eq!(files(&gpu), files(&cpu));

    // rf-features with the PSD on the GPU: within 1e-5 of the CPU.
    let (a, b) = (tmp.path("a"), tmp.path("b"));
    assert!(bin()
        .args(["rf-features"])
        .arg(&cpu)
        .arg("--out")
        .arg(&a)
        .output()
        .unwrap()
        .status
        .success());
    let o = bin()
        .args(["rf-features"])
        .arg(&cpu)
        .arg("--out")
        .arg(&b)
        .args(["--device", "gpu"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let (ta, tb) = (read_rows(&a), read_rows(&b));
    for ((name, ca), (_, cb)) in ta.iter().zip(&tb) {
        if let (Column::F64(x), Column::F64(y)) = (ca, cb) {
            for (u, v) in x.iter().zip(y) {
                let ok = u == v
                    || (u.is_nan() && v.is_nan())
                    || (u - v).abs() <= 1e-5 * u.abs().max(v.abs())
                    || (u - v).abs() <= 1e-9;
                assert!(ok, "{name}: cpu {u} gpu {v}");
            }
        } else {
            assert_eq!(ca, cb, "{name}");
        }
    }
}

fn col<'a>(t: &'a [(String, Column)], name: &str) -> &'a Column {
    &t.iter()
        .find(|c| c.0 == name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .1
}

/// The rows of an `rf-features` output folder: its parts' columns, part after part.
pub(crate) fn read_rows(out: &Path) -> Vec<(String, Column)> {
    let mut parts: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    parts.sort();
    assert!(!parts.is_empty(), "{}: no parts", out.display());
    let mut all: Vec<(String, Column)> = Vec::new();
    for part in parts {
        let (t, _) = read_table(&part).unwrap();
        if all.is_empty() {
            all = t;
            continue;
        }
        for ((name, into), (other, from)) in all.iter_mut().zip(t) {
            assert_eq!(name, &other, "{}", part.display());
            match (into, from) {
                (Column::Utf8(a), Column::Utf8(b)) => a.extend(b),
                (Column::F64(a), Column::F64(b)) => a.extend(b),
                (Column::U64(a), Column::U64(b)) => a.extend(b),
                (Column::ListF32(a), Column::ListF32(b)) => a.extend(b),
                (a, b) => panic!("{name}: {a:?} then {b:?}"),
            }
        }
    }
    all
}

/// The report of a single-shard output folder.
fn report(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("__sonograph/report.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn parquet_rows_hold_the_sigmf_recordings() {
    let tmp = Tmp::new("rf-parquet");
    let (sig, pq) = (tmp.path("sigmf"), tmp.path("pq"));
    assert!(synth(&sig, &[]).status.success());
    let o = synth(&pq, &["--format", "parquet", "--rows-per-part", "5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut parts: Vec<String> = files(&pq)
        .into_keys()
        .filter(|k| k.ends_with(".parquet"))
        .collect();
    parts.sort();
    assert_eq!(
        parts,
        [
            "part-000000000-000000005.parquet",
            "part-000000005-000000010.parquet",
            "part-000000010-000000012.parquet"
        ]
    );
    let (t, meta) = read_table(&pq.join(&parts[1])).unwrap();
    assert!(meta["sonograph.synth_spec"].contains("\"qpsk\""));
    let Column::U64(index) = col(&t, "index") else {
        panic!()
    };
    assert_eq!(index, &[5, 6, 7, 8, 9]);
    let Column::ListF32(iq) = col(&t, "iq") else {
        panic!()
    };
    let Column::Utf8(labels) = col(&t, "label") else {
        panic!()
    };
    for (k, i) in index.iter().enumerate() {
        let data = std::fs::read(sig.join(format!("sample-{i:09}.sigmf-data"))).unwrap();
        let values: Vec<f32> = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(iq[k], values, "recording {i}");
        let meta = std::fs::read_to_string(sig.join(format!("sample-{i:09}.sigmf-meta"))).unwrap();
        assert!(meta.contains(&format!("\"core:label\": \"{}\"", labels[k])));
    }
}

#[test]
fn rf_features_reads_what_synth_wrote_and_windows_it() {
    let tmp = Tmp::new("rf-features");
    let ds = tmp.path("ds");
    assert!(synth(&ds, &[]).status.success());
    let out = tmp.path("f");
    let features = |out: &Path, extra: &[&str]| {
        bin()
            .arg("rf-features")
            .arg(&ds)
            .arg("--out")
            .arg(out)
            .args(["--psd", "--calibration-db", "-10", "--rows-per-part", "5"])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = features(&out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = read_rows(&out);
    let r = report(&out);
    assert_eq!(
        (r["items_ok"].as_u64(), r["parts"].as_u64()),
        (Some(12), Some(3))
    );
    // Run again: the shard is complete, and nothing is written twice.
    let o = features(&out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("already complete"), "{}", stderr(&o));
    assert_eq!(read_rows(&out), t);
    // Two shards into one folder: the same rows.
    let sharded = tmp.path("sharded");
    for i in ["1", "0"] {
        let o = features(&sharded, &["--shard-index", i, "--shard-count", "2"]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(read_rows(&sharded), t, "two shards");
    // Other settings in the same folder are refused: their rows would mix.
    let o = features(&out, &["--nperseg", "512"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("belongs to another job"),
        "{}",
        stderr(&o)
    );
    let Column::Utf8(ids) = col(&t, "id") else {
        panic!()
    };
    assert_eq!(ids.len(), 12);
    assert_eq!(ids[3], "sample-000000003");
    let Column::F64(truth) = col(&t, "truth_snr_db") else {
        panic!()
    };
    let Column::F64(est) = col(&t, "snr_inband_db") else {
        panic!()
    };
    let Column::F64(rssi) = col(&t, "rssi_dbfs") else {
        panic!()
    };
    let Column::F64(dbm) = col(&t, "rssi_dbm") else {
        panic!()
    };
    let Column::ListF32(psd) = col(&t, "psd") else {
        panic!()
    };
    let Column::Utf8(labels) = col(&t, "label") else {
        panic!()
    };
    for i in 0..12 {
        assert!((-5.0..=30.0).contains(&truth[i]));
        assert!(!labels[i].is_empty());
        assert_eq!(psd[i].len(), 1024);
        assert!((dbm[i] - rssi[i] + 10.0).abs() < 1e-12);
        // Short recordings (8192 samples, 15 segments): a loose check that the estimate reads
        // the truth; the accuracy itself is crates/rf/tests/accuracy.rs's.
        if labels[i] != "ofdm" && labels[i] != "fm" {
            assert!(
                (est[i] - truth[i]).abs() < 3.0,
                "{}: {} vs {}",
                labels[i],
                est[i],
                truth[i]
            );
        }
    }
    // Windows of 10 ms (2000 samples) at 200 kHz: four per recording.
    let out2 = tmp.path("w");
    let o = bin()
        .arg("rf-features")
        .arg(ds.join("sample-000000001.sigmf-meta"))
        .arg("--out")
        .arg(&out2)
        .args(["--window-ms", "10"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let t = read_rows(&out2);
    let Column::U64(start) = col(&t, "start_sample") else {
        panic!()
    };
    assert_eq!(start, &[0, 2000, 4000, 6000]);

    // A raw file: the committed fixture, against numpy's RSSI and PAPR of it.
    let fixture = repo("tests/rf/noise_tone_dc.cf32");
    let out3 = tmp.path("raw");
    let o = bin()
        .arg("rf-features")
        .arg(&fixture)
        .arg("--out")
        .arg(&out3)
        .args(["--sample-rate", "200000"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let t = read_rows(&out3);
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo("tests/rf/reference.json")).unwrap())
            .unwrap();
    let want = &reference["features"]["noise_tone_dc"];
    let Column::F64(rssi) = col(&t, "rssi_dbfs") else {
        panic!()
    };
    let Column::F64(papr) = col(&t, "papr_db") else {
        panic!()
    };
    assert!((rssi[0] - want["rssi_dbfs"].as_f64().unwrap()).abs() < 1e-9);
    assert!((papr[0] - want["papr_db"].as_f64().unwrap()).abs() < 1e-9);
}

/// A recording that cannot be read (truncated, torn) or is too short is a failure listed in
/// the report and on stderr (exit 3), and every other recording's rows are written; a run
/// again leaves the failures as they are.
#[test]
fn a_bad_recording_is_listed_and_the_others_written() {
    let tmp = Tmp::new("rf-failures");
    let ds = tmp.path("ds");
    assert!(synth(&ds, &[]).status.success());
    let clean = tmp.path("clean");
    let o = bin()
        .arg("rf-features")
        .arg(&ds)
        .arg("--out")
        .arg(&clean)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let data = ds.join("sample-000000002.sigmf-data");
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..bytes.len() - 3]).unwrap();
    let meta = ds.join("sample-000000007.sigmf-meta");
    std::fs::write(&meta, b"{\"global\": ").unwrap();
    let out = tmp.path("out");
    for run in 0..2 {
        let o = bin()
            .arg("rf-features")
            .arg(&ds)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let e = stderr(&o);
        if run == 1 {
            assert_eq!(o.status.code(), Some(0), "{e}");
            assert!(
                e.contains("already complete (10 items ok, 2 failed)"),
                "{e}"
            );
            break;
        }
        assert_eq!(o.status.code(), Some(3), "{e}");
        assert!(
            e.contains("failed: sample-000000002: ")
                && e.contains("sample-000000002.sigmf-data: 65533 bytes is not a whole number"),
            "{e}"
        );
        assert!(e.contains("failed: sample-000000007: "), "{e}");
        assert!(e.contains("10 items ok, 2 failed"), "{e}");
    }
    let r = report(&out);
    let failed: Vec<&str> = r["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["sample-000000002", "sample-000000007"]);
    // The others' rows are the clean run's.
    let (got, want) = (read_rows(&out), read_rows(&clean));
    let keep: Vec<usize> = (0..12).filter(|&i| i != 2 && i != 7).collect();
    for ((name, g), (_, w)) in got.iter().zip(&want) {
        let picked = match w {
            Column::Utf8(v) => Column::Utf8(keep.iter().map(|&i| v[i].clone()).collect()),
            Column::F64(v) => Column::F64(keep.iter().map(|&i| v[i]).collect()),
            Column::U64(v) => Column::U64(keep.iter().map(|&i| v[i]).collect()),
            Column::ListF32(v) => Column::ListF32(keep.iter().map(|&i| v[i].clone()).collect()),
        };
        assert_eq!(format!("{g:?}"), format!("{picked:?}"), "{name}");
    }
}

/// A crash (by failpoint, as kill -9 or a power cut) at each step of publishing each file of
/// an `rf-features` run — every part, job.json, the report, the completion marker — and the
/// same command run again gives the rows of a clean run, each recording's once. Needs the
/// failpoints build: `cargo test --features failpoints --test integration rf_cli::`.
#[cfg(feature = "failpoints")]
#[test]
fn rf_features_after_a_crash_at_any_step_of_any_publish_equals_a_clean_run() {
    let tmp = Tmp::new("rf-features-crash");
    let ds = tmp.path("ds");
    assert!(synth(&ds, &[]).status.success());
    let run = |out: &Path, failpoints: &str| {
        bin()
            .arg("rf-features")
            .arg(&ds)
            .arg("--out")
            .arg(out)
            .args(["--rows-per-part", "5", "--window-ms", "20"])
            .env("FAILPOINTS", failpoints)
            .output()
            .unwrap()
    };
    let clean = tmp.path("clean");
    assert!(run(&clean, "").status.success());
    let reference = format!("{:?}", read_rows(&clean));
    // job.json, 4 parts, the report, the marker.
    let crashes = publish_crash::crash_at_every_publish(
        &tmp,
        [7, 7, 7],
        run,
        |o| o.status.success(),
        |o| o.status.success(),
        |out, label| {
            assert_eq!(format!("{:?}", read_rows(out)), reference, "{label}");
            let leftovers: Vec<String> = std::fs::read_dir(out)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".tmp"))
                .collect();
            assert!(leftovers.is_empty(), "{label}: {leftovers:?}");
        },
    );
    assert_eq!(crashes, 21);
}

/// Memory holds a group of recordings and a part's rows, not the corpus: peak RSS over
/// 10,000 recordings is within a few MiB of that over 1,000.
#[test]
fn rf_features_memory_is_flat_in_the_number_of_recordings() {
    let tmp = Tmp::new("rf-features-flat");
    let mut peaks = Vec::new();
    for count in [1_000usize, 10_000] {
        let ds = tmp.path(&format!("ds-{count}"));
        std::fs::create_dir_all(&ds).unwrap();
        // Raw cf32 files of 512 samples: a noisy tone, different in each file.
        for i in 0..count {
            let bytes: Vec<u8> = (0..512)
                .flat_map(|n| {
                    let phase = 0.1 * n as f32 + i as f32;
                    let noise = ((n * 7919 + i * 104_729) % 1000) as f32 / 1e4;
                    [phase.cos() + noise, phase.sin() - noise]
                })
                .flat_map(f32::to_le_bytes)
                .collect();
            std::fs::write(ds.join(format!("r{i:05}.cf32")), bytes).unwrap();
        }
        let out = tmp.path(&format!("out-{count}"));
        let o = bin()
            .arg("rf-features")
            .arg(&ds)
            .arg("--out")
            .arg(&out)
            .args([
                "--sample-rate",
                "1e5",
                "--nperseg",
                "128",
                "--rows-per-part",
                "500",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let r = report(&out);
        assert_eq!(r["items_ok"].as_u64(), Some(count as u64));
        assert_eq!(r["rows"].as_u64(), Some(count as u64));
        peaks.push(r["peak_rss_mb"].as_f64().unwrap());
    }
    // The source list (about 200 bytes a recording) is all that grows: 2 MB more.
    assert!(
        peaks[1] < peaks[0] + 8.0,
        "peak RSS: 1,000 recordings {:.1} MiB, 10,000 {:.1} MiB",
        peaks[0],
        peaks[1]
    );
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_file() {
    let tmp = Tmp::new("rf-bad");
    let ds = tmp.path("ds");
    assert!(synth(&ds, &[]).status.success());
    let check = |args: &[&str], want: &str| {
        let o = bin().args(args).output().unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    };
    let out = tmp.path("x");
    let out = out.to_str().unwrap();
    // A raw file without its rate: the job's error, before anything is written.
    let raw = tmp.path("r.cf32");
    std::fs::write(&raw, vec![0u8; 8 * 4096]).unwrap();
    check(
        &["rf-features", raw.to_str().unwrap(), "--out", out],
        "r.cf32: a raw IQ file needs --sample-rate",
    );
    assert!(!Path::new(out).exists());
    check(
        &[
            "rf-features",
            raw.to_str().unwrap(),
            "--out",
            out,
            "--window-ms",
            "nan",
        ],
        "window-ms: must be positive",
    );
    let o = bin()
        .args([
            "rf-features",
            raw.to_str().unwrap(),
            "--out",
            out,
            "--sample-rate",
            "1e6",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    check(
        &[
            "synth-iq",
            "--count",
            "1",
            "--modulation",
            "qpsk,9psk",
            "--out",
            out,
        ],
        "unknown modulation \"9psk\"",
    );
    check(
        &[
            "synth-iq",
            "--count",
            "1",
            "--seed",
            "1",
            "--out",
            ds.to_str().unwrap(),
        ],
        "dataset.json: the folder holds another dataset",
    );
    check(
        &["synth-iq", "--count", "1", "--snr-db", "9:1", "--out", out],
        "snr-db: ",
    );
    // A missing flag is named on the one line (clap puts it on the next).
    check(
        &["synth-iq", "--out", out],
        "required arguments were not provided: --count <COUNT>",
    );
    check(
        &[
            "synth-iq",
            "--count",
            "4",
            "--shard-index",
            "4",
            "--shard-count",
            "4",
            "--out",
            out,
        ],
        "shard index 4",
    );
}

/// `synth-iq --device auto` where it could use a GPU (lavapipe here, which
/// SONOGRAPH_AUTO_SOFTWARE=1 lets it measure): the noise stage runs where it measured faster
/// (a GPU only at 1.2x the CPU), the run says what it measured, and the dataset is the CPU's,
/// bit for bit, whichever it chose.
#[cfg(feature = "gpu")]
#[test]
fn synth_iq_auto_measures_and_writes_the_cpus_bytes() {
    if !common::has_gpu_adapter() {
        return;
    }
    let tmp = Tmp::new("rf-auto");
    let cpu = tmp.path("cpu");
    assert!(synth(&cpu, &["--device", "cpu"]).status.success());
    let auto = tmp.path("auto");
    let o = bin()
        .args(BASE)
        .arg("--out")
        .arg(&auto)
        .args(["--device", "auto"])
        .env("SONOGRAPH_AUTO_SOFTWARE", "1")
        .env("SONOGRAPH_CACHE_DIR", tmp.path("cache"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let said = stderr(&o);
    assert!(
        said.contains("auto chose") && said.contains("s of signal per s"),
        "{said}"
    );
    assert_eq!(files(&auto), files(&cpu));
}
