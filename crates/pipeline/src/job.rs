//! The job: it wires the stages together and assembles the report. Each stage is a module:
//! source (io::manifest), decode, segment, executor (with the batcher), writer (with the
//! ledger), report; this file only connects them with bounded queues and threads.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};
use sonograph_dsp::Extractor;
use sonograph_io::ledger::LedgerReader;
use sonograph_io::manifest::Entry;
use sonograph_io::parquet::{Dtype, PartMeta};

use crate::bucket::BucketOutput;
use crate::config::JobConfig;
use crate::decode::{decode_worker, Computed};
use crate::error::JobError;
use crate::executor::{run_executor, ExecutorStats, Unit};
use crate::layout::{feature_job_shape, finish_output, open_output, Opened, OutputLayout};
use crate::live::{LiveJob, Queue};
use crate::model::ModelStage;
use crate::report::{peak_rss_mb, DeviceReport, ModelReport, Report, StageTimes};
use crate::source::ShardSource;
use crate::stage::{run_row_stage, run_unit_stage, Stages};
use crate::writer::{progress_bar, writer_loop, Writer, WriterMsg};

/// How a job ended.
#[derive(Debug, Clone)]
pub enum JobOutcome {
    Finished(Report),
    /// The shard's completion marker was there: nothing to do.
    AlreadyDone(Report),
}

impl JobOutcome {
    pub fn report(&self) -> &Report {
        match self {
            JobOutcome::Finished(r) | JobOutcome::AlreadyDone(r) => r,
        }
    }
}

/// Runs the job on `devices` (at least one; the CLI builds them from `--device`).
pub fn run(config: &JobConfig, devices: Vec<Box<dyn Extractor>>) -> Result<JobOutcome, JobError> {
    run_with(config, devices, Stages::default())
}

/// [`run`] with `stages` inserted into the data path (see [`crate::stage`]).
pub fn run_with(
    config: &JobConfig,
    devices: Vec<Box<dyn Extractor>>,
    stages: Stages,
) -> Result<JobOutcome, JobError> {
    run_live(config, devices, stages, LiveJob::new())
}

/// [`run_with`], updating `live` as it goes (what a telemetry sampler reads) and stopping at a
/// batch boundary once `live` is canceled: then the output is resumable and the result is
/// [`JobError::Canceled`].
pub fn run_live(
    config: &JobConfig,
    devices: Vec<Box<dyn Extractor>>,
    stages: Stages,
    live: Arc<LiveJob>,
) -> Result<JobOutcome, JobError> {
    let result = run_stages(config, devices, stages, &live);
    live.set_finished();
    result
}

fn run_stages(
    config: &JobConfig,
    devices: Vec<Box<dyn Extractor>>,
    stages: Stages,
    live: &Arc<LiveJob>,
) -> Result<JobOutcome, JobError> {
    config.check()?;
    if let Some(params) = &config.vad {
        // The model and the runtime load now: a job that cannot segment says so once.
        sonograph_model::Runtime::get(config.ort_lib.as_deref())
            .and_then(|rt| sonograph_model::VadSegmenter::new(rt, params, config.spec.sample_rate))
            .map_err(|e| JobError::Config(format!("--vad: {e}")))?;
    }
    if devices.is_empty() {
        return Err(JobError::Config("no device to run on".into()));
    }
    // The model opens before anything is written: a model that cannot run on these features
    // is the job's error (not every item's), and leaves no trace in the output folder.
    let model_report = Arc::new(Mutex::new(ModelReport::default()));
    let model_stage = config
        .model
        .as_ref()
        .map(|m| {
            ModelStage::open(
                m,
                &config.spec,
                config.ort_lib.as_deref(),
                model_report.clone(),
                Some(live.clone()),
            )
        })
        .transpose()?;
    // The augmentation's corpora are listed and read now: one that cannot be is the job's
    // error. The service reads beneath its data roots only, which a corpus does not.
    let augmenter = match &config.augment {
        Some(_) if config.roots.is_confined() => {
            return Err(JobError::Config(
                "augment: not in the service (its noise and impulse responses would be read \
                 outside the data roots)"
                    .into(),
            ))
        }
        Some(a) => Some(
            crate::augment::Augmenter::load(a.options.clone(), a.seed, config.workers)
                .map_err(|e| JobError::Config(format!("augment: {e}")))?,
        ),
        None => None,
    };
    let start = Instant::now();
    let cpu_at_start = crate::host::process_cpu_seconds();
    let spec_id = config.spec.spec_id();
    // IQ recordings are listed whatever the spec: one of the wrong kind fails as an item,
    // saying why, instead of being passed over in silence.
    let options = sonograph_io::manifest::SourceOptions {
        iq: true,
        raw: config.iq.raw,
        roots: config.roots.clone(),
    };
    let source = ShardSource::open(
        &config.source,
        &options,
        config.shard_index,
        config.shard_count,
    )?;
    source.check_unique_ids()?;
    if let Some(model) = &config.model {
        // onnxruntime opens the model by its path: checked beneath the roots just before.
        config
            .roots
            .check(&model.path)
            .map_err(|e| JobError::Config(format!("model: {e}")))?;
    }
    let bucket = BucketOutput::of(&config.out);
    if bucket.is_some() && config.roots.is_confined() {
        return Err(JobError::Config(format!(
            "out: {}: object storage is outside the data roots",
            config.out.display()
        )));
    }
    let out = bucket.as_ref().map_or_else(
        || config.out.clone(),
        |b| b.work_dir(config.work_dir.as_deref()),
    );
    let layout = OutputLayout::new(&out, config.shard_index, config.shard_count);
    let mut shape = feature_job_shape(config, &spec_id)?;
    // Parts with the samples' column (absent without shards, as folders made before recorded
    // it): a run without it would write parts of other columns.
    if source.has_archive_members() {
        shape["sample"] = true.into();
    }
    // Parts of another format (absent for Parquet, as folders made before recorded it).
    if config.part_format != crate::config::PartFormat::Parquet {
        shape["part_format"] = config.part_format.name().into();
    }
    if bucket.is_some() {
        // The work folder's ledger belongs to this prefix: another --out with the same
        // --work-dir is refused, where it would take the ledger's parts for its own.
        shape["out"] = config.out.to_string_lossy().trim_end_matches('/').into();
    }
    if let Some(bucket) = &bucket {
        bucket.check_resumable(&layout, config.shard_index)?;
        bucket.claim_shape(&shape)?;
    }
    let (ledger, _lock) = match open_output(
        &layout,
        &config.roots,
        &shape,
        &spec_id,
        config.shard_index,
        config.shard_count,
    )? {
        Opened::Done(report) => {
            if let Some(bucket) = &bucket {
                // A run that died after marking the shard done may not have published it.
                bucket.publish_meta(&layout)?;
            }
            return Ok(JobOutcome::AlreadyDone(*report));
        }
        Opened::Run { ledger, lock } => (ledger, lock),
    };
    if let Some(bucket) = &bucket {
        bucket.upload_left_parts(&layout.out, config.shard_index)?;
    }
    let shard = format!("{}/{}", config.shard_index, config.shard_count);
    let settled_before = ledger.done_count()? + ledger.failed_count()?;
    let todo = (source.len() as u64).saturating_sub(settled_before);
    live.set_items(source.len() as u64, settled_before);
    tracing::info!(
        items = source.len(),
        todo,
        shard = %shard,
        spec_id = %spec_id,
        "starting"
    );

    let model_meta = model_stage.as_ref().map(|_| {
        let r = crate::live::lock(&model_report);
        serde_json::json!({
            "path": r.model,
            "kind": r.kind,
            "device": r.device,
            "input_precision": r.input_precision,
        })
        .to_string()
    });
    let writer = Writer::new(
        layout.out.clone(),
        config.shard_index,
        ledger,
        config.dtype,
        PartMeta {
            spec_id: spec_id.clone(),
            spec_json: config.spec.to_json(),
            precision: config.precision.name().into(),
            model: model_meta,
            bins: u32::try_from(config.spec.n_bins()).map_err(|_| {
                JobError::Config(format!("{} bins in a frame", config.spec.n_bins()))
            })?,
            sample: source.has_archive_members(),
        },
        config.part_mb << 20,
    )?
    // No more encoders than cores: the extra workers of a source in object storage wait on
    // the network, and each encoder holds a row group.
    .with_encoders(config.workers.min(crate::config::defaults::workers()))
    .with_format(config.part_format)
    .with_bucket(bucket.clone());
    let bar = progress_bar(config.progress, todo);
    // Opened after the writer's ledger, which created the file and settled its pending parts.
    let ledger_reader = LedgerReader::open(&layout.ledger)?;
    let (work_tx, work_rx) = bounded::<Entry>(config.work_queue_items());
    let (unit_tx, unit_rx) = bounded::<Unit>(config.prefetch * config.batch_items);
    // Rows are up to a piece of features each (about 1 MB for 30 s of Whisper): a short queue
    // keeps a fast producer from holding many of them while a part is being written.
    let (writer_tx, writer_rx) = bounded::<WriterMsg>(crate::config::WRITER_QUEUE);
    live.set_capacity(Queue::Work, config.workers * 2);
    live.set_capacity(Queue::Prefetch, config.prefetch * config.batch_items);
    live.set_capacity(Queue::Writer, 8);
    // Inserted stages sit between two queues each: units from the decoders to the executors,
    // rows from the executors (and decoders) to the writer.
    let units_in_executors = !stages.units.is_empty();
    // The model runs last, on the rows as the other stages leave them. Its input queue holds
    // two of its batches: the data side fills the next one while one runs.
    let mut row_stages = stages.rows;
    let mut row_capacity = 8;
    if let (Some(stage), Some(m)) = (model_stage, &config.model) {
        row_capacity = row_capacity.max(2 * m.batch);
        live.set_capacity(Queue::Model, row_capacity);
        row_stages.push(Box::new(stage));
    }
    // Rows that go straight to a writer storing f16 may come from a device as f16.
    let rows_stored_as_f16 = config.dtype == Dtype::F16 && row_stages.is_empty();
    let (writer_tx, writer_rx, row_stage_handles) = chain(
        writer_tx,
        writer_rx,
        row_stages,
        row_capacity,
        run_row_stage,
    )?;
    // A unit stage's failures enter the row stages' head, as every other message does, so that
    // none overtakes what an item sent before it (its sample, through the model stage).
    let (unit_tx, unit_rx, unit_stage_handles) = chain(
        unit_tx,
        unit_rx,
        stages.units,
        config.prefetch * config.batch_items,
        {
            let writer_tx = writer_tx.clone();
            move |stage, input, output| run_unit_stage(stage, input, output, writer_tx.clone())
        },
    )?;

    let writer_handle = {
        let bar = bar.clone();
        let live = live.clone();
        std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || writer_loop(writer, writer_rx, bar, &live))
            .map_err(|e| JobError::Internal(e.to_string()))?
    };
    let live_job = live.clone();
    // When every device is a CPU, the decode workers compute their items themselves (long
    // ones streamed) and no executor runs, unless unit stages must see the units; speech
    // segments (--vad) always go to the executors.
    let on_gpus = !devices.iter().all(|d| d.is_cpu());
    let on_executors = units_in_executors || config.vad.is_some() || on_gpus;
    let cpu_here = (!on_executors).then(|| live.device("cpu".into(), true));
    let devices = if on_executors { devices } else { Vec::new() };
    let live_executors = Arc::new(AtomicUsize::new(devices.len()));
    // Held by every executor thread until it ends: the decode workers see through it whether
    // any executor is left to take pieces (the live count drops to 0 while the last executor
    // standing goes on on the CPU).
    let executors_running = Arc::new(());
    let executor_handles: Vec<_> = devices
        .into_iter()
        .map(|mut device| {
            device.set_rows_stored_as_f16(rows_stored_as_f16);
            let (units, writer_tx) = (unit_rx.clone(), writer_tx.clone());
            let live = live_executors.clone();
            let running = executors_running.clone();
            let counters = live_job.clone();
            let (precision, batch_items) = (config.precision, config.batch_items);
            // Executors see items up to --max-seconds long: the batcher sizes for those.
            let item_samples =
                (config.max_seconds * f64::from(config.spec.sample_rate)).ceil() as usize;
            std::thread::Builder::new()
                .name("executor".into())
                .spawn(move || {
                    let _running = running;
                    run_executor(
                        device,
                        precision,
                        batch_items,
                        item_samples,
                        units,
                        writer_tx,
                        live,
                        &counters,
                    )
                })
        })
        .collect::<Result<_, _>>()
        .map_err(|e| JobError::Internal(e.to_string()))?;
    drop(unit_rx);
    // Only the executor threads may keep it alive.
    let executors_running = {
        let weak = Arc::downgrade(&executors_running);
        drop(executors_running);
        weak
    };
    let budget =
        crate::budget::MemoryBudget::new(config.memory_budget(crate::host::memory_bytes()));
    let augmenter = augmenter.map(Arc::new);
    let worker_handles: Vec<_> = (0..config.workers)
        .map(|i| {
            let budget = budget.clone();
            let (work, units, writer_tx) = (work_rx.clone(), unit_tx.clone(), writer_tx.clone());
            let config = config.clone();
            let running = executors_running.clone();
            let live = live.clone();
            let cpu_here = cpu_here.clone();
            let augmenter = augmenter.clone();
            std::thread::Builder::new()
                .name(format!("decode-{i}"))
                .spawn(move || {
                    let computed = match &cpu_here {
                        Some(cpu) => Computed::Here(cpu),
                        None => Computed::OnExecutors(&running),
                    };
                    decode_worker(
                        &config,
                        augmenter.as_deref(),
                        work,
                        units,
                        writer_tx,
                        computed,
                        on_gpus,
                        &budget,
                        &running,
                        &live,
                    )
                })
        })
        .collect::<Result<_, _>>()
        .map_err(|e| JobError::Internal(e.to_string()))?;
    drop((work_rx, unit_tx, writer_tx));

    // Each upcoming object's first read under way before its worker opens it.
    let read_ahead = |entry: &Entry| crate::decode::read_ahead(config, entry);
    let fed = source.feed(
        &ledger_reader,
        &work_tx,
        live,
        (&read_ahead, config.read_ahead_items()),
    );
    drop(work_tx);
    let mut stage_times = StageTimes::default();
    let mut computed_here = 0;
    for h in worker_handles {
        let worker = h
            .join()
            .map_err(|_| JobError::Internal("a decode worker panicked".into()))?;
        stage_times.decode_s += worker.decode_s;
        stage_times.compute_s += worker.compute_s;
        computed_here += worker.items_computed;
    }
    for h in unit_stage_handles {
        stage_times.inserted_s += h
            .join()
            .map_err(|_| JobError::Internal("an inserted unit stage panicked".into()))?;
    }
    let mut devices_report = Vec::new();
    if cpu_here.is_some() {
        // Each item computed alone, by the worker that decoded it.
        devices_report.push(DeviceReport {
            device: "cpu".into(),
            items: computed_here,
            batches: computed_here,
            min_batch: computed_here.min(1),
            max_batch: computed_here.min(1),
            mean_batch: computed_here.min(1) as f64,
            ..Default::default()
        });
    }
    for h in executor_handles {
        let ExecutorStats {
            report,
            queue_wait_s,
            compute_s,
        } = h
            .join()
            .map_err(|_| JobError::Internal("an executor panicked".into()))?;
        stage_times.queue_wait_s += queue_wait_s;
        stage_times.compute_s += compute_s;
        devices_report.push(report);
    }
    for h in row_stage_handles {
        stage_times.inserted_s += h
            .join()
            .map_err(|_| JobError::Internal("an inserted row stage panicked".into()))?;
    }
    let (writer, wstats) = writer_handle
        .join()
        .map_err(|_| JobError::Internal("the writer panicked".into()))?;
    let wstats = wstats?;
    bar.finish_and_clear();
    stage_times.write_s = wstats.write_s;

    // A source that broke off mid-way stops the job once the items fed are settled.
    let resumed = fed?;
    let failures = crate::report::first_failures(&writer.ledger)?;
    let wall = start.elapsed().as_secs_f64();
    let report = Report {
        spec_id,
        precision: config.precision.name().into(),
        shard_index: config.shard_index,
        shard_count: config.shard_count,
        items_total: source.len() as u64,
        items_ok: writer.ledger.done_count()?,
        items_failed: writer.ledger.failed_count()?,
        items_resumed: resumed,
        rows: wstats.rows,
        parts: wstats.parts,
        part_bytes: wstats.part_bytes,
        compression_ratio: if wstats.part_bytes > 0 {
            wstats.feature_bytes as f64 / wstats.part_bytes as f64
        } else {
            0.0
        },
        audio_seconds: wstats.audio_seconds,
        wall_seconds: wall,
        real_time_factor: if wall > 0.0 {
            wstats.audio_seconds / wall
        } else {
            0.0
        },
        core_utilisation: crate::host::core_utilisation(cpu_at_start, wall),
        stages: stage_times,
        devices: devices_report,
        device_choice: config.device_choice.clone(),
        model: config
            .model
            .as_ref()
            .map(|_| crate::live::lock(&model_report).clone()),
        peak_rss_mb: peak_rss_mb(),
        failures,
    };
    let finished = finish_output(&layout, &report, live.is_canceled());
    if let Some(bucket) = &bucket {
        // The report even of a run left unfinished: what it did, beside its parts.
        bucket.publish_meta(&layout)?;
    }
    finished?;
    Ok(JobOutcome::Finished(report))
}

/// Puts `stages` between the two ends of a queue: producers send to the returned sender,
/// each stage runs on its own thread from one bounded queue to the next, and the last one
/// feeds `first_tx`, whose receiver the consumers read. Without stages, the queue as it is.
#[allow(clippy::type_complexity)]
fn chain<T: Send + 'static, S: Send + 'static>(
    first_tx: Sender<T>,
    last_rx: Receiver<T>,
    stages: Vec<S>,
    capacity: usize,
    run: impl Fn(S, Receiver<T>, Sender<T>) -> f64 + Clone + Send + 'static,
) -> Result<(Sender<T>, Receiver<T>, Vec<JoinHandle<f64>>), JobError> {
    if stages.is_empty() {
        return Ok((first_tx, last_rx, Vec::new()));
    }
    let (head_tx, head_rx) = bounded::<T>(capacity);
    let mut input = Some(head_rx);
    let count = stages.len();
    let mut handles = Vec::with_capacity(count);
    for (k, stage) in stages.into_iter().enumerate() {
        let this_input = input.take().expect("each stage has an input");
        let output = if k + 1 == count {
            first_tx.clone()
        } else {
            let (tx, rx) = bounded::<T>(capacity);
            input = Some(rx);
            tx
        };
        let run = run.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("stage-{k}"))
                .spawn(move || run(stage, this_input, output))
                .map_err(|e| JobError::Internal(e.to_string()))?,
        );
    }
    Ok((head_tx, last_rx, handles))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::Unit;
    use crate::segment::extract_streaming;
    use crate::stage::{RowOut, RowStage, UnitStage};
    use crate::testing::{scratch_corpus, Flaky};
    use crate::writer::RowMsg;
    use sonograph_dsp::{CpuBackend, CpuExtractor, FeatureSpec, Precision};
    use sonograph_io::decode::DecodeOptions;
    use sonograph_io::parquet::read_part;
    use std::path::Path;
    use std::time::Duration;

    /// The writer fails (its part cannot be created) while two long items' pieces are queued
    /// for a device: the executor stops, and so must the decode workers waiting for permits.
    /// The job ends with the writer's error instead of hanging.
    #[test]
    fn a_failing_writer_ends_a_job_of_long_items_with_its_error() {
        let dir = scratch_corpus("writer", &[("long_a.wav", 300.0), ("long_b.wav", 300.0)]);
        let corpus = dir.join("corpus");
        let out = dir.join("out");
        // A directory where the first part's temporary file goes.
        std::fs::create_dir_all(out.join(".part-00000-00000.parquet.tmp")).unwrap();
        let spec = FeatureSpec::whisper(80);
        let mut config = JobConfig::new(corpus, out, spec.clone());
        config.batch_items = 2;
        config.workers = 2;
        // Batches of one piece: when the executor stops, it gives back the permit of the piece
        // in hand, but the other file's pieces wait in the queue holding theirs.
        let device = Flaky {
            hint: Some(60 * 16_000),
            ..Flaky::new(&spec, Precision::F64)
        };
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let _ = done_tx.send(run(&config, vec![Box::new(device)]).map(|_| ()));
        });
        let result = done_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the job hung");
        let err = result.expect_err("the writer cannot write");
        assert!(err.to_string().contains("part-00000-00000"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// On a device that is not the host CPU, long items go to the executor in pieces. With
    /// OOMs and the device lost half-way through the item, every piece is written once, the
    /// item is done, and the rows are the CPU's streamed pieces bit for bit.
    #[test]
    fn pieces_of_long_items_run_on_devices_and_equal_the_streamed_rows() {
        let dir = scratch_corpus("pieces", &[("long.wav", 200.0)]);
        let corpus = dir.join("corpus");
        let wav = corpus.join("long.wav");
        let spec = FeatureSpec::nemo(80);
        let mut config = JobConfig::new(corpus, dir.join("out"), spec.clone());
        config.batch_items = 3;
        config.workers = 1;
        // The first piece's window never fits (an OOM whatever the batches' sizes, which
        // depend on timing); batches of more than two pieces do not either.
        let samples = sonograph_io::decode_mono(&wav, &DecodeOptions::default(), 16_000).unwrap();
        let mut cutter = crate::segment::PieceCutter::new(&spec, config.chunk_seconds);
        let mut first_window = 0;
        cutter
            .push(&samples, |w| {
                if w.plan.index == 0 {
                    first_window = w.samples.len();
                }
                Ok::<(), std::convert::Infallible>(())
            })
            .unwrap();
        assert!(first_window > 0);
        let device = Flaky {
            fits: 2,
            huge: first_window,
            lose_after: Some(2),
            ..Flaky::new(&spec, Precision::F64)
        };
        let outcome = run(&config, vec![Box::new(device)]).unwrap();
        let report = outcome.report();
        assert_eq!((report.items_ok, report.items_failed), (1, 0));
        assert!(report.devices[0].out_of_memory > 0 && report.devices[0].retired);
        let mut rows = Vec::new();
        for entry in std::fs::read_dir(dir.join("out")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "parquet") {
                rows.extend(read_part(&path).unwrap().0);
            }
        }
        rows.sort_by(|a, b| a.offset_s.total_cmp(&b.offset_s));
        let mut expect = Vec::new();
        let mut ex = CpuExtractor::new(&spec).unwrap();
        extract_streaming(&wav, &DecodeOptions::default(), &mut ex, Some(30.0), |p| {
            expect.push(p);
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap();
        assert_eq!(rows.len(), 7);
        assert_eq!(rows.len(), expect.len());
        for (r, p) in rows.iter().zip(&expect) {
            assert!(
                (r.offset_s - p.offset_s).abs() < 1e-9,
                "{} vs {}",
                r.offset_s,
                p.offset_s
            );
            assert!((r.duration_s - p.duration_s).abs() < 1e-9);
            assert_eq!(r.num_frames as usize, p.frames);
            assert!(r.features == p.rows, "piece at {} s differs", r.offset_s);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every row of the parts under `out`, by (id, offset in µs).
    fn rows_by_key(out: &Path) -> std::collections::BTreeMap<(String, i64), Vec<f32>> {
        let mut rows = std::collections::BTreeMap::new();
        for entry in std::fs::read_dir(out).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "parquet") {
                for r in read_part(&path).unwrap().0 {
                    rows.insert((r.id, (r.offset_s * 1e6).round() as i64), r.features);
                }
            }
        }
        rows
    }

    /// A CPU-only job computes its items in the decode workers (no executor runs): the rows
    /// are the executors' (a pass-through unit stage sends the same items through them) bit
    /// for bit, short and long items alike, and the report counts every item on the CPU.
    #[test]
    fn a_cpu_job_computes_in_its_decode_workers_the_rows_of_the_executors() {
        struct Pass;
        impl UnitStage for Pass {
            fn name(&self) -> &str {
                "pass"
            }
            fn process(&mut self, unit: Unit, out: &mut Vec<Unit>) -> Result<(), String> {
                out.push(unit);
                Ok(())
            }
        }
        let dir = scratch_corpus(
            "cpu-here",
            &[
                ("a.wav", 1.0),
                ("b.wav", 7.5),
                ("c.wav", 2.25),
                ("long.wav", 65.0),
            ],
        );
        let spec = FeatureSpec::nemo(80);
        let job = |out: &str, stages: Stages| {
            let mut config = JobConfig::new(dir.join("corpus"), dir.join(out), spec.clone());
            config.workers = 2;
            let cpu = CpuBackend::new(&spec, Precision::F64).unwrap();
            let outcome = run_with(&config, vec![Box::new(cpu)], stages).unwrap();
            let report = outcome.report().clone();
            (rows_by_key(&dir.join(out)), report)
        };
        let (here, here_report) = job("here", Stages::default());
        let (executors, executors_report) = job(
            "executors",
            Stages {
                units: vec![Box::new(Pass)],
                rows: Vec::new(),
            },
        );
        // 1 + 1 + 1 rows for the short items, 3 pieces of the 65 s one.
        assert_eq!(here.len(), 6);
        assert!(here == executors, "the rows differ");
        assert_eq!((here_report.items_ok, here_report.items_failed), (4, 0));
        assert_eq!(here_report.devices.len(), 1);
        assert_eq!(here_report.devices[0].device, "cpu");
        // Three items and the long one's three pieces, computed by the workers in one job and
        // by the executor in the other.
        assert_eq!(here_report.devices[0].items, 6);
        assert_eq!(executors_report.devices[0].items, 6);
        // And each job took its own path: one item or piece at a time by the workers, no
        // executor waiting for units; units through the executor in the other.
        assert_eq!(here_report.devices[0].batches, 6);
        assert_eq!(here_report.devices[0].max_batch, 1);
        assert_eq!(here_report.stages.queue_wait_s, 0.0);
        assert!(executors_report.stages.queue_wait_s > 0.0);
        assert!(here_report.stages.compute_s > 0.0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Halves every sample: a spec's power spectrum becomes exactly a quarter.
    struct Halve;
    impl UnitStage for Halve {
        fn name(&self) -> &str {
            "halve"
        }
        fn process(&mut self, mut unit: Unit, out: &mut Vec<Unit>) -> Result<(), String> {
            unit.samples.iter_mut().for_each(|s| *s *= 0.5);
            out.push(unit);
            Ok(())
        }
    }

    /// Fails the items whose id starts with "b", passes the others.
    struct DropB;
    impl RowStage for DropB {
        fn name(&self) -> &str {
            "drop-b"
        }
        fn process(&mut self, row: RowMsg, out: &mut RowOut) -> Result<(), String> {
            if row.row.id.starts_with('b') {
                return Err("dropped".into());
            }
            out.pass(row);
            Ok(())
        }
    }

    /// A stage that drops a row or doubles a unit would leave an item forever undone or write a
    /// piece twice: the item fails instead, naming the stage, and the job completes.
    #[test]
    fn a_stage_that_drops_or_doubles_fails_the_item_not_the_job() {
        struct Drop1;
        impl RowStage for Drop1 {
            fn name(&self) -> &str {
                "drop"
            }
            fn process(&mut self, row: RowMsg, out: &mut RowOut) -> Result<(), String> {
                if !row.row.id.starts_with('a') {
                    out.pass(row);
                }
                Ok(())
            }
        }
        struct Double;
        impl UnitStage for Double {
            fn name(&self) -> &str {
                "double"
            }
            fn process(&mut self, unit: Unit, out: &mut Vec<Unit>) -> Result<(), String> {
                if unit.id.starts_with('b') {
                    out.push(Unit {
                        id: unit.id.clone(),
                        source: unit.source.clone(),
                        offset_s: unit.offset_s,
                        samples: unit.samples.clone(),
                        piece: unit.piece,
                        pcm16: unit.pcm16,
                        _permit: None,
                        _bytes: None,
                    });
                }
                out.push(unit);
                Ok(())
            }
        }
        let dir = scratch_corpus(
            "stage-contract",
            &[("a.wav", 1.0), ("b.wav", 1.0), ("c.wav", 1.0)],
        );
        let spec = FeatureSpec::whisper(80);
        let config = JobConfig::new(dir.join("corpus"), dir.join("out"), spec.clone());
        let cpu = CpuBackend::new(&spec, Precision::F64).unwrap();
        let stages = Stages {
            units: vec![Box::new(Double)],
            rows: vec![Box::new(Drop1)],
        };
        let outcome = run_with(&config, vec![Box::new(cpu)], stages).unwrap();
        let report = outcome.report();
        assert_eq!((report.items_ok, report.items_failed), (1, 2));
        let reasons: Vec<(&str, &str)> = report
            .failures
            .iter()
            .map(|f| (f.id.as_str(), f.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    "a.wav",
                    "drop: never passed on a row it was given (piece 0)"
                ),
                (
                    "b.wav",
                    "double: gave 2 results for one input; a stage passes each on as exactly one"
                ),
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A row stage may hold rows and pass them on later (a model on batches of rows): every
    /// row is written once, after the stage's `finish`.
    #[test]
    fn a_row_stage_may_hold_rows_until_it_finishes() {
        #[derive(Default)]
        struct HoldAll(Vec<RowMsg>);
        impl RowStage for HoldAll {
            fn name(&self) -> &str {
                "hold"
            }
            fn process(&mut self, row: RowMsg, _out: &mut RowOut) -> Result<(), String> {
                self.0.push(row);
                Ok(())
            }
            fn finish(&mut self, out: &mut RowOut) -> Result<(), String> {
                self.0.drain(..).for_each(|row| out.pass(row));
                Ok(())
            }
        }
        let dir = scratch_corpus("stage-hold", &[("a.wav", 1.0), ("long.wav", 75.0)]);
        let spec = FeatureSpec::whisper(80);
        let job = |out: &str, stages: Stages| {
            let config = JobConfig::new(dir.join("corpus"), dir.join(out), spec.clone());
            let cpu = CpuBackend::new(&spec, Precision::F64).unwrap();
            let outcome = run_with(&config, vec![Box::new(cpu)], stages).unwrap();
            assert_eq!(
                (outcome.report().items_ok, outcome.report().items_failed),
                (2, 0)
            );
            rows_by_key(&dir.join(out))
        };
        let plain = job("plain", Stages::default());
        let held = job(
            "held",
            Stages {
                units: Vec::new(),
                rows: vec![Box::new(HoldAll::default())],
            },
        );
        assert_eq!(plain.len(), 4, "a.wav and three pieces of long.wav");
        assert_eq!(held, plain);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A row stage may fail a row it held (a model that could not run on it): that item
    /// fails, naming the stage and the piece, and nothing of it is done; the others are
    /// written.
    #[test]
    fn a_row_stage_may_fail_a_row_it_held() {
        #[derive(Default)]
        struct FailSecondPiece(Vec<RowMsg>);
        impl RowStage for FailSecondPiece {
            fn name(&self) -> &str {
                "picky"
            }
            fn process(&mut self, row: RowMsg, _out: &mut RowOut) -> Result<(), String> {
                self.0.push(row);
                Ok(())
            }
            fn finish(&mut self, out: &mut RowOut) -> Result<(), String> {
                for row in self.0.drain(..) {
                    if row.piece == 1 {
                        out.fail(row, "no room".into());
                    } else {
                        out.pass(row);
                    }
                }
                Ok(())
            }
        }
        let dir = scratch_corpus("stage-fail", &[("a.wav", 1.0), ("long.wav", 75.0)]);
        let spec = FeatureSpec::whisper(80);
        let config = JobConfig::new(dir.join("corpus"), dir.join("out"), spec.clone());
        let cpu = CpuBackend::new(&spec, Precision::F64).unwrap();
        let stages = Stages {
            units: Vec::new(),
            rows: vec![Box::new(FailSecondPiece::default())],
        };
        let report = run_with(&config, vec![Box::new(cpu)], stages)
            .unwrap()
            .report()
            .clone();
        assert_eq!((report.items_ok, report.items_failed), (1, 1));
        assert_eq!(report.failures[0].id, "long.wav");
        assert_eq!(report.failures[0].reason, "picky: piece 1: no room");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Stages inserted between segmentation and the executors, and between the executors and
    /// the writer, see every unit and row (pieces of long items included) and change the
    /// output as they say, with nothing else of the job changed.
    #[test]
    fn inserted_stages_see_every_unit_and_row() {
        let dir = scratch_corpus(
            "stages",
            &[("a.wav", 3.0), ("b.wav", 2.0), ("long.wav", 75.0)],
        );
        let corpus = dir.join("corpus");
        let mut spec = FeatureSpec::whisper(80);
        spec.output = sonograph_dsp::OutputKind::Power;
        spec.log = sonograph_dsp::spec::LogKind::None;
        spec.dynamic_range = None;
        spec.affine = None;
        let job = |out: &str, stages: Stages| {
            let mut config = JobConfig::new(corpus.clone(), dir.join(out), spec.clone());
            config.workers = 1;
            let cpu = CpuBackend::new(&spec, Precision::F64).unwrap();
            let outcome = run_with(&config, vec![Box::new(cpu)], stages).unwrap();
            (outcome.report().clone(), rows_by_key(&dir.join(out)))
        };
        let (plain_report, plain) = job("plain", Stages::default());
        assert_eq!((plain_report.items_ok, plain_report.items_failed), (3, 0));
        let stages = Stages {
            units: vec![Box::new(Halve)],
            rows: vec![Box::new(DropB)],
        };
        let (report, staged) = job("staged", stages);
        assert_eq!((report.items_ok, report.items_failed), (2, 1));
        assert_eq!(report.failures[0].id, "b.wav");
        assert_eq!(report.failures[0].reason, "drop-b: dropped");
        assert!(report.stages.inserted_s > 0.0);
        let long_pieces = plain.keys().filter(|k| k.0 == "long.wav").count();
        assert_eq!(long_pieces, 3, "75 s in pieces of 30 s");
        assert_eq!(staged.len(), plain.len() - 1);
        for (key, features) in &staged {
            let want: Vec<f32> = plain[key].iter().map(|v| v * 0.25).collect();
            assert!(
                features == &want,
                "{key:?} is not a quarter of the plain run"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A manifest that names one id twice is refused before anything runs (the ledger keys
    /// rows by id: the second item would pass for the first one done), naming the id.
    #[test]
    fn a_manifest_with_a_duplicate_id_is_refused() {
        let dir = scratch_corpus("dup", &[("a.wav", 1.0), ("b.wav", 1.0)]);
        let manifest = dir.join("m.csv");
        let corpus = dir.join("corpus");
        std::fs::write(
            &manifest,
            format!(
                "id,path\nx,{0}/a.wav\ny,{0}/b.wav\nx,{0}/b.wav\n",
                corpus.display()
            ),
        )
        .unwrap();
        let spec = FeatureSpec::whisper(80);
        let config = JobConfig::new(manifest, dir.join("out"), spec.clone());
        let cpu = CpuBackend::new(&spec, Precision::F64).unwrap();
        let err = run(&config, vec![Box::new(cpu)]).unwrap_err();
        assert!(err.is_usage(), "{err}");
        assert!(
            err.to_string().contains("id \"x\" appears more than once"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
