//! The resume ledger: SQLite in `OUT/__sonograph/ledger.sqlite`.
//!
//! A part's rows are recorded as *pending* before its file is renamed into place and marked
//! *committed* after. On open, a pending part whose file exists was completed just before a
//! crash and is committed; one whose file is missing is forgotten, and its rows are computed
//! again. An item is done once its last piece is in a committed part; a row already committed
//! is never written twice. So a run killed at any instant and started again ends with every
//! item exactly once.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};
use thiserror::Error;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LedgerError {
    #[error("{path}: ledger: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("{path}: this output was made with spec {found}, not {expected}; use a new output folder or the same spec")]
    SpecMismatch {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("{path}: this output belongs to shard {found} of the job, not {expected}")]
    ShardMismatch {
        path: PathBuf,
        found: String,
        expected: String,
    },
}

/// A row of a part, as the ledger records it.
#[derive(Debug, Clone, PartialEq)]
pub struct PieceRecord {
    pub item_id: String,
    pub piece: u32,
    /// The item's last piece: once committed, the item is done.
    pub last: bool,
    pub audio_seconds: f64,
}

/// A read-only view of a ledger that a running job writes: the source stage asks it, a chunk
/// of items at a time, which are settled (done or failed), so that the job never holds the
/// set of all done items in memory.
pub struct LedgerReader {
    path: PathBuf,
    conn: Connection,
}

/// Items per query: SQLite binds at most 32766 parameters; a few hundred keep each query
/// short while amortising its cost.
const SETTLED_CHUNK: usize = 500;

/// Which of the items asked about are settled ([`LedgerReader::settled`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settled {
    pub done: std::collections::HashSet<String>,
    pub failed: std::collections::HashSet<String>,
}

impl LedgerReader {
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|source| LedgerError::Sqlite {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(LedgerReader {
            path: path.to_path_buf(),
            conn,
        })
    }

    /// Of `ids`, those done and those failed, through the tables' primary-key indexes.
    pub fn settled(&self, ids: &[&str]) -> Result<Settled, LedgerError> {
        let sql = |source| LedgerError::Sqlite {
            path: self.path.clone(),
            source,
        };
        let mut out = Settled::default();
        for chunk in ids.chunks(SETTLED_CHUNK) {
            let marks = vec!["?"; chunk.len()].join(",");
            for (query, set) in [
                (
                    format!("SELECT item_id FROM pieces WHERE last = 1 AND item_id IN ({marks})"),
                    &mut out.done,
                ),
                (
                    format!("SELECT item_id FROM failures WHERE item_id IN ({marks})"),
                    &mut out.failed,
                ),
            ] {
                let mut stmt = self.conn.prepare_cached(&query).map_err(sql)?;
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(chunk.iter()), |r| r.get(0))
                    .map_err(sql)?;
                for id in rows {
                    set.insert(id.map_err(sql)?);
                }
            }
        }
        Ok(out)
    }
}

/// Counts of a ledger's parts and items ([`Ledger::inspect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerSummary {
    pub committed_parts: u64,
    /// Parts begun and not committed: a crash between writing a part and committing it.
    pub pending_parts: u64,
    /// Items whose last piece is committed.
    pub done_items: u64,
}

pub struct Ledger {
    path: PathBuf,
    conn: Connection,
}

impl Ledger {
    /// Opens (or creates) the ledger of an output folder whose parts live in `parts_dir`, for
    /// `spec_id` and `shard` ("I/N"), and settles the parts left pending by a crash.
    pub fn open(
        path: &Path,
        parts_dir: &Path,
        spec_id: &str,
        shard: &str,
    ) -> Result<Self, LedgerError> {
        let sql = |source| LedgerError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(sql)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS parts (part INTEGER PRIMARY KEY, file TEXT NOT NULL,
                 state TEXT NOT NULL, rows INTEGER NOT NULL, bytes INTEGER);
             CREATE TABLE IF NOT EXISTS pieces (item_id TEXT NOT NULL, piece INTEGER NOT NULL,
                 part INTEGER NOT NULL, last INTEGER NOT NULL, audio_seconds REAL NOT NULL,
                 PRIMARY KEY (item_id, piece));
             CREATE TABLE IF NOT EXISTS failures (item_id TEXT PRIMARY KEY, source TEXT NOT NULL,
                 reason TEXT NOT NULL);",
        )
        .map_err(sql)?;
        let ledger = Ledger {
            path: path.to_path_buf(),
            conn,
        };
        ledger.check_meta("spec_id", spec_id, |found| LedgerError::SpecMismatch {
            path: path.to_path_buf(),
            found,
            expected: spec_id.to_string(),
        })?;
        ledger.check_meta("shard", shard, |found| LedgerError::ShardMismatch {
            path: path.to_path_buf(),
            found,
            expected: shard.to_string(),
        })?;
        ledger.settle_pending(parts_dir)?;
        Ok(ledger)
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> LedgerError + '_ {
        |source| LedgerError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn check_meta(
        &self,
        key: &str,
        value: &str,
        mismatch: impl FnOnce(String) -> LedgerError,
    ) -> Result<(), LedgerError> {
        let found: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(self.sql())?;
        match found {
            Some(f) if f != value => Err(mismatch(f)),
            Some(_) => Ok(()),
            None => {
                self.conn
                    .execute(
                        "INSERT INTO meta (key, value) VALUES (?1, ?2)",
                        [key, value],
                    )
                    .map_err(self.sql())?;
                Ok(())
            }
        }
    }

    fn settle_pending(&self, parts_dir: &Path) -> Result<(), LedgerError> {
        let pending: Vec<(i64, String)> = {
            let mut stmt = self
                .conn
                .prepare("SELECT part, file FROM parts WHERE state = 'pending'")
                .map_err(self.sql())?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(self.sql())?;
            rows.collect::<Result<_, _>>().map_err(self.sql())?
        };
        for (part, file) in pending {
            let path = parts_dir.join(&file);
            if path.exists() {
                self.conn
                    .execute(
                        "UPDATE parts SET state = 'committed' WHERE part = ?1",
                        [part],
                    )
                    .map_err(self.sql())?;
            } else {
                let _ = std::fs::remove_file(crate::publish::tmp_path(&path));
                self.conn
                    .execute("DELETE FROM pieces WHERE part = ?1", [part])
                    .map_err(self.sql())?;
                self.conn
                    .execute("DELETE FROM parts WHERE part = ?1", [part])
                    .map_err(self.sql())?;
            }
        }
        Ok(())
    }

    /// What a ledger holds, read without opening it for writing (nor settling its pending
    /// parts): for tools and tests that watch a job from outside while it runs.
    pub fn inspect(path: &Path) -> Result<LedgerSummary, LedgerError> {
        let sql = |source| LedgerError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(sql)?;
        let count = |query: &str| -> Result<u64, LedgerError> {
            conn.query_row(query, [], |r| r.get::<_, i64>(0))
                .map(|n| n as u64)
                .map_err(sql)
        };
        Ok(LedgerSummary {
            committed_parts: count("SELECT COUNT(*) FROM parts WHERE state = 'committed'")?,
            pending_parts: count("SELECT COUNT(*) FROM parts WHERE state = 'pending'")?,
            done_items: count("SELECT COUNT(*) FROM pieces WHERE last = 1")?,
        })
    }

    /// The number the next part should get.
    pub fn next_part(&self) -> Result<u32, LedgerError> {
        let max: Option<i64> = self
            .conn
            .query_row("SELECT MAX(part) FROM parts", [], |r| r.get(0))
            .map_err(self.sql())?;
        Ok(max.map_or(0, |m| m as u32 + 1))
    }

    /// Items whose last piece is committed.
    pub fn done_items(&self) -> Result<std::collections::HashSet<String>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare("SELECT item_id FROM pieces WHERE last = 1")
            .map_err(self.sql())?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// How many items are done (their last piece committed).
    pub fn done_count(&self) -> Result<u64, LedgerError> {
        self.conn
            .query_row("SELECT COUNT(*) FROM pieces WHERE last = 1", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as u64)
            .map_err(self.sql())
    }

    /// How many items are recorded as failed.
    pub fn failed_count(&self) -> Result<u64, LedgerError> {
        self.conn
            .query_row("SELECT COUNT(*) FROM failures", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(self.sql())
    }

    /// Pieces committed of the items not done yet (a long item cut short by a crash), as
    /// (item, piece): what a resumed run must not write again. Done items are never resumed,
    /// so this stays small however many items the ledger holds.
    pub fn partial_pieces(&self) -> Result<std::collections::HashSet<(String, u32)>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT item_id, piece FROM pieces WHERE item_id IN
                     (SELECT item_id FROM pieces GROUP BY item_id HAVING MAX(last) = 0)",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// Pieces already committed, as (item, piece).
    pub fn committed_pieces(
        &self,
    ) -> Result<std::collections::HashSet<(String, u32)>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare("SELECT item_id, piece FROM pieces")
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// Items recorded as failed, with their source and reason.
    pub fn failures(&self) -> Result<Vec<(String, String, String)>, LedgerError> {
        self.first_failures(usize::MAX)
    }

    /// The first `limit` failures by item id (a report lists a few; the ledger keeps all).
    pub fn first_failures(
        &self,
        limit: usize,
    ) -> Result<Vec<(String, String, String)>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare("SELECT item_id, source, reason FROM failures ORDER BY item_id LIMIT ?1")
            .map_err(self.sql())?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map([limit], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// Total audio seconds committed.
    pub fn committed_audio_seconds(&self) -> Result<f64, LedgerError> {
        self.conn
            .query_row(
                "SELECT COALESCE(SUM(audio_seconds), 0) FROM pieces",
                [],
                |r| r.get(0),
            )
            .map_err(self.sql())
    }

    /// Step 1 of a part: records its rows as pending, in one transaction.
    pub fn begin_part(
        &mut self,
        part: u32,
        file: &str,
        rows: &[PieceRecord],
    ) -> Result<(), LedgerError> {
        let path = self.path.clone();
        let sql = |source| LedgerError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            "INSERT INTO parts (part, file, state, rows) VALUES (?1, ?2, 'pending', ?3)",
            params![part, file, rows.len() as i64],
        )
        .map_err(sql)?;
        {
            let mut stmt = tx
                .prepare(
                    "INSERT INTO pieces (item_id, piece, part, last, audio_seconds)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(sql)?;
            for r in rows {
                stmt.execute(params![r.item_id, r.piece, part, r.last, r.audio_seconds])
                    .map_err(sql)?;
            }
        }
        tx.commit().map_err(sql)
    }

    /// Step 2 of a part, after its file is in place.
    pub fn commit_part(&self, part: u32, bytes: u64) -> Result<(), LedgerError> {
        self.conn
            .execute(
                "UPDATE parts SET state = 'committed', bytes = ?2 WHERE part = ?1",
                params![part, bytes as i64],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    /// Records an item that failed (replacing an earlier failure of the same item).
    pub fn record_failure(
        &self,
        item_id: &str,
        source: &str,
        reason: &str,
    ) -> Result<(), LedgerError> {
        self.record_failures(&[(item_id, source, reason)])
    }

    /// Records failed items, (item, source, reason), in one transaction: one sync for many
    /// (a corpus of unreadable files fails thousands of items a second).
    pub fn record_failures(&self, failures: &[(&str, &str, &str)]) -> Result<(), LedgerError> {
        let tx = self.conn.unchecked_transaction().map_err(self.sql())?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO failures (item_id, source, reason) VALUES (?1, ?2, ?3)",
                )
                .map_err(self.sql())?;
            for (id, source, reason) in failures {
                stmt.execute([id, source, reason]).map_err(self.sql())?;
            }
        }
        tx.commit().map_err(self.sql())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &str, piece: u32, last: bool) -> PieceRecord {
        PieceRecord {
            item_id: id.into(),
            piece,
            last,
            audio_seconds: 1.0,
        }
    }

    #[test]
    fn pending_parts_are_settled_by_whether_their_file_exists() {
        let dir = std::env::temp_dir().join(format!("sonograph-ledger-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("ledger.sqlite");
        {
            let mut l = Ledger::open(&db, &dir, "spec1", "0/1").unwrap();
            assert_eq!(l.next_part().unwrap(), 0);
            l.begin_part(0, "p0", &[rec("a", 0, true), rec("b", 0, false)])
                .unwrap();
            std::fs::write(dir.join("p0"), b"x").unwrap();
            l.commit_part(0, 1).unwrap();
            // Crash after the rename, before the commit: the file exists.
            l.begin_part(1, "p1", &[rec("b", 1, true)]).unwrap();
            std::fs::write(dir.join("p1"), b"x").unwrap();
            // Crash before the rename: no file.
            l.begin_part(2, "p2", &[rec("c", 0, true)]).unwrap();
            l.record_failure("d", "/x/d.wav", "corrupt").unwrap();
        }
        let l = Ledger::open(&db, &dir, "spec1", "0/1").unwrap();
        let done = l.done_items().unwrap();
        assert!(done.contains("a") && done.contains("b") && !done.contains("c"));
        assert_eq!(l.committed_pieces().unwrap().len(), 3);
        assert_eq!(l.next_part().unwrap(), 2);
        assert_eq!(l.failures().unwrap()[0].2, "corrupt");
        drop(l);
        assert!(matches!(
            Ledger::open(&db, &dir, "spec2", "0/1"),
            Err(LedgerError::SpecMismatch { .. })
        ));
        assert!(matches!(
            Ledger::open(&db, &dir, "spec1", "1/2"),
            Err(LedgerError::ShardMismatch { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
