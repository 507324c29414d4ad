//! Kernel benchmarks: one 30 s clip through each preset, both precisions, and the pieces.
//! Run: cargo bench -p sonograph-dsp

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use sonograph_dsp::complex::ComplexStft;
use sonograph_dsp::spec::WindowKind;
use sonograph_dsp::{CpuExtractor, FeatureSpec, Precision};

/// 30 s of a deterministic speech-like signal: a few drifting harmonics plus noise.
fn clip(rate: u32, seconds: usize) -> Vec<f32> {
    let n = rate as usize * seconds;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let noise = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            let t = i as f32 / rate as f32;
            let f0 = 120.0 + 30.0 * (0.5 * t).sin();
            let voiced: f32 = (1..6)
                .map(|h| (std::f32::consts::TAU * f0 * h as f32 * t).sin() / h as f32)
                .sum();
            0.2 * voiced + 0.02 * noise
        })
        .collect()
}

fn presets(c: &mut Criterion) {
    let mut group = c.benchmark_group("extract_30s");
    group.throughput(Throughput::Elements(30)); // elements = audio seconds
    for (name, precision) in [
        ("whisper", Precision::F32),
        ("whisper", Precision::F64),
        ("kaldi", Precision::F64),
        ("nemo", Precision::F64),
        ("librosa", Precision::F64),
        ("librosa-mfcc", Precision::F64),
    ] {
        let spec = FeatureSpec::preset(name).unwrap();
        let x = clip(spec.sample_rate, 30);
        let mut ex = CpuExtractor::with_precision(&spec, precision).unwrap();
        let mut out = Vec::new();
        group.bench_function(format!("{name}/{precision:?}"), |b| {
            b.iter(|| {
                out.clear();
                black_box(ex.extract(black_box(&x), &mut out).unwrap())
            })
        });
    }
    group.finish();
}

fn pieces(c: &mut Criterion) {
    let values: Vec<f64> = (1..=8000).map(|i| i as f64 * 1.37e-3).collect();
    c.bench_function("fastlog_ln_8000", |b| {
        let mut row = values.clone();
        b.iter(|| {
            row.copy_from_slice(&values);
            sonograph_dsp::fastlog::ln_in_place(black_box(&mut row));
        })
    });
    // 8000 IQ samples, interleaved as they travel through sonograph.
    let iq = clip(16_000, 1);
    let mut stft = ComplexStft::<f32>::new(256, 256, 128, WindowKind::Hann, true, true);
    let mut out = Vec::new();
    c.bench_function("complex_stft_256_8000iq", |b| {
        b.iter(|| {
            out.clear();
            black_box(stft.power(black_box(&iq), &mut out))
        })
    });
}

criterion_group!(benches, presets, pieces);
criterion_main!(benches);
