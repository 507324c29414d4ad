//! The `sigmf` Python package (1.14, scripts/requirements-rf.txt) reads what sonograph writes:
//! it validates the metadata against the SigMF schema and the SHA-512, and its samples equal
//! ours bit for bit in cf32 and within one LSB in ci16.
//!
//! Needs python3 with sigmf and numpy (`SONOGRAPH_PYTHON` names another interpreter). Without
//! them the test says it skipped, unless `SONOGRAPH_REQUIRE_PYTHON=1` (set in CI), where a
//! missing package fails it.

use std::path::PathBuf;
use std::process::Command;

#[path = "../../../tests/shared/skip.rs"]
mod skip;

use sonograph_io::sigmf::{sigmf_paths, write_sigmf, WriteType};
use sonograph_rf::sigmf::{truth_annotation, DataType, SigmfMeta};
use sonograph_rf::spec::{Impairments, ModKind, ModulationSpec, Range};
use sonograph_rf::{Synth, SynthSpec};

const CHECK: &str = r#"
import sys, json
import numpy as np
import sigmf
out = {}
for base, kind in [(sys.argv[1], "cf32"), (sys.argv[2], "ci16")]:
    handle = sigmf.fromfile(base)  # validates the schema and the checksum
    handle.validate()
    x = handle.read_samples()
    want = np.fromfile(sys.argv[3], dtype=np.complex64)
    ann = handle.get_annotations()
    out[kind] = {
        "n": int(len(x)),
        "equal": bool(np.array_equal(x.view(np.uint32), want.view(np.uint32))),
        "max_err": float(np.max(np.abs(np.concatenate([(x - want).real, (x - want).imag])))),
        "label": ann[0].get("core:label"),
        "snr": ann[0].get("sonograph:snr_db"),
        "rate": handle.get_global_field("core:sample_rate"),
    }
print(json.dumps(out))
"#;

fn python() -> String {
    std::env::var("SONOGRAPH_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn the_sigmf_package_reads_our_files() {
    let probe = Command::new(python())
        .args(["-c", "import sigmf, numpy; print(sigmf.__version__)"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                Err(e) => e.to_string(),
            };
            skip::skip_unless_required(
                "SONOGRAPH_REQUIRE_PYTHON",
                &format!(
                    "{} cannot import sigmf and numpy ({why}); pip install -r scripts/requirements-rf.txt",
                    python()
                ),
            );
            return;
        }
    }
    let dir = std::env::temp_dir().join(format!("sonograph-sigmf-py-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = SynthSpec {
        n_samples: 20_000,
        modulations: vec![ModulationSpec::new(ModKind::Qam16)],
        snr_db: Range::fixed(12.5),
        impairments: Impairments {
            cfo_hz: Some(Range {
                min: -100.0,
                max: 100.0,
            }),
            ..Impairments::default()
        },
        ..SynthSpec::default()
    };
    let sample = Synth::new(&spec).unwrap().sample(1, 2);
    let mut meta = SigmfMeta::new(DataType::Cf32Le, spec.sample_rate);
    meta.declare_extension();
    meta.annotations.push(truth_annotation(&sample.truth));
    let bases: Vec<PathBuf> = ["a", "b"].iter().map(|n| dir.join(n)).collect();
    write_sigmf(&bases[0], &sample.iq, WriteType::Cf32, meta.clone()).unwrap();
    let clipped = write_sigmf(&bases[1], &sample.iq, WriteType::Ci16, meta).unwrap();
    assert_eq!(clipped, 0);
    let raw = dir.join("want.cf32");
    let bytes: Vec<u8> = sample
        .iq
        .iter()
        .flat_map(|v| v.re.to_le_bytes().into_iter().chain(v.im.to_le_bytes()))
        .collect();
    std::fs::write(&raw, bytes).unwrap();
    let o = Command::new(python())
        .args(["-c", CHECK])
        .arg(sigmf_paths(&bases[0]).0)
        .arg(sigmf_paths(&bases[1]).0)
        .arg(&raw)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["cf32"]["n"], 20_000);
    assert_eq!(r["cf32"]["equal"], true, "{r}");
    assert_eq!(r["cf32"]["label"], "16qam");
    assert_eq!(r["cf32"]["snr"], 12.5);
    assert_eq!(r["cf32"]["rate"], 200_000.0);
    // One LSB of ci16 at sigmf's scale (1/32768); rounding keeps it under half.
    let err = r["ci16"]["max_err"].as_f64().unwrap();
    assert!(err <= 1.0 / 32768.0, "ci16 error {err}");
    assert!(err > 0.0, "ci16 cannot be exact on synthetic floats");
}
