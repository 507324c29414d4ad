//! A source listed whole with its items' durations (from a manifest, else from each file's
//! header): what the training loader samples from, what the augmentation's noise and
//! impulse-response corpora are drawn from, and what `sonograph manifest` writes.

use std::path::Path;

use rayon::prelude::*;
use sonograph_io::decode::{AudioReader, DecodeOptions, Limits};
use sonograph_io::manifest::{Entry, Source, SourceItem};

/// An entry of a source: its id, and its item or why it cannot be one.
pub type Listed = (String, Result<SourceItem, String>);

/// The source's entries: audio items, or why an entry cannot be one.
pub fn list(source: &Path) -> Result<Vec<Listed>, String> {
    let source = Source::open(source).map_err(|e| e.to_string())?;
    let entries = source.entries().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        out.push(match entry {
            Entry::Item(item) => (item.id.clone(), Ok(item)),
            Entry::Iq { id, .. } => (id, Err("an IQ recording: run extract on it".into())),
            Entry::Invalid { id, reason } => (id, Err(reason)),
        });
    }
    Ok(out)
}

/// Each entry's duration in seconds: the manifest's, else the file's (less the offset), read
/// on `threads` threads; 0 for an entry that cannot be read (it fails when loaded).
pub fn durations(listed: &[Listed], threads: usize) -> Vec<f64> {
    let of = |entry: &Listed| -> f64 {
        let Ok(item) = &entry.1 else { return 0.0 };
        if let Some(d) = item.duration_s {
            return d;
        }
        describe(&item.path, &Default::default())
            .map_or(0.0, |(_, _, d)| (d - item.offset_s).max(0.0))
    };
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(|| listed.par_iter().map(of).collect()),
        Err(_) => listed.iter().map(of).collect(),
    }
}

/// A file's sample rate, channels and duration in seconds: the header's length where it
/// declares one, else the frames of a decode (under the limits).
pub fn describe(path: &Path, limits: &Limits) -> Result<(u32, usize, f64), String> {
    let opts = DecodeOptions {
        limits: *limits,
        ..Default::default()
    };
    let mut reader = AudioReader::open_for_header(path, &opts).map_err(|e| e.to_string())?;
    let info = reader.info().clone();
    let frames = match info.declared_frames {
        Some(n) => n,
        None => {
            while reader.next_chunk().map_err(|e| e.to_string())?.is_some() {}
            reader.frames_read()
        }
    };
    Ok((
        info.sample_rate,
        info.channels,
        frames as f64 / f64::from(info.sample_rate),
    ))
}
