//! The `sonograph` binary end to end: outputs, flags, environment variables, exit codes and
//! error messages.

mod common;
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

/// `--dtype f16` stores the f32 features rounded to the nearest f16, in half the bytes.
#[test]
fn features_dtype_f16_rounds_the_f32_output() {
    let tmp = Tmp::new("features-f16");
    let input = data("speech_16000_mono_s16.wav");
    let (a, b) = (tmp.path("a.npy"), tmp.path("b.npy"));
    for (out, dtype) in [(&a, "f32"), (&b, "f16")] {
        let o = bin()
            .args(["features", input.to_str().unwrap(), "--preset", "whisper"])
            .args(["--dtype", dtype, "--out"])
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let (shape, dtype, halves) = read_npy(&b).unwrap();
    let (full_shape, full) = read_npy_f32(&a).unwrap();
    assert_eq!(dtype, Dtype::F16);
    assert_eq!(shape, full_shape);
    let rounded: Vec<f32> = full
        .iter()
        .map(|&v| half::f16::from_f32(v).to_f32())
        .collect();
    assert_eq!(halves, rounded);
    assert_ne!(halves, full, "whisper features are not all exact in f16");
}

/// `features --device gpu` (lavapipe here) writes the CPU's array within 1e-4, Kaldi's deep
/// bands included (the GPU computes in f64 where the adapter can).
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

/// A file over the GPU's memory budget is computed on the CPU (same array), with a warning
/// that says why.
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
    assert!(stderr(&o).contains("cannot be disabled"), "{}", stderr(&o));
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
    assert_eq!(read_npy_f32(&out).unwrap().0, vec![32_000 / 160 + 1, 64]);
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
