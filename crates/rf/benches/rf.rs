//! Criterion benches of one-second 200 kHz recordings: generation (clean waveform and the
//! exact noise stage separately), the Welch PSD, and the full feature vector.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use sonograph_rf::features::{features_with, FeatureConfig, Welch};
use sonograph_rf::spec::{ModKind, ModulationSpec, Range, SynthSpec};
use sonograph_rf::{add_noise, Synth};

fn spec(kind: ModKind) -> SynthSpec {
    SynthSpec {
        modulations: vec![ModulationSpec::new(kind)],
        snr_db: Range::fixed(10.0),
        ..SynthSpec::default()
    }
}

fn generation(c: &mut Criterion) {
    for kind in [ModKind::Qpsk, ModKind::Gmsk, ModKind::Ofdm, ModKind::Fm] {
        let synth = Synth::new(&spec(kind)).unwrap();
        let mut index = 0u64;
        c.bench_function(&format!("generate/{}", kind.label()), |b| {
            b.iter(|| {
                index += 1;
                black_box(synth.sample(7, index))
            })
        });
    }
    let synth = Synth::new(&spec(ModKind::Qpsk)).unwrap();
    let (clean, _, job) = synth.clean(7, 1);
    c.bench_function("generate/qpsk/noise-stage", |b| {
        b.iter(|| {
            let mut iq = clean.clone();
            add_noise(&mut iq, &job);
            black_box(iq)
        })
    });
}

fn featurise(c: &mut Criterion) {
    let synth = Synth::new(&spec(ModKind::Qpsk)).unwrap();
    let sample = synth.sample(7, 1);
    let cfg = FeatureConfig::default();
    let mut welch = Welch::new(&cfg.welch).unwrap();
    c.bench_function("features/welch", |b| {
        b.iter(|| black_box(welch.compute(&sample.iq, 200_000.0).unwrap()))
    });
    c.bench_function("features/all", |b| {
        b.iter(|| black_box(features_with(&mut welch, &sample.iq, 200_000.0, &cfg).unwrap()))
    });
}

/// 1,000 one-second recordings generated and featurised in memory on every core (one
/// thread per core taking every k-th recording): the end-to-end target, without
/// files or hashing.
fn pipeline(c: &mut Criterion) {
    let synth = Synth::new(&spec(ModKind::Qpsk)).unwrap();
    let cfg = FeatureConfig::default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    c.bench_function(&format!("pipeline/1000-recordings-{cores}-threads"), |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                for t in 0..cores {
                    let (synth, cfg) = (&synth, &cfg);
                    s.spawn(move || {
                        let mut welch = Welch::new(&cfg.welch).unwrap();
                        for i in (t..1000).step_by(cores) {
                            let x = synth.sample(7, i as u64);
                            black_box(features_with(&mut welch, &x.iq, 200_000.0, cfg).unwrap());
                        }
                    });
                }
            })
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = generation, featurise
}
criterion_group! {
    name = end_to_end;
    config = Criterion::default().sample_size(10);
    targets = pipeline
}
criterion_main!(benches, end_to_end);
