//! An executor: one per device. It packs prefetched items into batches and runs them; when
//! a batch does not fit it splits it in half and retries, down to one item, which then moves
//! to the CPU; when the device is lost, its work moves to the CPU. Nothing is dropped.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use sonograph_dsp::{AudioBatch, CpuBackend, ExtractError, Extractor, FeatureBatch, Precision};
use sonograph_io::parquet::FeatureRow;

use crate::report::{DeviceReport, Failure};
use crate::writer::{RowMsg, WriterMsg};

/// A decoded item waiting for an executor.
pub(crate) struct Unit {
    pub id: String,
    pub source: String,
    pub offset_s: f64,
    pub samples: Vec<f32>,
}

pub(crate) struct ExecutorStats {
    pub report: DeviceReport,
    pub queue_wait_s: f64,
    pub compute_s: f64,
}

pub(crate) fn run_executor(
    mut device: Box<dyn Extractor>,
    precision: Precision,
    batch_items: usize,
    units: Receiver<Unit>,
    writer: Sender<WriterMsg>,
) -> ExecutorStats {
    let spec = device.spec().clone();
    let mut stats = ExecutorStats {
        report: DeviceReport {
            device: device.device(),
            min_batch: u64::MAX,
            ..Default::default()
        },
        queue_wait_s: 0.0,
        compute_s: 0.0,
    };
    // The fallback for items a device cannot take; built on first use.
    let mut cpu: Option<CpuBackend> = None;
    let mut lost = false;
    let mut batch = AudioBatch::new();
    let mut meta: Vec<Unit> = Vec::new();
    let mut out = FeatureBatch::new(spec.n_bins());
    loop {
        let wait = Instant::now();
        let first = match units.recv() {
            Ok(u) => u,
            Err(_) => break,
        };
        batch.clear();
        meta.clear();
        batch.push(&first.samples);
        meta.push(first);
        // Fill the batch with what is already decoded; wait briefly for more.
        while batch.len() < batch_items {
            match units.recv_timeout(Duration::from_millis(2)) {
                Ok(u) => {
                    batch.push(&u.samples);
                    meta.push(u);
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        stats.queue_wait_s += wait.elapsed().as_secs_f64();
        let compute = Instant::now();
        out.reset(spec.n_bins());
        let n = batch.len() as u64;
        stats.report.batches += 1;
        stats.report.items += n;
        stats.report.min_batch = stats.report.min_batch.min(n);
        stats.report.max_batch = stats.report.max_batch.max(n);
        if lost {
            run_on_cpu(
                &mut cpu,
                &spec,
                precision,
                &batch,
                &mut out,
                &mut stats.report,
            );
        } else {
            run_split(
                device.as_mut(),
                &batch,
                &mut out,
                &mut cpu,
                precision,
                &mut stats.report,
                &mut lost,
            );
        }
        stats.compute_s += compute.elapsed().as_secs_f64();
        for (i, unit) in meta.drain(..).enumerate() {
            let msg = match out.item(i) {
                Ok((frames, rows)) => {
                    let duration_s = unit.samples.len() as f64 / f64::from(spec.sample_rate);
                    WriterMsg::Row(Box::new(RowMsg {
                        row: FeatureRow {
                            id: unit.id,
                            source: unit.source,
                            offset_s: unit.offset_s,
                            duration_s,
                            sample_rate: spec.sample_rate,
                            num_frames: frames as u32,
                            num_bins: spec.n_bins() as u32,
                            features: rows.to_vec(),
                        },
                        piece: 0,
                        last: true,
                    }))
                }
                Err(e) => WriterMsg::Failed(Failure {
                    id: unit.id,
                    source: unit.source,
                    reason: e.to_string(),
                }),
            };
            if writer.send(msg).is_err() {
                return stats;
            }
        }
    }
    if stats.report.batches == 0 {
        stats.report.min_batch = 0;
    } else {
        stats.report.mean_batch = stats.report.items as f64 / stats.report.batches as f64;
    }
    stats
}

fn run_on_cpu(
    cpu: &mut Option<CpuBackend>,
    spec: &sonograph_dsp::FeatureSpec,
    precision: Precision,
    batch: &AudioBatch,
    out: &mut FeatureBatch,
    report: &mut DeviceReport,
) {
    let backend = cpu
        .get_or_insert_with(|| CpuBackend::new(spec, precision).expect("the spec was validated"));
    report.moved_to_cpu += batch.len() as u64;
    if let Err(e) = backend.extract_batch(batch, out) {
        // The CPU backend reports errors per item; a batch error here is a bug, but the items
        // still get a recorded reason rather than vanishing.
        for _ in 0..batch.len() {
            out.push_error(e.clone());
        }
    }
}

/// Runs `batch` on `device`, halving on OOM; appends exactly one result per item to `out`.
fn run_split(
    device: &mut dyn Extractor,
    batch: &AudioBatch,
    out: &mut FeatureBatch,
    cpu: &mut Option<CpuBackend>,
    precision: Precision,
    report: &mut DeviceReport,
    lost: &mut bool,
) {
    let spec = device.spec().clone();
    if *lost {
        run_on_cpu(cpu, &spec, precision, batch, out, report);
        return;
    }
    let before = out.len();
    // wgpu panics on some device errors: a panicking device is treated as lost.
    let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        device.extract_batch(batch, out)
    }))
    .unwrap_or_else(|payload| {
        Err(ExtractError::DeviceLost(format!(
            "panicked: {}",
            crate::job::panic_text(&*payload)
        )))
    });
    if attempt.is_err() {
        // A failed batch must leave nothing behind; drop anything a panic left half-written.
        out.truncate_items(before);
    }
    match attempt {
        Ok(()) => {}
        Err(ExtractError::OutOfMemory(msg)) => {
            debug_assert_eq!(out.len(), before);
            report.out_of_memory += 1;
            if batch.len() == 1 {
                tracing::warn!(device = %device.device(), "one item does not fit ({msg}); computing it on the CPU");
                run_on_cpu(cpu, &spec, precision, batch, out, report);
            } else {
                report.splits += 1;
                let half = batch.len() / 2;
                for range in [0..half, half..batch.len()] {
                    report.retries += 1;
                    let part = batch.slice(range);
                    run_split(device, &part, out, cpu, precision, report, lost);
                }
            }
        }
        Err(ExtractError::DeviceLost(msg)) => {
            tracing::error!(device = %device.device(), "device lost ({msg}); its work moves to the CPU");
            *lost = true;
            run_on_cpu(cpu, &spec, precision, batch, out, report);
        }
        Err(other) => {
            for _ in 0..batch.len() {
                out.push_error(other.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonograph_dsp::FeatureSpec;

    /// A device that runs out of memory above `fit` items and is lost after `lose_after`
    /// batches; otherwise it computes exactly what the CPU does.
    struct Flaky {
        inner: CpuBackend,
        fit: usize,
        lose_after: usize,
        calls: usize,
    }

    impl Extractor for Flaky {
        fn spec(&self) -> &FeatureSpec {
            self.inner.spec()
        }
        fn device(&self) -> String {
            "flaky".into()
        }
        fn extract_batch(
            &mut self,
            batch: &AudioBatch,
            out: &mut FeatureBatch,
        ) -> Result<(), ExtractError> {
            self.calls += 1;
            if self.calls > self.lose_after {
                return Err(ExtractError::DeviceLost("injected".into()));
            }
            if batch.len() > self.fit {
                return Err(ExtractError::OutOfMemory(format!(
                    "{} items > {}",
                    batch.len(),
                    self.fit
                )));
            }
            self.inner.extract_batch(batch, out)
        }
    }

    #[test]
    fn ooms_split_and_a_lost_device_moves_work_without_losing_an_item() {
        let spec = FeatureSpec::whisper(80);
        let items: Vec<Vec<f32>> = (0..13)
            .map(|i| {
                (0..1600 + 160 * i)
                    .map(|t| ((t * (i + 1)) as f32 * 0.001).sin())
                    .collect()
            })
            .collect();
        let (unit_tx, unit_rx) = crossbeam_channel::bounded(64);
        let (w_tx, w_rx) = crossbeam_channel::unbounded();
        for (i, s) in items.iter().enumerate() {
            unit_tx
                .send(Unit {
                    id: format!("item{i:02}"),
                    source: String::new(),
                    offset_s: 0.0,
                    samples: s.clone(),
                })
                .unwrap();
        }
        drop(unit_tx);
        let device = Flaky {
            inner: CpuBackend::new(&spec, Precision::F64).unwrap(),
            fit: 3,
            lose_after: 9,
            calls: 0,
        };
        let stats = run_executor(Box::new(device), Precision::F64, 8, unit_rx, w_tx);
        let mut got: Vec<(String, Vec<f32>)> = w_rx
            .iter()
            .map(|m| match m {
                WriterMsg::Row(r) => (r.row.id, r.row.features),
                WriterMsg::Failed(f) => panic!("{} failed: {}", f.id, f.reason),
            })
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got.len(), items.len(), "every item exactly once");
        let mut ex = sonograph_dsp::CpuExtractor::new(&spec).unwrap();
        for (i, (id, features)) in got.iter().enumerate() {
            assert_eq!(id, &format!("item{i:02}"));
            let mut expect = Vec::new();
            ex.extract(&items[i], &mut expect).unwrap();
            assert_eq!(features, &expect, "{id}");
        }
        assert!(stats.report.out_of_memory >= 2, "{:?}", stats.report);
        assert!(stats.report.splits >= 2);
        assert!(stats.report.moved_to_cpu > 0);
    }
}
