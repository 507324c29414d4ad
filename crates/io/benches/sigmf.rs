//! SigMF recordings written as `synth-iq` writes them: 8 one-second 200 kHz cf32 recordings
//! (1.6 MB each, with `core:sha512`) under temporary names, unsynced, their SHA-512s computed
//! side by side (`write_sigmf_group_unsynced`) and one recording at a time
//! (`write_sigmf_unsynced`), into the system's temporary folder (use TMPDIR=/dev/shm to leave
//! the disk out). Run: cargo bench -p sonograph-io --bench sigmf

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sonograph_io::sigmf::{
    write_sigmf_group_unsynced, write_sigmf_unsynced, DataType, SigmfRecording, WriteType,
    HASHED_TOGETHER,
};
use sonograph_rf::sigmf::SigmfMeta;
use sonograph_rf::Complex32;

fn sigmf(c: &mut Criterion) {
    let recordings: Vec<Vec<Complex32>> = (0..HASHED_TOGETHER)
        .map(|r| {
            (0..200_000)
                .map(|i| {
                    let x = (i as f32 * 0.013 + r as f32).sin();
                    Complex32::new(x, x * 0.5)
                })
                .collect()
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("sonograph-bench-sigmf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bases: Vec<_> = (0..HASHED_TOGETHER)
        .map(|r| dir.join(format!("rec{r}")))
        .collect();
    let meta = || SigmfMeta::new(DataType::Cf32Le, 200e3);
    let mut group = c.benchmark_group("sigmf_8x1s_cf32");
    group.throughput(Throughput::Bytes(8 * 200_000 * 8));
    group.sample_size(10);
    // The drafts are dropped unpublished; their temporary files are written over each time.
    group.bench_function("hashed_together", |b| {
        b.iter(|| {
            let group = bases
                .iter()
                .zip(&recordings)
                .map(|(base, iq)| SigmfRecording {
                    base,
                    iq,
                    meta: meta(),
                })
                .collect();
            write_sigmf_group_unsynced(group, WriteType::Cf32).unwrap()
        })
    });
    group.bench_function("one_at_a_time", |b| {
        b.iter(|| {
            bases
                .iter()
                .zip(&recordings)
                .map(|(base, iq)| write_sigmf_unsynced(base, iq, WriteType::Cf32, meta()).unwrap())
                .collect::<Vec<_>>()
        })
    });
    group.finish();
    std::fs::remove_dir_all(&dir).ok();
}

criterion_group!(benches, sigmf);
criterion_main!(benches);
