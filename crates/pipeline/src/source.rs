//! The source stage: this shard's share of a directory or a manifest, streamed into the work
//! queue a chunk at a time, less the items the ledger says are settled. Nothing here grows
//! with the number of items but the ids' 8-byte fingerprints of the duplicate check.

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::ops::Range;

use crossbeam_channel::Sender;
use sonograph_io::ledger::LedgerReader;
use sonograph_io::manifest::{shard_range, Entry, Source, SourceError, SourceOptions};

use crate::error::JobError;
use crate::live::LiveJob;

/// Entries asked about the ledger at once.
const CHUNK: usize = 1024;

/// This shard's contiguous share of a source's entries.
pub(crate) struct ShardSource {
    source: Source,
    range: Range<usize>,
}

impl ShardSource {
    /// Opens the source and finds shard `index` of `count`: a contiguous share of the
    /// entries in their order (a directory's by id, a manifest's by line).
    pub fn open(
        path: &std::path::Path,
        options: &SourceOptions,
        index: usize,
        count: usize,
    ) -> Result<Self, SourceError> {
        let source = Source::open_with(path, options)?;
        let range = shard_range(source.count()?, index, count);
        Ok(ShardSource { source, range })
    }

    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Whether the source has members of WebDataset shards (its parts then carry their
    /// samples: the whole source's, so that every shard's parts have the same columns).
    pub fn has_archive_members(&self) -> bool {
        self.source.has_archive_members()
    }

    /// This shard's entries, streamed.
    fn entries(
        &self,
    ) -> Result<impl Iterator<Item = Result<Entry, SourceError>> + '_, SourceError> {
        Ok(self
            .source
            .entries()?
            .skip(self.range.start)
            .take(self.range.len()))
    }

    /// Refuses a shard in which an id appears twice: the ledger keys rows by id, so the second
    /// item would be taken for the first one done. Compares 64-bit fingerprints (8 bytes an
    /// item); where two agree, a second pass compares the ids themselves (a fingerprint
    /// collision between distinct ids is not a duplicate) and names the one repeated.
    pub fn check_unique_ids(&self) -> Result<(), JobError> {
        let mut prints = Vec::with_capacity(self.len());
        for entry in self.entries()? {
            prints.push(fingerprint(entry?.id()));
        }
        prints.sort_unstable();
        let mut shared: Vec<u64> = prints
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        drop(prints);
        if shared.is_empty() {
            return Ok(());
        }
        shared.dedup();
        let mut seen = std::collections::HashSet::new();
        for entry in self.entries()? {
            let entry = entry?;
            if shared.binary_search(&fingerprint(entry.id())).is_ok()
                && !seen.insert(entry.id().to_string())
            {
                return Err(JobError::Source(SourceError::Format {
                    path: self.source.path().to_path_buf(),
                    reason: format!("id {:?} appears more than once", entry.id()),
                }));
            }
        }
        Ok(())
    }

    /// Sends the entries not yet settled to `work`, asking `ledger` a chunk at a time; returns
    /// how many were done already. Stops early when the workers are gone. `ahead` sees each
    /// entry `read_ahead` entries before it is sent (as the entry `read_ahead` places before
    /// it goes), across chunks alike: the next chunk is settled while `read_ahead` entries of
    /// this one are still to go, so the window never runs dry at a chunk's edge. (So an
    /// error listing or settling the next chunk ends the feed with up to `read_ahead` entries
    /// of this one unsent, to be sent by the next run; and the count returned on an early
    /// stop includes the next chunk's done entries.)
    pub fn feed(
        &self,
        ledger: &LedgerReader,
        work: &Sender<Entry>,
        live: &LiveJob,
        (ahead, read_ahead): (&dyn Fn(&Entry), usize),
    ) -> Result<u64, JobError> {
        let mut resumed = 0;
        let mut entries = self.entries()?;
        let mut listed_all = false;
        let mut todo: VecDeque<Entry> = VecDeque::with_capacity(CHUNK + read_ahead + 1);
        // The entries at the front of `todo` that `ahead` has seen: the one sent next and the
        // `read_ahead` after it.
        let window = if read_ahead == 0 { 0 } else { read_ahead + 1 };
        let mut seen = 0;
        loop {
            while !listed_all && todo.len() < window.max(1) {
                let chunk = entries
                    .by_ref()
                    .take(CHUNK)
                    .collect::<Result<Vec<_>, _>>()?;
                listed_all = chunk.len() < CHUNK;
                if chunk.is_empty() {
                    break;
                }
                let ids: Vec<&str> = chunk.iter().map(|e| e.id()).collect();
                let settled = ledger.settled(&ids)?;
                resumed += settled.done.len() as u64;
                todo.extend(chunk.into_iter().filter(|e| {
                    !settled.done.contains(e.id()) && !settled.failed.contains(e.id())
                }));
            }
            while seen < window.min(todo.len()) {
                ahead(&todo[seen]);
                seen += 1;
            }
            let Some(entry) = todo.pop_front() else {
                return Ok(resumed);
            };
            seen = seen.saturating_sub(1);
            if live.is_canceled() {
                return Ok(resumed); // the rest waits for the job's resume
            }
            if work.send(entry).is_err() {
                return Ok(resumed); // every worker is gone; the job's joins say why
            }
        }
    }
}

fn fingerprint(id: &str) -> u64 {
    // SipHash with fixed keys: the same fingerprint throughout a run, which is all it needs.
    let mut h = DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonograph_io::ledger::{Ledger, PieceRecord};
    use std::cell::RefCell;

    /// Across chunks, every entry not settled is sent once, in order, and `ahead` sees each
    /// exactly when the entry `read_ahead` places before it is next to go: never later (a
    /// window run dry at a chunk's edge) and never earlier (the window's reads are held by a
    /// bounded cache). Settled entries are neither seen nor sent.
    #[test]
    fn read_ahead_runs_on_across_chunks() {
        let dir = std::env::temp_dir().join(format!("sono-source-feed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let n = 4 * CHUNK + 300;
        let lines: String = (0..n)
            .map(|i| format!("{{\"audio_filepath\": \"clip{i:05}.wav\", \"duration\": 1.0}}\n"))
            .collect();
        let manifest = dir.join("m.jsonl");
        std::fs::write(&manifest, lines).unwrap();
        let source = ShardSource::open(&manifest, &SourceOptions::default(), 0, 1).unwrap();
        let ids: Vec<String> = source
            .entries()
            .unwrap()
            .map(|e| e.unwrap().id().to_string())
            .collect();
        assert_eq!(ids.len(), n);
        // Failed items on both sides of the first chunk's edge and at the end; the third chunk
        // settled whole (done, then failed), and done items beside failed ones in the second.
        let mut failed = vec![3, CHUNK - 2, CHUNK - 1, CHUNK, CHUNK + 5, n - 1];
        failed.extend(2 * CHUNK + CHUNK / 2..3 * CHUNK);
        let done: Vec<usize> = (CHUNK + 6..CHUNK + 40)
            .chain(2 * CHUNK..2 * CHUNK + CHUNK / 2)
            .collect();
        let ledger_path = dir.join("ledger.sqlite");
        let mut ledger = Ledger::open(&ledger_path, &dir, "spec", "0/1").unwrap();
        for &i in &failed {
            ledger.record_failure(&ids[i], "test", "broken").unwrap();
        }
        let records: Vec<PieceRecord> = done
            .iter()
            .map(|&i| PieceRecord {
                item_id: ids[i].clone(),
                piece: 0,
                last: true,
                audio_seconds: 1.0,
            })
            .collect();
        ledger.begin_part(0, "part-0", &records).unwrap();
        ledger.commit_part(0, 1).unwrap();
        let reader = LedgerReader::open(&ledger_path).unwrap();
        let expected: Vec<&String> = (0..n)
            .filter(|i| !failed.contains(i) && !done.contains(i))
            .map(|i| &ids[i])
            .collect();
        // 1,500 entries ahead: more than a chunk, so several are settled before the first send.
        for read_ahead in [0, 1, 16, 200, 1_500] {
            let (tx, rx) = crossbeam_channel::unbounded::<Entry>();
            // (entry, how many were sent when `ahead` saw it)
            let seen = RefCell::new(Vec::new());
            let ahead = |e: &Entry| seen.borrow_mut().push((e.id().to_string(), rx.len()));
            let resumed = source
                .feed(&reader, &tx, &LiveJob::new(), (&ahead, read_ahead))
                .unwrap();
            assert_eq!(resumed, done.len() as u64, "read_ahead {read_ahead}");
            let sent: Vec<String> = rx.try_iter().map(|e| e.id().to_string()).collect();
            assert_eq!(
                sent.iter().collect::<Vec<_>>(),
                expected,
                "read_ahead {read_ahead}"
            );
            let seen = seen.into_inner();
            if read_ahead == 0 {
                assert!(seen.is_empty());
                continue;
            }
            assert_eq!(seen.len(), expected.len(), "read_ahead {read_ahead}");
            for (j, (id, sent_then)) in seen.iter().enumerate() {
                assert_eq!(id, expected[j], "read_ahead {read_ahead}");
                assert_eq!(
                    *sent_then,
                    j.saturating_sub(read_ahead),
                    "read_ahead {read_ahead}: entry {j} ({id}) seen late or early"
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
