//! `nemo_manifest` and `csv_manifest`: manifests through `parse_nemo` / `parse_csv`, and
//! through `Source`, whose count (what shards are cut by) must agree with its entries.

use std::path::{Path, PathBuf};

use sonograph_io::manifest::{parse_csv, parse_nemo, Entry, SourceError, SourceItem};
use sonograph_io::manifest::{shard_range, Source};

use crate::harness::{assert_names, run, Scratch};

/// The folder relative paths resolve against.
const BASE: &str = "/data/corpus";

fn resolved(base: &Path, p: &str) -> PathBuf {
    if Path::new(p).is_absolute() {
        PathBuf::from(p)
    } else {
        base.join(p)
    }
}

/// A span a manifest may give: offset finite and ≥ 0, duration absent or finite and > 0.
fn assert_span(item: &SourceItem) {
    assert!(
        item.offset_s.is_finite() && item.offset_s >= 0.0,
        "{}: offset {} accepted",
        item.id,
        item.offset_s
    );
    if let Some(d) = item.duration_s {
        assert!(
            d.is_finite() && d > 0.0,
            "{}: duration {d} accepted",
            item.id
        );
    }
}

fn assert_one_line(what: &str, text: &str) {
    assert!(
        !text.contains('\n') && !text.contains('\r'),
        "{what} spans lines: {text:?}"
    );
}

/// A manifest written to a file and opened as a source: its `count()` (the shards' sizes)
/// equals the entries it streams, which are `parsed` with the file's folder as the base.
fn check_source(path: &Path, parsed: &[Entry]) {
    let source = Source::open(path).expect("a manifest that exists opens");
    // Entries are named by the manifest's file name, so that every shard names them alike
    // however the path was spelled: errors name it the same way.
    let name = Path::new(path.file_name().expect("a file"));
    let count = source.count();
    if let Err(e) = &count {
        assert_names(&e.to_string(), name);
    }
    let entries: Result<Vec<Entry>, SourceError> = source
        .entries()
        .and_then(|entries| entries.collect::<Result<Vec<_>, _>>());
    if let Err(e) = &entries {
        assert_names(&e.to_string(), name);
    }
    match (count, entries) {
        (Ok(count), Ok(entries)) => {
            assert_eq!(
                count,
                entries.len(),
                "count() disagrees with the entries streamed: shards would be cut wrong"
            );
            assert_eq!(
                entries.len(),
                parsed.len(),
                "the source streams another list"
            );
            for (a, b) in entries.iter().zip(parsed) {
                assert_eq!(a, b, "the source streams another entry");
            }
            // Shards partition the entries.
            for shards in [1, 2, 3, 7] {
                let mut next = 0;
                for i in 0..shards {
                    let r = shard_range(count, i, shards);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, count);
            }
        }
        (Err(_), Err(_)) => assert!(
            parsed.is_empty(),
            "the source fails where the same bytes parse"
        ),
        (count, entries) => panic!(
            "count() and entries() disagree: {:?} and {:?}",
            count.map_err(|e| e.to_string()),
            entries.map(|e| e.len()).map_err(|e| e.to_string())
        ),
    }
}

/// NeMo JSON lines, every entry iterated.
pub fn nemo_manifest(data: &[u8]) {
    run("nemo_manifest", || {
        let base = PathBuf::from(BASE);
        let entries: Vec<Entry> = parse_nemo(data, base.clone(), "m.jsonl".into())
            .map(|r| r.expect("reading from memory cannot fail"))
            .collect();
        // Every line that is not blank is one entry, in order, named by its number.
        let lines: Vec<(usize, &[u8])> = data
            .split(|&b| b == b'\n')
            .enumerate()
            .filter(|(_, l)| !l.trim_ascii().is_empty())
            .collect();
        assert_eq!(
            entries.len(),
            lines.len(),
            "not one entry per non-blank line"
        );
        for (entry, (n, line)) in entries.iter().zip(&lines) {
            match entry {
                Entry::Invalid { id, reason } => {
                    assert_eq!(id, &format!("m.jsonl:{}", n + 1));
                    assert_one_line("a line's reason", reason);
                }
                Entry::Item(item) => {
                    assert_span(item);
                    // The fields sonograph reads (other keys are skipped unparsed, as there).
                    #[derive(serde::Deserialize)]
                    struct Line {
                        audio_filepath: String,
                        offset: Option<f64>,
                    }
                    let fields: Line = serde_json::from_slice(line).expect("an item's line parses");
                    let file = fields.audio_filepath.as_str();
                    assert_eq!(item.path, resolved(&base, file));
                    let want_id = match fields.offset {
                        Some(_) => format!("{file}@{}", item.offset_s),
                        None => file.to_string(),
                    };
                    assert_eq!(item.id, want_id);
                }
                Entry::Iq { .. } => panic!("a manifest line became an IQ recording"),
            }
        }
        let scratch = Scratch::new("nemo");
        let path = scratch.write("m.jsonl", data);
        let reparsed: Vec<Entry> = parse_nemo(data, scratch.path().to_path_buf(), "m.jsonl".into())
            .map(|r| r.expect("reading from memory cannot fail"))
            .collect();
        check_source(&path, &reparsed);
    })
}

/// CSV with a header naming `id` and `path`, every row iterated.
pub fn csv_manifest(data: &[u8]) {
    run("csv_manifest", || {
        let base = PathBuf::from(BASE);
        let entries: Vec<Entry> = match parse_csv(data, base.clone(), "m.csv") {
            Err(e) => {
                assert!(
                    matches!(e, SourceError::Format { .. }),
                    "a bad header is a format error: {e:?}"
                );
                assert_one_line("a refused header's reason", &e.to_string());
                Vec::new()
            }
            Ok(rows) => rows.collect(),
        };
        for (i, entry) in entries.iter().enumerate() {
            match entry {
                Entry::Invalid { id, reason } => {
                    assert_eq!(id, &format!("m.csv:{}", i + 2));
                    assert_one_line("a row's reason", reason);
                }
                Entry::Item(item) => {
                    assert_span(item);
                    assert!(!item.id.is_empty(), "an item without an id");
                    assert!(
                        item.path.starts_with(&base) || item.path.is_absolute(),
                        "{} resolved outside the manifest's folder and is not absolute",
                        item.path.display()
                    );
                }
                Entry::Iq { .. } => panic!("a manifest row became an IQ recording"),
            }
        }
        let scratch = Scratch::new("csv");
        let path = scratch.write("m.csv", data);
        let reparsed: Vec<Entry> = match parse_csv(data, scratch.path().to_path_buf(), "m.csv") {
            Ok(rows) => rows.collect(),
            Err(_) => Vec::new(),
        };
        assert_eq!(reparsed.len(), entries.len());
        check_source(&path, &reparsed);
    })
}
