//! Sources of items: a directory walked recursively (its audio files, and the audio members of
//! its WebDataset `.tar` shards), a shard, or a manifest (NeMo JSON lines or CSV).
//!
//! A manifest line that cannot be used becomes an [`Entry::Invalid`] with its reason: one bad
//! line is one failed item in the report, never a failed job.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

pub use crate::item::{is_audio, ArchiveMember, Entry, SampleMember, SourceItem, AUDIO_EXTENSIONS};
use crate::nemo_tarred::TarredShards;
use crate::remote::ListedObject;
use crate::roots::Roots;
use crate::sigmf::{is_iq_file, list_recordings_in, DataType, IqSource};
use crate::webdataset::{is_shard, shard_entries};

/// A source that cannot be read at all (a usage error, not an item error).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SourceError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Format { path: PathBuf, reason: String },
}

/// A source of items, opened: a directory (walked and sorted by id at once), or a manifest
/// (NeMo JSON lines or CSV) that is read as a stream, in its own order, each time its
/// entries are asked for — a manifest of millions of lines is never held in memory.
pub struct Source {
    path: PathBuf,
    kind: SourceKind,
    roots: Roots,
}

enum SourceKind {
    Dir(Vec<Entry>),
    Nemo,
    Csv,
}

/// What [`Source::open_with`] lists besides audio, and where it may read.
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// IQ recordings too (SigMF, `.sigmf` archives, raw IQ files).
    pub iq: bool,
    /// The datatype of raw IQ files whose extension does not say it.
    pub raw: Option<DataType>,
    /// Where the source and what it lists may be opened from (a manifest, an archive; the
    /// items' own files are opened beneath them by whoever reads them).
    pub roots: Roots,
}

/// `base` names a SigMF recording as `base.sigmf-meta`.
fn is_sigmf_base(base: &Path) -> bool {
    crate::sigmf::sigmf_paths(base).0.is_file()
}

/// The IQ recordings at `path` (a folder, a prefix, a recording) as entries: an archive that
/// cannot be listed is one invalid entry.
fn iq_entries(
    path: &Path,
    options: &SourceOptions,
    listing: Option<&[ListedObject]>,
) -> Result<Vec<Entry>, SourceError> {
    let listed = list_recordings_in(&options.roots, path, options.raw, listing).map_err(|e| {
        SourceError::Format {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    })?;
    let mut entries: Vec<Entry> = listed
        .into_iter()
        // With a raw datatype given, a folder's every file reads as raw IQ: its audio files are
        // audio all the same.
        .filter(|(_, r)| !matches!(r, Ok(IqSource::Raw { path, .. }) if is_audio(path)))
        .map(|(id, r)| match r {
            Ok(source) => Entry::Iq { id, source },
            Err(e) => Entry::Invalid {
                id,
                reason: e.to_string(),
            },
        })
        .collect();
    entries.sort_by(|a, b| a.id().cmp(b.id()));
    Ok(entries)
}

fn not_a_source(path: &Path, iq: bool) -> SourceError {
    let reason = if iq {
        "a source is a directory, a .jsonl (NeMo) or a .csv manifest, a .tar shard \
         (WebDataset), a SigMF recording (.sigmf-meta/.sigmf-data), a .sigmf archive, or a raw \
         IQ file (.cf32, .ci16, .cu8, .ci8; another name with --format)"
    } else {
        "a source is a directory, a .jsonl (NeMo) or a .csv manifest, or a .tar shard \
         (WebDataset)"
    };
    SourceError::Format {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// A source's entries, in order; an error reading the source ends it.
pub type Entries<'a> = Box<dyn Iterator<Item = Result<Entry, SourceError>> + 'a>;

impl Source {
    /// Opens a directory (walked now, sorted by id; ids are unique by construction) or a
    /// `.jsonl` / `.csv` manifest (checked to be readable; read when iterated).
    pub fn open(path: &Path) -> Result<Source, SourceError> {
        Self::open_with(path, &SourceOptions::default())
    }

    /// [`open`](Self::open), and with `options.iq` IQ recordings too: a directory's SigMF
    /// recordings, `.sigmf` archives (one entry per member) and raw IQ files beside its
    /// audio, or a source that is one of them (a SigMF file or base name, an archive, a raw
    /// file). An archive that cannot be listed is one invalid entry.
    pub fn open_with(path: &Path, options: &SourceOptions) -> Result<Source, SourceError> {
        if crate::remote::is_url(path) {
            return Self::open_url(path, options);
        }
        // The source itself beneath the roots, now: a folder swapped for a symlink out of
        // them since the job was submitted is refused here.
        let meta = options
            .roots
            .check(path)
            .and_then(|()| std::fs::metadata(path));
        let kind = match meta {
            Ok(m) if m.is_dir() => {
                let mut entries = walk_dir(path)?;
                // Its WebDataset shards' audio members, by the shard's id and their key.
                for shard in walk_files(path, is_shard)? {
                    if let Entry::Item(shard) = shard {
                        entries.extend(shard_entries(&options.roots, &shard.path, &shard.id));
                    }
                }
                if options.iq {
                    entries.extend(iq_entries(path, options, None)?);
                }
                entries.sort_by(|a, b| a.id().cmp(b.id()));
                SourceKind::Dir(entries)
            }
            _ => match path.extension().and_then(|e| e.to_str()) {
                Some("csv") if meta.is_ok() => SourceKind::Csv,
                _ if meta.is_ok() && is_shard(path) => {
                    let name = path.file_name().unwrap_or_default().to_string_lossy();
                    let mut entries = shard_entries(&options.roots, path, &name);
                    entries.sort_by(|a, b| a.id().cmp(b.id()));
                    SourceKind::Dir(entries)
                }
                Some("json" | "jsonl" | "ndjson") if meta.is_ok() => SourceKind::Nemo,
                // A SigMF base name is no file of its own.
                _ if options.iq && (meta.is_ok() || is_sigmf_base(path)) => {
                    if meta.is_ok() && options.raw.is_none() && !is_iq_file(path) {
                        return Err(not_a_source(path, true));
                    }
                    SourceKind::Dir(iq_entries(path, options, None)?)
                }
                _ => {
                    if let Err(source) = meta {
                        return Err(SourceError::Io {
                            path: path.to_path_buf(),
                            source,
                        });
                    }
                    return Err(not_a_source(path, options.iq));
                }
            },
        };
        Ok(Source {
            path: path.to_path_buf(),
            kind,
            roots: options.roots.clone(),
        })
    }

    /// A source in object storage: a manifest (`.jsonl`, `.csv`) or a WebDataset shard by its
    /// extension, with IQ a recording's object (SigMF, an archive, a raw file), otherwise a
    /// prefix listed as a folder is walked (its audio objects and the audio members of its
    /// shards, and with IQ its recordings; an empty listing is an error, as a missing folder
    /// is).
    fn open_url(path: &Path, options: &SourceOptions) -> Result<Source, SourceError> {
        let io = |source| SourceError::Io {
            path: path.to_path_buf(),
            source,
        };
        if options.roots.is_confined() {
            // Refused with the roots' own words (the service reads beneath its data roots).
            options.roots.open_blob(path).map_err(io)?;
        }
        let kind = match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => SourceKind::Csv,
            Some("json" | "jsonl" | "ndjson") => SourceKind::Nemo,
            _ if is_shard(path) => {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                let mut entries = shard_entries(&options.roots, path, &name);
                entries.sort_by(|a, b| a.id().cmp(b.id()));
                SourceKind::Dir(entries)
            }
            _ if options.iq && is_iq_file(path) => {
                SourceKind::Dir(iq_entries(path, options, None)?)
            }
            _ => {
                let listed = crate::remote::list(path).map_err(io)?;
                if listed.is_empty() {
                    return Err(SourceError::Format {
                        path: path.to_path_buf(),
                        reason: "no object under this prefix".into(),
                    });
                }
                let mut entries = Vec::new();
                if options.iq {
                    // From the same listing: the job lists IQ recordings whatever its spec,
                    // and a second listing of 2,000 clips held the first item back 0.09 s on
                    // a loopback server (bench/RESULTS.md, 2026-12-04). First, so that the
                    // audio below takes the listing's names without a copy.
                    entries.extend(iq_entries(path, options, Some(&listed))?);
                }
                for object in listed {
                    if is_audio(&object.url) {
                        entries.push(Entry::Item(SourceItem {
                            id: object.id,
                            path: object.url,
                            offset_s: 0.0,
                            duration_s: None,
                            member: None,
                        }));
                    } else if is_shard(&object.url) {
                        entries.extend(shard_entries(&options.roots, &object.url, &object.id));
                    }
                }
                entries.sort_by(|a, b| a.id().cmp(b.id()));
                SourceKind::Dir(entries)
            }
        };
        if matches!(kind, SourceKind::Csv | SourceKind::Nemo) {
            // Readable now, as a local manifest is checked to be.
            options.roots.open_blob(path).map_err(io)?;
        }
        Ok(Source {
            path: path.to_path_buf(),
            kind,
            roots: options.roots.clone(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether any of its items is a member of a WebDataset shard, whose sample the output
    /// carries (a NeMo tarred manifest's members carry none: their text is the manifest's).
    pub fn has_archive_members(&self) -> bool {
        match &self.kind {
            SourceKind::Dir(entries) => entries
                .iter()
                .any(|e| matches!(e, Entry::Item(i) if i.member.is_some())),
            SourceKind::Nemo | SourceKind::Csv => false,
        }
    }

    /// How many entries there are, by a pass that parses no JSON: every non-empty line of a
    /// NeMo manifest and every record of a CSV one is an entry (a bad one is an invalid entry).
    pub fn count(&self) -> Result<usize, SourceError> {
        let io = |source| SourceError::Io {
            path: self.path.clone(),
            source,
        };
        match &self.kind {
            SourceKind::Dir(entries) => Ok(entries.len()),
            SourceKind::Nemo => {
                use std::io::BufRead;
                let file = self.open_manifest().map_err(io)?;
                let mut n = 0;
                for line in std::io::BufReader::new(file).split(b'\n') {
                    n += usize::from(!line.map_err(io)?.trim_ascii().is_empty());
                }
                Ok(n)
            }
            SourceKind::Csv => {
                let file = self.open_manifest().map_err(io)?;
                let base = PathBuf::new();
                Ok(parse_csv(std::io::BufReader::new(file), base, &self.name())?.count())
            }
        }
    }

    /// The manifest, for reading from the start (a local file or an object).
    fn open_manifest(&self) -> std::io::Result<crate::span::Span> {
        crate::span::Span::whole(self.roots.open_blob(&self.path)?)
    }

    /// The manifest's file name: ids of bad lines and errors use it alone, so that every shard
    /// computes the same ids however the path was spelled.
    fn name(&self) -> String {
        self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    }

    /// The entries, streamed: a directory's in id order, a manifest's in line order.
    pub fn entries(&self) -> Result<Entries<'_>, SourceError> {
        let io = |source| SourceError::Io {
            path: self.path.clone(),
            source,
        };
        let base = self.path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let name = self.name();
        match &self.kind {
            SourceKind::Dir(entries) => Ok(Box::new(entries.iter().cloned().map(Ok))),
            SourceKind::Nemo => {
                let file = self.open_manifest().map_err(io)?;
                let path = self.path.clone();
                Ok(Box::new(
                    parse_nemo_in(
                        std::io::BufReader::new(file),
                        base,
                        name,
                        self.roots.clone(),
                    )
                    .map(move |r| {
                        r.map_err(|source| SourceError::Io {
                            path: path.clone(),
                            source,
                        })
                    }),
                ))
            }
            SourceKind::Csv => {
                let file = self.open_manifest().map_err(io)?;
                Ok(Box::new(
                    parse_csv(std::io::BufReader::new(file), base, &name)?.map(Ok),
                ))
            }
        }
    }
}

/// Audio files under `root` (recursively; symlinked directories are not followed, so a loop
/// cannot hang the walk), with ids relative to `root`.
pub fn walk_dir(root: &Path) -> Result<Vec<Entry>, SourceError> {
    walk_files(root, is_audio)
}

/// Files under `root` that `accept` takes (recursively, hidden and `_` entries skipped,
/// symlinked directories not followed), with ids relative to `root` joined by `/`, in id order.
pub fn walk_files(root: &Path, accept: impl Fn(&Path) -> bool) -> Result<Vec<Entry>, SourceError> {
    crate::walk::walk_sorted(root, accept)
        .map(|r| {
            r.map_err(|e| SourceError::Io {
                path: e.path,
                source: e.source,
            })
            .map(|(id, path)| {
                Entry::Item(SourceItem {
                    id,
                    path,
                    offset_s: 0.0,
                    duration_s: None,
                    member: None,
                })
            })
        })
        .collect()
}

#[derive(Deserialize)]
struct NemoLine {
    audio_filepath: String,
    /// NeMo's tarred datasets: the audio is a member of `audio_{shard_id}.tar` (a whole
    /// number, or its text).
    #[serde(default)]
    shard_id: Option<serde_json::Value>,
    #[serde(default)]
    offset: Option<f64>,
    #[serde(default)]
    duration: Option<f64>,
}

fn resolve(base: &Path, p: &str) -> PathBuf {
    let path = Path::new(p);
    if path.is_absolute() || crate::remote::is_url(path) {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}

fn check_span(offset: f64, duration: Option<f64>) -> Result<(), String> {
    if !offset.is_finite() || offset < 0.0 {
        return Err(format!("offset {offset} must be a finite number ≥ 0"));
    }
    if let Some(d) = duration {
        if !d.is_finite() || d <= 0.0 {
            return Err(format!("duration {d} must be a finite number > 0"));
        }
    }
    Ok(())
}

/// NeMo manifest: one JSON object per line with `audio_filepath`, optional `offset` and
/// `duration` (seconds); other keys (`text`, …) are ignored. Relative paths are relative to
/// `base` (the manifest's folder). Streams: one line at a time.
pub fn parse_nemo(
    reader: impl std::io::BufRead,
    base: PathBuf,
    name: String,
) -> impl Iterator<Item = Result<Entry, std::io::Error>> {
    parse_nemo_in(reader, base, name, Roots::anywhere())
}

/// [`parse_nemo`], the shards of a tarred manifest (lines with `shard_id`) opened beneath
/// `roots`.
pub fn parse_nemo_in(
    reader: impl std::io::BufRead,
    base: PathBuf,
    name: String,
    roots: Roots,
) -> impl Iterator<Item = Result<Entry, std::io::Error>> {
    let mut shards = TarredShards::new(roots, base.clone());
    reader
        .split(b'\n')
        .enumerate()
        .filter(|(_, line)| !matches!(line, Ok(l) if l.trim_ascii().is_empty()))
        .map(move |(n, line)| {
            let line = line?;
            Ok(match std::str::from_utf8(&line) {
                Ok(text) => nemo_entry(text, n + 1, &base, &name, &mut shards),
                // One bad line is one failed item, not a failed job.
                Err(e) => Entry::Invalid {
                    id: format!("{name}:{}", n + 1),
                    reason: format!("line is not UTF-8: {e}"),
                },
            })
        })
}

fn nemo_entry(
    line: &str,
    number: usize,
    base: &Path,
    name: &str,
    shards: &mut TarredShards,
) -> Entry {
    let line_id = format!("{name}:{number}");
    // serde reads a struct from a JSON array too, by position (`["a.wav"]` would be an item):
    // a NeMo line is an object.
    if !line.trim_start().starts_with('{') {
        return Entry::Invalid {
            id: line_id,
            reason: "line is not a JSON object".into(),
        };
    }
    let parsed: Result<NemoLine, _> = serde_json::from_str(line);
    match parsed {
        Err(e) => Entry::Invalid {
            id: line_id,
            reason: format!("line does not parse: {e}"),
        },
        Ok(l) => {
            let offset = l.offset.unwrap_or(0.0);
            match check_span(offset, l.duration) {
                Err(reason) => Entry::Invalid {
                    id: line_id,
                    reason,
                },
                Ok(()) => {
                    let shard_id = match &l.shard_id {
                        None => None,
                        Some(v) => match v.as_u64().or_else(|| v.as_str()?.parse().ok()) {
                            Some(n) => Some(n),
                            None => {
                                return Entry::Invalid {
                                    id: line_id,
                                    reason: format!("shard_id {v} is not a whole number"),
                                }
                            }
                        },
                    };
                    let file = match shard_id {
                        // A member: its id names its shard, where member names are unique.
                        Some(shard) => format!("audio_{shard}.tar/{}", l.audio_filepath),
                        None => l.audio_filepath.clone(),
                    };
                    let id = if l.offset.is_some() {
                        format!("{file}@{offset}")
                    } else {
                        file
                    };
                    match shard_id {
                        Some(shard) => {
                            match shards.item(id, shard, &l.audio_filepath, offset, l.duration) {
                                Ok(item) => Entry::Item(item),
                                Err(reason) => Entry::Invalid {
                                    id: line_id,
                                    reason,
                                },
                            }
                        }
                        None => Entry::Item(SourceItem {
                            id,
                            path: resolve(base, &l.audio_filepath),
                            offset_s: offset,
                            duration_s: l.duration,
                            member: None,
                        }),
                    }
                }
            }
        }
    }
}

/// CSV manifest with a header naming `id` and `path`, optionally `offset` and `duration`.
/// The header is read now; the rows stream.
pub fn parse_csv(
    reader: impl std::io::Read,
    base: PathBuf,
    name: &str,
) -> Result<impl Iterator<Item = Entry>, SourceError> {
    let format = |reason: String| SourceError::Format {
        path: PathBuf::from(name),
        reason,
    };
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(reader);
    let headers = reader
        .headers()
        .map_err(|e| format(format!("bad CSV header: {e}")))?
        .clone();
    let col = |name: &str| headers.iter().position(|h| h == name);
    let (Some(id_col), Some(path_col)) = (col("id"), col("path")) else {
        return Err(format(
            "the CSV header must name the columns id and path".into(),
        ));
    };
    let columns = CsvColumns {
        id: id_col,
        path: path_col,
        offset: col("offset"),
        duration: col("duration"),
    };
    let name = name.to_string();
    Ok(reader.into_records().enumerate().map(move |(n, record)| {
        let line_id = format!("{name}:{}", n + 2);
        match record {
            Ok(r) => csv_entry(&r, &columns, line_id, &base),
            Err(e) => Entry::Invalid {
                id: line_id,
                reason: format!("row does not parse: {e}"),
            },
        }
    }))
}

/// Where a CSV manifest keeps each field.
struct CsvColumns {
    id: usize,
    path: usize,
    offset: Option<usize>,
    duration: Option<usize>,
}

fn csv_entry(record: &csv::StringRecord, c: &CsvColumns, line_id: String, base: &Path) -> Entry {
    let field = |c: Option<usize>| c.and_then(|c| record.get(c)).filter(|s| !s.is_empty());
    let number = |c: Option<usize>, what: &str| -> Result<Option<f64>, String> {
        field(c)
            .map(|s| {
                s.parse::<f64>()
                    .map_err(|_| format!("{what} {s:?} is not a number"))
            })
            .transpose()
    };
    match (field(Some(c.id)), field(Some(c.path))) {
        (Some(id), Some(p)) => {
            let span = number(c.offset, "offset").and_then(|o| {
                let d = number(c.duration, "duration")?;
                let o = o.unwrap_or(0.0);
                check_span(o, d).map(|()| (o, d))
            });
            match span {
                Ok((offset_s, duration_s)) => Entry::Item(SourceItem {
                    id: id.to_string(),
                    path: resolve(base, p),
                    offset_s,
                    duration_s,
                    member: None,
                }),
                Err(reason) => Entry::Invalid {
                    id: line_id,
                    reason,
                },
            }
        }
        _ => Entry::Invalid {
            id: line_id,
            reason: "id and path must not be empty".into(),
        },
    }
}

/// The contiguous share `[n·i/N, n·(i+1)/N)` of `len` sorted items for shard `index` of `count`.
pub fn shard_range(len: usize, index: usize, count: usize) -> std::ops::Range<usize> {
    let (len, index, count) = (len as u128, index as u128, count as u128);
    let start = len * index / count;
    let end = len * (index + 1) / count;
    start as usize..end as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nemo_lines_good_and_bad() {
        let text = concat!(
            "{\"audio_filepath\": \"a.wav\", \"duration\": 2.5, \"text\": \"hi\"}\n",
            "\n",
            "{\"audio_filepath\": \"/abs/b.flac\", \"offset\": 1.5, \"duration\": 1.0}\n",
            "not json\n",
            "{\"audio_filepath\": \"c.wav\", \"offset\": -1}\n",
        );
        let e: Vec<Entry> = parse_nemo(text.as_bytes(), "/m".into(), "m.jsonl".into())
            .map(Result::unwrap)
            .collect();
        assert_eq!(e.len(), 4);
        assert_eq!(
            e[0],
            Entry::Item(SourceItem {
                id: "a.wav".into(),
                path: "/m/a.wav".into(),
                offset_s: 0.0,
                duration_s: Some(2.5),
                member: None,
            })
        );
        assert_eq!(e[1].id(), "/abs/b.flac@1.5");
        assert!(matches!(&e[2], Entry::Invalid { id, .. } if id == "m.jsonl:4"));
        assert!(matches!(&e[3], Entry::Invalid { reason, .. } if reason.contains("offset")));
        // A line that is not UTF-8 is one invalid entry; the lines around it are read.
        let bytes =
            b"{\"audio_filepath\": \"a.wav\"}\n\xff\xfe bad\n{\"audio_filepath\": \"b.wav\"}\n";
        let e: Vec<Entry> = parse_nemo(&bytes[..], "/m".into(), "m.jsonl".into())
            .map(Result::unwrap)
            .collect();
        assert_eq!(e.len(), 3);
        assert!(
            matches!(&e[1], Entry::Invalid { id, reason } if id == "m.jsonl:2" && reason.contains("UTF-8"))
        );
        assert_eq!(e[2].id(), "b.wav");
    }

    #[test]
    fn csv_with_quotes_optional_columns_and_bad_rows() {
        let text = "id,path,offset,duration\nx,\"dir, with comma/x.wav\",0.5,\ny,y.wav,,2\nz,,1,1\nw,w.wav,abc,1\n";
        let e: Vec<Entry> = parse_csv(text.as_bytes(), "/d".into(), "m.csv")
            .unwrap()
            .collect();
        assert_eq!(e.len(), 4);
        assert_eq!(
            e[0],
            Entry::Item(SourceItem {
                id: "x".into(),
                path: "/d/dir, with comma/x.wav".into(),
                offset_s: 0.5,
                duration_s: None,
                member: None,
            })
        );
        assert!(matches!(&e[1], Entry::Item(i) if i.duration_s == Some(2.0)));
        assert!(matches!(&e[2], Entry::Invalid { .. }));
        assert!(matches!(&e[3], Entry::Invalid { reason, .. } if reason.contains("abc")));
        assert!(parse_csv("name,file\na,b\n".as_bytes(), ".".into(), "m.csv").is_err());
    }

    #[test]
    fn shards_partition_the_items() {
        for len in [0, 1, 7, 100, 101] {
            for count in [1, 2, 3, 8] {
                let mut next = 0;
                for i in 0..count {
                    let r = shard_range(len, i, count);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, len);
            }
        }
    }
}
