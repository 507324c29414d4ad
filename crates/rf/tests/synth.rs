//! Synthesis: every modulation and impairment does what it says, and a recording is a pure
//! function of (spec, seed, index).

use rustfft::num_complex::Complex32;
use sonograph_rf::features::{features, welch, FeatureConfig, WelchConfig};
use sonograph_rf::normal::deviate;
use sonograph_rf::philox::{Rng, Stream};
use sonograph_rf::spec::{Fading, Impairments, ModKind, ModParams, ModulationSpec, Range};
use sonograph_rf::synth::modulation_of;
use sonograph_rf::{add_noise, Synth, SynthSpec};

fn spec_of(kind: ModKind, snr: f64) -> SynthSpec {
    SynthSpec {
        n_samples: 50_000,
        modulations: vec![ModulationSpec::new(kind)],
        snr_db: Range::fixed(snr),
        ..SynthSpec::default()
    }
}

fn power(iq: &[Complex32]) -> f64 {
    iq.iter().map(|v| f64::from(v.norm_sqr())).sum::<f64>() / iq.len() as f64
}

#[test]
fn every_modulation_is_finite_at_its_level_and_labelled() {
    for kind in ModKind::ALL {
        let synth = Synth::new(&spec_of(kind, 20.0)).unwrap();
        let (clean, truth, job) = synth.clean(1, 2);
        assert_eq!(clean.len(), 50_000);
        assert_eq!(truth.label, kind.label());
        assert!(
            clean.iter().all(|v| v.re.is_finite() && v.im.is_finite()),
            "{}",
            kind.label()
        );
        // The level is the realised power: -30 dBFS.
        let p = power(&clean);
        assert!(
            (10.0 * p.log10() + 30.0).abs() < 1e-4,
            "{}: {p}",
            kind.label()
        );
        assert!(truth.in_band_hz > 0.0 && truth.in_band_hz <= 200_000.0);
        assert!(job.sigma > 0.0);
    }
}

#[test]
fn a_recording_depends_only_on_seed_and_index() {
    let mut spec = spec_of(ModKind::Qpsk, 5.0);
    spec.modulations = ModKind::ALL
        .iter()
        .map(|&k| ModulationSpec::new(k))
        .collect();
    spec.impairments = Impairments {
        cfo_hz: Some(Range {
            min: -1e3,
            max: 1e3,
        }),
        phase_noise_linewidth_hz: Some(Range::fixed(10.0)),
        multipath_paths: Some(Range { min: 1.0, max: 4.0 }),
        multipath_max_delay_s: Some(20e-6),
        fading: Some(Fading::Rayleigh),
        doppler_hz: Some(Range::fixed(50.0)),
        ..Impairments::default()
    };
    let a = Synth::new(&spec).unwrap();
    let b = Synth::new(&spec).unwrap();
    // In any order, from fresh or reused generators.
    let later = b.sample(9, 17);
    let first = a.sample(9, 3);
    assert_eq!(a.sample(9, 17), later);
    assert_eq!(b.sample(9, 3), first);
    assert_ne!(a.sample(9, 4).iq, first.iq);
    assert_ne!(a.sample(10, 3).iq, first.iq);
    // The draw of the modulation is uniform over the list.
    let mut counts = vec![0; ModKind::ALL.len()];
    for i in 0..5400 {
        let k = modulation_of(&spec, 9, i);
        counts[ModKind::ALL.iter().position(|&m| m == k).unwrap()] += 1;
    }
    assert!(
        counts.iter().all(|&c| (140..=260).contains(&c)),
        "{counts:?}"
    );
}

/// The exact stage adds sigma times the deviate of Noise-stream word j to value j.
#[test]
fn noise_stage_is_the_documented_formula() {
    let synth = Synth::new(&spec_of(ModKind::Qpsk, 3.0)).unwrap();
    let (clean, _, job) = synth.clean(4, 8);
    let mut noisy = clean.clone();
    add_noise(&mut noisy, &job);
    let rng = Rng::new(4, 8, Stream::Noise);
    for n in [0usize, 1, 4095, 4096, 49_999] {
        let re = clean[n].re + job.sigma * deviate(rng.word(2 * n as u64));
        let im = clean[n].im + job.sigma * deviate(rng.word(2 * n as u64 + 1));
        assert_eq!(
            (noisy[n].re.to_bits(), noisy[n].im.to_bits()),
            (re.to_bits(), im.to_bits())
        );
    }
    // Its power is 2 sigma^2.
    let noise: Vec<Complex32> = noisy.iter().zip(&clean).map(|(a, b)| a - b).collect();
    let p = power(&noise);
    let want = 2.0 * f64::from(job.sigma).powi(2);
    assert!((p / want - 1.0).abs() < 0.02, "{p} vs {want}");
}

/// The AVX2 path of the exact stage (taken where the CPU has it) equals the scalar code on
/// every value, quantised or not, whatever the length.
#[test]
fn vector_and_scalar_noise_stages_agree_bit_for_bit() {
    let synth = Synth::new(&spec_of(ModKind::Qam64, 0.0)).unwrap();
    let (clean, _, job) = synth.clean(3, 9);
    for (bits, len) in [(0u32, 50_000usize), (9, 12_345), (16, 7), (2, 1001)] {
        let job = sonograph_rf::NoiseJob {
            quantize_bits: bits,
            ..job
        };
        let mut fast = clean[..len].to_vec();
        add_noise(&mut fast, &job);
        let mut slow = clean[..len].to_vec();
        let mut words = vec![0u32; 2 * len];
        Rng::new(3, 9, Stream::Noise).fill_words_scalar(0, &mut words);
        sonograph_rf::synth::noise_chunk_scalar(&mut slow, &words, job.sigma, bits);
        let same = fast
            .iter()
            .zip(&slow)
            .all(|(a, b)| a.re.to_bits() == b.re.to_bits() && a.im.to_bits() == b.im.to_bits());
        assert!(same, "bits {bits}, length {len}");
    }
}

#[test]
fn quantisation_puts_every_value_on_the_grid() {
    let mut spec = spec_of(ModKind::Qam16, 10.0);
    spec.impairments.quantize_bits = Some(8);
    let s = Synth::new(&spec).unwrap().sample(1, 1);
    for v in &s.iq {
        for x in [v.re, v.im] {
            let k = x * 128.0;
            assert_eq!(k, k.round(), "{x}");
            assert!((-1.0..1.0).contains(&x));
        }
    }
}

fn peak_hz(iq: &[Complex32]) -> f64 {
    let psd = welch(iq, 200_000.0, &WelchConfig::default()).unwrap();
    let k = (0..psd.density.len())
        .max_by(|&a, &b| psd.density[a].total_cmp(&psd.density[b]))
        .unwrap();
    psd.freq(k)
}

#[test]
fn carrier_offset_moves_a_tone_and_dc_offset_adds_a_mean() {
    let mut spec = spec_of(ModKind::Tone, 40.0);
    spec.impairments.cfo_hz = Some(Range::fixed(12_500.0));
    let s = Synth::new(&spec).unwrap().sample(2, 0);
    assert!(
        (peak_hz(&s.iq) - 12_500.0).abs() <= 200.0,
        "{}",
        peak_hz(&s.iq)
    );
    assert_eq!(s.truth.cfo_hz, 12_500.0);

    let mut spec = spec_of(ModKind::Qpsk, 40.0);
    spec.impairments.dc_offset_dbc = Some(Range::fixed(-10.0));
    let s = Synth::new(&spec).unwrap().sample(2, 0);
    let mean = s.iq.iter().fold(Complex32::new(0.0, 0.0), |a, v| a + v) / s.iq.len() as f32;
    let want = 10f64.powf(-3.0) * 10f64.powf(-1.0);
    // The QPSK's own mean over 50k samples moves it by a few per cent.
    assert!(
        (f64::from(mean.norm_sqr()) / want - 1.0).abs() < 0.15,
        "{mean}"
    );
}

/// The spectra the parameters promise: FSK tones at ±h·Rs/2, SSB on one side, the OFDM and
/// chirp bandwidths.
#[test]
fn modulation_spectra_follow_their_parameters() {
    let cfg = FeatureConfig::default();
    let obw = |kind: ModKind, params: ModParams| {
        let mut spec = spec_of(kind, 60.0);
        spec.modulations = vec![ModulationSpec { kind, params }];
        let s = Synth::new(&spec).unwrap().sample(3, 0);
        features(&s.iq, 200_000.0, &cfg).unwrap().0
    };
    // OFDM: 52 of 256 bins of 200 kHz.
    let f = obw(ModKind::Ofdm, ModParams::default());
    let want = 52.0 / 256.0 * 200_000.0;
    assert!(
        (f.obw_hz / want - 1.0).abs() < 0.1,
        "ofdm {} vs {want}",
        f.obw_hz
    );
    // LFM: a 50 kHz sweep over 10 ms (time-bandwidth 500, so the edges are sharp).
    let lfm = ModParams {
        period_s: Some(0.01),
        ..ModParams::default()
    };
    let f = obw(ModKind::Lfm, lfm);
    assert!((f.obw_hz / 50_000.0 - 1.0).abs() < 0.05, "lfm {}", f.obw_hz);
    // SSB: the upper sideband is above 0 Hz, the lower below.
    let f = obw(ModKind::SsbUsb, ModParams::default());
    assert!(
        f.obw_low_hz > -300.0 && f.obw_high_hz <= 5_300.0,
        "usb {f:?}"
    );
    let f = obw(ModKind::SsbLsb, ModParams::default());
    assert!(
        f.obw_high_hz < 300.0 && f.obw_low_hz >= -5_300.0,
        "lsb {f:?}"
    );
    // 2-FSK with h = 1 at 25 kBd: tones at ±12.5 kHz, so the spread is about 12.5 kHz.
    let f = obw(ModKind::Fsk2, ModParams::default());
    assert!(
        (f.spectral_spread_hz / 12_500.0 - 1.0).abs() < 0.15,
        "2fsk {}",
        f.spectral_spread_hz
    );
    // AM with a carrier has its peak at DC; FM's amplitude is constant.
    let f = obw(ModKind::AmDsb, ModParams::default());
    assert!(f.peak_freq_hz.abs() < 200.0);
    let f = obw(ModKind::Fm, ModParams::default());
    assert!(f.amp_std < 0.02, "fm amplitude std {}", f.amp_std);
    // GMSK and MSK are constant-envelope too, so M2M4 reads their SNR (40 dB in-band is about
    // 60 - 10 log10(200 k / B99) full-band).
    let f = obw(ModKind::Gmsk, ModParams::default());
    assert!(f.amp_std < 0.02 && f.snr_m2m4_db > 40.0, "gmsk {f:?}");
}

#[test]
fn channel_impairments_keep_the_level_and_change_the_signal() {
    let base = spec_of(ModKind::Qpsk, 100.0);
    let plain = Synth::new(&base).unwrap().clean(5, 1).0;
    let cases: Vec<Impairments> = vec![
        Impairments {
            sample_rate_offset_ppm: Some(Range::fixed(50.0)),
            ..Impairments::default()
        },
        Impairments {
            multipath_paths: Some(Range::fixed(3.0)),
            multipath_max_delay_s: Some(50e-6),
            ..Impairments::default()
        },
        Impairments {
            fading: Some(Fading::Rician),
            doppler_hz: Some(Range::fixed(100.0)),
            rician_k_db: Some(Range::fixed(6.0)),
            ..Impairments::default()
        },
        Impairments {
            phase_noise_linewidth_hz: Some(Range::fixed(100.0)),
            cfo_drift_hz_per_s: Some(Range::fixed(1000.0)),
            ..Impairments::default()
        },
        Impairments {
            iq_amplitude_db: Some(Range::fixed(1.0)),
            iq_phase_deg: Some(Range::fixed(5.0)),
            ..Impairments::default()
        },
    ];
    for imp in cases {
        let mut spec = base.clone();
        spec.impairments = imp.clone();
        let (iq, truth, _) = Synth::new(&spec).unwrap().clean(5, 1);
        assert_ne!(iq, plain, "{imp:?} changed nothing");
        assert!(iq.iter().all(|v| v.re.is_finite() && v.im.is_finite()));
        let db = 10.0 * power(&iq).log10();
        // IQ imbalance changes the power by design; everything else keeps the level.
        let tol = if imp.iq_amplitude_db.is_some() {
            1.0
        } else {
            1e-3
        };
        assert!((db + 30.0).abs() < tol, "{imp:?}: {db} dBFS");
        if imp.multipath_paths.is_some() {
            assert_eq!(truth.path_delays_s.len(), 3);
            assert!((truth.path_powers.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
    }
}

/// The exact normal deviates have a standard normal's moments and tails.
#[test]
fn deviates_are_standard_normal() {
    let rng = Rng::new(123, 0, Stream::Noise);
    let mut words = vec![0u32; 2_000_000];
    rng.fill_words(0, &mut words);
    let n = words.len() as f64;
    let x: Vec<f64> = words.iter().map(|&w| f64::from(deviate(w))).collect();
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    let kurt = x.iter().map(|v| (v - mean).powi(4)).sum::<f64>() / n / (var * var);
    assert!(mean.abs() < 0.003, "mean {mean}");
    assert!((var - 1.0).abs() < 0.004, "variance {var}");
    assert!((kurt - 3.0).abs() < 0.02, "kurtosis {kurt}");
    // Tail masses of N(0, 1): P(|x| > 2) = 0.0455, P(|x| > 3) = 0.0027.
    let beyond = |t: f64| x.iter().filter(|v| v.abs() > t).count() as f64 / n;
    assert!((beyond(2.0) - 0.0455).abs() < 0.0006, "{}", beyond(2.0));
    assert!((beyond(3.0) - 0.0027).abs() < 0.00015, "{}", beyond(3.0));
    assert!(beyond(4.0) > 0.0, "the tails reach past 4 sigma");
}
