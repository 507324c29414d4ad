//! The job: sources → shard → stages → report.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sonograph_dsp::{CpuExtractor, ExtractError, Extractor, FeatureSpec, OutputKind, Precision};
use sonograph_io::decode::{AudioReader, ChannelMix, DecodeOptions, Limits};
use sonograph_io::ledger::{Ledger, LedgerError};
use sonograph_io::manifest::{read_source, shard_range, Entry, SourceError, SourceItem};
use sonograph_io::parquet::{Dtype, FeatureRow};
use sonograph_io::segment::{extract_from_reader, PieceCutter, PieceWindow};
use sonograph_io::{decode_reader, stream_reader, StreamError, WriteError};
use thiserror::Error;

use crate::executor::{run_executor, ExecutorStats, Permit, Unit};
use crate::report::{peak_rss_mb, Failure, Report, StageTimes};
use crate::writer::{RowMsg, Writer, WriterMsg, WriterStats};

/// Everything a job needs to know.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// A directory, a NeMo `.jsonl` or a `.csv` manifest.
    pub source: PathBuf,
    pub out: PathBuf,
    pub spec: FeatureSpec,
    pub precision: Precision,
    pub mix: ChannelMix,
    /// Resource limits every file is decoded under (as `features` applies them).
    pub limits: Limits,
    /// Decode threads.
    pub workers: usize,
    /// Depth of the prefetch queue, in batches.
    pub prefetch: usize,
    /// Items per executor batch.
    pub batch_items: usize,
    /// Items longer than this are streamed and cut into pieces.
    pub max_seconds: f64,
    /// Length of a piece of a long item.
    pub chunk_seconds: f64,
    pub shard_index: usize,
    pub shard_count: usize,
    pub dtype: Dtype,
    /// A part is closed once its features reach this many MiB.
    pub part_mb: usize,
    /// Draw a progress bar (on a terminal); otherwise a log line every 10 s.
    pub progress: bool,
}

impl JobConfig {
    /// Defaults for everything but the source, the output and the spec.
    pub fn new(source: PathBuf, out: PathBuf, spec: FeatureSpec) -> Self {
        JobConfig {
            source,
            out,
            spec,
            precision: Precision::default(),
            mix: ChannelMix::Mean,
            limits: Limits::default(),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            prefetch: 4,
            batch_items: 16,
            max_seconds: 60.0,
            chunk_seconds: 30.0,
            shard_index: 0,
            shard_count: 1,
            dtype: Dtype::F32,
            part_mb: 64,
            progress: false,
        }
    }
}

/// Why a job could not run. Item problems are never job errors: they are in the report.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum JobError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

impl JobError {
    /// A usage or configuration problem (exit code 2), as opposed to a failure while running.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            JobError::Config(_)
                | JobError::Source(_)
                | JobError::Ledger(
                    LedgerError::SpecMismatch { .. } | LedgerError::ShardMismatch { .. }
                )
        )
    }
}

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

/// Where a shard keeps its files. Parts sit in `out/`; everything else under
/// `out/__sonograph/`, which dataset readers skip (pyarrow skips names starting with `_`,
/// Hugging Face datasets those starting with `__`).
#[derive(Debug, Clone)]
pub struct OutputLayout {
    pub out: PathBuf,
    pub meta_dir: PathBuf,
    pub ledger: PathBuf,
    pub report: PathBuf,
    pub done_marker: PathBuf,
    /// The job's shape (spec, shard count), shared by all shards of the folder.
    pub job: PathBuf,
}

impl OutputLayout {
    /// A single-shard job uses `ledger.sqlite` and `report.json`; shard `I` of `N` adds
    /// `-IIIII` so that shards can share one output folder.
    pub fn new(out: &Path, shard_index: usize, shard_count: usize) -> Self {
        let meta_dir = out.join(META_DIR);
        let suffix = if shard_count == 1 {
            String::new()
        } else {
            format!("-{shard_index:05}")
        };
        OutputLayout {
            out: out.to_path_buf(),
            ledger: meta_dir.join(format!("ledger{suffix}.sqlite")),
            report: meta_dir.join(format!("report{suffix}.json")),
            done_marker: meta_dir.join(format!("shard-{shard_index:05}-of-{shard_count:05}.done")),
            job: meta_dir.join("job.json"),
            meta_dir,
        }
    }
}

/// Name of the folder inside the output that holds everything but the parts.
pub const META_DIR: &str = "__sonograph";

/// Records the job's spec and shard count in `job.json` the first time, and refuses a run
/// that disagrees: shards of different counts would write parts of the same names.
fn check_job_shape(
    layout: &OutputLayout,
    config: &JobConfig,
    spec_id: &str,
) -> Result<(), JobError> {
    // Everything that changes which rows exist or how they are stored: a resume with other
    // values would mix pieces of different lengths or parts of different types.
    let shape = serde_json::json!({
        "spec_id": spec_id,
        "shard_count": config.shard_count,
        "max_seconds": config.max_seconds,
        "chunk_seconds": config.chunk_seconds,
        "dtype": format!("{:?}", config.dtype),
        "mix": format!("{:?}", config.mix),
    });
    let text = format!("{shape}\n");
    // Written whole under a unique name, then linked into place: `job.json` either does not
    // exist or is complete, whatever instant a process dies at.
    let tmp = layout
        .meta_dir
        .join(format!(".job-{}.json.tmp", std::process::id()));
    std::fs::write(&tmp, &text).map_err(io_err(&tmp))?;
    let linked = std::fs::hard_link(&tmp, &layout.job);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let found = std::fs::read_to_string(&layout.job).map_err(io_err(&layout.job))?;
            let found: serde_json::Value = serde_json::from_str(&found).map_err(|e| {
                JobError::Config(format!("{}: unreadable: {e}", layout.job.display()))
            })?;
            if found == shape {
                return Ok(());
            }
            Err(JobError::Config(format!(
                "{}: this output folder belongs to another job ({found}); this run is {shape}; use another folder or the same settings",
                layout.out.display()
            )))
        }
        Err(e) => Err(io_err(&layout.job)(e)),
    }
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> JobError + '_ {
    move |source| JobError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn check(config: &JobConfig) -> Result<(), JobError> {
    let bad = |m: &str| Err(JobError::Config(m.to_string()));
    if config.workers == 0 {
        return bad("--workers must be at least 1");
    }
    if config.prefetch == 0 || config.batch_items == 0 {
        return bad("--prefetch and --batch-items must be at least 1");
    }
    if !(config.chunk_seconds.is_finite()
        && config.max_seconds.is_finite()
        && config.chunk_seconds > 0.0
        && config.max_seconds >= config.chunk_seconds)
    {
        return bad("--chunk-seconds must be finite, > 0 and not above --max-seconds");
    }
    if config.part_mb == 0 {
        return bad("--part-mb must be at least 1");
    }
    if config.shard_count == 0 || config.shard_index >= config.shard_count {
        return bad("--shard-index must be below --shard-count");
    }
    config
        .spec
        .validate()
        .map_err(|e| JobError::Config(e.to_string()))
}

/// Runs the job on `devices` (at least one; the CLI builds them from `--device`).
pub fn run(config: &JobConfig, devices: Vec<Box<dyn Extractor>>) -> Result<JobOutcome, JobError> {
    check(config)?;
    if devices.is_empty() {
        return Err(JobError::Config("no device to run on".into()));
    }
    let start = Instant::now();
    let spec_id = config.spec.spec_id();
    let entries = read_source(&config.source)?;
    let range = shard_range(entries.len(), config.shard_index, config.shard_count);
    let shard_entries = &entries[range];
    let layout = OutputLayout::new(&config.out, config.shard_index, config.shard_count);
    std::fs::create_dir_all(&layout.meta_dir).map_err(io_err(&layout.meta_dir))?;
    check_job_shape(&layout, config, &spec_id)?;
    // One process per shard: a second one (a requeued task, a duplicate pod) would write the
    // same part numbers.
    let lock_path = layout
        .meta_dir
        .join(format!("shard-{:05}.lock", config.shard_index));
    let lock = std::fs::File::create(&lock_path).map_err(io_err(&lock_path))?;
    if lock.try_lock().is_err() {
        return Err(JobError::Config(format!(
            "{}: another process is running shard {} of this folder",
            lock_path.display(),
            config.shard_index
        )));
    }
    let shard = format!("{}/{}", config.shard_index, config.shard_count);
    let ledger = Ledger::open(&layout.ledger, &layout.out, &spec_id, &shard)?;
    if layout.done_marker.exists() {
        if let Some(report) = read_report(&layout.report) {
            return Ok(JobOutcome::AlreadyDone(report));
        }
    }
    let done = ledger.done_items()?;
    let failed_before: std::collections::HashSet<String> = ledger
        .failures()?
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    let todo: Vec<Entry> = shard_entries
        .iter()
        .filter(|e| !done.contains(e.id()) && !failed_before.contains(e.id()))
        .cloned()
        .collect();
    let resumed = shard_entries
        .iter()
        .filter(|e| done.contains(e.id()))
        .count() as u64;
    tracing::info!(
        items = shard_entries.len(),
        todo = todo.len(),
        shard = %shard,
        spec_id = %spec_id,
        "starting"
    );

    let writer = Writer::new(
        layout.out.clone(),
        config.shard_index,
        ledger,
        config.dtype,
        spec_id.clone(),
        config.spec.to_json(),
        config.part_mb << 20,
    )?;
    let bar = progress_bar(config.progress, todo.len() as u64);
    let (work_tx, work_rx) = bounded::<Entry>(config.workers * 2);
    let (unit_tx, unit_rx) = bounded::<Unit>(config.prefetch * config.batch_items);
    // Rows are up to a piece of features each (about 1 MB for 30 s of Whisper): a short queue
    // keeps a fast producer from holding many of them while a part is being written.
    let (writer_tx, writer_rx) = bounded::<WriterMsg>(8);

    let writer_handle = {
        let bar = bar.clone();
        std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || writer_loop(writer, writer_rx, bar))
            .map_err(|e| JobError::Internal(e.to_string()))?
    };
    let live_executors = Arc::new(AtomicUsize::new(devices.len()));
    let pieces_to_executors = !devices.iter().all(|d| d.is_cpu());
    // Held by every executor thread until it ends: the decode workers see through it whether
    // any executor is left to take pieces (the live count drops to 0 while the last executor
    // standing goes on on the CPU).
    let executors_running = Arc::new(());
    let executor_handles: Vec<_> = devices
        .into_iter()
        .map(|device| {
            let (units, writer_tx) = (unit_rx.clone(), writer_tx.clone());
            let live = live_executors.clone();
            let running = executors_running.clone();
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
    let worker_handles: Vec<_> = (0..config.workers)
        .map(|i| {
            let (work, units, writer_tx) = (work_rx.clone(), unit_tx.clone(), writer_tx.clone());
            let config = config.clone();
            let running = executors_running.clone();
            std::thread::Builder::new()
                .name(format!("decode-{i}"))
                .spawn(move || {
                    let long_items = if pieces_to_executors {
                        LongItems::ToExecutors(&running)
                    } else {
                        LongItems::Stream
                    };
                    decode_worker(&config, work, units, writer_tx, long_items)
                })
        })
        .collect::<Result<_, _>>()
        .map_err(|e| JobError::Internal(e.to_string()))?;
    drop((work_rx, unit_tx, writer_tx));

    for entry in todo {
        if work_tx.send(entry).is_err() {
            break; // every worker is gone; the joins below say why
        }
    }
    drop(work_tx);
    let mut stages = StageTimes::default();
    for h in worker_handles {
        stages.decode_s += h
            .join()
            .map_err(|_| JobError::Internal("a decode worker panicked".into()))?;
    }
    let mut devices_report = Vec::new();
    for h in executor_handles {
        let ExecutorStats {
            report,
            queue_wait_s,
            compute_s,
        } = h
            .join()
            .map_err(|_| JobError::Internal("an executor panicked".into()))?;
        stages.queue_wait_s += queue_wait_s;
        stages.compute_s += compute_s;
        devices_report.push(report);
    }
    let (writer, wstats) = writer_handle
        .join()
        .map_err(|_| JobError::Internal("the writer panicked".into()))?;
    let wstats = wstats?;
    bar.finish_and_clear();
    stages.write_s = wstats.write_s;

    let shard_ids: std::collections::HashSet<&str> = shard_entries.iter().map(|e| e.id()).collect();
    let failures: Vec<Failure> = writer
        .ledger
        .failures()?
        .into_iter()
        .filter(|(id, _, _)| shard_ids.contains(id.as_str()))
        .map(|(id, source, reason)| Failure { id, source, reason })
        .collect();
    let wall = start.elapsed().as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let report = Report {
        spec_id,
        shard_index: config.shard_index,
        shard_count: config.shard_count,
        items_total: shard_entries.len() as u64,
        items_ok: writer.ledger.done_items()?.len() as u64,
        items_failed: failures.len() as u64,
        items_resumed: resumed,
        rows: wstats.rows,
        parts: wstats.parts,
        audio_seconds: wstats.audio_seconds,
        wall_seconds: wall,
        real_time_factor: if wall > 0.0 {
            wstats.audio_seconds / wall
        } else {
            0.0
        },
        core_utilisation: (stages.decode_s + stages.compute_s) / (wall * cores).max(1e-9),
        stages,
        devices: devices_report,
        peak_rss_mb: peak_rss_mb(),
        failures,
    };
    write_json_atomically(&layout.report, &report)?;
    let undone =
        report.items_total - (report.items_ok + report.items_failed).min(report.items_total);
    if undone > 0 {
        // No item is lost: without the marker, the same command runs them again.
        return Err(JobError::Internal(format!(
            "{undone} items were left undone (see the log); run the same command again to finish them"
        )));
    }
    std::fs::write(&layout.done_marker, format!("{}\n", report.spec_id))
        .map_err(io_err(&layout.done_marker))?;
    Ok(JobOutcome::Finished(report))
}

fn read_report(path: &Path) -> Option<Report> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn write_json_atomically(path: &Path, report: &Report) -> Result<(), JobError> {
    let tmp = sonograph_io::parquet::tmp_path(path);
    let text =
        serde_json::to_string_pretty(report).map_err(|e| JobError::Internal(e.to_string()))?;
    std::fs::write(&tmp, text).map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

fn progress_bar(enabled: bool, len: u64) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} items  {msg}  ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar
}

fn writer_loop(
    mut writer: Writer,
    rx: Receiver<WriterMsg>,
    bar: ProgressBar,
) -> (Writer, Result<WriterStats, JobError>) {
    let started = Instant::now();
    let mut last_log = Instant::now();
    let hidden = bar.is_hidden();
    for msg in rx {
        let finished_item = match &msg {
            WriterMsg::Row(r) => r.last,
            WriterMsg::Failed(_) => true,
        };
        if let Err(e) = writer.handle(msg) {
            return (writer, Err(e));
        }
        if finished_item {
            bar.inc(1);
            let hours = writer.stats.audio_seconds / 3600.0;
            let rate = writer.stats.audio_seconds / started.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!("{hours:.2} h audio  {rate:.0}× real time"));
            if hidden && last_log.elapsed() >= Duration::from_secs(10) {
                last_log = Instant::now();
                tracing::info!(
                    items_ok = writer.stats.items_ok,
                    items_failed = writer.stats.items_failed,
                    audio_hours = hours,
                    real_time_factor = rate,
                    "progress"
                );
            }
        }
    }
    if writer.pieces_held() > 0 {
        tracing::warn!(
            items = writer.pieces_held(),
            "long items left undone: some of their pieces never arrived (a resume redoes them)"
        );
    }
    let result = writer.flush().map(|()| std::mem::take(&mut writer.stats));
    (writer, result)
}

/// Decodes items; short ones go to the prefetch queue, long ones too in pieces (or, when all
/// executors are CPUs, they are streamed here).
/// Returns the seconds spent busy (not counting time blocked on a full queue).
fn decode_worker(
    config: &JobConfig,
    work: Receiver<Entry>,
    units: Sender<Unit>,
    writer: Sender<WriterMsg>,
    long_items: LongItems,
) -> f64 {
    let spec = Arc::new(config.spec.clone());
    let mut extractor: Option<CpuExtractor> = None;
    let mut busy = 0.0;
    for entry in work {
        let t = Instant::now();
        let mut blocked = 0.0;
        let outcome = match entry {
            Entry::Invalid { id, reason } => Err(Failure {
                id,
                source: config.source.display().to_string(),
                reason,
            }),
            Entry::Item(item) => {
                let ex = extractor.get_or_insert_with(|| {
                    CpuExtractor::with_precision(&spec, config.precision)
                        .expect("the spec was validated")
                });
                // A bug tripped by one file must not take the shard down with it (it would trip
                // again on every resume): the item fails with the panic's message.
                let run = std::panic::AssertUnwindSafe(|| {
                    decode_item(
                        config,
                        &item,
                        ex,
                        &units,
                        &writer,
                        &long_items,
                        &mut blocked,
                    )
                });
                std::panic::catch_unwind(run).unwrap_or_else(|payload| {
                    Err(Failure {
                        id: item.id.clone(),
                        source: item.path.display().to_string(),
                        reason: format!("internal error while decoding: {}", panic_text(&*payload)),
                    })
                })
            }
        };
        busy += t.elapsed().as_secs_f64() - blocked;
        let sent = match outcome {
            Ok(Flow::Continue) => true,
            Ok(Flow::Stop) => false,
            Err(f) => writer.send(WriterMsg::Failed(f)).is_ok(),
        };
        if !sent {
            break;
        }
    }
    busy
}

fn decode_item(
    config: &JobConfig,
    item: &SourceItem,
    extractor: &mut CpuExtractor,
    units: &Sender<Unit>,
    writer: &Sender<WriterMsg>,
    long_items: &LongItems,
    blocked: &mut f64,
) -> Result<Flow, Failure> {
    let source = item.path.display().to_string();
    let fail = |reason: String| item_failure(item, reason);
    let opts = DecodeOptions {
        mix: config.mix,
        limits: config.limits,
        offset_s: item.offset_s,
        duration_s: item.duration_s,
    };
    let reader = AudioReader::open(&item.path, &opts).map_err(|e| fail(e.to_string()))?;
    let short = reader
        .expected_seconds()
        .is_some_and(|s| s <= config.max_seconds);
    if short {
        let samples =
            decode_reader(reader, config.spec.sample_rate).map_err(|e| fail(e.to_string()))?;
        let wait = Instant::now();
        let sent = units.send(Unit {
            id: item.id.clone(),
            source,
            offset_s: item.offset_s,
            samples,
            piece: None,
            _permit: None,
        });
        *blocked += wait.elapsed().as_secs_f64();
        // A closed queue means the job is stopping; the item stays undone for a resume.
        return Ok(if sent.is_ok() {
            Flow::Continue
        } else {
            Flow::Stop
        });
    }
    if let (LongItems::ToExecutors(live), false) =
        (long_items, config.spec.output == OutputKind::Psd)
    {
        return send_pieces(config, item, reader, units, live, blocked);
    }
    // Streamed here, through this worker's extractor (Welch PSD, which averages the whole
    // item into one row, always is).
    let spec = &config.spec;
    let mut pieces = 0u32;
    let result = extract_from_reader(reader, extractor, Some(config.chunk_seconds), |piece| {
        pieces += 1;
        let wait = Instant::now();
        let sent = writer
            .send(WriterMsg::Row(Box::new(RowMsg {
                row: FeatureRow {
                    id: item.id.clone(),
                    source: source.clone(),
                    offset_s: item.offset_s + piece.offset_s,
                    duration_s: piece.duration_s,
                    sample_rate: spec.sample_rate,
                    num_frames: piece.frames as u32,
                    num_bins: spec.n_bins() as u32,
                    features: piece.rows,
                },
                piece: piece.index,
                last: piece.last,
            })))
            .map_err(|_| WriterGone);
        *blocked += wait.elapsed().as_secs_f64();
        sent
    });
    match result {
        Ok(_) => Ok(Flow::Continue),
        Err(StreamError::Sink { .. }) => Ok(Flow::Stop), // the writer has stopped
        Err(e) if pieces > 0 => Err(fail(format!(
            "{e} (after {pieces} pieces; earlier pieces of this item may be in the output)"
        ))),
        Err(e) => Err(fail(e.to_string())),
    }
}

/// Cuts a long item, as it decodes, into pieces that go to the executors like short items,
/// each with the window of samples it reads: the file is never held whole, and its pieces run
/// on any device, several at once. At most `--batch-items` pieces of it are queued or being
/// computed at a time: a decoder outruns the executors, and the queue would otherwise fill
/// with pieces of one file.
fn send_pieces(
    config: &JobConfig,
    item: &SourceItem,
    reader: AudioReader,
    units: &Sender<Unit>,
    executors_running: &Weak<()>,
    blocked: &mut f64,
) -> Result<Flow, Failure> {
    let source = item.path.display().to_string();
    let fail = |reason: String| item_failure(item, reason);
    let mut cutter = PieceCutter::new(&config.spec, config.chunk_seconds);
    let (permits, taken) = bounded::<()>(config.batch_items);
    let mut send = |w: PieceWindow| {
        let wait = Instant::now();
        // A permit is a slot in `permits`; the unit gives it back when it is dropped. With no
        // executor left, the units still queued are never dropped: stop waiting then (the
        // item stays undone, and the job says so).
        while permits.send_timeout((), Duration::from_millis(50)).is_err() {
            if executors_running.strong_count() == 0 {
                return Err(WriterGone);
            }
        }
        let sent = units.send(Unit {
            id: item.id.clone(),
            source: source.clone(),
            offset_s: item.offset_s,
            samples: w.samples,
            piece: Some(w.plan),
            _permit: Some(Permit(taken.clone())),
        });
        *blocked += wait.elapsed().as_secs_f64();
        sent.map_err(|_| WriterGone)
    };
    let streamed = stream_reader(reader, config.spec.sample_rate, |chunk| {
        cutter.push(chunk, &mut send)
    });
    match streamed {
        Ok(_) => {}
        // A closed queue means the job is stopping; the item stays undone for a resume.
        Err(StreamError::Sink { .. }) => return Ok(Flow::Stop),
        Err(e) if cutter.pieces() > 0 => {
            return Err(fail(format!(
                "{e} (after {} pieces; earlier pieces of this item may be in the output)",
                cutter.pieces()
            )))
        }
        Err(e) => return Err(fail(e.to_string())),
    }
    let Some(last) = cutter.finish() else {
        return Err(fail(format!("{source}: {}", ExtractError::Empty)));
    };
    Ok(match send(last) {
        Ok(()) => Flow::Continue,
        Err(WriterGone) => Flow::Stop,
    })
}

fn item_failure(item: &SourceItem, reason: String) -> Failure {
    Failure {
        id: item.id.clone(),
        source: item.path.display().to_string(),
        reason,
    }
}

/// Where a decode worker computes long items.
enum LongItems<'a> {
    /// Here, streaming them through its own CPU extractor: all executors are CPUs.
    Stream,
    /// On the executors, in pieces; with a handle that is dead once every executor has ended.
    ToExecutors(&'a Weak<()>),
}

/// Whether a decode worker goes on after an item.
enum Flow {
    Continue,
    /// A downstream stage has stopped: the job is ending.
    Stop,
}

#[derive(Debug, Error)]
#[error("the writer has stopped")]
struct WriterGone;

/// The message of a caught panic.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Flaky;
    use sonograph_io::parquet::read_part;
    use sonograph_io::segment::extract_streaming;

    /// A 16-bit mono WAV of a gliding tone.
    fn write_wav(path: &Path, rate: u32, seconds: f64) {
        let n = (seconds * f64::from(rate)) as u32;
        let mut bytes = Vec::with_capacity(44 + 2 * n as usize);
        bytes.extend_from_slice(b"RIFF");
        bytes.extend_from_slice(&(36 + 2 * n).to_le_bytes());
        bytes.extend_from_slice(b"WAVEfmt ");
        bytes.extend_from_slice(&16u32.to_le_bytes());
        bytes.extend_from_slice(&1u16.to_le_bytes()); // PCM
        bytes.extend_from_slice(&1u16.to_le_bytes()); // mono
        bytes.extend_from_slice(&rate.to_le_bytes());
        bytes.extend_from_slice(&(2 * rate).to_le_bytes());
        bytes.extend_from_slice(&2u16.to_le_bytes());
        bytes.extend_from_slice(&16u16.to_le_bytes());
        bytes.extend_from_slice(b"data");
        bytes.extend_from_slice(&(2 * n).to_le_bytes());
        for i in 0..n {
            let t = f64::from(i) / f64::from(rate);
            let v = 0.3 * (std::f64::consts::TAU * (150.0 + 20.0 * t) * t).sin();
            bytes.extend_from_slice(&((v * 32767.0) as i16).to_le_bytes());
        }
        std::fs::write(path, bytes).unwrap();
    }

    /// A fresh folder `sono-job-NAME-PID` in the temp dir with `corpus/` holding 16 kHz WAVs
    /// of the given (file name, seconds).
    fn scratch_corpus(name: &str, wavs: &[(&str, f64)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sono-job-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("corpus")).unwrap();
        for (file, seconds) in wavs {
            write_wav(&dir.join("corpus").join(file), 16_000, *seconds);
        }
        dir
    }

    /// With every executor gone, a decode worker waiting for a permit for the next piece of
    /// a long item stops (the pieces already queued are never taken, so no permit comes back)
    /// instead of hanging the job.
    #[test]
    fn a_decoder_stops_waiting_for_permits_once_no_executor_is_left() {
        let dir = scratch_corpus("permits", &[("long.wav", 100.0)]);
        let wav = dir.join("corpus/long.wav");
        let mut config = JobConfig::new(
            dir.join("corpus"),
            dir.join("out"),
            FeatureSpec::whisper(80),
        );
        config.batch_items = 1;
        let item = SourceItem {
            id: "long.wav".into(),
            path: wav.clone(),
            offset_s: 0.0,
            duration_s: None,
        };
        let reader = AudioReader::open(&wav, &DecodeOptions::default()).unwrap();
        let (units, queued) = bounded::<Unit>(8);
        let executors = Arc::new(());
        let running = Arc::downgrade(&executors);
        drop(executors);
        let flow = send_pieces(&config, &item, reader, &units, &running, &mut 0.0).unwrap();
        assert!(matches!(flow, Flow::Stop));
        assert_eq!(queued.len(), 1, "one piece went out on the one permit");
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
        let device = Flaky {
            fits: 2,
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
}
