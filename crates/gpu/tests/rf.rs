//! RF on the GPU (lavapipe in CI): the exact stage of synthesis returns the CPU's bits, and the
//! Welch PSD and every feature read from it are within 1e-5 relative of the CPU path.
//!
//! Without an adapter they skip (a failure under `SONOGRAPH_REQUIRE_GPU=1`, see
//! tests/shared/skip.rs).

#[path = "../../../tests/shared/skip.rs"]
mod skip;

use sonograph_dsp::DeviceError;
use sonograph_gpu::rf::RfGpu;
use sonograph_rf::features::{features, spectral_features, FeatureConfig, RfFeatures, WelchConfig};
use sonograph_rf::spec::{Impairments, ModKind, ModulationSpec, Range};
use sonograph_rf::{add_noise, Synth, SynthSpec};

fn gpu() -> Option<RfGpu> {
    match RfGpu::new(None) {
        Ok(g) => Some(g),
        Err(DeviceError::Unavailable(why)) => {
            skip::skip(&format!(
                "no wgpu adapter (install mesa-vulkan-drivers): {why}"
            ));
            None
        }
        Err(e) => panic!("the RF GPU backend failed to start: {e}"),
    }
}

#[test]
fn gpu_noise_stage_is_bit_identical_to_the_cpu() {
    let Some(mut g) = gpu() else { return };
    let mut spec = SynthSpec {
        n_samples: 30_001,
        modulations: ModKind::ALL
            .iter()
            .map(|&k| ModulationSpec::new(k))
            .collect(),
        snr_db: Range {
            min: -10.0,
            max: 30.0,
        },
        ..SynthSpec::default()
    };
    for bits in [None, Some(10)] {
        spec.impairments = Impairments {
            quantize_bits: bits,
            cfo_hz: Some(Range {
                min: -5e3,
                max: 5e3,
            }),
            ..Impairments::default()
        };
        let synth = Synth::new(&spec).unwrap();
        let indices = [0u64, 1, 7, 123_456_789_012, u64::MAX - 3];
        let (mut clean, mut jobs) = (Vec::new(), Vec::new());
        for (k, &i) in indices.iter().enumerate() {
            // Recordings of different lengths in one dispatch.
            let (mut iq, _, job) = synth.clean(0xfeed_beef_u64 << 20, i);
            iq.truncate(30_001 - 997 * k);
            clean.push(iq);
            jobs.push(job);
        }
        let mut on_gpu = clean.clone();
        g.add_noise(&mut on_gpu, &jobs).unwrap();
        for (k, (mut cpu, job)) in clean.into_iter().zip(&jobs).enumerate() {
            add_noise(&mut cpu, job);
            let differ = cpu
                .iter()
                .zip(&on_gpu[k])
                .filter(|(a, b)| {
                    a.re.to_bits() != b.re.to_bits() || a.im.to_bits() != b.im.to_bits()
                })
                .count();
            assert_eq!(
                differ,
                0,
                "recording {k} (bits {bits:?}): {differ} values differ on {}",
                g.device()
            );
        }
    }
}

fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / a.abs().max(b.abs())
    }
}

#[test]
fn gpu_psd_and_features_match_the_cpu() {
    let Some(mut g) = gpu() else { return };
    let cfg = FeatureConfig::default();
    for (kind, detrend) in [
        (ModKind::Qpsk, false),
        (ModKind::Ofdm, true),
        (ModKind::Fm, false),
    ] {
        let spec = SynthSpec {
            n_samples: 100_000,
            modulations: vec![ModulationSpec::new(kind)],
            snr_db: Range::fixed(15.0),
            ..SynthSpec::default()
        };
        let synth = Synth::new(&spec).unwrap();
        let samples: Vec<_> = (0..3).map(|i| synth.sample(2, i).iq).collect();
        let welch = WelchConfig {
            detrend,
            ..cfg.welch
        };
        let cfg = FeatureConfig {
            welch,
            ..cfg.clone()
        };
        let refs: Vec<&[_]> = samples.iter().map(|s| s.as_slice()).collect();
        let psds = g.welch(&refs, &[200_000.0; 3], &welch).unwrap();
        for (iq, gpsd) in samples.iter().zip(&psds) {
            let (cpu, cpsd) = features(iq, 200_000.0, &cfg).unwrap();
            assert_eq!(gpsd.segments, cpsd.segments);
            let peak = cpsd.density.iter().copied().fold(0.0, f64::max);
            for (k, (a, b)) in gpsd.density.iter().zip(&cpsd.density).enumerate() {
                // f64 on lavapipe: the FFTs differ only in rounding.
                assert!(
                    (a - b).abs() <= 1e-9 * b.abs() + 1e-13 * peak,
                    "{} bin {k}: {a} vs {b}",
                    kind.label()
                );
            }
            // The features read off the GPU's PSD, the sample statistics as on the CPU.
            let mut f = cpu;
            spectral_features(gpsd, cfg.obw_fraction, &mut f);
            for ((name, a), b) in RfFeatures::NAMES.iter().zip(f.values()).zip(cpu.values()) {
                if a.is_nan() && b.is_nan() {
                    continue;
                }
                assert!(
                    rel(a, b) <= 1e-5 || (a - b).abs() <= 1e-9,
                    "{} {name}: gpu {a} cpu {b}",
                    kind.label()
                );
            }
        }
    }
    // nperseg that is not a power of two is refused with a reason.
    let odd = WelchConfig {
        nperseg: 1000,
        noverlap: 500,
        ..cfg.welch
    };
    let e = g
        .welch(&[&[Default::default(); 4000]], &[1.0], &odd)
        .unwrap_err();
    assert!(e.to_string().contains("power-of-two"), "{e}");
}
