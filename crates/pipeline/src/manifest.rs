//! `sonograph manifest`: a NeMo manifest of a folder or a bucket prefix (one JSON line per
//! audio file: its path, duration, sample rate and channels), so that a corpus of millions of
//! files is listed once and every shard of a job reads its slice of the manifest instead of
//! walking the tree or listing the bucket. The folder is walked as a stream in id order (a
//! prefix listed, its objects' headers read by byte range), the headers read side by side, the
//! lines written in that order and published whole.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;
use sonograph_io::decode::Limits;
use sonograph_io::manifest::is_audio;
use sonograph_io::publish::Draft;
use sonograph_io::walk::walk_sorted;

use crate::error::JobError;
use crate::layout::io_err;
use crate::listing::describe;
use crate::report::Failure;

/// Files whose headers are read at once (a window of the walk).
const WINDOW: usize = 1024;

/// What a manifest lists and where it goes.
#[derive(Debug, Clone)]
pub struct ManifestOptions {
    pub source: PathBuf,
    pub out: PathBuf,
    /// Threads reading headers.
    pub workers: usize,
    pub limits: Limits,
}

/// What was listed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ManifestReport {
    pub files: u64,
    pub audio_seconds: f64,
    pub failed: u64,
    /// The first 1,000 files that could not be read, with why.
    pub failures: Vec<Failure>,
    pub wall_seconds: f64,
}

/// A line of the manifest (NeMo's keys; `extract` reads `audio_filepath` and `duration`).
#[derive(Serialize)]
struct Line<'a> {
    audio_filepath: &'a str,
    duration: f64,
    sample_rate: u32,
    channels: usize,
}

/// Writes the manifest of `o.source` to `o.out`.
pub fn write_manifest(o: &ManifestOptions) -> Result<ManifestReport, JobError> {
    let started = Instant::now();
    let remote = sonograph_io::remote::is_url(&o.source);
    if remote {
        if sonograph_io::remote::is_url(&o.out) {
            return Err(JobError::Config(format!(
                "{}: a manifest is written to a local file (copy it to the bucket after)",
                o.out.display()
            )));
        }
    } else if !o.source.is_dir() {
        return Err(JobError::Config(format!(
            "{}: the source of a manifest is a folder or a bucket prefix",
            o.source.display()
        )));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(o.workers.clamp(1, *crate::bounds::WORKERS.end()))
        .build()
        .map_err(|e| JobError::Internal(e.to_string()))?;
    // Paths relative to the manifest's folder where the files are under it (a manifest moved
    // with its corpus, or read on another machine that mounts both elsewhere, still works).
    let base = o
        .out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .canonicalize()
        .map_err(io_err(&o.out))?;
    let (draft, file) = Draft::create(&o.out).map_err(io_err(&o.out))?;
    let mut w = std::io::BufWriter::new(file);
    let mut report = ManifestReport::default();
    let mut walk: Box<dyn Iterator<Item = Result<(String, PathBuf), JobError>>> = if remote {
        // The store's error names the URL. One it refused or could not make (bad settings,
        // no such bucket, no permission) is the invocation's; others stay I/O errors.
        let listed = sonograph_io::remote::list(&o.source).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidInput
            | std::io::ErrorKind::NotFound
            | std::io::ErrorKind::PermissionDenied
            | std::io::ErrorKind::Unsupported => JobError::Input(e.to_string()),
            _ => io_err(&o.source)(e),
        })?;
        Box::new(
            listed
                .into_iter()
                .filter(|object| is_audio(&object.url))
                .map(|object| Ok((object.id, object.url))),
        )
    } else {
        Box::new(walk_sorted(&o.source, is_audio).map(|r| {
            r.map_err(|e| JobError::Io {
                path: e.path,
                error: e.source,
            })
        }))
    };
    loop {
        let window: Vec<(String, PathBuf)> =
            walk.by_ref().take(WINDOW).collect::<Result<_, _>>()?;
        if window.is_empty() {
            break;
        }
        let described: Vec<Result<(u32, usize, f64), String>> = pool.install(|| {
            window
                .par_iter()
                .map(|(_, path)| describe(path, &o.limits))
                .collect()
        });
        for ((id, path), d) in window.iter().zip(described) {
            match d {
                Ok((sample_rate, channels, duration)) => {
                    let shown = shown_path(path, &base);
                    let line = Line {
                        audio_filepath: &shown,
                        duration,
                        sample_rate,
                        channels,
                    };
                    serde_json::to_writer(&mut w, &line)
                        .map_err(|e| JobError::Internal(e.to_string()))?;
                    w.write_all(b"\n").map_err(io_err(&o.out))?;
                    report.files += 1;
                    report.audio_seconds += duration;
                }
                Err(reason) => {
                    report.failed += 1;
                    if report.failures.len() < 1000 {
                        report.failures.push(Failure {
                            id: id.clone(),
                            source: path.display().to_string(),
                            reason,
                        });
                    }
                }
            }
        }
    }
    let file = w.into_inner().map_err(|e| io_err(&o.out)(e.into_error()))?;
    draft
        .sync(file)
        .and_then(|s| s.publish())
        .map_err(io_err(&o.out))?;
    report.wall_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// `path` relative to `base` where it is under it, else as it is (absolute, or a URL).
fn shown_path(path: &Path, base: &Path) -> String {
    if sonograph_io::remote::is_url(path) {
        return path.to_string_lossy().into_owned();
    }
    let full = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    full.strip_prefix(base)
        .map(Path::to_path_buf)
        .unwrap_or(full)
        .to_string_lossy()
        .into_owned()
}
