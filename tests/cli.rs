//! The `sonograph` binary end to end: outputs, flags, environment variables, exit codes and
//! error messages.

use crate::common;
use common::{bin, repo, stderr, Tmp};

use std::path::{Path, PathBuf};

use sonograph_dsp::{CpuExtractor, FeatureSpec};
use sonograph_io::parquet::Dtype;
use sonograph_io::{decode_mono, read_npy, read_npy_f32, DecodeOptions};

fn data(name: &str) -> PathBuf {
    repo("tests/data").join(name)
}

#[test]
fn features_writes_the_same_array_as_the_library() {
    let tmp = Tmp::new("features");
    let out = tmp.path("f.npy");
    let input = data("speech_44100_stereo.flac");
    let o = bin()
        .args([
            "features",
            input.to_str().unwrap(),
            "--preset",
            "kaldi",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let (shape, values) = read_npy_f32(&out).unwrap();
    let spec = FeatureSpec::preset("kaldi").unwrap();
    let samples = decode_mono(&input, &DecodeOptions::default(), 16_000).unwrap();
    let mut expect = Vec::new();
    let frames = CpuExtractor::new(&spec)
        .unwrap()
        .extract(&samples, &mut expect)
        .unwrap();
    assert_eq!(shape, vec![frames, 80]);
    assert_eq!(values, expect);
}

/// `--dtype f16` stores the f32 features rounded to the nearest f16, in half the bytes, on the
/// CPU and on the GPU (whose rows come back as f16, rounded on the device as the CPU rounds).
#[test]
fn features_dtype_f16_rounds_the_f32_output() {
    let tmp = Tmp::new("features-f16");
    let input = data("speech_16000_mono_s16.wav");
    let mut devices = vec!["cpu"];
    if cfg!(feature = "gpu") && common::has_gpu_adapter() {
        devices.push("gpu");
    }
    for device in devices {
        let (a, b) = (
            tmp.path(&format!("{device}-a.npy")),
            tmp.path(&format!("{device}-b.npy")),
        );
        for (out, dtype) in [(&a, "f32"), (&b, "f16")] {
            let o = bin()
                .args(["features", input.to_str().unwrap(), "--preset", "whisper"])
                .args(["--device", device, "--dtype", dtype, "--out"])
                .arg(out)
                .output()
                .unwrap();
            assert!(o.status.success(), "{device}: {}", stderr(&o));
        }
        let (shape, dtype, halves) = read_npy(&b).unwrap();
        let (full_shape, full) = read_npy_f32(&a).unwrap();
        assert_eq!(dtype, Dtype::F16);
        assert_eq!(shape, full_shape);
        let rounded = full
            .iter()
            .map(|&v| half::f16::from_f32(v).to_f32().to_bits());
        assert!(
            rounded.eq(halves.iter().map(|v| v.to_bits())),
            "{device}: the f16 array is not the f32 one rounded"
        );
        assert_ne!(halves, full, "whisper features are not all exact in f16");
    }
}

/// `features --device gpu` (lavapipe here) writes the CPU's array within 1e-4, Kaldi's deep
/// bands included (the GPU computes in f64 where the adapter can).
#[cfg(feature = "gpu")]
#[test]
fn features_on_the_gpu_match_the_cpu() {
    if !common::has_gpu_adapter() {
        return;
    }
    let tmp = Tmp::new("features-gpu");
    let input = data("speech_16000_mono_s16.wav");
    let (cpu, gpu) = (tmp.path("cpu.npy"), tmp.path("gpu.npy"));
    for (out, device) in [(&cpu, "cpu"), (&gpu, "gpu")] {
        let o = bin()
            .args(["features", input.to_str().unwrap(), "--preset", "kaldi"])
            .args(["--device", device, "--out"])
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{device}: {}", stderr(&o));
    }
    let (cs, c) = read_npy_f32(&cpu).unwrap();
    let (gs, g) = read_npy_f32(&gpu).unwrap();
    assert_eq!(cs, gs);
    let worst = c
        .iter()
        .zip(&g)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(worst <= 1e-4, "worst {worst:e}");
}

/// `bench --pcm16` rounds its generated clips to 16-bit samples, and the GPU is sent them as
/// such: every chunk, half the bytes of the same clips as f32. `bench --dtype f16` has the
/// rows back as f16: half the bytes of f32 rows.
#[cfg(feature = "gpu")]
#[test]
fn bench_pcm16_sends_the_gpu_half_the_bytes() {
    if !common::has_gpu_adapter() {
        return;
    }
    let transfer = |extra: &[&str]| {
        let o = bin()
            .args(["bench", "--device", "gpu", "--preset", "whisper"])
            .args(["--clips", "3", "--seconds", "2", "--repeat", "1"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let line: serde_json::Value =
            serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
        assert_eq!(line["failed_items"], 0, "{line}");
        line["transfer"].clone()
    };
    let (f32s, pcm16) = (transfer(&[]), transfer(&["--pcm16"]));
    assert_eq!(f32s["pcm16_chunks_per_run"], 0.0, "{f32s}");
    // 3 clips of 201 frames of 80 bands, in one chunk: 4 bytes a value as f32, 2 as f16.
    let f16s = transfer(&["--dtype", "f16"]);
    assert_eq!(f32s["f16_chunks_per_run"], 0.0, "{f32s}");
    assert_eq!(f16s["f16_chunks_per_run"], f16s["chunks_per_run"], "{f16s}");
    assert_eq!(
        f32s["row_bytes_per_run"],
        4.0 * 3.0 * 201.0 * 80.0,
        "{f32s}"
    );
    assert_eq!(
        f16s["row_bytes_per_run"],
        2.0 * 3.0 * 201.0 * 80.0,
        "{f16s}"
    );
    assert!(pcm16["chunks_per_run"].as_f64().unwrap() >= 1.0, "{pcm16}");
    assert_eq!(
        pcm16["pcm16_chunks_per_run"], pcm16["chunks_per_run"],
        "{pcm16}"
    );
    // 3 clips of 32,000 samples: 4 bytes each as f32, 2 as 16-bit.
    assert_eq!(f32s["sample_bytes_per_run"], 4.0 * 96_000.0, "{f32s}");
    assert_eq!(pcm16["sample_bytes_per_run"], 2.0 * 96_000.0, "{pcm16}");
}

/// A file over the GPU's memory budget is computed on the CPU (same array), with a warning
/// that says why.
#[cfg(feature = "gpu")]
#[test]
fn features_over_the_gpu_budget_fall_back_to_the_cpu() {
    if !common::has_gpu_adapter() {
        return;
    }
    let tmp = Tmp::new("features-oom");
    let input = data("speech_16000_mono_s16.wav");
    let (cpu, gpu) = (tmp.path("cpu.npy"), tmp.path("gpu.npy"));
    let o = bin()
        .args([
            "features",
            input.to_str().unwrap(),
            "--preset",
            "whisper",
            "--out",
        ])
        .arg(&cpu)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = bin()
        .args(["features", input.to_str().unwrap(), "--preset", "whisper"])
        .args(["--device", "gpu", "--gpu-memory", "64KiB", "--out"])
        .arg(&gpu)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("does not fit") && err.contains("computed on cpu"),
        "{err}"
    );
    assert_eq!(read_npy_f32(&cpu).unwrap(), read_npy_f32(&gpu).unwrap());
}

/// `SONOGRAPH_DISABLE_DEVICES` takes a device out: shown `disabled` (the probe does not revive
/// it), refused by name, skipped by `gpu`; the CPU cannot be disabled.
#[cfg(feature = "gpu")]
#[test]
fn disabled_devices_are_never_selected() {
    if !common::has_gpu_adapter() {
        return;
    }
    let o = bin()
        .args(["devices", "--json"])
        .env("SONOGRAPH_DISABLE_DEVICES", "gpu:0")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let listed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let gpu0 = &listed["devices"][0];
    assert_eq!(
        (gpu0["id"].as_str(), gpu0["state"].as_str()),
        (Some("gpu:0"), Some("disabled"))
    );
    let input = data("speech_16000_mono_s16.wav");
    let tmp = Tmp::new("disabled");
    let adapters = listed["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["index"].is_number())
        .count();
    // By name: refused, saying why; `gpu`, where gpu:0 is the only adapter: none is usable.
    let cases: &[(&str, &str)] = if adapters == 1 {
        &[("gpu:0", "Disabled"), ("gpu", "no usable")]
    } else {
        &[("gpu:0", "Disabled")]
    };
    for &(device, why) in cases {
        let o = bin()
            .args([
                "features",
                input.to_str().unwrap(),
                "--device",
                device,
                "--out",
            ])
            .arg(tmp.path("x.npy"))
            .env("SONOGRAPH_DISABLE_DEVICES", "gpu:0")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{device}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{}", stderr(&o));
    }
    let o = bin()
        .args(["devices"])
        .env("SONOGRAPH_DISABLE_DEVICES", "cpu")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot disable cpu"), "{}", stderr(&o));
}

/// A CPU-only build (`cargo test --no-default-features`): `devices` says GPU support was not
/// built, a GPU asked for by name is a usage error saying so, and `auto` runs on the CPU.
#[cfg(not(feature = "gpu"))]
#[test]
fn a_cpu_only_build_says_so_and_runs_on_the_cpu() {
    let o = bin().args(["devices"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("GPU support was not built"), "{text}");
    let o = bin().args(["devices", "--json"]).output().unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(listed["gpu_built"], false);
    assert_eq!(listed["devices"].as_array().unwrap().len(), 1);
    let tmp = Tmp::new("cpu-only");
    let input = data("speech_16000_mono_s16.wav");
    for device in ["gpu", "gpu:0", "gpu:0,cpu"] {
        let o = bin()
            .args(["features", input.to_str().unwrap(), "--device", device])
            .arg("--out")
            .arg(tmp.path("x.npy"))
            .output()
            .unwrap();
        if device.contains(',') {
            // `features` runs on one device; a list is refused before anything else.
            assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
            continue;
        }
        assert_eq!(o.status.code(), Some(2), "{device}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("built without GPU support"),
            "{}",
            stderr(&o)
        );
    }
    let o = bin()
        .args([
            "extract",
            input.to_str().unwrap(),
            "--device",
            "gpu",
            "--out",
        ])
        .arg(tmp.path("ds"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("built without GPU support"));
    let o = bin()
        .args([
            "features",
            input.to_str().unwrap(),
            "--device",
            "auto",
            "--out",
        ])
        .arg(tmp.path("auto.npy"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Devices are health-probed before `features`, `extract` and `bench` choose them: one that
/// fails its probe (injected) is not used, and the run says so.
#[cfg(all(feature = "failpoints", feature = "gpu"))]
#[test]
fn a_device_that_fails_its_probe_is_not_used_and_the_run_says_so() {
    if !common::has_gpu_adapter() {
        return;
    }
    const FAILING: &str = "gpu::probe_fails=return";
    let tmp = Tmp::new("probe");
    let input = data("speech_16000_mono_s16.wav");
    let input = input.to_str().unwrap();
    for (device, why) in [("gpu", "no usable"), ("gpu:0", "Failed")] {
        let o = bin()
            .args(["features", input, "--device", device, "--out"])
            .arg(tmp.path("x.npy"))
            .env("FAILPOINTS", FAILING)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{device}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("failed its health probe"), "{err}");
        assert!(err.contains(why) && err.contains("injected"), "{err}");
    }
    // `all`: the GPU is left out, the job runs on the CPU and says why.
    let corpus = tmp.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::copy(input, corpus.join("a.wav")).unwrap();
    let out = tmp.path("ds");
    let o = bin()
        .args([
            "extract",
            corpus.to_str().unwrap(),
            "--device",
            "all",
            "--out",
        ])
        .arg(&out)
        .env("FAILPOINTS", FAILING)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("failed its health probe"),
        "{}",
        stderr(&o)
    );
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("__sonograph/report.json")).unwrap(),
    )
    .unwrap();
    let devices: Vec<&str> = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["device"].as_str().unwrap())
        .collect();
    assert!(devices.iter().all(|d| d.starts_with("cpu")), "{devices:?}");
    let o = bin()
        .args(["bench", "--device", "all", "--clips", "1", "--seconds", "1"])
        .args(["--repeat", "1"])
        .env("FAILPOINTS", FAILING)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0]["device"].as_str().unwrap().starts_with("cpu"));
    // A kernel that does not compile is a bug: exit 1, saying so, whatever chose the device.
    let o = bin()
        .args(["features", input, "--device", "gpu", "--out"])
        .arg(tmp.path("k.npy"))
        .env("FAILPOINTS", "gpu::broken_kernel=return")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("GPU kernel error"), "{}", stderr(&o));
    let o = bin()
        .args([
            "extract",
            corpus.to_str().unwrap(),
            "--device",
            "all",
            "--out",
        ])
        .arg(tmp.path("ds2"))
        .env("FAILPOINTS", "gpu::broken_kernel=return")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("GPU kernel error"), "{}", stderr(&o));
}

/// A FLAC whose STREAMINFO claims 2^36 - 1 samples (about 50 days at 16 kHz).
fn flac_claiming_forever(path: &Path) {
    let mut flac = std::fs::read(data("speech_16000_mono_s16.flac")).unwrap();
    assert_eq!(&flac[..4], b"fLaC");
    // STREAMINFO starts at byte 8; bytes 18..26 hold rate (20 bits), channels - 1 (3),
    // bits - 1 (5) and the total sample count (36), big-endian.
    let mut word = u64::from_be_bytes(flac[18..26].try_into().unwrap());
    word |= (1u64 << 36) - 1;
    flac[18..26].copy_from_slice(&word.to_be_bytes());
    std::fs::write(path, flac).unwrap();
}

/// Resource limits hold on every path that decodes, with flags and variables to change them:
/// a header claiming 2^36 samples is refused before anything is decoded, by `features` and by
/// `extract` alike; duration, channel and rate limits are settable.
#[test]
fn limits_refuse_hostile_headers_on_every_path() {
    let tmp = Tmp::new("limits");
    let forever = tmp.path("forever.flac");
    flac_claiming_forever(&forever);
    let out = tmp.path("o.npy");
    let out = out.to_str().unwrap();
    let started = std::time::Instant::now();
    expect_user_error(
        &["features", forever.to_str().unwrap(), "--out", out],
        "declares 68719476735 frames",
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let stereo = data("speech_44100_stereo.flac");
    let stereo = stereo.to_str().unwrap();
    expect_user_error(
        &["features", stereo, "--max-channels", "1", "--out", out],
        "2 channels is outside 1..=1",
    );
    expect_user_error(
        &[
            "features",
            stereo,
            "--max-sample-rate",
            "16000",
            "--out",
            out,
        ],
        "44100 Hz is outside",
    );
    expect_user_error(
        &["features", stereo, "--max-duration", "1.5", "--out", out],
        "the limit is 1.5 s",
    );
    expect_user_error(
        &["features", stereo, "--max-duration", "0", "--out", out],
        "max-duration 0 s is outside",
    );
    expect_user_error(
        &["features", stereo, "--max-channels", "100000", "--out", out],
        "max-channels 100000 is outside 1..=1024",
    );
    let o = bin()
        .args(["features", stereo, "--out", out])
        .env("SONOGRAPH_MAX_CHANNELS", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    expect_user_error(
        &["bench", stereo, "--max-channels", "1", "--repeat", "1"],
        "channels",
    );
    // `extract` applies the same limits: each such file is a failed item with the reason.
    let corpus = tmp.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::copy(&forever, corpus.join("forever.flac")).unwrap();
    std::fs::copy(stereo, corpus.join("stereo.flac")).unwrap();
    std::fs::copy(data("speech_16000_mono_s16.wav"), corpus.join("mono.wav")).unwrap();
    let ds = tmp.path("ds");
    let o = bin()
        .args([
            "extract",
            corpus.to_str().unwrap(),
            "--max-channels",
            "1",
            "--out",
        ])
        .arg(&ds)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ds.join("__sonograph/report.json")).unwrap())
            .unwrap();
    assert_eq!(report["items_ok"], 1);
    let reasons: Vec<String> = report["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["reason"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("declares 68719476735 frames")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("2 channels")),
        "{reasons:?}"
    );
}

#[test]
fn usage_errors_exit_2() {
    let input = data("speech_16000_mono_s16.wav");
    let input = input.to_str().unwrap();
    expect_user_error(
        &["bench", input, "--repeat", "0"],
        "repeat must be at least 1",
    );
    // clap's own errors are one line too.
    expect_user_error(
        &["features", input, "--dtype", "f64", "--out", "x.npy"],
        "f64",
    );
    expect_user_error(&["features", input, "--bogus"], "--bogus");
    let o = bin()
        .args(["features", input, "--spec", "s.json", "--out", "x.npy"])
        .env("SONOGRAPH_PRESET", "kaldi")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stderr(&o).trim_end().lines().count(), 1, "{}", stderr(&o));
    expect_user_error(
        &["features", input, "--device", "tpu", "--out", "x.npy"],
        "tpu",
    );
    expect_user_error(
        &["features", input, "--device", "all", "--out", "x.npy"],
        "one device",
    );
    let o = bin()
        .args(["bench", input])
        .env("SONOGRAPH_REPEAT", "0")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn n_mels_spec_files_and_environment_variables() {
    let tmp = Tmp::new("flags");
    let input = data("speech_16000_mono_s16.wav");
    // --n-mels through the environment, preset through the environment.
    let out = tmp.path("a.npy");
    let o = bin()
        .args(["features", input.to_str().unwrap()])
        .env("SONOGRAPH_PRESET", "nemo")
        .env("SONOGRAPH_N_MELS", "64")
        .env("SONOGRAPH_OUT", &out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // NeMo ≥ 2.5: len / hop valid frames.
    assert_eq!(read_npy_f32(&out).unwrap().0, vec![32_000 / 160, 64]);
    // A TOML spec gives the same result as the preset it was printed from.
    let json = bin().args(["presets", "whisper-128"]).output().unwrap();
    assert!(json.status.success());
    let spec = FeatureSpec::from_json(&String::from_utf8(json.stdout).unwrap()).unwrap();
    let toml_path = tmp.path("spec.toml");
    std::fs::write(&toml_path, toml_text(&spec)).unwrap();
    let (b, c) = (tmp.path("b.npy"), tmp.path("c.npy"));
    for (args, out) in [
        (vec!["--spec", toml_path.to_str().unwrap()], &b),
        (vec!["--preset", "whisper-128"], &c),
    ] {
        let o = bin()
            .args([
                "features",
                input.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(read_npy_f32(&b).unwrap(), read_npy_f32(&c).unwrap());
    assert_eq!(read_npy_f32(&b).unwrap().0, vec![200, 128]);
}

fn toml_text(spec: &FeatureSpec) -> String {
    // The library's JSON is the source of truth; TOML goes through serde the same way.
    let value: serde_json::Value = serde_json::from_str(&spec.to_json()).unwrap();
    let mut out = String::new();
    let mut tables = String::new();
    for (k, v) in value.as_object().unwrap() {
        match v {
            serde_json::Value::Null => {}
            serde_json::Value::Object(m) => {
                tables.push_str(&format!("[{k}]\n"));
                for (ik, iv) in m {
                    tables.push_str(&format!("{ik} = {iv}\n"));
                }
            }
            other => out.push_str(&format!("{k} = {other}\n")),
        }
    }
    out + &tables
}

#[test]
fn presets_lists_every_preset_and_prints_json() {
    let o = bin().arg("presets").output().unwrap();
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    for p in FeatureSpec::presets() {
        assert!(
            text.lines().any(|l| l.starts_with(p.name)),
            "{} missing:\n{text}",
            p.name
        );
        let o = bin().args(["presets", p.name]).output().unwrap();
        let spec = FeatureSpec::from_json(&String::from_utf8(o.stdout).unwrap()).unwrap();
        assert_eq!(spec, p.spec);
    }
}

fn expect_user_error(args: &[&str], needle: &str) {
    let o = bin().args(args).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(needle), "{needle:?} not in {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_file() {
    let tmp = Tmp::new("bad");
    let out = tmp.path("o.npy");
    let out = out.to_str().unwrap();
    let missing = tmp.path("missing.wav");
    expect_user_error(
        &["features", missing.to_str().unwrap(), "--out", out],
        "missing.wav",
    );
    let junk = tmp.path("junk.flac");
    std::fs::write(&junk, b"fLaC but not really").unwrap();
    expect_user_error(
        &["features", junk.to_str().unwrap(), "--out", out],
        "junk.flac",
    );
    let empty = tmp.path("empty.wav");
    std::fs::write(&empty, b"").unwrap();
    expect_user_error(
        &["features", empty.to_str().unwrap(), "--out", out],
        "empty.wav",
    );
    // A WAV header claiming 0 Hz (symphonia 0.5 would panic on it).
    let mut zero_hz = std::fs::read(data("speech_16000_mono_s16.wav")).unwrap();
    zero_hz[24..28].copy_from_slice(&0u32.to_le_bytes());
    let zero_path = tmp.path("zero_hz.wav");
    std::fs::write(&zero_path, zero_hz).unwrap();
    expect_user_error(
        &["features", zero_path.to_str().unwrap(), "--out", out],
        "sample rate 0 Hz",
    );
    let input = data("speech_16000_mono_s16.wav");
    let input = input.to_str().unwrap();
    expect_user_error(
        &["features", input, "--preset", "nope", "--out", out],
        "unknown preset",
    );
    expect_user_error(
        &["features", input, "--n-mels", "0", "--out", out],
        "n_mels",
    );
    expect_user_error(
        &["features", input, "--channel", "3", "--out", out],
        "channel 3",
    );
    // An item the preset's reference refuses: NeMo <= 2.4 cannot reflect-pad 1 sample.
    let short = repo("tests/golden/audio/short1_16000.wav");
    expect_user_error(
        &[
            "features",
            short.to_str().unwrap(),
            "--preset",
            "nemo-legacy",
            "--out",
            out,
        ],
        "needs at least 257",
    );
    assert!(!Path::new(out).exists(), "nothing is written on error");
}

#[test]
fn audio_shorter_than_a_frame_gives_zero_frames_and_says_so() {
    let tmp = Tmp::new("short");
    let out = tmp.path("s.npy");
    // 399 samples: Kaldi's snip_edges framing has no whole 400-sample frame.
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/audio/short399_16000.wav");
    let o = bin()
        .args([
            "features",
            input.to_str().unwrap(),
            "--preset",
            "kaldi",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("shorter than one frame"),
        "{}",
        stderr(&o)
    );
    assert_eq!(read_npy_f32(&out).unwrap(), (vec![0, 80], vec![]));
}

/// `auto` by measurement: where it could choose a GPU (here lavapipe, which
/// SONOGRAPH_AUTO_SOFTWARE=1 lets it measure), the GPU and the CPU run the job's spec, the
/// faster is kept (a GPU only at 1.2x the CPU), the report says what was measured and why, and
/// the next job of the spec reads the measurements from the cache instead of measuring again.
#[cfg(feature = "gpu")]
#[test]
fn auto_chooses_by_measuring_the_devices_on_the_jobs_spec() {
    if !common::has_gpu_adapter() {
        return;
    }
    let tmp = Tmp::new("auto-calibration");
    let cache = tmp.path("cache");
    let corpus = tmp.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::copy(data("speech_16000_mono_s16.wav"), corpus.join("a.wav")).unwrap();
    let run = |out: &str| {
        let o = bin()
            .args(["extract", corpus.to_str().unwrap(), "--out"])
            .arg(tmp.path(out))
            .args(["--preset", "whisper", "--device", "auto", "--no-progress"])
            .env("SONOGRAPH_AUTO_SOFTWARE", "1")
            .env("SONOGRAPH_CACHE_DIR", &cache)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("sonograph: auto chose "),
            "{}",
            stderr(&o)
        );
        let report: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(tmp.path(out).join("__sonograph/report.json")).unwrap(),
        )
        .unwrap();
        report["device_choice"].clone()
    };
    let first = run("first");
    let measured = first["measured"].as_array().expect("what auto measured");
    let ids: Vec<&str> = measured.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids[0], "cpu");
    assert!(ids[1].starts_with("gpu:"), "{first}");
    let rate = |m: &serde_json::Value| m["audio_seconds_per_second"].as_f64().unwrap();
    assert!(measured
        .iter()
        .all(|m| rate(m) > 0.0 && m["cached"] == false));
    // The choice follows the measurements: a GPU only at 1.2x the CPU.
    let want = if rate(&measured[1]) >= 1.2 * rate(&measured[0]) {
        ids[1]
    } else {
        "cpu"
    };
    assert_eq!(first["chose"], want, "{first}");
    assert!(!first["why"].as_str().unwrap().is_empty());
    assert!(cache.join("calibration.json").is_file());
    // The next job of the spec is told by the cache.
    let second = run("second");
    assert!(
        second["measured"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["cached"] == true),
        "{second}"
    );
    assert_eq!(second["chose"], first["chose"]);
}
