//! The one writer: rows into Parquet parts, parts into the ledger.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use sonograph_dsp::FeatureSpec;
use sonograph_io::ledger::{Ledger, PieceRecord};
use sonograph_io::parquet::{ClosedPart, Dtype, FeatureRow, PartMeta, PartWriter};
use sonograph_io::wds_part::TarPartWriter;

use crate::part_format::PartFormat;

use crate::bucket::BucketOutput;
use crate::error::JobError;
use crate::live::{LiveJob, Queue, Stage};
use crate::report::Failure;

/// Failures recorded in the ledger per transaction.
const FAILURES_PER_TRANSACTION: usize = 256;

/// What an item done without a row counts for towards closing a part: 1,024 such items fill
/// a part of the default 64 MiB.
const EMPTY_ITEM_BYTES: usize = 64 << 10;

/// What the other stages send to the writer.
#[derive(Debug)]
pub(crate) enum WriterMsg {
    Row(Box<RowMsg>),
    /// An item failed, and no row of it can follow (a whole item; or a long item streamed by
    /// one decoder, whose rows came before).
    Failed(Failure),
    /// An item failed while pieces of it may still be on their way (pieces of a long item run
    /// on several executors in any order): the writer remembers it, to drop them.
    FailedPiece(Failure),
    /// An item done without a row (no speech in it, with `--vad`): recorded in the ledger with
    /// the next part, as done.
    Empty {
        id: String,
    },
    /// The text members of an item's WebDataset sample (JSON), sent by its decoder before any
    /// of its rows: every row of the item carries them.
    Sample {
        id: String,
        text: String,
    },
}

/// A row of features on its way to the writer: piece `piece` of its item, the item's last.
#[derive(Debug)]
pub struct RowMsg {
    pub row: FeatureRow,
    pub piece: u32,
    pub last: bool,
}

/// The row of `frames` frames of `spec`'s features of item `id` (or of its piece), from
/// `offset_s` in its file and `duration_s` long: the one shape every stage that computes
/// features (an executor, a decode worker) hands on.
pub(crate) fn feature_row(
    spec: &FeatureSpec,
    id: String,
    source: String,
    offset_s: f64,
    duration_s: f64,
    frames: usize,
    features: Vec<f32>,
) -> FeatureRow {
    FeatureRow {
        id,
        source,
        offset_s,
        duration_s,
        sample_rate: spec.sample_rate,
        num_frames: frames as u32,
        num_bins: spec.n_bins() as u32,
        features,
        model: None,
        sample: None,
    }
}

/// Seconds of a whole item of `values` samples at `spec`'s rate (IQ samples are two values).
pub(crate) fn item_seconds(spec: &FeatureSpec, values: usize) -> f64 {
    let mut samples = values / spec.values_per_sample();
    if spec.is_fixed_length() {
        // The audio the row's features hold: the rest was cut (padding holds none).
        samples = samples.min(spec.cut_samples());
    }
    samples as f64 / f64::from(spec.sample_rate)
}

pub(crate) struct Writer {
    pub parts_dir: PathBuf,
    pub shard_index: usize,
    pub ledger: Ledger,
    pub dtype: Dtype,
    pub meta: PartMeta,
    pub part_bytes: usize,
    /// Row groups a part encodes at once (the job's workers, at most 8).
    encoders: usize,
    pub next_part: u32,
    /// Rows committed by earlier runs of items not done yet: never written twice. (Done
    /// items never come back: the source stage leaves them out.)
    pub committed: HashSet<(String, u32)>,
    /// Pieces of long items run on several executors at once and arrive in any order. An
    /// item's last piece marks it done in the ledger, so it is written only after all the
    /// others: per item, the pieces written so far and a last piece that came early.
    pieces: HashMap<String, (u32, Option<Box<RowMsg>>)>,
    /// Long items that failed in this run while pieces of theirs were still on their way: a
    /// piece that comes later is not written, and is not their end. (Whole items are not kept:
    /// memory grows with failed long items only.)
    failed: HashSet<String>,
    /// Failures not yet in the ledger (recorded in batches).
    unrecorded: Vec<Failure>,
    /// The samples of the items in flight whose rows carry one, until their last row.
    samples: HashMap<String, String>,
    /// The part being written, its file name, and its rows as the ledger will record them.
    open: Option<(Part, String)>,
    format: PartFormat,
    /// Where each part is uploaded before the ledger commits it (an output in object storage).
    bucket: Option<BucketOutput>,
    /// The part being uploaded while the next one is written (one at a time).
    uploading: Option<Upload>,
    records: Vec<PieceRecord>,
    bytes: usize,
    pub stats: WriterStats,
}

/// A part in the ledger as pending and on its way to the bucket, from a thread of its own:
/// the ledger commits it once the bucket holds it. A crash before then leaves it pending
/// with its local file, which the next run commits and uploads again.
struct Upload {
    part: u32,
    size: u64,
    rows: u64,
    local: PathBuf,
    done: std::thread::JoinHandle<Result<(), JobError>>,
}

#[derive(Default)]
pub(crate) struct WriterStats {
    pub items_ok: u64,
    pub items_failed: u64,
    pub rows: u64,
    pub parts: u64,
    pub audio_seconds: f64,
    pub write_s: f64,
    /// The features as stored values (f32 or f16), and the parts they went into.
    pub feature_bytes: u64,
    pub part_bytes: u64,
}

impl Writer {
    #[allow(clippy::too_many_arguments)]
    /// Parts encode up to `encoders` row groups at once (by default one per core, at most 8).
    pub fn with_encoders(mut self, encoders: usize) -> Self {
        self.encoders = encoders;
        self
    }

    /// Parts of `format` (Parquet by default).
    pub fn with_format(mut self, format: PartFormat) -> Self {
        self.format = format;
        self
    }

    /// Uploads each part to `bucket` before the ledger commits it, and then removes its local
    /// copy. A part uploads while the next is written (the writer waits only for the one
    /// before, when it has the next to send).
    pub(crate) fn with_bucket(mut self, bucket: Option<BucketOutput>) -> Self {
        self.bucket = bucket;
        self
    }

    pub fn new(
        parts_dir: PathBuf,
        shard_index: usize,
        ledger: Ledger,
        dtype: Dtype,
        meta: PartMeta,
        part_bytes: usize,
    ) -> Result<Self, JobError> {
        let next_part = ledger.next_part()?;
        let committed = ledger.partial_pieces()?;
        Ok(Writer {
            parts_dir,
            shard_index,
            ledger,
            dtype,
            meta,
            part_bytes,
            encoders: sonograph_io::parquet::default_encoders(),
            next_part,
            committed,
            pieces: HashMap::new(),
            failed: HashSet::new(),
            unrecorded: Vec::new(),
            samples: HashMap::new(),
            open: None,
            format: PartFormat::Parquet,
            bucket: None,
            uploading: None,
            records: Vec::new(),
            bytes: 0,
            stats: WriterStats::default(),
        })
    }

    /// An item failed: its pieces and sample dropped, its failure recorded with the next
    /// batch of failures.
    fn fail(&mut self, f: Failure) -> Result<(), JobError> {
        self.stats.items_failed += 1;
        self.pieces.remove(&f.id);
        self.samples.remove(&f.id);
        self.unrecorded.push(f);
        if self.unrecorded.len() >= FAILURES_PER_TRANSACTION {
            self.record_failures()?;
        }
        Ok(())
    }

    pub fn handle(&mut self, msg: WriterMsg) -> Result<(), JobError> {
        match msg {
            WriterMsg::Failed(f) | WriterMsg::FailedPiece(f) if self.failed.contains(&f.id) => {
                // Another piece of an item already failed: recorded once.
                let _ = f;
            }
            WriterMsg::Failed(f) => self.fail(f)?,
            WriterMsg::FailedPiece(f) => {
                // Remembered for the rest of the run (only failed long items are).
                self.failed.insert(f.id.clone());
                self.fail(f)?;
            }
            WriterMsg::Sample { id, text } => {
                self.samples.insert(id, text);
            }
            WriterMsg::Empty { id } => {
                self.samples.remove(&id);
                self.stats.items_ok += 1;
                self.records.push(PieceRecord {
                    item_id: id,
                    piece: 0,
                    last: true,
                    audio_seconds: 0.0,
                });
                // A part carries the record into the ledger, even one with no row; each such
                // record counts as some bytes of it, so that a run of silent items still
                // reaches the ledger part by part (not only at the end of the job).
                self.open_part()?;
                self.bytes += EMPTY_ITEM_BYTES;
                if self.bytes >= self.part_bytes {
                    self.flush()?;
                }
            }
            WriterMsg::Row(m) => {
                if self.failed.contains(&m.row.id) {
                    // The item failed: no more of it is written, and it is not done.
                    return Ok(());
                }
                let written = self.pieces.get(&m.row.id).map_or(0, |p| p.0);
                if m.last && written < m.piece {
                    let id = m.row.id.clone();
                    self.pieces.entry(id).or_default().1 = Some(m);
                    return Ok(());
                }
                let id = m.row.id.clone();
                let last = m.last;
                self.write_row(*m)?;
                if last {
                    self.pieces.remove(&id);
                    return Ok(());
                }
                let entry = self.pieces.entry(id.clone()).or_default();
                entry.0 += 1;
                if entry.1.as_ref().is_some_and(|held| held.piece == entry.0) {
                    let held = entry.1.take().expect("checked above");
                    self.pieces.remove(&id);
                    self.write_row(*held)?;
                }
            }
        }
        Ok(())
    }

    /// Pieces that never got written: the last pieces of items whose other pieces did not all
    /// arrive (only a job that stops early leaves any; their items are retried on resume).
    pub fn pieces_held(&self) -> usize {
        self.pieces.values().filter(|p| p.1.is_some()).count()
    }

    fn write_row(&mut self, m: RowMsg) -> Result<(), JobError> {
        let RowMsg {
            mut row,
            piece,
            last,
        } = m;
        row.sample = if last {
            self.samples.remove(&row.id)
        } else {
            self.samples.get(&row.id).cloned()
        };
        if last {
            self.stats.items_ok += 1;
        }
        if self.committed.contains(&(row.id.clone(), piece)) {
            // Written by an earlier run that died before finishing this item.
            return Ok(());
        }
        self.stats.audio_seconds += row.duration_s;
        self.stats.feature_bytes += (row.values() * self.dtype.bytes()) as u64;
        let t = Instant::now();
        self.bytes += row.values() * 4
            + row.id.len()
            + row.source.len()
            + row.sample.as_ref().map_or(0, String::len)
            + 64;
        self.records.push(PieceRecord {
            item_id: row.id.clone(),
            piece,
            last,
            audio_seconds: row.duration_s,
        });
        self.open_part()?.push(row)?;
        // An upload done is committed now, and a failed one fails the job now, rather than
        // after a whole part more.
        if self
            .uploading
            .as_ref()
            .is_some_and(|u| u.done.is_finished())
        {
            self.settle_upload()?;
        }
        self.stats.write_s += t.elapsed().as_secs_f64();
        if self.bytes >= self.part_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// The part being written, begun if none is.
    fn open_part(&mut self) -> Result<&mut Part, JobError> {
        if self.open.is_none() {
            let file = format!(
                "part-{:05}-{:05}.{}",
                self.shard_index,
                self.next_part,
                self.format.extension()
            );
            let path = self.parts_dir.join(&file);
            let part = match self.format {
                PartFormat::Parquet => Part::Parquet(Box::new(PartWriter::create_with_encoders(
                    &path,
                    self.dtype,
                    &self.meta,
                    self.encoders,
                )?)),
                PartFormat::Webdataset => Part::Tar(TarPartWriter::create(&path, self.dtype)?),
            };
            self.open = Some((part, file));
        }
        Ok(&mut self.open.as_mut().expect("opened above").0)
    }

    /// Records the failures not yet in the ledger, in one transaction. One that a crash
    /// keeps out of the ledger is retried by the next run: nothing is lost either way.
    fn record_failures(&mut self) -> Result<(), JobError> {
        if self.unrecorded.is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        let rows: Vec<(&str, &str, &str)> = self
            .unrecorded
            .iter()
            .map(|f| (f.id.as_str(), f.source.as_str(), f.reason.as_str()))
            .collect();
        self.ledger.record_failures(&rows)?;
        self.unrecorded.clear();
        self.stats.write_s += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Completes the open part: file synced → ledger (pending) → rename → ledger (committed);
    /// and records the failures held. A part for a bucket is committed once uploaded: when the
    /// next part is flushed, when a row finds its upload done, or by [`finish`](Self::finish).
    pub fn flush(&mut self) -> Result<(), JobError> {
        self.record_failures()?;
        let Some((part_writer, file)) = self.open.take() else {
            return Ok(());
        };
        let t = Instant::now();
        let part = self.next_part;
        let closed = part_writer.close()?;
        let rows = closed.rows as u64;
        self.ledger.begin_part(part, &file, &self.records)?;
        // Crash points (failpoints builds only): the process dies here as under kill -9.
        fail::fail_point!("writer-before-rename", |_| crash());
        let size = closed.publish()?;
        fail::fail_point!("writer-before-commit", |_| crash());
        let local = self.parts_dir.join(&file);
        match self.bucket.clone() {
            Some(bucket) => {
                // Parts reach the bucket and the ledger in order, one upload at a time: the
                // work folder holds two parts at most.
                self.settle_upload()?;
                let to_upload = local.clone();
                let done = std::thread::Builder::new()
                    .name("part-upload".into())
                    .spawn(move || bucket.upload_part(&to_upload))
                    .map_err(|e| JobError::Internal(format!("a part's upload thread: {e}")))?;
                self.uploading = Some(Upload {
                    part,
                    size,
                    rows,
                    local,
                    done,
                });
            }
            None => self.commit(part, size, rows)?,
        }
        self.next_part += 1;
        self.records.clear();
        self.bytes = 0;
        self.stats.write_s += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Completes the open part and waits for its upload, if any: the ledger then holds every
    /// row written.
    pub fn finish(&mut self) -> Result<(), JobError> {
        self.flush()?;
        let t = Instant::now();
        self.settle_upload()?;
        self.stats.write_s += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Waits for the part being uploaded, then commits it and removes its local copy.
    fn settle_upload(&mut self) -> Result<(), JobError> {
        let Some(upload) = self.uploading.take() else {
            return Ok(());
        };
        upload.done.join().unwrap_or_else(|_| {
            Err(JobError::Internal(format!(
                "{}: its upload thread panicked",
                upload.local.display()
            )))
        })?;
        fail::fail_point!("writer-after-upload", |_| crash());
        self.commit(upload.part, upload.size, upload.rows)?;
        crate::bucket::remove_uploaded(&upload.local)
    }

    fn commit(&mut self, part: u32, size: u64, rows: u64) -> Result<(), JobError> {
        self.ledger.commit_part(part, size)?;
        self.stats.rows += rows;
        self.stats.parts += 1;
        self.stats.part_bytes += size;
        Ok(())
    }
}

/// A writer stopped by an error waits for the upload under way: no thread of a job outlives it
/// (the service runs jobs in its process, and the next run on the work folder uploads the
/// part again). The part stays pending, for that run to commit.
impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(upload) = self.uploading.take() {
            let _ = upload.done.join();
        }
    }
}

/// The part being written, of the job's format.
enum Part {
    Parquet(Box<PartWriter>),
    Tar(TarPartWriter),
}

impl Part {
    fn push(&mut self, row: FeatureRow) -> Result<(), sonograph_io::WriteError> {
        match self {
            Part::Parquet(p) => p.push(row),
            Part::Tar(p) => p.push(row),
        }
    }

    fn close(self) -> Result<ClosedPart, sonograph_io::WriteError> {
        match self {
            Part::Parquet(p) => p.close(),
            Part::Tar(p) => p.close(),
        }
    }
}

/// Ends the process at once, as kill -9 would: the kill-and-resume tests crash the writer at
/// the two instants that matter to the ledger (`FAILPOINTS=writer-before-rename=return`).
/// (Compiled in whenever the `fail` crate's failpoints are, which another crate's tests may
/// switch on; unused otherwise.)
#[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
fn crash() -> Result<(), JobError> {
    std::process::abort()
}

pub(crate) fn progress_bar(enabled: bool, len: u64) -> ProgressBar {
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

pub(crate) fn writer_loop(
    mut writer: Writer,
    rx: Receiver<WriterMsg>,
    bar: ProgressBar,
    live: &LiveJob,
) -> (Writer, Result<WriterStats, JobError>) {
    let started = Instant::now();
    let mut last_log = Instant::now();
    let hidden = bar.is_hidden();
    for msg in rx.iter() {
        live.observe_queue(Queue::Writer, rx.len());
        let before = (writer.stats.items_ok, writer.stats.items_failed);
        let (audio_before, write_before) = (writer.stats.audio_seconds, writer.stats.write_s);
        let failure = match &msg {
            WriterMsg::Failed(f) | WriterMsg::FailedPiece(f) => {
                Some((f.id.clone(), f.reason.clone()))
            }
            WriterMsg::Row(_) | WriterMsg::Empty { .. } | WriterMsg::Sample { .. } => None,
        };
        if let Err(e) = writer.handle(msg) {
            return (writer, Err(e));
        }
        // What the message changed, as the writer counted it (a repeated failure of one item,
        // or a row an earlier run committed, counts once or not at all there, and so here).
        let audio = writer.stats.audio_seconds - audio_before;
        if audio > 0.0 {
            live.row_written(audio);
        }
        if writer.stats.items_ok > before.0 {
            live.item_done();
        }
        if let (true, Some((id, reason))) = (writer.stats.items_failed > before.1, failure) {
            live.item_failed(&id, &reason);
        }
        live.add_busy(Stage::Write, writer.stats.write_s - write_before);
        // An item the writer settled just now: not a second failed piece of one, nor the last
        // row of an item that had failed already.
        let settled = writer.stats.items_ok + writer.stats.items_failed - before.0 - before.1;
        if settled > 0 {
            bar.inc(settled);
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
    let result = writer.finish().map(|()| std::mem::take(&mut writer.stats));
    (writer, result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, piece: u32, last: bool) -> WriterMsg {
        WriterMsg::Row(Box::new(RowMsg {
            row: FeatureRow {
                id: id.into(),
                source: format!("/x/{id}.wav"),
                offset_s: f64::from(piece) * 30.0,
                duration_s: 30.0,
                sample_rate: 16_000,
                num_frames: 1,
                num_bins: 2,
                features: vec![f32::from(piece as u16); 2],
                model: None,
                sample: None,
            },
            piece,
            last,
        }))
    }

    fn writer(dir: &std::path::Path) -> Writer {
        let ledger = Ledger::open(&dir.join("ledger.sqlite"), dir, "spec", "0/1").unwrap();
        Writer::new(
            dir.into(),
            0,
            ledger,
            Dtype::F32,
            PartMeta {
                spec_id: "spec".into(),
                spec_json: "{}".into(),
                precision: "f64".into(),
                model: None,
                bins: 2,
                sample: false,
            },
            1,
        )
        .unwrap()
    }

    /// An item done without a row (no speech) is done in the ledger once a part is committed,
    /// with no row written for it; the rows counted are the rows in the parts.
    #[test]
    fn an_item_without_rows_is_done_with_the_next_part() {
        let dir = std::env::temp_dir().join(format!("sono-writer-empty-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut w = writer(&dir);
        w.part_bytes = 1 << 20;
        w.handle(row("a", 0, true)).unwrap();
        w.handle(WriterMsg::Empty { id: "quiet".into() }).unwrap();
        assert!(
            w.ledger.done_items().unwrap().is_empty(),
            "nothing committed yet"
        );
        w.flush().unwrap();
        let mut done: Vec<String> = w.ledger.done_items().unwrap().into_iter().collect();
        done.sort();
        assert_eq!(done, ["a", "quiet"]);
        assert_eq!((w.stats.items_ok, w.stats.rows, w.stats.parts), (2, 1, 1));
        // A run of silent items closes parts by itself (each counts 64 KiB): 20 of them fill
        // 1 MiB, and reach the ledger without any row.
        for k in 0..20 {
            w.handle(WriterMsg::Empty {
                id: format!("quiet{k}"),
            })
            .unwrap();
        }
        assert_eq!(w.ledger.done_count().unwrap(), 2 + 16);
        assert_eq!((w.stats.rows, w.stats.parts), (1, 2));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Pieces of one item come from several executors in any order; the item is done (its
    /// last piece in the ledger) only once every piece is written; after a failure nothing
    /// more of it is written.
    #[test]
    fn a_last_piece_waits_for_the_others_and_a_failed_item_never_ends() {
        let dir = std::env::temp_dir().join(format!("sono-writer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut w = writer(&dir);
        w.handle(row("a", 2, true)).unwrap();
        w.handle(row("b", 1, true)).unwrap();
        w.handle(row("a", 1, false)).unwrap();
        assert!(w.ledger.done_items().unwrap().is_empty());
        assert_eq!(w.pieces_held(), 2);
        w.handle(row("a", 0, false)).unwrap(); // a's last piece follows it out
        w.handle(WriterMsg::FailedPiece(Failure {
            id: "b".into(),
            source: "/x/b.wav".into(),
            reason: "piece 0: sample 3 is NaN".into(),
        }))
        .unwrap();
        w.handle(row("b", 0, false)).unwrap(); // after its item failed: not written
        w.handle(row("c", 0, true)).unwrap(); // a whole item
        w.handle(row("d", 0, false)).unwrap();
        w.handle(WriterMsg::FailedPiece(Failure {
            id: "d".into(),
            source: "/x/d.wav".into(),
            reason: "piece 1: sample 9 is NaN".into(),
        }))
        .unwrap();
        w.handle(row("d", 2, true)).unwrap(); // after its item failed: not its end
                                              // A whole item's failure: no row of it can follow, so it is not remembered.
        w.handle(WriterMsg::Failed(Failure {
            id: "e".into(),
            source: "/x/e.wav".into(),
            reason: "cannot open".into(),
        }))
        .unwrap();
        assert_eq!(
            w.failed.iter().map(String::as_str).collect::<HashSet<_>>(),
            HashSet::from(["b", "d"])
        );
        w.flush().unwrap();
        let done = w.ledger.done_items().unwrap();
        let mut done: Vec<_> = done.into_iter().collect();
        done.sort();
        assert_eq!(done, ["a", "c"]);
        assert_eq!(w.pieces_held(), 0);
        assert_eq!((w.stats.items_ok, w.stats.items_failed), (2, 3));
        assert_eq!(w.ledger.failures().unwrap().len(), 3);
        let committed = w.ledger.committed_pieces().unwrap();
        for p in 0..3 {
            assert!(committed.contains(&("a".to_string(), p)), "a piece {p}");
        }
        assert!(!committed.contains(&("d".to_string(), 2)));
        assert!(!committed.contains(&("b".to_string(), 0)));
        assert!(
            committed.contains(&("d".to_string(), 0)),
            "written before d failed"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The progress bar moves once per item settled: not for a second failed piece of an item,
    /// nor for the last piece of an item that failed, nor before every piece is written.
    #[test]
    fn the_progress_bar_counts_each_item_once() {
        let dir = std::env::temp_dir().join(format!("sono-writer-bar-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let failed_piece = |id: &str, piece: u32| {
            WriterMsg::FailedPiece(Failure {
                id: id.into(),
                source: format!("/x/{id}.wav"),
                reason: format!("piece {piece}: sample 3 is NaN"),
            })
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        for msg in [
            row("a", 1, true), // a's last piece first: a is not done yet
            row("b", 0, false),
            failed_piece("b", 1),
            failed_piece("b", 2), // b failed already
            row("b", 3, true),    // after b failed: not its end
            row("a", 0, false),   // a done
            row("c", 0, true),
        ] {
            tx.send(msg).unwrap();
        }
        drop(tx);
        let bar = ProgressBar::hidden();
        let (w, stats) = writer_loop(writer(&dir), rx, bar.clone(), &LiveJob::new());
        let stats = stats.unwrap();
        assert_eq!((stats.items_ok, stats.items_failed), (2, 1));
        assert_eq!(bar.position(), 3);
        drop(w);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
