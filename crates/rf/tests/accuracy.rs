//! The accuracy items against theory: PSD-based SNR (bias and RMSE over −5…30 dB, pure
//! noise), occupied bandwidth against the pulse's own spectrum, and Swami & Sadler's C̃42.

use rustfft::num_complex::{Complex32, Complex64};
use rustfft::FftPlanner;
use sonograph_rf::features::{features, FeatureConfig};
use sonograph_rf::modulate::pulse_taps;
use sonograph_rf::spec::{ModKind, ModParams, ModulationSpec, Pulse, Range, SnrDefinition};
use sonograph_rf::{Synth, SynthSpec};

fn qpsk_spec(def: SnrDefinition, snr: f64) -> SynthSpec {
    SynthSpec {
        modulations: vec![ModulationSpec::new(ModKind::Qpsk)],
        snr_db: Range::fixed(snr),
        snr_definition: def,
        ..SynthSpec::default()
    }
}

/// Bias and RMSE (dB) of an SNR estimate over −5…30 dB, 8 recordings per point.
fn snr_errors(
    def: SnrDefinition,
    pick: impl Fn(&sonograph_rf::RfFeatures) -> f64,
) -> Vec<(f64, f64, f64)> {
    let cfg = FeatureConfig::default();
    let mut rows = Vec::new();
    for snr in (-5..=30).step_by(5) {
        let synth = Synth::new(&qpsk_spec(def, f64::from(snr))).unwrap();
        let errs: Vec<f64> = (0..8)
            .map(|i| {
                let s = synth.sample(11, i);
                let (f, _) = features(&s.iq, 200_000.0, &cfg).unwrap();
                pick(&f) - f64::from(snr)
            })
            .collect();
        let bias = errs.iter().sum::<f64>() / errs.len() as f64;
        let rmse = (errs.iter().map(|e| e * e).sum::<f64>() / errs.len() as f64).sqrt();
        rows.push((f64::from(snr), bias, rmse));
    }
    rows
}

fn assert_snr(rows: &[(f64, f64, f64)], what: &str) {
    for &(snr, bias, rmse) in rows {
        eprintln!("{what} {snr:>5} dB: bias {bias:+.3} dB, rmse {rmse:.3} dB");
    }
    for &(snr, bias, rmse) in rows {
        assert!(bias.abs() <= 0.5, "{what} at {snr} dB: bias {bias} dB");
        assert!(rmse <= 1.0, "{what} at {snr} dB: rmse {rmse} dB");
    }
}

#[test]
fn psd_snr_full_band_bias_and_rmse() {
    let rows = snr_errors(SnrDefinition::FullBand, |f| f.snr_fullband_db);
    assert_snr(&rows, "full-band");
}

#[test]
fn psd_snr_in_band_bias_and_rmse() {
    let rows = snr_errors(SnrDefinition::InBand, |f| f.snr_inband_db);
    assert_snr(&rows, "in-band");
}

/// Pure complex white noise reads at most 1 dB (Heimdall's estimator read +7.8 dB).
#[test]
fn pure_noise_reads_no_snr() {
    let cfg = FeatureConfig::default();
    for seed in 0..4u64 {
        let rng = sonograph_rf::philox::Rng::new(seed, 0, sonograph_rf::philox::Stream::Noise);
        let mut words = vec![0u32; 400_000];
        rng.fill_words(0, &mut words);
        let iq: Vec<Complex32> = words
            .chunks_exact(2)
            .map(|w| {
                Complex32::new(
                    0.1 * sonograph_rf::normal::deviate(w[0]),
                    0.1 * sonograph_rf::normal::deviate(w[1]),
                )
            })
            .collect();
        let (f, _) = features(&iq, 200_000.0, &cfg).unwrap();
        eprintln!(
            "noise seed {seed}: full-band {:.2} dB, in-band {:.2} dB, floor {:.2} dB/Hz",
            f.snr_fullband_db, f.snr_inband_db, f.noise_floor_dbfs_hz
        );
        assert!(f.snr_fullband_db <= 1.0, "{}", f.snr_fullband_db);
        assert!(f.snr_inband_db <= 1.0, "{}", f.snr_inband_db);
        // The floor is the noise's own density: 2 * 0.01 / 200 kHz.
        let want = 10.0 * (0.02f64 / 200_000.0).log10();
        assert!(
            (f.noise_floor_dbfs_hz - want).abs() < 0.05,
            "{} vs {want}",
            f.noise_floor_dbfs_hz
        );
    }
}

/// The 99 % bandwidth of a linear modulation's PSD, |H(f)|², from a dense DFT of its taps:
/// the truth for the generated signal (its symbols are i.i.d. and zero-mean).
fn true_obw(taps: &[f64], sps: usize, fs: f64) -> f64 {
    let n = 1 << 18;
    let mut buf: Vec<Complex64> = taps.iter().map(|&t| Complex64::new(t, 0.0)).collect();
    buf.resize(n, Complex64::default());
    FftPlanner::new().plan_fft_forward(n).process(&mut buf);
    let p: Vec<f64> = buf.iter().map(|c| c.norm_sqr()).collect();
    let total: f64 = p.iter().sum();
    // Symmetric spectrum: accumulate from DC outwards until 99 % is inside.
    let mut acc = p[0];
    let mut k = 0;
    while acc < 0.99 * total {
        k += 1;
        acc += p[k] + p[n - k];
    }
    let _ = sps;
    2.0 * k as f64 * fs / n as f64
}

#[test]
fn occupied_bandwidth_within_one_bin_or_two_percent() {
    let cfg = FeatureConfig::default();
    let fs = 200_000.0;
    for (sps, rolloff, snr) in [
        (8u32, 0.35, 30.0),
        (4, 0.2, 20.0),
        (16, 0.5, 10.0),
        (8, 0.35, 5.0),
    ] {
        let params = ModParams {
            samples_per_symbol: Some(sps),
            rolloff: Some(rolloff),
            ..ModParams::default()
        };
        let spec = SynthSpec {
            modulations: vec![ModulationSpec {
                kind: ModKind::Qpsk,
                params,
            }],
            snr_db: Range::fixed(snr),
            ..SynthSpec::default()
        };
        let taps = pulse_taps(Pulse::Rrc, sps as usize, rolloff, 0.0, 8);
        let truth = true_obw(&taps, sps as usize, fs);
        let synth = Synth::new(&spec).unwrap();
        for i in 0..3 {
            let s = synth.sample(5, i);
            let (f, psd) = features(&s.iq, fs, &cfg).unwrap();
            let tol = psd.bin_hz().max(0.02 * truth);
            eprintln!(
                "sps {sps} β {rolloff} {snr} dB: obw {:.0} Hz, truth {truth:.0} Hz",
                f.obw_hz
            );
            assert!(
                (f.obw_hz - truth).abs() <= tol,
                "{} vs {truth} (±{tol})",
                f.obw_hz
            );
        }
    }
}

/// C̃42 at 20 dB with 4096+ symbols: one sample per symbol, as the theory assumes (Es/N0 is
/// then the full-band SNR).
#[test]
fn c42_matches_theory() {
    let cfg = FeatureConfig::default();
    for (kind, theory) in [
        (ModKind::Bpsk, -2.0),
        (ModKind::Qpsk, -1.0),
        (ModKind::Psk8, -1.0),
        (ModKind::Qam16, -0.68),
    ] {
        let params = ModParams {
            samples_per_symbol: Some(1),
            pulse: Some(Pulse::Rect),
            ..ModParams::default()
        };
        let spec = SynthSpec {
            n_samples: 8192,
            modulations: vec![ModulationSpec { kind, params }],
            snr_db: Range::fixed(20.0),
            snr_definition: SnrDefinition::EsN0,
            ..SynthSpec::default()
        };
        let synth = Synth::new(&spec).unwrap();
        for i in 0..3 {
            let s = synth.sample(3, i);
            let (f, _) = features(&s.iq, 200_000.0, &cfg).unwrap();
            eprintln!("{}: C42 {:.4} (theory {theory})", kind.label(), f.c42);
            assert!(
                (f.c42 - theory).abs() <= 0.05,
                "{}: {} vs {theory}",
                kind.label(),
                f.c42
            );
        }
    }
}
