//! The part writer: 16 rows of 30 s of Whisper features (3,000 frames of 80 bins, 15.4 MB of
//! f32) written as a Parquet part, stored as f32 and as f16 (each value rounded on the way),
//! the file synced and renamed into place as a job's writer does.
//! Run: cargo bench -p sonograph-io --bench parts

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sonograph_io::parquet::{write_part, Dtype, FeatureRow, PartMeta};

fn rows() -> Vec<FeatureRow> {
    (0..16)
        .map(|r| FeatureRow {
            id: format!("clip{r}.flac"),
            source: format!("corpus/clip{r}.flac"),
            offset_s: 0.0,
            duration_s: 30.0,
            sample_rate: 16_000,
            num_frames: 3_000,
            num_bins: 80,
            // Log-mel-like values: smooth in time and frequency, with a little noise.
            features: (0..3_000 * 80)
                .map(|i| {
                    let (t, b) = ((i / 80) as f32, (i % 80) as f32);
                    let noise = ((i as u64 * 2_654_435_761 + r as u64) % 1_000) as f32 * 1e-4;
                    (t * 0.01 + b * 0.1).sin() * 0.8 - 0.2 + noise
                })
                .collect(),
            model: None,
            sample: None,
        })
        .collect()
}

fn parts(c: &mut Criterion) {
    let rows = rows();
    let meta = PartMeta {
        spec_id: "bench".into(),
        spec_json: "{}".into(),
        precision: "f64".into(),
        model: None,
        bins: 80,
        sample: false,
    };
    let dir = std::env::temp_dir().join(format!("sonograph-bench-parts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut group = c.benchmark_group("part_16x30s_whisper");
    group.throughput(Throughput::Elements(16));
    group.sample_size(10);
    for dtype in [Dtype::F32, Dtype::F16] {
        let path = dir.join(format!("part.{}.parquet", dtype.name()));
        group.bench_function(dtype.name(), |b| {
            b.iter(|| write_part(&path, &rows, dtype, &meta).unwrap())
        });
    }
    group.finish();
    std::fs::remove_dir_all(&dir).ok();
}

criterion_group!(benches, parts);
criterion_main!(benches);
