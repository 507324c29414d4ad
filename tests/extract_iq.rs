//! `sonograph extract` on IQ sources: SigMF recordings (one, a folder, a `.sigmf` archive)
//! and raw files with `--sample-rate`, through the IQ presets; each row is the library's
//! `ComplexStft` of the recording's samples. Specs and sources of the wrong kind, recordings
//! at another rate and truncated data are item failures that name the file and say why.

use crate::common;
use common::{bin, stderr, Tmp};

use std::path::Path;
use std::process::Output;

use sonograph_dsp::complex::ComplexStft;
use sonograph_dsp::FeatureSpec;
use sonograph_io::parquet::{read_part, FeatureRow};
use sonograph_io::sigmf::{list_sources, read_source, DEFAULT_MAX_SAMPLES};

/// `sonograph synth-iq`: `count` QPSK recordings of `samples` samples at 200 kHz in `out`.
fn synth(out: &Path, count: u32, samples: u32) {
    let o = bin()
        .args(["synth-iq", "--count", &count.to_string()])
        .args(["--samples", &samples.to_string()])
        .args(["--modulation", "qpsk,fm", "--snr-db", "10", "--seed", "7"])
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

fn extract(source: &Path, out: &Path, args: &[&str]) -> Output {
    bin()
        .arg("extract")
        .arg(source)
        .arg("--out")
        .arg(out)
        .args(["--no-progress", "--device", "cpu"])
        .args(args)
        .output()
        .unwrap()
}

/// Every row of the job's parts, by id then offset.
pub(crate) fn rows(out: &Path) -> Vec<FeatureRow> {
    let mut rows = Vec::new();
    for e in std::fs::read_dir(out).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|e| e == "parquet") {
            rows.extend(read_part(&p).unwrap().0);
        }
    }
    rows.sort_by(|a, b| a.id.cmp(&b.id).then(a.offset_s.total_cmp(&b.offset_s)));
    rows
}

/// The interleaved I/Q values of the one recording at `path`, as the library reads it.
fn samples_of(path: &Path, sample_rate: Option<f64>) -> Vec<f32> {
    let sources = list_sources(path, None).unwrap();
    let rec = read_source(&sources[0], sample_rate, DEFAULT_MAX_SAMPLES).unwrap();
    rec[0].samples.iter().flat_map(|c| [c.re, c.im]).collect()
}

/// `|X|²` of every whole frame of `iq` under `spec` (f64, as the IQ presets compute).
fn stft_power(spec: &FeatureSpec, iq: &[f32]) -> Vec<f32> {
    let mut out = Vec::new();
    ComplexStft::<f64>::for_spec(spec).power(iq, &mut out);
    out
}

/// A ustar archive of `files` (name, bytes), as `tar cf` (and `sigmf.archive`) writes one.
fn ustar(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut tar = Vec::new();
    for (name, bytes) in files {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..108].copy_from_slice(b"0000644\0");
        h[108..116].copy_from_slice(b"0000000\0");
        h[116..124].copy_from_slice(b"0000000\0");
        h[124..136].copy_from_slice(format!("{:011o}\0", bytes.len()).as_bytes());
        h[136..148].copy_from_slice(b"00000000000\0");
        h[156] = b'0';
        h[257..265].copy_from_slice(b"ustar\x0000");
        h[148..156].fill(b' ');
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        tar.extend_from_slice(&h);
        tar.extend_from_slice(bytes);
        tar.resize(tar.len().div_ceil(512) * 512, 0);
    }
    tar.resize(tar.len() + 1024, 0);
    tar
}

/// A folder of SigMF recordings, one of them alone, and the same recordings in a `.sigmf`
/// archive: one row per recording, equal to `ComplexStft` of its samples (bit for bit for
/// `iq-power`; `iq-spectrogram` is its dB), with the recording's rate and length.
#[test]
fn sigmf_recordings_folders_and_archives_give_the_complex_stft() {
    let tmp = Tmp::new("extract-iq-sigmf");
    let rec = tmp.path("rec");
    synth(&rec, 3, 20_000);
    let power = FeatureSpec::iq_power(200_000, 256);

    let o = extract(&rec, &tmp.path("folder"), &["--preset", "iq-power"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains(" s of IQ in "), "{}", stderr(&o));
    let folder = rows(&tmp.path("folder"));
    let ids: Vec<&str> = folder.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        ["sample-000000000", "sample-000000001", "sample-000000002"]
    );
    for row in &folder {
        let iq = samples_of(&rec.join(format!("{}.sigmf-meta", row.id)), None);
        let want = stft_power(&power, &iq);
        assert_eq!(row.num_bins, 256);
        assert_eq!(row.num_frames as usize, power.n_frames(20_000));
        assert_eq!(row.sample_rate, 200_000);
        assert!((row.duration_s - 0.1).abs() < 1e-12, "{}", row.duration_s);
        assert!(row.features == want, "{}", row.id);
    }

    // One recording, by its metadata file, in dB.
    let one = rec.join("sample-000000001.sigmf-meta");
    let o = extract(&one, &tmp.path("one"), &["--preset", "iq-spectrogram"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = rows(&tmp.path("one"));
    assert_eq!(got.len(), 1);
    let want = stft_power(&power, &samples_of(&one, None));
    assert_eq!(got[0].features.len(), want.len());
    for (g, p) in got[0].features.iter().zip(&want) {
        let db = 10.0 * f64::from(p.max(1e-10)).log10();
        assert!((f64::from(*g) - db).abs() < 1e-3, "{g} dB vs {db} dB");
    }

    // The same recordings in an archive: ids `archive/recording`, the same rows.
    let mut files = Vec::new();
    for k in 0..3 {
        for ext in ["sigmf-meta", "sigmf-data"] {
            let name = format!("sample-00000000{k}.{ext}");
            files.push((name.clone(), std::fs::read(rec.join(&name)).unwrap()));
        }
    }
    let pack = tmp.path("pack.sigmf");
    std::fs::write(&pack, ustar(&files)).unwrap();
    let o = extract(&pack, &tmp.path("archive"), &["--preset", "iq-power"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let archive = rows(&tmp.path("archive"));
    assert_eq!(archive.len(), 3);
    for (a, f) in archive.iter().zip(&folder) {
        assert_eq!(a.id, format!("pack.sigmf/{}", f.id));
        assert!(a.features == f.features, "{}", a.id);
    }
}

/// A chirp with a little deterministic noise, interleaved I/Q, within ±1.
fn chirp(n: usize) -> Vec<f32> {
    (0..n)
        .flat_map(|t| {
            let a = 0.05 * t as f64 + 2e-6 * (t * t) as f64;
            let r = ((t * 7919) % 97) as f64 / 97.0 - 0.5;
            [
                (0.7 * a.cos() + 0.1 * r) as f32,
                (0.7 * a.sin() - 0.1 * r) as f32,
            ]
        })
        .collect()
}

/// Raw cf32 and cu8 files at `--sample-rate` (the IQ spec's rate then): rows equal to
/// `ComplexStft` of the samples written, and a long recording, cut into pieces as it
/// streams, gives the same frames as a whole.
#[test]
fn raw_files_at_the_given_rate_give_the_complex_stft() {
    let tmp = Tmp::new("extract-iq-raw");
    let dir = tmp.path("raw");
    std::fs::create_dir_all(&dir).unwrap();
    let iq = chirp(30_000);
    let bytes: Vec<u8> = iq.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("a.cf32"), &bytes).unwrap();
    // cu8: (b − 128) / 128, exact for these values.
    let u8s: Vec<u8> = iq
        .iter()
        .map(|v| (v * 127.0).round() as i32 + 128)
        .map(|b| b as u8)
        .collect();
    let iq_u8: Vec<f32> = u8s
        .iter()
        .map(|&b| (f32::from(b) - 128.0) / 128.0)
        .collect();
    std::fs::write(dir.join("b.cu8"), &u8s).unwrap();

    let spec = FeatureSpec::iq_power(1_000_000, 256);
    let args = ["--preset", "iq-power", "--sample-rate", "1000000"];
    let o = extract(&dir, &tmp.path("out"), &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = rows(&tmp.path("out"));
    assert_eq!(got.len(), 2);
    for (row, want) in got
        .iter()
        .zip([stft_power(&spec, &iq), stft_power(&spec, &iq_u8)])
    {
        assert_eq!(row.sample_rate, 1_000_000);
        assert_eq!(row.num_frames as usize, spec.n_frames(30_000));
        assert!(row.features == want, "{}", row.id);
    }
    assert_eq!(
        (got[0].id.as_str(), got[1].id.as_str()),
        ("a.cf32", "b.cu8")
    );

    // 30 ms streamed in pieces of 5 ms: their frames, in order, are the whole item's.
    let mut long = args.to_vec();
    long.extend(["--max-seconds", "0.01", "--chunk-seconds", "0.005"]);
    let o = extract(&dir.join("a.cf32"), &tmp.path("pieces"), &long);
    assert!(o.status.success(), "{}", stderr(&o));
    let pieces = rows(&tmp.path("pieces"));
    assert!(pieces.len() >= 5, "{} pieces", pieces.len());
    let joined: Vec<f32> = pieces.iter().flat_map(|r| r.features.clone()).collect();
    assert!(joined == got[0].features);
    let seconds: f64 = pieces.iter().map(|r| r.duration_s).sum();
    assert!((seconds - 0.03).abs() < 1e-9, "{seconds}");
}

fn failures(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("sonograph: failed: "))
        .map(str::to_string)
        .collect()
}

/// An IQ recording under an audio spec, an audio file under an IQ spec, a recording at
/// another rate than the spec's: each fails as an item (exit 3), in one line naming the file
/// and saying why, while the items that fit are extracted.
#[test]
fn sources_and_specs_of_different_kinds_fail_as_items() {
    let tmp = Tmp::new("extract-iq-kinds");
    let dir = tmp.path("mixed");
    synth(&dir, 1, 4_000);
    let wav = dir.join("clip.wav");
    // 0.5 s of a 16 kHz tone, 16-bit PCM.
    let n = 8_000u32;
    let mut w = Vec::new();
    w.extend_from_slice(b"RIFF");
    w.extend_from_slice(&(36 + 2 * n).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    for v in [1u16, 1] {
        w.extend_from_slice(&v.to_le_bytes());
    }
    w.extend_from_slice(&16_000u32.to_le_bytes());
    w.extend_from_slice(&32_000u32.to_le_bytes());
    for v in [2u16, 16] {
        w.extend_from_slice(&v.to_le_bytes());
    }
    w.extend_from_slice(b"data");
    w.extend_from_slice(&(2 * n).to_le_bytes());
    for t in 0..n {
        let v = (8000.0 * (0.1 * f64::from(t)).sin()) as i16;
        w.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(&wav, w).unwrap();

    let o = extract(&dir, &tmp.path("audio"), &["--preset", "whisper"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let f = failures(&o);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].contains(
            "sample-000000000.sigmf-meta: an IQ recording, and the spec takes real audio"
        ),
        "{}",
        f[0]
    );
    assert_eq!(rows(&tmp.path("audio"))[0].id, "clip.wav");

    let o = extract(&dir, &tmp.path("iq"), &["--preset", "iq-spectrogram"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let f = failures(&o);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].contains("clip.wav: an audio file, and the spec takes complex IQ input"),
        "{}",
        f[0]
    );
    assert_eq!(rows(&tmp.path("iq"))[0].id, "sample-000000000");

    // --sample-rate makes the spec 100 kHz; the recording is at 200 kHz, and is not resampled.
    let meta = dir.join("sample-000000000.sigmf-meta");
    let args = ["--preset", "iq-power", "--sample-rate", "100000"];
    let o = extract(&meta, &tmp.path("rate"), &args);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let f = failures(&o);
    assert!(
        f[0].contains(
            "sample-000000000.sigmf-meta: recorded at 200000 Hz, and the spec is for 100000 Hz"
        ),
        "{}",
        f[0]
    );

    // A raw file needs its rate.
    std::fs::write(tmp.path("x.cf32"), [0u8; 8000]).unwrap();
    let o = extract(
        &tmp.path("x.cf32"),
        &tmp.path("norate"),
        &["--preset", "iq-power"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        failures(&o)[0].contains("x.cf32: a raw IQ file needs --sample-rate"),
        "{}",
        stderr(&o)
    );
}

/// Data shorter than its metadata says, or not a whole number of samples, fails as an item
/// naming the data file; the other recordings are extracted.
#[test]
fn truncated_data_fails_as_an_item() {
    let tmp = Tmp::new("extract-iq-truncated");
    let rec = tmp.path("rec");
    synth(&rec, 3, 4_000);
    let cut = |k: u32, len: u64| {
        let data = rec.join(format!("sample-00000000{k}.sigmf-data"));
        std::fs::OpenOptions::new()
            .write(true)
            .open(data)
            .unwrap()
            .set_len(len)
            .unwrap();
    };
    cut(0, 8 * 1_000); // whole samples: 1,000 of the 4,000 the annotation covers
    cut(2, 8 * 1_000 + 3); // half a sample and more
    let o = extract(&rec, &tmp.path("out"), &["--preset", "iq-power"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let f = failures(&o);
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(
        f[0].contains("sample-000000000.sigmf-data: truncated: the metadata refers to sample 4000, the data holds 1000"),
        "{}",
        f[0]
    );
    assert!(
        f[1].contains(
            "sample-000000002.sigmf-data: 8003 bytes is not a whole number of 8-byte cf32_le samples"
        ),
        "{}",
        f[1]
    );
    let ok = rows(&tmp.path("out"));
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].id, "sample-000000001");
}

/// The GPU backend has no kernels for complex specs: a GPU named outright is refused before
/// anything runs, saying so.
#[cfg(feature = "gpu")]
#[test]
fn a_gpu_named_for_an_iq_spec_is_refused() {
    let tmp = Tmp::new("extract-iq-gpu");
    synth(&tmp.path("rec"), 1, 4_000);
    let o = bin()
        .arg("extract")
        .arg(tmp.path("rec"))
        .arg("--out")
        .arg(tmp.path("out"))
        .args([
            "--no-progress",
            "--device",
            "gpu",
            "--preset",
            "iq-spectrogram",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("complex (IQ) input"), "{}", stderr(&o));
}
