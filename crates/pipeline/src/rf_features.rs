//! `rf-features` as a dataset job: the RF features of IQ recordings (SigMF pairs, `.sigmf`
//! archives, raw files) as rows of Parquet parts, in the same output folder, ledger, shards
//! and report as a feature job. A run killed at any instant and run again ends with every
//! recording's rows exactly once; a recording that cannot be read, or is too short, is a
//! failure in the report, never the end of the job. Memory holds one group of recordings and
//! one part's rows, whatever the corpus.

use std::path::PathBuf;
use std::time::Instant;

use rayon::prelude::*;
use sonograph_io::ledger::{Ledger, LedgerReader, PieceRecord};
use sonograph_io::sigmf::{list_sources, read_source_in, IqRecording, IqSource};
use sonograph_io::table::{write_table, Column};
use sonograph_rf::features::{
    features_with, first_non_finite, sample_features, spectral_features, Psd, RfFeatures, Welch,
};
use sonograph_rf::rows::{PsdDevice, RowSpec};
use sonograph_rf::Complex32;

use crate::error::JobError;
use crate::job::JobOutcome;
use crate::layout::{finish_output, open_output, Opened, OutputLayout};
use crate::live::LiveJob;
use crate::options::IqFormat;
use crate::report::{peak_rss_mb, DeviceReport, Failure, Report, StageTimes};
use crate::writer::progress_bar;

/// The memory a part's rows may hold before it is written.
const PART_BYTES: usize = 1 << 30;

/// An `rf-features` job.
#[derive(Debug, Clone)]
pub struct RfFeaturesJob {
    /// A SigMF recording, a `.sigmf` archive, a raw IQ file, or a folder of them.
    pub source: PathBuf,
    /// The output folder (parts in it, the ledger and report under `__sonograph/`).
    pub out: PathBuf,
    pub rows: RowSpec,
    /// The sample rate of raw files (SigMF recordings carry their own).
    pub sample_rate: Option<f64>,
    /// The sample type of raw files whose extension does not say it.
    pub raw_format: Option<IqFormat>,
    /// The largest recording read, in complex samples; a larger one fails.
    pub max_samples: u64,
    /// Threads (0: one per core).
    pub workers: usize,
    pub shard_index: usize,
    pub shard_count: usize,
    /// Rows per Parquet part (a recording's rows never span two parts).
    pub part_rows: usize,
    /// A progress bar on stderr.
    pub progress: bool,
    /// Where its files may be read and written: anywhere from the command line and Python;
    /// beneath the data roots for the service, which checks the source and the output
    /// folder there and opens every recording beneath them (a symlink out of them is refused).
    pub roots: sonograph_io::Roots,
    /// The most bytes of samples read at once, counting each source as `max_samples` of
    /// them (an archive's recordings are read together, each up to `max_samples`): fewer
    /// sources are read together under it, one at least. `None`: a group of up to 16 (the
    /// service sets one).
    pub max_group_bytes: Option<u64>,
}

impl RfFeaturesJob {
    /// A job with the default settings (every recording whole, no PSD column, one shard).
    pub fn new(source: PathBuf, out: PathBuf) -> Self {
        RfFeaturesJob {
            source,
            out,
            rows: RowSpec::default(),
            sample_rate: None,
            raw_format: None,
            max_samples: sonograph_io::sigmf::DEFAULT_MAX_SAMPLES,
            workers: 0,
            shard_index: 0,
            shard_count: 1,
            part_rows: crate::config::defaults::RF_ROWS_PER_PART,
            progress: false,
            roots: sonograph_io::Roots::anywhere(),
            max_group_bytes: None,
        }
    }

    pub(crate) fn check(&self) -> Result<(), JobError> {
        self.rows
            .validate()
            .map_err(|e| JobError::Config(e.to_string()))?;
        if let Some(fs) = self.sample_rate {
            crate::config::within("sample-rate", fs, crate::config::bounds::IQ_SAMPLE_RATE)?;
        }
        // A part's rows are held until it is written, each with its PSD.
        crate::config::within("rows-per-part", self.part_rows, 1..=1_000_000)?;
        let row_bytes = 512
            + if self.rows.psd {
                4 * self.rows.features.welch.nperseg
            } else {
                0
            };
        if self.part_rows.saturating_mul(row_bytes) > PART_BYTES {
            return Err(JobError::Config(format!(
                "rows-per-part {}: a part of rows with a PSD of {} bins holds {:.1} GiB, over \
                 the {} GiB a part may",
                self.part_rows,
                self.rows.features.welch.nperseg,
                (self.part_rows * row_bytes) as f64 / f64::from(1u32 << 30),
                PART_BYTES >> 30
            )));
        }
        crate::config::within(
            "max-samples",
            self.max_samples,
            crate::config::bounds::IQ_MAX_SAMPLES,
        )?;
        crate::config::within(
            "workers",
            self.workers,
            0..=*crate::config::bounds::WORKERS.end(),
        )?;
        crate::config::check_shard(self.shard_index, self.shard_count)
    }

    /// What every run on the output folder must share: other settings give other rows.
    fn shape(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "rf-features",
            "spec_id": self.rows.spec_id(),
            "rows": self.rows,
            "shard_count": self.shard_count,
            "sample_rate": self.sample_rate,
            "raw_format": self.raw_format,
        })
    }
}

/// One row: a recording, or a window of one.
struct Row {
    id: String,
    source: String,
    label: String,
    truth_snr_db: f64,
    window: u64,
    start: u64,
    samples: u64,
    sample_rate: f64,
    features: RfFeatures,
    psd: Vec<f32>,
}

/// A window to compute: the source (in the group), the recording in it, its number, its
/// first sample and length.
#[derive(Clone, Copy)]
struct Window {
    source: usize,
    recording: usize,
    number: u64,
    start: usize,
    len: usize,
}

impl Window {
    fn samples<'a>(&self, read: &'a [Result<Vec<IqRecording>, String>]) -> &'a [Complex32] {
        let rec = &read[self.source]
            .as_ref()
            .expect("windows of read sources only")[self.recording];
        &rec.samples[self.start..self.start + self.len]
    }
}

/// Runs the job, the Welch PSDs on `device` where one is given (on the CPU from the first
/// error of it on).
pub fn run_rf_features(
    job: &RfFeaturesJob,
    device: Option<Box<dyn PsdDevice>>,
) -> Result<JobOutcome, JobError> {
    run_rf_features_live(job, device, &LiveJob::new())
}

/// [`run_rf_features`], its progress counted in `live` as it goes (recordings done and
/// failed, rows, seconds of signal), for a metrics server to read.
pub fn run_rf_features_live(
    job: &RfFeaturesJob,
    device: Option<Box<dyn PsdDevice>>,
    live: &LiveJob,
) -> Result<JobOutcome, JobError> {
    let outcome = run(job, device, live);
    live.set_finished();
    outcome
}

fn run(
    job: &RfFeaturesJob,
    device: Option<Box<dyn PsdDevice>>,
    live: &LiveJob,
) -> Result<JobOutcome, JobError> {
    job.check()?;
    let started = Instant::now();
    let cpu_at_start = crate::host::process_cpu_seconds();
    let raw = job.raw_format.map(IqFormat::datatype);
    // The names are listed wherever the source is (a walk that follows no symlinked folder);
    // every file is opened beneath the roots when it is read.
    job.roots
        .check(&job.source)
        .map_err(|e| JobError::Config(format!("source: {e}")))?;
    let all = list_sources(&job.source, raw).map_err(|e| JobError::Config(e.to_string()))?;
    if all.is_empty() {
        return Err(JobError::Config(format!(
            "{}: no IQ recordings found",
            job.source.display()
        )));
    }
    if job.sample_rate.is_none() {
        if let Some(s) = all.iter().find(|s| matches!(s, IqSource::Raw { .. })) {
            return Err(JobError::Config(format!(
                "{}: a raw IQ file needs --sample-rate",
                s.path().display()
            )));
        }
    }
    if let Some(pair) = all.windows(2).find(|p| p[0].id() == p[1].id()) {
        return Err(JobError::Config(format!(
            "{} and {}: two recordings of one id {:?}; rename one",
            pair[0].path().display(),
            pair[1].path().display(),
            pair[0].id()
        )));
    }
    let range = sonograph_io::manifest::shard_range(all.len(), job.shard_index, job.shard_count);
    let sources = &all[range];
    let spec_id = job.rows.spec_id();
    let layout = OutputLayout::new(&job.out, job.shard_index, job.shard_count);
    let (ledger, _lock) = match open_output(
        &layout,
        &job.roots,
        &job.shape(),
        &spec_id,
        job.shard_index,
        job.shard_count,
    )? {
        Opened::Done(report) => return Ok(JobOutcome::AlreadyDone(*report)),
        Opened::Run { ledger, lock } => (ledger, lock),
    };
    let reader = LedgerReader::open(&layout.ledger)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(job.workers)
        .build()
        .map_err(|e| JobError::Internal(format!("cannot start the thread pool: {e}")))?;
    let mut state = RunState {
        device,
        cpu: DeviceReport {
            device: "cpu".into(),
            ..DeviceReport::default()
        },
        gpu: None,
        stages: StageTimes::default(),
    };
    if let Some(d) = &state.device {
        state.gpu = Some(DeviceReport {
            device: d.name(),
            ..DeviceReport::default()
        });
    }
    let mut sink = PartSink::new(job, ledger, &spec_id)?;
    let bar = progress_bar(job.progress, sources.len() as u64);
    let (mut resumed, mut settled_before) = (0u64, 0u64);
    let group = group_size(job, pool.current_num_threads());
    for chunk in sources.chunks(group) {
        if live.is_canceled() {
            break; // what is done is written below; the rest waits for the job's resume
        }
        let ids: Vec<&str> = chunk.iter().map(|s| s.id()).collect();
        let settled = reader.settled(&ids)?;
        let todo: Vec<&IqSource> = chunk
            .iter()
            .filter(|s| !settled.done.contains(s.id()) && !settled.failed.contains(s.id()))
            .collect();
        resumed += chunk
            .iter()
            .filter(|s| settled.done.contains(s.id()))
            .count() as u64;
        // Settled by an earlier run, done or failed, as extract counts them for its progress.
        settled_before += (chunk.len() - todo.len()) as u64;
        live.set_items(sources.len() as u64, settled_before);
        bar.inc((chunk.len() - todo.len()) as u64);
        let results = pool.install(|| state.rows_of(job, &todo));
        let mut failures = Vec::new();
        for (source, result) in todo.iter().zip(results) {
            match result {
                Ok((rows, seconds)) => {
                    for _ in 0..rows.len() {
                        live.row_written(seconds / rows.len() as f64);
                    }
                    live.item_done();
                    sink.push(source.id(), rows, seconds);
                    // Parts close at the same recordings whatever the threads or groups.
                    if sink.rows.len() >= job.part_rows {
                        sink.flush(&mut state.stages)?;
                    }
                }
                Err(reason) => {
                    live.item_failed(source.id(), &reason);
                    failures.push(Failure {
                        id: source.id().to_string(),
                        source: source.path().display().to_string(),
                        reason,
                    })
                }
            }
            bar.inc(1);
        }
        sink.record_failures(&failures)?;
    }
    sink.flush(&mut state.stages)?;
    bar.finish_and_clear();
    let ledger = &sink.ledger;
    let failures = crate::report::first_failures(ledger)?;
    let wall = started.elapsed().as_secs_f64();
    let mut devices = vec![state.cpu];
    devices.extend(state.gpu);
    devices.retain(|d| d.items > 0 || d.retired || d.device != "cpu");
    let report = Report {
        spec_id,
        precision: "f64".into(),
        shard_index: job.shard_index,
        shard_count: job.shard_count,
        items_total: sources.len() as u64,
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
        stages: state.stages,
        devices,
        device_choice: None,
        model: None,
        peak_rss_mb: peak_rss_mb(),
        failures,
    };
    finish_output(&layout, &report, live.is_canceled())?;
    Ok(JobOutcome::Finished(report))
}

/// Sources read at once: enough to keep every thread busy (windows of one recording spread
/// over all of them), few enough that memory holds one group: at most 16, and within
/// `max_group_bytes` where it is set.
fn group_size(job: &RfFeaturesJob, threads: usize) -> usize {
    let group = (threads * 4).clamp(4, 16);
    job.max_group_bytes.map_or(group, |budget| {
        let each = job.max_samples.saturating_mul(8).max(1);
        group.min(usize::try_from(budget / each).unwrap_or(usize::MAX).max(1))
    })
}

/// What changes as the job goes: where the PSDs run, what each device did, stage times.
struct RunState {
    device: Option<Box<dyn PsdDevice>>,
    cpu: DeviceReport,
    gpu: Option<DeviceReport>,
    stages: StageTimes,
}

impl RunState {
    /// The rows of each source and its seconds of signal, or why it failed (on the current
    /// rayon pool).
    fn rows_of(
        &mut self,
        job: &RfFeaturesJob,
        todo: &[&IqSource],
    ) -> Vec<Result<(Vec<Row>, f64), String>> {
        let read: Vec<(Result<Vec<IqRecording>, String>, f64)> = todo
            .par_iter()
            .map(|s| {
                timed(|| {
                    read_source_in(&job.roots, s, job.sample_rate, job.max_samples)
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        self.stages.decode_s += read.iter().map(|r| r.1).sum::<f64>();
        let mut read: Vec<Result<Vec<IqRecording>, String>> =
            read.into_iter().map(|r| r.0).collect();
        // Every window of every recording read, in order; a recording too short fails its
        // source.
        let mut windows = Vec::new();
        for (source, result) in read.iter_mut().enumerate() {
            let Ok(recordings) = result else { continue };
            let mut mine = Vec::new();
            let cut = recordings
                .iter()
                .enumerate()
                .try_for_each(|(recording, rec)| {
                    let list = job
                        .rows
                        .windows(rec.samples.len(), rec.sample_rate)
                        .map_err(|e| format!("{}: {e}", rec.path.display()))?;
                    for (number, (start, len)) in list.into_iter().enumerate() {
                        mine.push(Window {
                            source,
                            recording,
                            number: number as u64,
                            start,
                            len,
                        });
                    }
                    Ok::<_, String>(())
                });
            match cut {
                Ok(()) => windows.extend(mine),
                Err(reason) => *result = Err(reason),
            }
        }
        let computed = self.compute(job, &read, &windows);
        // Back to the sources: a window that failed fails its source.
        let mut out: Vec<Result<(Vec<Row>, f64), String>> = read
            .iter()
            .map(|r| match r {
                Ok(recs) => Ok((
                    Vec::new(),
                    recs.iter()
                        .map(|rec| rec.samples.len() as f64 / rec.sample_rate)
                        .sum(),
                )),
                Err(reason) => Err(reason.clone()),
            })
            .collect();
        for (w, result) in windows.iter().zip(computed) {
            let Ok((rows, _)) = &mut out[w.source] else {
                continue;
            };
            let rec = &read[w.source].as_ref().expect("read")[w.recording];
            match result {
                Ok((features, psd)) => rows.push(row(job, rec, w, features, psd)),
                Err(reason) => out[w.source] = Err(format!("{}: {reason}", rec.path.display())),
            }
        }
        out
    }

    /// The features and PSD of each window: the PSDs on the device while it works, the rest
    /// on the CPU threads.
    fn compute(
        &mut self,
        job: &RfFeaturesJob,
        read: &[Result<Vec<IqRecording>, String>],
        windows: &[Window],
    ) -> Vec<Result<(RfFeatures, Vec<f64>), String>> {
        let cfg = &job.rows.features;
        let rate = |w: &Window| read[w.source].as_ref().expect("read")[w.recording].sample_rate;
        if let (Some(device), false) = (self.device.as_mut(), windows.is_empty()) {
            let slices: Vec<&[Complex32]> = windows.iter().map(|w| w.samples(read)).collect();
            let rates: Vec<f64> = windows.iter().map(rate).collect();
            let t = Instant::now();
            let answer = device.welch(&slices, &rates, &cfg.welch).and_then(|psds| {
                if psds.len() == slices.len() {
                    Ok(psds)
                } else {
                    Err(format!("{} PSDs for {} windows", psds.len(), slices.len()))
                }
            });
            match answer {
                Ok(psds) => {
                    self.stages.compute_s += t.elapsed().as_secs_f64();
                    let report = self.gpu.as_mut().expect("a device has its report");
                    report.items += windows.len() as u64;
                    report.batches += 1;
                    let out: Vec<_> = slices
                        .par_iter()
                        .zip(&rates)
                        .zip(psds)
                        .map(|((iq, &fs), psd)| timed(|| on_psd(iq, fs, psd, job)))
                        .collect();
                    return self.busy(out);
                }
                Err(e) => {
                    // The rest of the job runs on the CPU; nothing is lost.
                    let name = device.name();
                    tracing::warn!("{name}: {e}; the rest of the job runs on the CPU");
                    let report = self.gpu.as_mut().expect("a device has its report");
                    report.alerts.push(format!("{name}: {e}; moved to the CPU"));
                    report.retired = true;
                    self.device = None;
                }
            }
        }
        self.cpu.items += windows.len() as u64;
        self.cpu.batches += u64::from(!windows.is_empty());
        let out: Vec<_> = windows
            .par_iter()
            .map_init(
                || Welch::new(&cfg.welch).expect("validated by the job"),
                |welch, w| {
                    timed(|| {
                        features_with(welch, w.samples(read), rate(w), cfg)
                            .map(|(f, psd)| (f, psd.density))
                            .map_err(|e| e.to_string())
                    })
                },
            )
            .collect();
        self.busy(out)
    }

    /// The results, their busy seconds added to the compute stage's.
    fn busy<T>(&mut self, timed: Vec<(T, f64)>) -> Vec<T> {
        self.stages.compute_s += timed.iter().map(|t| t.1).sum::<f64>();
        timed.into_iter().map(|t| t.0).collect()
    }
}

/// `f`'s result and the seconds it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64())
}

/// The features of a window whose PSD a device computed.
fn on_psd(
    iq: &[Complex32],
    fs: f64,
    psd: Psd,
    job: &RfFeaturesJob,
) -> Result<(RfFeatures, Vec<f64>), String> {
    if let Some(i) = first_non_finite(iq) {
        return Err(format!("sample {i} is not finite"));
    }
    let cfg = &job.rows.features;
    let mut f = RfFeatures::default();
    sample_features(iq, fs, cfg, &mut f);
    spectral_features(&psd, cfg.obw_fraction, &mut f);
    Ok((f, psd.density))
}

fn row(
    job: &RfFeaturesJob,
    rec: &IqRecording,
    w: &Window,
    features: RfFeatures,
    psd: Vec<f64>,
) -> Row {
    let annotation = rec.meta.as_ref().and_then(|m| m.annotations.first());
    Row {
        id: rec.id.clone(),
        source: rec.path.display().to_string(),
        label: annotation.and_then(|a| a.label.clone()).unwrap_or_default(),
        truth_snr_db: annotation
            .and_then(|a| a.extra.get("sonograph:snr_db"))
            .and_then(|v| v.as_f64())
            .unwrap_or(f64::NAN),
        window: w.number,
        start: w.start as u64,
        samples: w.len as u64,
        sample_rate: rec.sample_rate,
        features,
        psd: if job.rows.psd {
            psd.iter().map(|&v| v as f32).collect()
        } else {
            Vec::new()
        },
    }
}

/// Rows into Parquet parts, parts into the ledger: a part's rows are recorded as pending,
/// its file published (fsync, rename, fsync of the folder), then the part committed. A crash
/// anywhere leaves a part the ledger settles when the job opens again.
struct PartSink {
    ledger: Ledger,
    dir: PathBuf,
    shard_index: usize,
    metadata: [(String, String); 2],
    psd: bool,
    next_part: u32,
    rows: Vec<Row>,
    records: Vec<PieceRecord>,
    rows_written: u64,
    parts_written: u64,
    bytes_written: u64,
    seconds_written: f64,
}

impl PartSink {
    fn new(job: &RfFeaturesJob, ledger: Ledger, spec_id: &str) -> Result<Self, JobError> {
        let spec =
            serde_json::to_string(&job.rows).map_err(|e| JobError::Internal(e.to_string()))?;
        Ok(PartSink {
            next_part: ledger.next_part()?,
            ledger,
            dir: job.out.clone(),
            shard_index: job.shard_index,
            metadata: [
                ("sonograph.rf_features".into(), spec),
                ("sonograph.spec_id".into(), spec_id.into()),
            ],
            psd: job.rows.psd,
            rows: Vec::new(),
            records: Vec::new(),
            rows_written: 0,
            parts_written: 0,
            bytes_written: 0,
            seconds_written: 0.0,
        })
    }

    /// A source's rows (none where no window fits it: it is done all the same).
    fn push(&mut self, id: &str, rows: Vec<Row>, seconds: f64) {
        let count = rows.len().max(1);
        for piece in 0..count {
            self.records.push(PieceRecord {
                item_id: id.to_string(),
                piece: piece as u32,
                last: piece + 1 == count,
                audio_seconds: if piece + 1 == count { seconds } else { 0.0 },
            });
        }
        self.rows.extend(rows);
    }

    fn record_failures(&self, failures: &[Failure]) -> Result<(), JobError> {
        let list: Vec<(&str, &str, &str)> = failures
            .iter()
            .map(|f| (f.id.as_str(), f.source.as_str(), f.reason.as_str()))
            .collect();
        if !list.is_empty() {
            self.ledger.record_failures(&list)?;
        }
        Ok(())
    }

    fn flush(&mut self, stages: &mut StageTimes) -> Result<(), JobError> {
        if self.records.is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        let part = self.next_part;
        let file = format!("part-{:05}-{part:05}.parquet", self.shard_index);
        let path = self.dir.join(&file);
        self.ledger.begin_part(part, &file, &self.records)?;
        let bytes = write_table(&path, &columns(&self.rows, self.psd), &self.metadata)?;
        self.ledger.commit_part(part, bytes)?;
        self.next_part += 1;
        self.rows_written += self.rows.len() as u64;
        self.parts_written += 1;
        self.bytes_written += bytes;
        self.seconds_written += self.records.iter().map(|r| r.audio_seconds).sum::<f64>();
        self.rows.clear();
        self.records.clear();
        stages.write_s += t.elapsed().as_secs_f64();
        Ok(())
    }
}

/// A part's columns: the row's identity, then every feature (docs/rf.md), then the PSD.
fn columns(rows: &[Row], psd: bool) -> Vec<(String, Column)> {
    let text = |f: &dyn Fn(&Row) -> String| Column::Utf8(rows.iter().map(f).collect());
    let whole = |f: &dyn Fn(&Row) -> u64| Column::U64(rows.iter().map(f).collect());
    let real = |f: &dyn Fn(&Row) -> f64| Column::F64(rows.iter().map(f).collect());
    let mut columns = vec![
        ("id".to_string(), text(&|r| r.id.clone())),
        ("source".to_string(), text(&|r| r.source.clone())),
        ("label".to_string(), text(&|r| r.label.clone())),
        ("truth_snr_db".to_string(), real(&|r| r.truth_snr_db)),
        ("window".to_string(), whole(&|r| r.window)),
        ("start_sample".to_string(), whole(&|r| r.start)),
        ("num_samples".to_string(), whole(&|r| r.samples)),
        ("sample_rate".to_string(), real(&|r| r.sample_rate)),
    ];
    let values: Vec<Vec<f64>> = rows.iter().map(|r| r.features.values()).collect();
    for (i, name) in RfFeatures::NAMES.iter().enumerate() {
        columns.push((
            name.to_string(),
            Column::F64(values.iter().map(|v| v[i]).collect()),
        ));
    }
    if psd {
        columns.push((
            "psd".to_string(),
            Column::ListF32(rows.iter().map(|r| r.psd.clone()).collect()),
        ));
    }
    columns
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonograph_io::sigmf::{write_sigmf, DataType, WriteType};
    use sonograph_rf::sigmf::SigmfMeta;

    /// A canceled job stops before its next group of recordings, says how many are left,
    /// and the same job run again does them all.
    #[test]
    fn a_canceled_job_stops_and_resumes() {
        let dir = std::env::temp_dir().join(format!("sono-rf-cancel-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("iq")).unwrap();
        let iq: Vec<Complex32> = (0..1024)
            .map(|i| Complex32::new((0.01 * i as f32).cos(), (0.02 * i as f32).sin()))
            .collect();
        for i in 0..3 {
            let base = dir.join(format!("iq/r{i}"));
            let meta = SigmfMeta::new(DataType::Cf32Le, 1e6);
            write_sigmf(&base, &iq, WriteType::Cf32, meta).unwrap();
        }
        let job = RfFeaturesJob::new(dir.join("iq"), dir.join("out"));
        let canceled = LiveJob::new();
        canceled.cancel();
        match run_rf_features_live(&job, None, &canceled) {
            Err(JobError::Canceled { undone }) => assert_eq!(undone, 3),
            other => panic!("{:?}", other.map(|o| o.report().items_ok)),
        }
        let outcome = run_rf_features(&job, None).unwrap();
        let report = outcome.report();
        assert_eq!((report.items_ok, report.items_resumed), (3, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A byte budget reads fewer sources at once, one at least.
    #[test]
    fn a_group_holds_what_its_budget_allows() {
        let mut job = RfFeaturesJob::new("iq".into(), "out".into());
        job.max_samples = 1 << 27;
        assert_eq!(group_size(&job, 16), 16);
        assert_eq!(group_size(&job, 1), 4);
        job.max_group_bytes = Some(4 << 30);
        assert_eq!(group_size(&job, 16), 4);
        job.max_group_bytes = Some(1 << 20);
        assert_eq!(group_size(&job, 16), 1);
    }
}
