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
    /// entry `read_ahead` entries before it is sent, within a chunk: a chunk's first ones
    /// only as it is settled, after the chunk before has been sent.
    pub fn feed(
        &self,
        ledger: &LedgerReader,
        work: &Sender<Entry>,
        live: &LiveJob,
        (ahead, read_ahead): (&dyn Fn(&Entry), usize),
    ) -> Result<u64, JobError> {
        let mut resumed = 0;
        let mut chunk: Vec<Entry> = Vec::with_capacity(CHUNK);
        let mut entries = self.entries()?;
        loop {
            chunk.clear();
            for entry in entries.by_ref().take(CHUNK) {
                chunk.push(entry?);
            }
            if chunk.is_empty() {
                return Ok(resumed);
            }
            let ids: Vec<&str> = chunk.iter().map(|e| e.id()).collect();
            let settled = ledger.settled(&ids)?;
            resumed += settled.done.len() as u64;
            let mut todo: VecDeque<Entry> = chunk
                .drain(..)
                .filter(|e| !settled.done.contains(e.id()) && !settled.failed.contains(e.id()))
                .collect();
            // `ahead` has seen the first `read_ahead` entries, and after each entry sent, the
            // one that comes `read_ahead` entries after it.
            todo.iter().take(read_ahead).for_each(ahead);
            while let Some(entry) = todo.pop_front() {
                if let Some(later) = read_ahead.checked_sub(1).and_then(|i| todo.get(i)) {
                    ahead(later);
                }
                if live.is_canceled() {
                    return Ok(resumed); // the rest waits for the job's resume
                }
                if work.send(entry).is_err() {
                    return Ok(resumed); // every worker is gone; the job's joins say why
                }
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
