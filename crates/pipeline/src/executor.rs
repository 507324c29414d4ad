//! An executor: one per device. It packs prefetched items into batches of the size its
//! adaptive batcher asks for and runs them through it: a batch that does not fit is split and
//! retried down to one item, which then moves to the CPU. A lost device's batch in hand is
//! finished on the CPU; then its executor stops taking work, which moves to the devices
//! still running — or, if it was the last, stays with it and runs on the CPU. Nothing is
//! dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use sonograph_dsp::{AudioBatch, CpuBackend, Extractor, FeatureBatch, Precision};

use crate::batcher::{AdaptiveBatcher, BatcherConfig};
use crate::budget::BytesHeld;
use crate::segment::PiecePlan;

use crate::live::{LiveJob, Queue, Stage};
use crate::report::{DeviceReport, Failure};
use crate::writer::{feature_row, item_seconds, RowMsg, WriterMsg};

/// A decoded item (or a piece of one) on its way to an executor.
pub struct Unit {
    pub id: String,
    pub source: String,
    /// Where the item starts in its source file, in seconds.
    pub offset_s: f64,
    /// The whole item, or a piece's window.
    pub samples: Vec<f32>,
    /// A piece of a long item; `None`: the whole item.
    pub piece: Option<PiecePlan>,
    /// Every sample is on the 16-bit grid (found where the samples were made), so a GPU is
    /// sent them as 16-bit integers. A unit stage's output is not (it may have changed them).
    pub(crate) pcm16: bool,
    /// Held while the unit is queued or computed (pieces of long items).
    pub(crate) _permit: Option<Permit>,
    /// The unit's room in the job's memory budget, held while it is queued or computed.
    pub(crate) _bytes: Option<BytesHeld>,
}

/// One of the slots that bound the pieces of a long item in flight: frees its slot when the
/// unit that holds it is dropped, however the unit ends.
pub(crate) struct Permit(pub Receiver<()>);

impl Drop for Permit {
    fn drop(&mut self) {
        let _ = self.0.try_recv();
    }
}

pub(crate) struct ExecutorStats {
    pub report: DeviceReport,
    pub queue_wait_s: f64,
    pub compute_s: f64,
}

/// This executor's place in the count of executors still taking work.
struct LiveGuard {
    live: Arc<AtomicUsize>,
    counted: bool,
}

impl LiveGuard {
    /// Leaves the count; returns how many executors remain in it.
    fn leave(&mut self) -> usize {
        if !std::mem::take(&mut self.counted) {
            return self.live.load(Ordering::SeqCst);
        }
        self.live.fetch_sub(1, Ordering::SeqCst) - 1
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.leave();
    }
}

// The job's queues, counters and sizing, each from its own place in the job's wiring.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_executor(
    mut device: Box<dyn Extractor>,
    precision: Precision,
    batch_items: usize,
    item_samples: usize,
    units: Receiver<Unit>,
    writer: Sender<WriterMsg>,
    live_executors: Arc<AtomicUsize>,
    job: &LiveJob,
) -> ExecutorStats {
    let spec = device.spec().clone();
    let (name, spec_id) = (device.device(), spec.spec_id());
    let counters = job.device(name.clone(), device.is_cpu());
    let mut stats = ExecutorStats {
        report: DeviceReport {
            device: name.clone(),
            min_batch: u64::MAX,
            ..Default::default()
        },
        queue_wait_s: 0.0,
        compute_s: 0.0,
    };
    // Counts this executor out of the live ones however it ends (done, retired, panicking).
    let mut live = LiveGuard {
        live: live_executors,
        counted: true,
    };
    // The fallback for items the device cannot take: the spec was validated by the job, so
    // this cannot fail (and a panic here fails the job loudly rather than losing items).
    let mut cpu = CpuBackend::new(&spec, precision).expect("the job validated the spec");
    let mut batcher = AdaptiveBatcher::new(BatcherConfig::for_device(
        device.as_ref(),
        item_samples,
        batch_items,
    ));
    // The device may have run before the job (`auto`'s calibration): the report counts the
    // job's own transfers.
    let transfer_before = device.transfer_stats();
    let mut batch = AudioBatch::new();
    let mut meta: Vec<Unit> = Vec::new();
    let mut out = FeatureBatch::new(spec.n_bins());
    'run: loop {
        let wait = Instant::now();
        let first = match units.recv() {
            Ok(u) => u,
            Err(_) => break,
        };
        job.observe_queue(Queue::Prefetch, units.len());
        batch.clear();
        meta.clear();
        batch.push_known_piece(&first.samples, first.piece.map(|p| p.span), first.pcm16);
        meta.push(first);
        // Fill the batch with what is already decoded, up to the size the batcher wants now;
        // wait briefly for more.
        let want = batcher.size_for(&name, &spec_id);
        while batch.len() < want {
            match units.recv_timeout(Duration::from_millis(2)) {
                Ok(u) => {
                    batch.push_known_piece(&u.samples, u.piece.map(|p| p.span), u.pcm16);
                    meta.push(u);
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let waited = wait.elapsed();
        stats.queue_wait_s += waited.as_secs_f64();
        job.add_busy(Stage::QueueWait, waited.as_secs_f64());
        let compute = Instant::now();
        out.reset(spec.n_bins());
        let n = batch.len() as u64;
        stats.report.batches += 1;
        stats.report.items += n;
        stats.report.min_batch = stats.report.min_batch.min(n);
        stats.report.max_batch = stats.report.max_batch.max(n);
        // Fault injection: `executor::batch=sleep(ms)` stretches a job so that the
        // kill-and-resume tests' kills land while it runs.
        fail::fail_point!("executor::batch");
        batcher.run(&batch, device.as_mut(), &mut cpu, &mut out);
        let computed = compute.elapsed();
        stats.compute_s += computed.as_secs_f64();
        job.add_busy(Stage::Compute, computed.as_secs_f64());
        let b = batcher.stats();
        counters.batch_done(
            n as usize,
            waited,
            computed,
            b.ooms,
            b.items_on_fallback + b.items_after_loss,
            device.memory_stats(),
        );
        for (i, unit) in meta.drain(..).enumerate() {
            let (piece, last, offset_s, duration_s) = match unit.piece {
                Some(p) => (p.index, p.last, p.offset_s, p.duration_s),
                None => (0, true, 0.0, item_seconds(&spec, unit.samples.len())),
            };
            let msg = match out.take(i) {
                Ok((frames, rows)) => WriterMsg::Row(Box::new(RowMsg {
                    row: feature_row(
                        &spec,
                        unit.id,
                        unit.source,
                        unit.offset_s + offset_s,
                        duration_s,
                        frames,
                        rows,
                    ),
                    piece,
                    last,
                })),
                Err(e) => match unit.piece {
                    Some(_) => WriterMsg::FailedPiece(Failure {
                        id: unit.id,
                        source: unit.source,
                        reason: format!("piece {piece} (at {offset_s:.2} s): {e}"),
                    }),
                    None => WriterMsg::Failed(Failure {
                        id: unit.id,
                        source: unit.source,
                        reason: e.to_string(),
                    }),
                },
            };
            if writer.send(msg).is_err() {
                break 'run;
            }
        }
        if batcher.is_lost(&name) && !stats.report.retired {
            stats.report.retired = true;
            counters.mark_lost(batcher.stats().alerts.last().cloned());
            // The last executor standing keeps going on the CPU; the others leave the queue
            // to the devices that still work.
            if live.leave() > 0 {
                tracing::warn!("{name} is out; its work moves to the other devices");
                break 'run;
            }
        }
        if job.is_canceled() {
            // At a batch boundary: every row of the batch is with the writer. Units still
            // queued are dropped undone; the resumed job runs them.
            break 'run;
        }
    }
    if stats.report.batches == 0 {
        stats.report.min_batch = 0;
    } else {
        stats.report.mean_batch = stats.report.items as f64 / stats.report.batches as f64;
    }
    let b = batcher.stats();
    stats.report.out_of_memory = b.ooms;
    stats.report.splits = b.splits;
    stats.report.retries = b.retries;
    stats.report.moved_to_cpu = b.items_on_fallback + b.items_after_loss;
    stats.report.batch_ceiling = b.ceiling;
    stats.report.recovered = b.recovered;
    stats.report.alerts = b.alerts.clone();
    stats.report.alerts_dropped = b.alerts_dropped;
    stats.report.transfer = device
        .transfer_stats()
        .map(|now| now.since(&transfer_before.unwrap_or_default()));
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Flaky;
    use sonograph_dsp::FeatureSpec;

    /// `n` distinct clips, 1600 samples and `step` more for each.
    fn clips(n: usize, step: usize) -> Vec<Vec<f32>> {
        (0..n)
            .map(|i| {
                (0..1600 + step * i)
                    .map(|t| ((t * (i + 1)) as f32 * 0.001).sin())
                    .collect()
            })
            .collect()
    }

    /// A closed queue holding `items` as units "item00", "item01", ...
    fn queued(items: &[Vec<f32>]) -> Receiver<Unit> {
        let (tx, rx) = crossbeam_channel::bounded(items.len());
        for (i, s) in items.iter().enumerate() {
            tx.send(Unit {
                id: format!("item{i:02}"),
                source: String::new(),
                offset_s: 0.0,
                samples: s.clone(),
                piece: None,
                pcm16: false,
                _permit: None,
                _bytes: None,
            })
            .unwrap();
        }
        rx
    }

    #[test]
    fn ooms_split_and_a_lost_device_moves_work_without_losing_an_item() {
        let spec = FeatureSpec::whisper(80);
        let items = clips(13, 160);
        let unit_rx = queued(&items);
        let (w_tx, w_rx) = crossbeam_channel::unbounded();
        let device = Flaky {
            fits: 3,
            lose_after: Some(5),
            ..Flaky::new(&spec, Precision::F64)
        };
        let live = Arc::new(AtomicUsize::new(1));
        let stats = run_executor(
            Box::new(device),
            Precision::F64,
            8,
            3200,
            unit_rx,
            w_tx,
            live,
            &LiveJob::default(),
        );
        let mut got: Vec<(String, Vec<f32>)> = w_rx
            .iter()
            .map(|m| match m {
                WriterMsg::Row(r) => (r.row.id, r.row.features),
                WriterMsg::Failed(f) | WriterMsg::FailedPiece(f) => {
                    panic!("{} failed: {}", f.id, f.reason)
                }
                WriterMsg::Empty { id } | WriterMsg::Sample { id, .. } => {
                    panic!("{id} had no row, or a sample")
                }
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
        // 8 and 4 ran out of memory; batches then stayed under 4.
        assert_eq!(stats.report.batch_ceiling, Some(4));
        assert!(
            stats.report.alerts.iter().any(|a| a.contains("move to")),
            "{:?}",
            stats.report.alerts
        );
    }

    /// With two devices, a lost one finishes its batch in hand on the CPU and leaves the rest
    /// of the queue to the other: every item exactly once.
    #[test]
    fn a_lost_device_leaves_its_work_to_the_other_devices() {
        let spec = FeatureSpec::whisper(80);
        let items = clips(40, 16);
        let unit_rx = queued(&items);
        let (w_tx, w_rx) = crossbeam_channel::unbounded();
        let live = Arc::new(AtomicUsize::new(2));
        let flaky = Flaky {
            lose_after: Some(0),
            ..Flaky::new(&spec, Precision::F64)
        };
        let spawn = |device: Box<dyn Extractor>| {
            let (units, w_tx, live) = (unit_rx.clone(), w_tx.clone(), live.clone());
            std::thread::spawn(move || {
                run_executor(
                    device,
                    Precision::F64,
                    4,
                    3200,
                    units,
                    w_tx,
                    live,
                    &LiveJob::default(),
                )
            })
        };
        // The flaky device runs first (so that it surely gets a batch) and is lost on it; the
        // healthy one, counted as live all along, then finds the rest of the queue.
        let lost = spawn(Box::new(flaky)).join().unwrap();
        let healthy = spawn(Box::new(CpuBackend::new(&spec, Precision::F64).unwrap()));
        drop(w_tx);
        let healthy = healthy.join().unwrap();
        let mut ids: Vec<String> = w_rx
            .iter()
            .map(|m| match m {
                WriterMsg::Row(r) => r.row.id,
                WriterMsg::Failed(f) | WriterMsg::FailedPiece(f) => {
                    panic!("{} failed: {}", f.id, f.reason)
                }
                WriterMsg::Empty { id } | WriterMsg::Sample { id, .. } => {
                    panic!("{id} had no row, or a sample")
                }
            })
            .collect();
        ids.sort();
        let expect: Vec<String> = (0..items.len()).map(|i| format!("item{i:02}")).collect();
        assert_eq!(ids, expect, "every item exactly once");
        assert!(lost.report.retired && !healthy.report.retired);
        // The lost device finished its batch in hand on the CPU and left.
        assert_eq!(
            (lost.report.items, lost.report.moved_to_cpu),
            (4, 4),
            "{:?}",
            lost.report
        );
        assert_eq!(lost.report.items + healthy.report.items, items.len() as u64);
        // Each left the count once: the lost one when retiring, the other when done.
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }
}
