//! The one writer: rows into Parquet parts, parts into the ledger.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use sonograph_io::ledger::{Ledger, PieceRecord};
use sonograph_io::parquet::{Dtype, FeatureRow, PartWriter};

use crate::job::JobError;
use crate::report::Failure;

/// What the other stages send to the writer.
pub(crate) enum WriterMsg {
    Row(Box<RowMsg>),
    Failed(Failure),
}

pub(crate) struct RowMsg {
    pub row: FeatureRow,
    pub piece: u32,
    pub last: bool,
}

pub(crate) struct Writer {
    pub parts_dir: PathBuf,
    pub shard_index: usize,
    pub ledger: Ledger,
    pub dtype: Dtype,
    pub spec_id: String,
    pub spec_json: String,
    pub part_bytes: usize,
    pub next_part: u32,
    /// Rows committed by earlier runs: never written twice.
    pub committed: HashSet<(String, u32)>,
    /// The part being written, its file name, and its rows as the ledger will record them.
    open: Option<(PartWriter, String)>,
    records: Vec<PieceRecord>,
    bytes: usize,
    pub stats: WriterStats,
}

#[derive(Default)]
pub(crate) struct WriterStats {
    pub items_ok: u64,
    pub items_failed: u64,
    pub rows: u64,
    pub parts: u64,
    pub audio_seconds: f64,
    pub write_s: f64,
}

impl Writer {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        parts_dir: PathBuf,
        shard_index: usize,
        ledger: Ledger,
        dtype: Dtype,
        spec_id: String,
        spec_json: String,
        part_bytes: usize,
    ) -> Result<Self, JobError> {
        let next_part = ledger.next_part()?;
        let committed = ledger.committed_pieces()?;
        Ok(Writer {
            parts_dir,
            shard_index,
            ledger,
            dtype,
            spec_id,
            spec_json,
            part_bytes,
            next_part,
            committed,
            open: None,
            records: Vec::new(),
            bytes: 0,
            stats: WriterStats::default(),
        })
    }

    pub fn handle(&mut self, msg: WriterMsg) -> Result<(), JobError> {
        match msg {
            WriterMsg::Failed(f) => {
                let t = Instant::now();
                self.ledger.record_failure(&f.id, &f.source, &f.reason)?;
                self.stats.write_s += t.elapsed().as_secs_f64();
                self.stats.items_failed += 1;
            }
            WriterMsg::Row(m) => {
                let RowMsg { row, piece, last } = *m;
                if last {
                    self.stats.items_ok += 1;
                }
                if self.committed.contains(&(row.id.clone(), piece)) {
                    // Written by an earlier run that died before finishing this item.
                    return Ok(());
                }
                self.stats.audio_seconds += row.duration_s;
                let t = Instant::now();
                self.bytes += row.features.len() * 4 + row.id.len() + row.source.len() + 64;
                self.records.push(PieceRecord {
                    item_id: row.id.clone(),
                    piece,
                    last,
                    audio_seconds: row.duration_s,
                });
                if self.open.is_none() {
                    let file =
                        format!("part-{:05}-{:05}.parquet", self.shard_index, self.next_part);
                    let path = self.parts_dir.join(&file);
                    let part =
                        PartWriter::create(&path, self.dtype, &self.spec_id, &self.spec_json)?;
                    self.open = Some((part, file));
                }
                if let Some((part, _)) = &mut self.open {
                    part.push(row)?;
                }
                self.stats.write_s += t.elapsed().as_secs_f64();
                if self.bytes >= self.part_bytes {
                    self.flush()?;
                }
            }
        }
        Ok(())
    }

    /// Completes the open part: file synced → ledger (pending) → rename → ledger (committed).
    pub fn flush(&mut self) -> Result<(), JobError> {
        let Some((part_writer, file)) = self.open.take() else {
            return Ok(());
        };
        let t = Instant::now();
        let part = self.next_part;
        let closed = part_writer.close()?;
        self.ledger.begin_part(part, &file, &self.records)?;
        fail_point("writer-before-rename")?;
        let size = closed.publish()?;
        fail_point("writer-before-commit")?;
        self.ledger.commit_part(part, size)?;
        self.next_part += 1;
        self.stats.rows += self.records.len() as u64;
        self.stats.parts += 1;
        self.records.clear();
        self.bytes = 0;
        self.stats.write_s += t.elapsed().as_secs_f64();
        Ok(())
    }
}

/// Test hook: `SONOGRAPH_FAIL_AT=<name>` makes the writer abort the process at that point, as
/// a kill -9 would, so that tests can crash it at the two instants that matter for the ledger.
fn fail_point(name: &str) -> Result<(), JobError> {
    if std::env::var("SONOGRAPH_FAIL_AT").is_ok_and(|v| v == name) {
        std::process::abort();
    }
    Ok(())
}
