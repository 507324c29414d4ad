//! The machine's device measurements (how fast each device extracts each spec, what `auto`
//! chooses by), kept in `calibration.json` of the cache folder: `SONOGRAPH_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/sonograph`, else `~/.cache/sonograph`. A cache that cannot be read or
//! written only costs the next run a measurement.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sonograph_dsp::CalibrationStore;

/// The measurements in the cache file, read when opened, written whole at each new one.
pub struct FileStore {
    path: Option<PathBuf>,
    entries: BTreeMap<String, f64>,
}

impl FileStore {
    pub fn open() -> FileStore {
        let path = cache_dir().map(|d| d.join("calibration.json"));
        let entries = path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        FileStore { path, entries }
    }
}

impl CalibrationStore for FileStore {
    fn get(&self, key: &str) -> Option<f64> {
        self.entries.get(key).copied()
    }

    fn put(&mut self, key: String, rate: f64) {
        self.entries.insert(key, rate);
        let Some(path) = &self.path else { return };
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                let text =
                    serde_json::to_string_pretty(&self.entries).map_err(std::io::Error::other)?;
                crate::publish::publish_bytes(path, text.as_bytes())
            });
        if let Err(e) = written {
            warn_once(path, &e);
        }
    }
}

/// Says once on stderr that the cache cannot be written.
fn warn_once(path: &std::path::Path, e: &std::io::Error) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        eprintln!(
            "sonograph: warning: the device calibration cache {} cannot be written: {e}",
            path.display()
        )
    });
}

/// `SONOGRAPH_CACHE_DIR`, else `$XDG_CACHE_HOME/sonograph`, else `~/.cache/sonograph`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SONOGRAPH_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("sonograph"))
}
