//! `transcribe` as a dataset job: audio items (a file, a folder, a manifest) cut into segments
//! (whole where an item fits the model's window, else at Silero VAD's speech or in fixed
//! windows), their NeMo features run through an ASR export in batches, the transcripts written
//! as parts (JSON lines or Parquet) in an output folder with the ledger, shards and report of
//! a feature job. A run killed at any instant and run again ends with each item's transcripts
//! once; an item that cannot be decoded is a failure listed in the report, never the end of
//! the job. Items are streamed: memory holds a batch of segments, the audio a segment not yet
//! given out can still need, and one part's transcripts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sonograph_dsp::{CpuExtractor, FeatureSpec};
use sonograph_io::decode::{ChannelMix, DecodeOptions, Limits};
use sonograph_io::ledger::{Ledger, LedgerReader, PieceRecord};
use sonograph_io::manifest::{Entry, SourceItem, SourceOptions};
use sonograph_io::transcripts::{TranscriptRow, TranscriptWriter};
use sonograph_io::{AudioReader, StreamError};
use sonograph_model::{AsrModel, ModelBatch, Runtime, VadParams};

use crate::batcher::{AdaptiveBatcher, BatcherConfig};
use crate::error::JobError;
use crate::job::JobOutcome;
use crate::layout::{finish_output, io_err, open_output, Opened, OutputLayout};
use crate::live::LiveJob;
use crate::model::{FeatureRows, NoFallback};
use crate::report::{peak_rss_mb, DeviceReport, Failure, Report, StageTimes};
use crate::source::ShardSource;
use crate::vad::{stream_vad, Segmenters, SinkStop, VadEvent, VadStop};

pub use crate::vad::OUT_RATE;

/// Items per part by default.
pub const DEFAULT_PART_ITEMS: usize = 1024;

/// How an item longer than the model's window is cut.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum SegmentMode {
    /// An item longer than the window is cut at its speech segments (Silero VAD; the VAD
    /// settings apply); a shorter one is transcribed whole, as NeMo and onnx-asr transcribe it.
    #[default]
    Vad,
    /// Consecutive windows of the window's length.
    Fixed,
}

/// What the parts are.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum TranscriptFormat {
    /// JSON lines: id, source, start and end (samples at 16 kHz), start_s, end_s, text,
    /// tokens, timestamps.
    Jsonl,
    /// Parquet of the same columns (start and end in seconds only).
    Parquet,
}

/// A `transcribe` job.
#[derive(Debug, Clone)]
pub struct TranscribeJob {
    /// An audio file, a folder (walked), or a manifest (NeMo .jsonl, or .csv).
    pub source: PathBuf,
    /// The output folder (parts in it, the ledger and report under `__sonograph/`).
    pub out: PathBuf,
    /// The model folder (a NeMo Parakeet/FastConformer export as onnx-asr reads it).
    pub model: PathBuf,
    /// The onnxruntime library, where it is not found by itself.
    pub ort_lib: Option<PathBuf>,
    pub format: TranscriptFormat,
    pub segment: SegmentMode,
    /// The model's window, in seconds: an item up to this long (by its header) is transcribed
    /// whole; a longer one is cut.
    pub window_s: f64,
    pub vad: VadParams,
    /// Segments per model batch (the batcher splits a batch that runs out of memory).
    pub batch: usize,
    /// onnxruntime threads (0: one per core).
    pub threads: usize,
    /// One channel (0-based) instead of the mean of all.
    pub channel: Option<usize>,
    pub limits: Limits,
    pub shard_index: usize,
    pub shard_count: usize,
    /// Items per part (an item's transcripts never span two parts).
    pub part_items: usize,
    /// Where its files may be read and written: anywhere from the command line and Python;
    /// beneath the data roots for the service (the source, every item's audio, the model
    /// folder and the output folder).
    pub roots: sonograph_io::Roots,
}

impl TranscribeJob {
    /// A job with the defaults (VAD cut past a 30 s window, batches of 8, JSON lines).
    pub fn new(source: PathBuf, out: PathBuf, model: PathBuf) -> Self {
        TranscribeJob {
            source,
            out,
            model,
            ort_lib: None,
            format: TranscriptFormat::Jsonl,
            segment: SegmentMode::Vad,
            window_s: crate::config::defaults::WINDOW_S,
            vad: VadParams::default(),
            batch: crate::config::defaults::TRANSCRIBE_BATCH,
            threads: 0,
            channel: None,
            limits: Limits::default(),
            shard_index: 0,
            shard_count: 1,
            part_items: DEFAULT_PART_ITEMS,
            roots: sonograph_io::Roots::anywhere(),
        }
    }

    pub(crate) fn check(&self) -> Result<(), JobError> {
        if !(self.window_s.is_finite() && self.window_s > 0.0) {
            return Err(JobError::Config(format!(
                "window-s must be > 0, not {}",
                self.window_s
            )));
        }
        crate::config::within("batch", self.batch, 1..=4096)?;
        crate::config::within("threads", self.threads, 0..=1024)?;
        crate::config::within("items-per-part", self.part_items, 1..=1_000_000)?;
        self.vad
            .validate()
            .map_err(|e| JobError::Config(e.to_string()))?;
        self.limits.validate().map_err(JobError::Config)?;
        crate::config::check_shard(self.shard_index, self.shard_count)
    }

    /// What every run on the output folder must share: other settings give other rows.
    fn shape(&self) -> serde_json::Value {
        // The same model however it is named.
        let model = std::fs::canonicalize(&self.model).unwrap_or_else(|_| self.model.clone());
        serde_json::json!({
            "kind": "transcribe",
            "model": model.display().to_string(),
            "format": self.format,
            "segment": self.segment,
            "window_s": self.window_s,
            "vad": serde_json::to_value(self.vad).unwrap_or_default(),
            "channel": self.channel,
            "shard_count": self.shard_count,
        })
    }
}

/// The transcripts of items, and the segments that could not be transcribed.
#[derive(Default)]
struct Transcribed {
    /// (item, row, start, end in samples at 16 kHz), in item and segment order.
    rows: Vec<(String, TranscriptRow, u64, u64)>,
    /// (item, the segment's failure).
    segment_failures: Vec<(String, Failure)>,
}

/// A segment waiting for its batch.
struct Pending {
    item: String,
    source: PathBuf,
    index: usize,
    start: u64,
    end: u64,
    samples: Vec<f32>,
}

/// The model, its features and the batcher, turning pending segments into rows.
struct Transcriber {
    model: AsrModel,
    spec: FeatureSpec,
    batcher: AdaptiveBatcher,
    batch: usize,
    busy_s: f64,
    batches: u64,
}

impl Transcriber {
    /// Runs the pending segments once there is a batch of them.
    fn flush_full(&mut self, pending: &mut Vec<Pending>, out: &mut Transcribed) {
        if pending.len() >= self.batch {
            self.flush(pending, out);
        }
    }

    fn flush(&mut self, pending: &mut Vec<Pending>, out: &mut Transcribed) {
        if pending.is_empty() {
            return;
        }
        let started = Instant::now();
        let spec = &self.spec;
        // NeMo normalises each segment over its own frames, as it does each utterance.
        let features: Vec<Result<Vec<f32>, String>> = pending
            .par_iter()
            .map_init(
                || CpuExtractor::new(spec).expect("validated when the model was opened"),
                |ex, p| {
                    let mut rows = Vec::new();
                    ex.extract(&p.samples, &mut rows)
                        .map(|_| rows)
                        .map_err(|e| e.to_string())
                },
            )
            .collect();
        let valid: Vec<usize> = (0..pending.len())
            .filter(|&i| features[i].is_ok())
            .collect();
        let rows = FeatureRows::new(
            valid
                .iter()
                .map(|&i| features[i].as_deref().unwrap_or_default())
                .collect(),
            self.spec.n_mels,
        );
        let mut outputs = ModelBatch::new();
        self.batcher.run_on(
            &rows,
            self.model.runner(),
            &mut NoFallback("the model's only device failed".into()),
            &mut outputs,
        );
        let mut results = valid.iter().zip(outputs.into_items());
        for (i, p) in pending.drain(..).enumerate() {
            let decoded = match &features[i] {
                Err(e) => Err(e.clone()),
                Ok(_) => {
                    let (_, output) = results.next().expect("one output per valid segment");
                    output
                        .map_err(|e| e.to_string())
                        .and_then(|o| self.model.decode(&o).map_err(|e| e.to_string()))
                }
            };
            let (start_s, end_s) = (
                p.start as f64 / f64::from(OUT_RATE),
                p.end as f64 / f64::from(OUT_RATE),
            );
            let id = format!("{}#{}", p.item, p.index);
            match decoded {
                Ok(t) => out.rows.push((
                    p.item,
                    TranscriptRow {
                        id,
                        source: p.source.display().to_string(),
                        start_s,
                        end_s,
                        text: t.text,
                        tokens: t.tokens,
                        timestamps: t.timestamps.iter().map(|x| start_s + x).collect(),
                    },
                    p.start,
                    p.end,
                )),
                Err(reason) => out.segment_failures.push((
                    p.item,
                    Failure {
                        id,
                        source: p.source.display().to_string(),
                        reason,
                    },
                )),
            }
        }
        self.busy_s += started.elapsed().as_secs_f64();
        self.batches += 1;
    }

    /// The model's device was lost: every segment after failed for want of it, not for its
    /// input, so the job stops (what was committed stays; the same job run again resumes)
    /// instead of marking the rest done without transcripts.
    fn lost(&self) -> Result<(), JobError> {
        let stats = self.batcher.stats();
        if stats.devices_lost > 0 {
            let why = stats.alerts.last().cloned().unwrap_or_default();
            return Err(JobError::Model(format!(
                "the model's device failed ({why}); run the same command again to resume"
            )));
        }
        Ok(())
    }
}

/// Runs the job.
pub fn run_transcribe(job: &TranscribeJob) -> Result<JobOutcome, JobError> {
    run_transcribe_live(job, &LiveJob::new())
}

/// [`run_transcribe`], its progress counted in `live` as it goes (items settled by an earlier
/// run, items done and failed, transcript rows and their seconds), for `--metrics-addr`. A
/// cancel stops the feeding of items; what was transcribed is written, and the job returns
/// [`JobError::Canceled`].
pub fn run_transcribe_live(job: &TranscribeJob, live: &LiveJob) -> Result<JobOutcome, JobError> {
    let outcome = transcribe(job, live);
    live.set_finished();
    outcome
}

fn transcribe(job: &TranscribeJob, live: &LiveJob) -> Result<JobOutcome, JobError> {
    job.check()?;
    let started = Instant::now();
    let cpu_at_start = crate::host::process_cpu_seconds();
    let rt = Runtime::get(job.ort_lib.as_deref()).map_err(|e| JobError::Model(e.to_string()))?;
    confine_model(&job.roots, &job.model)?;
    let model = AsrModel::open(rt, &job.model, job.threads)
        .map_err(|e| JobError::Model(format!("{}: {e}", job.model.display())))?;
    let n_mels = model.n_mels();
    let mut spec = FeatureSpec::preset(if n_mels == 128 { "nemo-128" } else { "nemo" })
        .map_err(|e| JobError::Internal(e.to_string()))?;
    spec.n_mels = n_mels;
    spec.validate()
        .map_err(|e| JobError::Model(format!("{}: {e}", job.model.display())))?;
    // A single audio file is its own item; anything else is a source of items.
    job.roots
        .check(&job.source)
        .map_err(|e| JobError::Config(format!("source: {e}")))?;
    let single = job.source.is_file() && !is_manifest(&job.source);
    let source = if single {
        None
    } else {
        let options = SourceOptions {
            iq: false,
            raw: None,
            roots: job.roots.clone(),
        };
        let s = ShardSource::open(&job.source, &options, job.shard_index, job.shard_count)?;
        s.check_unique_ids()?;
        Some(s)
    };
    let shape = job.shape();
    let spec_id: String = Sha256::digest(shape.to_string().as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let layout = OutputLayout::new(&job.out, job.shard_index, job.shard_count);
    let (ledger, _lock) = match open_output(
        &layout,
        &job.roots,
        &shape,
        &spec_id,
        job.shard_index,
        job.shard_count,
    )? {
        Opened::Done(report) => return Ok(JobOutcome::AlreadyDone(*report)),
        Opened::Run { ledger, lock } => (ledger, lock),
    };
    let reader = LedgerReader::open(&layout.ledger)?;
    let mut tr = Transcriber {
        model,
        spec,
        batcher: AdaptiveBatcher::new(BatcherConfig {
            initial: job.batch,
            max: job.batch,
            ..Default::default()
        }),
        batch: job.batch,
        busy_s: 0.0,
        batches: 0,
    };
    let mut sink = TranscriptSink::new(job, ledger);
    let mut segmenters = Segmenters::new(rt, job.vad);
    if job.segment == SegmentMode::Vad {
        // Loaded once now: a VAD that cannot load is the job's error, not every item's.
        segmenters
            .at(OUT_RATE)
            .map_err(|e| JobError::Model(format!("VAD: {e}")))?;
    }
    // A single file is shard 0's item (of any shard count).
    let single_here = single && job.shard_index == 0;
    let items_total = source
        .as_ref()
        .map_or(u64::from(single_here), |s| s.len() as u64);
    // Settled by an earlier run, done or failed, as extract counts them for its progress.
    live.set_items(
        items_total,
        sink.ledger.done_count()? + sink.ledger.failed_count()?,
    );
    let (tx, rx) = crossbeam_channel::bounded::<Entry>(64);
    let (resumed, decode_s) = std::thread::scope(|scope| -> Result<(u64, f64), JobError> {
        // Owned here: an early return drops it, so a feeder blocked on a full queue gets an
        // error from its send and ends, and the scope's join does not wait for ever.
        let rx = rx;
        let source = &source;
        // The ledger's reader is the feeder's alone (a SQLite connection is not shared).
        let feeder = scope.spawn(move || -> Result<u64, JobError> {
            match source {
                Some(s) => s.feed(&reader, &tx, live, (&|_| {}, 0)),
                None if !single_here => Ok(0),
                None => {
                    let id = file_id(&job.source);
                    let settled = reader.settled(&[id.as_str()])?;
                    if settled.done.contains(&id) || settled.failed.contains(&id) {
                        return Ok(u64::from(settled.done.contains(&id)));
                    }
                    let item = SourceItem {
                        id,
                        path: job.source.clone(),
                        offset_s: 0.0,
                        duration_s: None,
                        member: None,
                    };
                    let _ = tx.send(Entry::Item(item));
                    Ok(0)
                }
            }
        });
        let mut pending: Vec<Pending> = Vec::new();
        let mut done = Transcribed::default();
        let mut decode_s = 0.0;
        for entry in rx.iter() {
            let (id, path, outcome) = match entry {
                Entry::Item(item) => {
                    let t = Instant::now();
                    let outcome = segment_item(
                        job,
                        &item,
                        &mut segmenters,
                        &mut tr,
                        &mut pending,
                        &mut done,
                    );
                    decode_s += t.elapsed().as_secs_f64();
                    (item.id, item.path, outcome)
                }
                Entry::Invalid { id, reason } => {
                    (id, job.source.clone(), Err(ItemStop::Item(reason)))
                }
                Entry::Iq { id, source } => (
                    id,
                    source.path(),
                    Err(ItemStop::Item("not audio".to_string())),
                ),
            };
            match outcome {
                Ok(()) => {
                    live.item_done();
                    sink.ended.push(id);
                }
                Err(ItemStop::Job(e)) => return Err(e),
                Err(ItemStop::Item(reason)) => {
                    live.item_failed(&id, &reason);
                    // What of it was cut or transcribed already goes with it.
                    pending.retain(|p| p.item != id);
                    done.rows.retain(|r| r.0 != id);
                    done.segment_failures.retain(|f| f.0 != id);
                    sink.failures.push(Failure {
                        id,
                        source: path.display().to_string(),
                        reason,
                    });
                }
            }
            if sink.ended.len() + sink.failures.len() >= job.part_items {
                tr.flush(&mut pending, &mut done);
                tr.lost()?;
                sink.write_part(&mut done, live)?;
            }
        }
        tr.flush(&mut pending, &mut done);
        tr.lost()?;
        sink.write_part(&mut done, live)?;
        let resumed = feeder
            .join()
            .map_err(|_| JobError::Internal("the item feeder panicked".into()))??;
        Ok((resumed, decode_s))
    })?;
    let ledger = &sink.ledger;
    let mut failures = crate::report::first_failures(ledger)?;
    // Segments that could not be transcribed, of items done all the same (their other
    // segments written): listed, not counted as failed items.
    let room = crate::report::REPORT_FAILURES.saturating_sub(failures.len());
    failures.extend(sink.segment_failures.drain(..).take(room));
    let wall = started.elapsed().as_secs_f64();
    let report = Report {
        spec_id,
        precision: "f32".into(),
        shard_index: job.shard_index,
        shard_count: job.shard_count,
        items_total,
        items_ok: ledger.done_count()?,
        items_failed: ledger.failed_count()?,
        items_resumed: resumed,
        rows: sink.rows_written,
        parts: sink.parts_written,
        part_bytes: sink.bytes_written,
        compression_ratio: 0.0,
        audio_seconds: sink.seconds_written,
        wall_seconds: wall,
        real_time_factor: sink.seconds_written / wall.max(1e-9),
        core_utilisation: crate::host::core_utilisation(cpu_at_start, wall),
        stages: StageTimes {
            decode_s: (decode_s - tr.busy_s).max(0.0),
            compute_s: tr.busy_s,
            write_s: sink.write_s,
            ..StageTimes::default()
        },
        devices: vec![DeviceReport {
            device: "cpu".into(),
            items: sink.rows_written,
            batches: tr.batches,
            ..DeviceReport::default()
        }],
        device_choice: None,
        model: None,
        peak_rss_mb: peak_rss_mb(),
        failures,
    };
    finish_output(&layout, &report, live.is_canceled())?;
    Ok(JobOutcome::Finished(report))
}

/// A file's id as a folder source gives it: its name.
fn file_id(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// A NeMo (.jsonl, .json, .ndjson) or CSV manifest, by its extension.
pub fn is_manifest(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("jsonl" | "json" | "ndjson" | "csv")
    )
}

/// A confined job's (the service's) model folder: beneath the roots, and none of its files a
/// symlink out of them. onnxruntime opens the model files by path after this check, as an
/// extract job's model is opened after the service resolved it beneath the roots.
fn confine_model(roots: &sonograph_io::Roots, dir: &Path) -> Result<(), JobError> {
    if !roots.is_confined() {
        return Ok(());
    }
    let outside = |path: &Path, e: std::io::Error| {
        JobError::Config(format!("model: {}: {e}", path.display()))
    };
    roots.check(dir).map_err(|e| outside(dir, e))?;
    let entries = std::fs::read_dir(dir).map_err(|e| outside(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| outside(dir, e))?.path();
        roots.check(&path).map_err(|e| outside(&path, e))?;
    }
    Ok(())
}

/// Cuts `item` into segments (streamed), running the model on each batch that fills; an
/// error is the item's (it names the file).
fn segment_item(
    job: &TranscribeJob,
    item: &SourceItem,
    segmenters: &mut Segmenters,
    tr: &mut Transcriber,
    pending: &mut Vec<Pending>,
    done: &mut Transcribed,
) -> Result<(), ItemStop> {
    let opts = DecodeOptions {
        mix: job.channel.map_or(ChannelMix::Mean, ChannelMix::Select),
        limits: job.limits,
        offset_s: item.offset_s,
        duration_s: item.duration_s,
    };
    // Samples from `base` on: what a segment not yet given out may still need.
    let mut buf: Vec<f32> = Vec::new();
    let mut base = 0u64;
    let mut index = 0usize;
    let mut cut = |start: u64, end: u64, buf: &[f32], base: u64| -> Result<Pending, String> {
        // A segment never starts before what the segmenter let go (earliest_open_sample) nor
        // ends past what it was given; if one did, that is a bug, said so.
        let kept = base..base + buf.len() as u64;
        if !(kept.start <= start && start <= end && end <= kept.end) {
            return Err(format!(
                "{}: segment {start}..{end} is outside the samples kept ({kept:?}): a bug in sonograph",
                item.path.display()
            ));
        }
        let p = Pending {
            item: item.id.clone(),
            source: item.path.clone(),
            index,
            start,
            end,
            samples: buf[(start - base) as usize..(end - base) as usize].to_vec(),
        };
        index += 1;
        Ok(p)
    };
    // An item that fits the model's window is transcribed whole, whatever the mode: one
    // window of the fixed cut. (A header that understates the length is cut in windows.) The
    // reader that read the header is the fixed cut's: the item is not opened twice (an object's
    // first read, or a shard's sample, fetched again).
    let opened = AudioReader::open_item(&job.roots, item, &opts);
    let fits = opened
        .as_ref()
        .ok()
        .and_then(|r| r.expected_seconds())
        .is_some_and(|s| s <= job.window_s);
    let mode = if fits {
        SegmentMode::Fixed
    } else {
        job.segment
    };
    match mode {
        SegmentMode::Vad => {
            // The segmenter reads the item itself.
            drop(opened);
            stream_vad(
                segmenters,
                &job.roots,
                item,
                &opts,
                Some(OUT_RATE),
                |event| {
                    match event {
                        VadEvent::Samples(chunk) => buf.extend_from_slice(chunk),
                        VadEvent::Segment(s) => {
                            pending.push(cut(s.start, s.end, &buf, base)?);
                            tr.flush_full(pending, done);
                        }
                        VadEvent::Pushed(seg) => {
                            // Drop what no segment still to come can start at.
                            let keep = seg.earliest_open_sample().max(base);
                            buf.drain(..(keep - base) as usize);
                            base = keep;
                        }
                    }
                    Ok(())
                },
            )
            .map_err(|e| match e {
                VadStop::Runtime(message) => ItemStop::Job(JobError::Model(message)),
                input => ItemStop::Item(input.to_string()),
            })?;
        }
        SegmentMode::Fixed => {
            let window = (job.window_s * f64::from(OUT_RATE)).round().max(1.0) as u64;
            let mut total = 0u64;
            let reader = opened.map_err(|e| ItemStop::Item(e.to_string()))?;
            sonograph_io::stream_reader(reader, OUT_RATE, |chunk| {
                buf.extend_from_slice(chunk);
                total += chunk.len() as u64;
                while total - base >= window {
                    pending.push(cut(base, base + window, &buf, base).map_err(SinkStop)?);
                    buf.drain(..window as usize);
                    base += window;
                    tr.flush_full(pending, done);
                }
                Ok::<(), SinkStop>(())
            })
            .map_err(|e| match e {
                StreamError::Sink { source, .. } => ItemStop::Item(source.0),
                other => ItemStop::Item(other.to_string()),
            })?;
            if total > base {
                pending.push(cut(base, total, &buf, base).map_err(ItemStop::Item)?);
                tr.flush_full(pending, done);
            }
        }
    }
    Ok(())
}

/// Why an item ended without its transcripts: its own fault (a failure in the report), or
/// the job's (onnxruntime failed: the job stops, and the item runs again on resume).
enum ItemStop {
    Item(String),
    Job(JobError),
}

/// Transcripts into parts, parts into the ledger: a part's items are recorded as pending, its
/// file published (fsync, rename, fsync of the folder), then the part committed; a crash
/// anywhere leaves a part the ledger settles when the job opens again.
struct TranscriptSink {
    ledger: Ledger,
    dir: PathBuf,
    shard_index: usize,
    format: TranscriptFormat,
    next_part: Option<u32>,
    /// Items ended since the last part, in order, and those that failed.
    ended: Vec<String>,
    failures: Vec<Failure>,
    segment_failures: Vec<Failure>,
    rows_written: u64,
    parts_written: u64,
    bytes_written: u64,
    seconds_written: f64,
    write_s: f64,
}

impl TranscriptSink {
    fn new(job: &TranscribeJob, ledger: Ledger) -> Self {
        TranscriptSink {
            ledger,
            dir: job.out.clone(),
            shard_index: job.shard_index,
            format: job.format,
            next_part: None,
            ended: Vec::new(),
            failures: Vec::new(),
            segment_failures: Vec::new(),
            rows_written: 0,
            parts_written: 0,
            bytes_written: 0,
            seconds_written: 0.0,
            write_s: 0.0,
        }
    }

    /// Writes the transcripts of the items ended since the last part (all of `done`: the
    /// pending segments were run before) and records the items that failed.
    fn write_part(&mut self, done: &mut Transcribed, live: &LiveJob) -> Result<(), JobError> {
        let t = Instant::now();
        if !self.failures.is_empty() {
            let list: Vec<(&str, &str, &str)> = self
                .failures
                .iter()
                .map(|f| (f.id.as_str(), f.source.as_str(), f.reason.as_str()))
                .collect();
            self.ledger.record_failures(&list)?;
            self.failures.clear();
        }
        self.segment_failures
            .extend(done.segment_failures.drain(..).map(|f| f.1));
        if self.ended.is_empty() {
            return Ok(());
        }
        let mut per_item: HashMap<&str, (u32, f64)> = HashMap::new();
        for (item, row, ..) in &done.rows {
            let e = per_item.entry(item.as_str()).or_default();
            e.0 += 1;
            e.1 += row.end_s - row.start_s;
        }
        let mut records = Vec::new();
        for id in &self.ended {
            let (count, seconds) = per_item.get(id.as_str()).copied().unwrap_or_default();
            // An item with no speech is done with no row.
            let pieces = count.max(1);
            for piece in 0..pieces {
                records.push(PieceRecord {
                    item_id: id.clone(),
                    piece,
                    last: piece + 1 == pieces,
                    audio_seconds: if piece + 1 == pieces { seconds } else { 0.0 },
                });
            }
        }
        let part = match self.next_part {
            Some(p) => p,
            None => self.ledger.next_part()?,
        };
        let extension = match self.format {
            TranscriptFormat::Jsonl => "jsonl",
            TranscriptFormat::Parquet => "parquet",
        };
        let file = format!("part-{:05}-{part:05}.{extension}", self.shard_index);
        let path = self.dir.join(&file);
        self.ledger.begin_part(part, &file, &records)?;
        let rows = std::mem::take(&mut done.rows);
        let count = rows.len() as u64;
        // Counted live once the part is committed.
        let row_seconds: Vec<f64> = rows
            .iter()
            .map(|(_, row, ..)| row.end_s - row.start_s)
            .collect();
        match self.format {
            TranscriptFormat::Jsonl => {
                let mut text = String::new();
                for (_, row, start, end) in rows {
                    let line = serde_json::json!({
                        "id": row.id,
                        "source": row.source,
                        "start": start,
                        "end": end,
                        "start_s": row.start_s,
                        "end_s": row.end_s,
                        "text": row.text,
                        "tokens": row.tokens,
                        "timestamps": row.timestamps,
                    });
                    text.push_str(&line.to_string());
                    text.push('\n');
                }
                sonograph_io::publish::publish_bytes(&path, text.as_bytes())
                    .map_err(io_err(&path))?;
            }
            TranscriptFormat::Parquet => {
                let mut writer = TranscriptWriter::create(&path)?;
                for (_, row, ..) in rows {
                    writer.push(row)?;
                }
                writer.finish()?;
            }
        }
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        self.ledger.commit_part(part, bytes)?;
        for seconds in row_seconds {
            live.row_written(seconds);
        }
        self.next_part = Some(part + 1);
        self.rows_written += count;
        self.parts_written += 1;
        self.bytes_written += bytes;
        self.seconds_written += records.iter().map(|r| r.audio_seconds).sum::<f64>();
        self.ended.clear();
        self.write_s += t.elapsed().as_secs_f64();
        Ok(())
    }
}
