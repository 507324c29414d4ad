//! sonograph against scipy 1.17 / numpy 2.4 on the fixtures that scripts/rf_reference.py
//! wrote into tests/rf: Welch PSDs within 1e-6 relative of `scipy.signal.welch` per bin, and
//! the sample and spectral features against numpy transcriptions of their formulas.

use std::path::PathBuf;

use rustfft::num_complex::Complex32;
use serde_json::Value;
use sonograph_dsp::spec::WindowKind;
use sonograph_rf::features::{features, welch, FeatureConfig, WelchConfig};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/rf")
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("reference.json")).unwrap()).unwrap()
}

fn signal(name: &str) -> Vec<Complex32> {
    let bytes = std::fs::read(dir().join(format!("{name}.cf32"))).unwrap();
    bytes
        .chunks_exact(8)
        .map(|b| {
            Complex32::new(
                f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                f32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            )
        })
        .collect()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(got: f64, want: f64, rtol: f64, what: &str) {
    let err = (got - want).abs() / want.abs().max(1e-300);
    assert!(err <= rtol, "{what}: {got} vs {want} (relative {err:e})");
}

#[test]
fn welch_equals_scipy_within_1e6_relative() {
    let r = reference();
    let cases = r["welch"].as_object().unwrap();
    assert_eq!(cases.len(), 4);
    for (name, case) in cases {
        let cfg = WelchConfig {
            nperseg: case["nperseg"].as_u64().unwrap() as usize,
            noverlap: case["noverlap"].as_u64().unwrap() as usize,
            window: match case["window"].as_str().unwrap() {
                "hann" => WindowKind::Hann,
                "hamming" => WindowKind::Hamming,
                "boxcar" => WindowKind::Rectangular,
                w => panic!("window {w}"),
            },
            detrend: case["detrend"].as_bool().unwrap(),
        };
        let x = signal(case["signal"].as_str().unwrap());
        let psd = welch(&x, case["fs"].as_f64().unwrap(), &cfg).unwrap();
        let want = f64s(&case["psd"]);
        let got = psd.fft_order();
        assert_eq!(got.len(), want.len(), "{name}");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            close(*g, *w, 1e-6, &format!("{name} bin {k}"));
        }
        // scipy's frequencies, in its order.
        let freqs = f64s(&case["freqs"]);
        let n = freqs.len();
        for (k, f) in freqs.iter().enumerate() {
            let shifted = (k + n / 2) % n;
            assert!(
                (psd.freq(shifted) - f).abs() <= 1e-9 * psd.fs,
                "{name} freq {k}"
            );
        }
    }
}

#[test]
fn features_match_numpy_transcriptions() {
    let r = reference();
    for (name, want) in r["features"].as_object().unwrap() {
        let x = signal(name);
        let fs = want["fs"].as_f64().unwrap();
        let (f, _) = features(&x, fs, &FeatureConfig::default()).unwrap();
        close(
            f.rssi_dbfs,
            want["rssi_dbfs"].as_f64().unwrap(),
            1e-9,
            "rssi",
        );
        close(f.papr_db, want["papr_db"].as_f64().unwrap(), 1e-9, "papr");
        let groups = [
            (
                "amp",
                [f.amp_mean, f.amp_std, f.amp_skewness, f.amp_kurtosis],
            ),
            (
                "phase",
                [
                    f.phase_mean,
                    f.phase_std,
                    f.phase_skewness,
                    f.phase_kurtosis,
                ],
            ),
            (
                "freq",
                [
                    f.freq_mean_hz,
                    f.freq_std_hz,
                    f.freq_skewness,
                    f.freq_kurtosis,
                ],
            ),
        ];
        for (g, got) in groups {
            for (i, (a, b)) in got.iter().zip(f64s(&want[g])).enumerate() {
                // Means near zero are compared against the scale of the values.
                let scale = if i == 0 {
                    b.abs().max(1e-3 * got[1])
                } else {
                    b.abs()
                };
                assert!((a - b).abs() <= 1e-9 * scale, "{name} {g}[{i}]: {a} vs {b}");
            }
        }
        let c = [
            f.c20_abs, f.c21, f.c40_abs, f.c41_abs, f.c42, f.c60_abs, f.c63,
        ];
        for (i, (a, b)) in c.iter().zip(f64s(&want["cumulants"])).enumerate() {
            assert!(
                (a - b).abs() <= 1e-9 * b.abs().max(1e-6),
                "{name} cumulant {i}: {a} vs {b}"
            );
        }
        if let Some(centroid) = want.get("spectral_centroid_hz") {
            close(
                f.spectral_centroid_hz,
                centroid.as_f64().unwrap(),
                1e-6,
                "centroid",
            );
            close(
                f.spectral_spread_hz,
                want["spectral_spread_hz"].as_f64().unwrap(),
                1e-6,
                "spread",
            );
            close(
                f.spectral_kurtosis,
                want["spectral_kurtosis"].as_f64().unwrap(),
                1e-6,
                "kurtosis",
            );
            close(
                f.spectral_flatness,
                want["spectral_flatness"].as_f64().unwrap(),
                1e-6,
                "flatness",
            );
            close(
                f.peak_freq_hz,
                want["peak_freq_hz"].as_f64().unwrap(),
                1e-12,
                "peak",
            );
        }
    }
}
