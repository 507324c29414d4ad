//! The presets that follow a framework's own frontend, against that framework run on the
//! fixtures of scripts/frameworks_reference.py (tests/golden/frameworks/cases.json, made with
//! transformers 5.24.0): `whisper-hf` and `whisper-hf-128`, transformers'
//! `WhisperFeatureExtractor` as fine-tuning recipes call it (the audio zero-padded or cut to
//! 30 s, 3,000 frames), and `speech2text`, transformers' `Speech2TextFeatureExtractor` (Kaldi
//! fbank, utterance CMVN). Every frame within 1e-6 (f64 core) and 1e-4 (f32 core) on the CPU,
//! whole and streamed, and within the golden suite's 2e-4 through `extract` on the CPU and
//! the GPU.

use std::path::{Path, PathBuf};

use sonograph_dsp::{CpuExtractor, FeatureSpec, Precision};
use sonograph_io::parquet::read_part;
use sonograph_io::read_npy_f32;

use crate::common::{self, bin, stderr, write_wav, Tmp};

/// The golden suite's tolerance on log outputs (what `extract` is held to).
const LOG_ATOL: f64 = 2e-4;
/// What each core gives on these fixtures, with room: 1.2e-7 (f64) and 6.0e-5 (f32) worst.
const F64_ATOL: f64 = 1e-6;
const F32_ATOL: f64 = 1e-4;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/frameworks")
}

struct Case {
    name: String,
    signal: String,
    preset: String,
    /// What the framework computed the reference in (`float64` where the case does not say).
    precision: String,
}

fn cases() -> Vec<Case> {
    let manifest = manifest("cases.json");
    assert_eq!(manifest["versions"]["transformers"], "5.24.0");
    cases_of(&manifest)
}

/// The cases of scripts/frameworks_torch_reference.py: frameworks run in torch.
fn torch_cases() -> Vec<Case> {
    let manifest = manifest("cases-torch.json");
    assert_eq!(manifest["versions"]["torchaudio"], "2.11.1");
    assert_eq!(manifest["versions"]["espnet"], ESPNET);
    assert_eq!(manifest["versions"]["speechbrain"], "1.1.2");
    assert_eq!(manifest["versions"]["lhotse"], "1.33.0");
    assert_eq!(manifest["versions"]["transformers"], "5.24.0");
    cases_of(&manifest)
}

/// The ESPnet release the `espnet` preset was read from.
const ESPNET: &str = "202511";

fn manifest(file: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(dir().join(file)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn cases_of(manifest: &serde_json::Value) -> Vec<Case> {
    manifest["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            name: c["case"].as_str().unwrap().into(),
            signal: c["signal"].as_str().unwrap().into(),
            preset: c["preset"].as_str().unwrap().into(),
            precision: c["precision"].as_str().unwrap_or("float64").into(),
        })
        .collect()
}

fn input(signal: &str) -> Vec<f32> {
    read_npy_f32(&dir().join(format!("input/{signal}.npy")))
        .unwrap()
        .1
}

/// The reference `[3000, bins]`, row-major.
fn reference(case: &str) -> (Vec<usize>, Vec<f32>) {
    read_npy_f32(&dir().join(format!("ref/{case}.npy"))).unwrap()
}

/// The largest difference, and where.
fn worst(got: &[f32], expect: &[f32], bins: usize) -> (f64, String) {
    assert_eq!(got.len(), expect.len());
    got.iter()
        .zip(expect)
        .enumerate()
        .map(|(i, (&a, &b))| {
            let e = (f64::from(a) - f64::from(b)).abs();
            (
                e,
                format!("frame {} bin {}: {a} vs {b}", i / bins, i % bins),
            )
        })
        .fold((0.0, String::new()), |w, x| {
            if x.0 > w.0 || x.0.is_nan() {
                x
            } else {
                w
            }
        })
}

/// The rows `spec` gives `x` in `precision`, whole; the same rows streamed in uneven chunks
/// (7,919 samples: cut and padded alike); `rows` of them either way.
fn whole_and_streamed(
    spec: &FeatureSpec,
    precision: Precision,
    x: &[f32],
    rows: usize,
    case: &str,
) -> Vec<f32> {
    let mut ex = CpuExtractor::with_precision(spec, precision).unwrap();
    let mut got = Vec::new();
    assert_eq!(ex.extract(x, &mut got), Ok(rows), "{case} {precision:?}");
    ex.begin();
    for chunk in x.chunks(7919) {
        ex.push(chunk).unwrap();
    }
    let mut streamed = Vec::new();
    assert_eq!(ex.finish(&mut streamed), Ok(rows), "{case} {precision:?}");
    assert_eq!(streamed, got, "{case} {precision:?} streamed");
    got
}

#[test]
fn whisper_hf_equals_transformers_whole_streamed_and_in_both_precisions() {
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| c.preset.starts_with("whisper-hf"))
        .collect();
    assert_eq!(cases.len(), 8, "six signals, two of them at 128 mels too");
    for case in &cases {
        let spec = FeatureSpec::preset(&case.preset).unwrap();
        let bins = spec.n_bins();
        let x = input(&case.signal);
        let (shape, expect) = reference(&case.name);
        assert_eq!(shape, [3000, bins], "{}", case.name);
        for (precision, tol) in [(Precision::F64, F64_ATOL), (Precision::F32, F32_ATOL)] {
            let got = whole_and_streamed(&spec, precision, &x, 3000, &case.name);
            let (err, at) = worst(&got, &expect, bins);
            eprintln!("{} {precision:?}: worst {err:.2e} ({at})", case.name);
            assert!(err <= tol, "{} {precision:?}: {err:e} at {at}", case.name);
        }
    }
}

/// Why the preset exists: `whisper` reflects at the audio's end, as
/// `log_mel_spectrogram(audio)` does; transformers pads with zeros first. They agree inside
/// the audio and part in its last frames, most on audio that ends loud.
#[test]
fn whisper_reflects_where_transformers_pads_with_zeros() {
    let x = input("chirp_loud_3s");
    let (_, expect) = reference("chirp_loud_3s.whisper-hf-80");
    let mut got = Vec::new();
    let frames = CpuExtractor::new(&FeatureSpec::preset("whisper").unwrap())
        .unwrap()
        .extract(&x, &mut got)
        .unwrap();
    assert_eq!(frames, 300);
    let interior = (frames - 2) * 80;
    let (err, at) = worst(&got[..interior], &expect[..interior], 80);
    assert!(err <= LOG_ATOL, "interior frames: {err:e} at {at}");
    let (end, at) = worst(&got[interior..], &expect[interior..frames * 80], 80);
    assert!(end > 0.1, "the last frames should differ: {end:e} at {at}");
}

/// `extract --preset whisper-hf` writes transformers' rows for a short file (padded) and a
/// long one (cut at 30 s, not cut into pieces), on the CPU and, where there is one, the GPU.
#[test]
fn extract_writes_the_rows_transformers_gives() {
    let tmp = Tmp::new("whisper-hf");
    let items = [("chirp_loud_3s", 3.0), ("noise_31s", 30.0)];
    for (device, rows) in rows_on_each_device(&tmp, &["chirp_loud_3s", "noise_31s"], "whisper-hf") {
        assert_fixed_length_rows(device, &rows, &items, (3000, 80), "whisper-hf-80", 1.0);
    }
}

/// Rows of a fixed-length preset, one per `(signal, seconds)` in id order: each `shape`, its
/// duration the audio its features hold, and within the golden log tolerance (in the log's
/// units, `units` per output unit) of the reference `<signal>.<case>` on every band.
fn assert_fixed_length_rows(
    device: &str,
    rows: &[sonograph_io::parquet::FeatureRow],
    items: &[(&str, f64)],
    shape: (u32, u32),
    case: &str,
    units: f64,
) {
    assert_eq!(rows.len(), items.len(), "{device}");
    for (row, &(signal, seconds)) in rows.iter().zip(items) {
        assert_eq!(row.id, format!("{signal}.wav"));
        assert_eq!((row.num_frames, row.num_bins), shape, "{device} {signal}");
        assert!(
            (row.duration_s - seconds).abs() < 1e-9,
            "{device} {signal}: {} s",
            row.duration_s
        );
        let (_, expect) = reference(&format!("{signal}.{case}"));
        let (err, at, _) = worst_within(&row.features, &expect, shape.1 as usize, None, units);
        assert!(err <= LOG_ATOL, "{device} {signal}: {err:e} at {at}");
    }
}

/// `speech2text` against transformers' `Speech2TextFeatureExtractor` (numpy path) on four
/// signals: Kaldi's fbank, then each band normalised over the item by its population deviation.
/// Held to the golden suite's tolerance on log outputs in log-mel units (the difference times
/// the band's deviation): transformers normalises in float32, the preset in f64, and a band
/// that barely varies (the square wave's, 1e-4 of a log unit) turns last-bit differences of
/// its log-mel into large normalised ones (0.54 there; 4.5e-6 on the chirp). Measured:
/// 1.4e-5 (chirp) to 9.8e-5 (square) in log-mel units.
#[test]
fn speech2text_equals_transformers_whole_streamed_and_in_both_precisions() {
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| c.preset == "speech2text")
        .collect();
    assert_eq!(cases.len(), 5, "every signal but the three-frame tone");
    let spec = FeatureSpec::preset("speech2text").unwrap();
    for case in &cases {
        let x = input(&case.signal);
        let (shape, expect) = reference(&case.name);
        assert_eq!(shape[1], 80, "{}", case.name);
        // The preset's own precision (f64: `auto` computes Kaldi's fbank in f64). In f32 the
        // FFT's rounding lifts the quietest bands of a frame, and CMVN magnifies it in a band
        // of little variance: up to 0.13 on the chirp, so f32 is not offered as equal.
        let (precision, tol) = (Precision::F64, LOG_ATOL);
        let got = whole_and_streamed(&spec, precision, &x, shape[0], &case.name);
        let (err, at) = worst(&got, &expect, 80);
        // In log-mel units: the difference times the band's deviation over the item.
        let scaled = in_log_mel_units(&got, &expect, &band_divisors(&spec, &x));
        eprintln!(
            "{} {precision:?}: worst {err:.2e} ({at}); in log-mel units {scaled:.2e}",
            case.name
        );
        assert!(scaled <= tol, "{} {precision:?}: {scaled:e}", case.name);
    }
}

/// What each band is divided by when normalised over the item, from the Kaldi fbank before
/// it: its population deviation (`speech2text`'s CMVN), or the root of its sample variance
/// plus 1e-7 (`seamless-m4t`).
fn band_divisors(spec: &FeatureSpec, x: &[f32]) -> Vec<f64> {
    use sonograph_dsp::spec::Normalize;
    let fbank = FeatureSpec {
        normalize: Normalize::None,
        stack_frames: 0,
        ..spec.clone()
    };
    let mut rows = Vec::new();
    let frames = CpuExtractor::new(&fbank)
        .unwrap()
        .extract(x, &mut rows)
        .unwrap() as f64;
    (0..80)
        .map(|b| {
            let band: Vec<f64> = rows
                .iter()
                .skip(b)
                .step_by(80)
                .map(|&v| f64::from(v))
                .collect();
            let mean = band.iter().sum::<f64>() / frames;
            let squares = band.iter().map(|v| (v - mean).powi(2)).sum::<f64>();
            match spec.normalize {
                Normalize::PerMelBin => (squares / (frames - 1.0) + 1e-7).sqrt(),
                _ => (squares / frames).sqrt(),
            }
        })
        .collect()
}

/// The largest difference in log-mel units: each value's difference times what its band was
/// divided by (`divisors`, by band; rows may stack several frames of 80 bands).
fn in_log_mel_units(got: &[f32], expect: &[f32], divisors: &[f64]) -> f64 {
    assert_eq!(got.len(), expect.len());
    got.iter()
        .zip(expect)
        .enumerate()
        .map(|(i, (&a, &b))| (f64::from(a) - f64::from(b)).abs() * divisors[i % divisors.len()])
        .fold(0.0, f64::max)
}

/// `seamless-m4t` against transformers' `SeamlessM4TFeatureExtractor` (numpy only) on five
/// signals: the Kaldi fbank, each band normalised over the item (sample variance + 1e-7), two
/// frames to a row of 160. One signal has 99 frames: its last row is a frame and 80 zeros.
/// Held, as `speech2text`, to the golden tolerance in log-mel units.
#[test]
fn seamless_m4t_equals_transformers_whole_streamed_and_two_frames_a_row() {
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| c.preset == "seamless-m4t")
        .collect();
    assert_eq!(cases.len(), 5, "every signal but the three-frame tone");
    let spec = FeatureSpec::preset("seamless-m4t").unwrap();
    assert_eq!((spec.frame_bins(), spec.n_bins()), (80, 160));
    let mut odd = 0;
    for case in &cases {
        let x = input(&case.signal);
        let (shape, expect) = reference(&case.name);
        assert_eq!(shape[1], 160, "{}", case.name);
        assert_eq!(spec.n_frames(x.len()), shape[0], "{}", case.name);
        let got = whole_and_streamed(&spec, Precision::F64, &x, shape[0], &case.name);
        let scaled = in_log_mel_units(&got, &expect, &band_divisors(&spec, &x));
        eprintln!("{}: {scaled:.2e} in log-mel units", case.name);
        assert!(scaled <= LOG_ATOL, "{}: {scaled:e}", case.name);
        let frames = 1 + (x.len() - 400) / 160;
        if frames % 2 == 1 {
            odd += 1;
            assert!(
                got[got.len() - 80..].iter().all(|&v| v == 0.0),
                "{}",
                case.name
            );
            assert!(got[got.len() - 160..got.len() - 80]
                .iter()
                .any(|&v| v != 0.0));
        }
    }
    assert_eq!(odd, 1, "the 99-frame signal");
}

/// `extract --preset seamless-m4t` writes transformers' rows of 160 on the CPU and, where there
/// is one, the GPU (the fbank on the device; normalisation and stacking on the host).
#[test]
fn extract_writes_the_seamless_m4t_rows_transformers_gives() {
    extract_writes_the_normalised_references("seamless-m4t", &["speech_2s", "two_tones_99_frames"]);
}

/// `extract --preset speech2text` writes transformers' rows on the CPU and, where there is
/// one, the GPU (the same Kaldi fbank on the device, the CMVN after it on the host).
#[test]
fn extract_writes_the_speech2text_rows_transformers_gives() {
    extract_writes_the_normalised_references("speech2text", &["noise_31s", "speech_2s"]);
}

/// `extract --preset PRESET` (a spec that normalises each band over the item) on `signals`
/// (sorted by name, as the rows come back) gives the framework's reference rows within the
/// golden tolerance in log-mel units, on the CPU and, where there is one, the GPU.
fn extract_writes_the_normalised_references(preset: &str, signals: &[&str]) {
    let tmp = Tmp::new(preset);
    let spec = FeatureSpec::preset(preset).unwrap();
    for (device, rows) in rows_on_each_device(&tmp, signals, preset) {
        for (row, signal) in rows.iter().zip(signals) {
            let (shape, expect) = reference(&format!("{signal}.{preset}"));
            assert_eq!(shape[1], spec.n_bins(), "{signal}.{preset}");
            assert_eq!(
                (row.num_frames as usize, row.num_bins as usize),
                (shape[0], shape[1]),
                "{device}"
            );
            let divisors = band_divisors(&spec, &input(signal));
            let scaled = in_log_mel_units(&row.features, &expect, &divisors);
            eprintln!("{device} {signal}: {scaled:.2e} in log-mel units");
            assert!(scaled <= LOG_ATOL, "{device} {signal}: {scaled:e}");
        }
    }
}

/// The rows `extract --preset PRESET` writes for a corpus of `signals` (32-bit float WAVs, one
/// row each, by id) on the CPU and, where there is one, the GPU: (device, rows) for each.
fn rows_on_each_device(
    tmp: &Tmp,
    signals: &[&str],
    preset: &str,
) -> Vec<(&'static str, Vec<sonograph_io::parquet::FeatureRow>)> {
    let corpus = tmp.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for signal in signals {
        write_wav(
            &corpus.join(format!("{signal}.wav")),
            16_000,
            &input(signal),
            true,
        );
    }
    let mut devices = vec!["cpu"];
    if common::has_gpu_adapter() {
        devices.push("gpu");
    }
    devices
        .into_iter()
        .map(|device| {
            let rows = extract_rows(&corpus, &tmp.path(&format!("out-{device}")), preset, device);
            assert_eq!(rows.len(), signals.len(), "{device}: one row per file");
            (device, rows)
        })
        .collect()
}

/// The rows `extract --preset PRESET --device DEVICE` writes for `corpus` into `out`, by id.
fn extract_rows(
    corpus: &Path,
    out: &Path,
    preset: &str,
    device: &str,
) -> Vec<sonograph_io::parquet::FeatureRow> {
    let o = bin()
        .arg("extract")
        .arg(corpus)
        .arg("--out")
        .arg(out)
        .args(["--preset", preset, "--device", device, "--no-progress"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{device}: {}", stderr(&o));
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "parquet") {
            rows.extend(read_part(&path).unwrap().0);
        }
    }
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    rows
}

/// A band more than this many nats (≈ 61 dB) under its frame's peak, in a reference the
/// framework computed in float32, holds float32 rounding noise rather than digits the
/// tolerance can ask for (the golden suite's rule for kaldi-native-fbank, tests/golden.rs).
const F32_REFERENCE_DEPTH_NATS: f64 = 14.0;

/// The depth under a frame's peak below which a float32 reference's bands are not compared,
/// in the preset's log unit; `None` for a float64 reference: every band is compared.
fn compared_depth(case: &Case, spec: &FeatureSpec) -> Option<f64> {
    use sonograph_dsp::spec::LogKind;
    (case.precision == "float32").then(|| match spec.log {
        LogKind::Db => F32_REFERENCE_DEPTH_NATS * 10.0 / std::f64::consts::LN_10,
        LogKind::Log10 => F32_REFERENCE_DEPTH_NATS / std::f64::consts::LN_10,
        _ => F32_REFERENCE_DEPTH_NATS,
    })
}

/// What a difference in the output is worth in the log's own units: the affine's divisor
/// (AST's `2 std`), else 1.
fn log_units(spec: &FeatureSpec) -> f64 {
    spec.affine.map_or(1.0, |a| f64::from(a.div))
}

/// The largest difference over the bands compared (all, or those within `depth` of their
/// frame's peak in the reference), in the log's units (`units` per output unit), where, and
/// how many were compared.
fn worst_within(
    got: &[f32],
    expect: &[f32],
    bins: usize,
    depth: Option<f64>,
    units: f64,
) -> (f64, String, usize) {
    assert_eq!(got.len(), expect.len());
    let (mut worst, mut at, mut compared) = (0.0f64, String::new(), 0);
    for (frame, (g, e)) in got.chunks(bins).zip(expect.chunks(bins)).enumerate() {
        let peak = e
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)))
            * units;
        for (bin, (&a, &b)) in g.iter().zip(e).enumerate() {
            if depth.is_some_and(|d| f64::from(b) * units < peak - d) {
                continue;
            }
            compared += 1;
            let err = (f64::from(a) - f64::from(b)).abs() * units;
            if err > worst || err.is_nan() {
                (worst, at) = (err, format!("frame {frame} bin {bin}: {a} vs {b}"));
            }
        }
    }
    (worst, at, compared)
}

/// The presets of scripts/frameworks_torch_reference.py.
const TORCH_PRESETS: [&str; 6] = [
    "torchaudio",
    "espnet",
    "speechbrain",
    "lhotse-fbank",
    "lhotse-mfcc",
    "ast",
];

/// Presets whose reference is the framework run in torch on every signal of the fixtures:
/// `torchaudio` (`AmplitudeToDB()(MelSpectrogram()(y))`), `speechbrain` (`Fbank()`), lhotse's
/// `Fbank()` and `Mfcc()`, and transformers' `ASTFeatureExtractor` (its own steps), in float64:
/// every band; `espnet` (ESPnet2's `DefaultFrontend` as it runs, its STFT in float32): the
/// bands above its float32 floor. Within the golden tolerance on log outputs (in the log's own
/// units: AST's normalised values times its `2 std`) in the preset's own precision (`auto`:
/// f64), whole and streamed in uneven chunks. The f32 core's distance is printed, not held:
/// float32's noise in deep bands is larger than the tolerance (docs/presets.md).
#[test]
fn torch_frameworks_presets_equal_the_framework_whole_and_streamed() {
    let cases = torch_cases();
    for preset in TORCH_PRESETS {
        let cases: Vec<&Case> = cases.iter().filter(|c| c.preset == preset).collect();
        assert_eq!(cases.len(), 6, "{preset}: every signal");
        let spec = FeatureSpec::preset(preset).unwrap();
        for case in cases {
            let x = input(&case.signal);
            let (shape, expect) = reference(&case.name);
            assert_eq!(
                shape,
                [spec.n_frames(x.len()), spec.n_bins()],
                "{}",
                case.name
            );
            let depth = compared_depth(case, &spec);
            for precision in [Precision::F64, Precision::F32] {
                let got = whole_and_streamed(&spec, precision, &x, shape[0], &case.name);
                let (err, at, compared) =
                    worst_within(&got, &expect, shape[1], depth, log_units(&spec));
                eprintln!(
                    "{} {precision:?}: worst {err:.2e} ({at}) over {compared} of {} values",
                    case.name,
                    expect.len()
                );
                if precision == Precision::F64 {
                    assert!(
                        err <= LOG_ATOL,
                        "{} {precision:?}: {err:e} at {at}",
                        case.name
                    );
                }
            }
        }
    }
}

/// `extract` with each of those presets writes the framework's rows for every signal of the
/// fixtures on the CPU and, where there is one, the GPU (compared as above).
#[test]
fn extract_writes_the_torch_frameworks_rows() {
    let cases = torch_cases();
    for preset in TORCH_PRESETS {
        let tmp = Tmp::new(preset);
        let spec = FeatureSpec::preset(preset).unwrap();
        // By name, as the rows come back.
        let signals = [
            "chirp_loud_3s",
            "noise_31s",
            "speech_2s",
            "square_5s",
            "tiny_800",
            "two_tones_99_frames",
        ];
        for (device, rows) in rows_on_each_device(&tmp, &signals, preset) {
            for (row, signal) in rows.iter().zip(signals) {
                let case = cases
                    .iter()
                    .find(|c| c.signal == signal && c.preset == preset)
                    .unwrap();
                let (shape, expect) = reference(&case.name);
                assert_eq!(
                    (row.num_frames as usize, row.num_bins as usize),
                    (shape[0], shape[1]),
                    "{device} {}",
                    case.name
                );
                let depth = compared_depth(case, &spec);
                let (err, at, compared) =
                    worst_within(&row.features, &expect, shape[1], depth, log_units(&spec));
                eprintln!(
                    "{device} {}: worst {err:.2e} ({at}) over {compared} values",
                    case.name
                );
                assert!(err <= LOG_ATOL, "{device} {}: {err:e} at {at}", case.name);
            }
        }
    }
}

/// lhotse mirrors each edge once by flipping the item's own samples: under 140 samples (at its
/// 400/160 framing) the last frame comes out short and lhotse fails (`setStorage: sizes [1, 1,
/// 400] ... requiring a storage size`, lhotse 1.33). The presets refuse such an item by name;
/// from 140 on, one frame, as there.
#[test]
fn lhotse_presets_refuse_what_lhotse_cannot_frame() {
    use sonograph_dsp::ItemError;
    for preset in ["lhotse-fbank", "lhotse-mfcc"] {
        let spec = FeatureSpec::preset(preset).unwrap();
        let x: Vec<f32> = (0..140).map(|i| 0.1 * (i as f32 * 0.3).sin()).collect();
        let mut out = Vec::new();
        let mut ex = CpuExtractor::new(&spec).unwrap();
        assert_eq!(
            ex.extract(&x[..139], &mut out),
            Err(ItemError::TooShort {
                samples: 139,
                min: 140
            }),
            "{preset}"
        );
        assert_eq!(ex.extract(&x, &mut out), Ok(1), "{preset}");
        assert!(out.iter().all(|v| v.is_finite()), "{preset}");
    }
}

/// `extract --preset ast`: an item longer than 1,024 frames (31 s) is cut to the 10.255 s
/// those frames read, and its row says so; a three-frame item is completed with frames of
/// zeros before the normalisation (1,021 rows of AudioSet's `mean / (2 std)`), on the CPU and,
/// where there is one, the GPU.
#[test]
fn extract_cuts_and_completes_ast_items_to_1024_frames() {
    let tmp = Tmp::new("ast");
    let spec = FeatureSpec::preset("ast").unwrap();
    let signals = ["noise_31s", "tiny_800"];
    // A frame of zeros, normalised: AudioSet's mean over twice its std.
    let affine = spec.affine.unwrap();
    let padding = affine.add / affine.div;
    let items = [(signals[0], 10.255), (signals[1], 0.05)];
    for (device, rows) in rows_on_each_device(&tmp, &signals, "ast") {
        assert_fixed_length_rows(device, &rows, &items, (1024, 128), "ast", log_units(&spec));
        let tiny = &rows[1].features;
        assert!(tiny[3 * 128..].iter().all(|&v| v == padding), "{device}");
        assert!(tiny[..3 * 128].iter().all(|&v| v != padding), "{device}");
    }
}

/// `wav2vec2` against transformers' `Wav2Vec2FeatureExtractor` (numpy only) on five signals:
/// the waveform itself, zero mean and unit variance over the item, one sample a row. Within
/// 1e-5 in both precisions (transformers takes the mean and variance in float32), whole and
/// streamed.
#[test]
fn wav2vec2_equals_transformers_whole_streamed_and_in_both_precisions() {
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| c.preset == "wav2vec2")
        .collect();
    assert_eq!(cases.len(), 5, "every signal but the 31 s of noise");
    let spec = FeatureSpec::preset("wav2vec2").unwrap();
    for case in &cases {
        let x = input(&case.signal);
        let (shape, expect) = reference(&case.name);
        assert_eq!(shape, [x.len(), 1], "{}", case.name);
        for precision in [Precision::F64, Precision::F32] {
            let got = whole_and_streamed(&spec, precision, &x, x.len(), &case.name);
            let (err, at) = worst(&got, &expect, 1);
            eprintln!("{} {precision:?}: worst {err:.2e} ({at})", case.name);
            assert!(err <= 1e-5, "{} {precision:?}: {err:e} at {at}", case.name);
        }
    }
}

/// `extract --preset wav2vec2` writes transformers' `input_values` as rows of one sample on
/// the CPU and, where there is one, the GPU (the samples normalised on the device), within
/// 1e-5 of transformers and 1e-6 of each other; `auto` gives the same rows, whichever it takes.
#[test]
fn extract_writes_wav2vec2_rows_on_the_cpu_and_the_gpu() {
    let tmp = Tmp::new("wav2vec2");
    let signals = ["chirp_loud_3s", "speech_2s"];
    let on_each = rows_on_each_device(&tmp, &signals, "wav2vec2");
    assert_eq!(on_each.len(), 1 + usize::from(common::has_gpu_adapter()));
    let cpu = &on_each[0].1;
    let corpus = tmp.path("corpus");
    let auto = extract_rows(&corpus, &tmp.path("out-auto"), "wav2vec2", "auto");
    for (device, rows) in on_each
        .iter()
        .map(|(d, r)| (*d, r))
        .chain([("auto", &auto)])
    {
        assert_eq!(rows.len(), signals.len(), "{device}");
        for ((row, signal), cpu_row) in rows.iter().zip(signals).zip(cpu) {
            let (shape, expect) = reference(&format!("{signal}.wav2vec2"));
            assert_eq!(
                (row.num_frames as usize, row.num_bins),
                (shape[0], 1),
                "{device} {signal}"
            );
            let (err, at) = worst(&row.features, &expect, 1);
            assert!(err <= 1e-5, "{device} {signal}: {err:e} at {at}");
            let (err, at) = worst(&row.features, &cpu_row.features, 1);
            assert!(
                err <= 1e-6,
                "{device} {signal} against the CPU: {err:e} at {at}"
            );
        }
    }
}
