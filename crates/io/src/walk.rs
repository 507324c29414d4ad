//! Walking a folder: its files in the order of their ids (paths relative to the folder, joined
//! by `/`), as a stream (walkdir), for folder sources, SigMF folders and `sonograph manifest`.

use std::path::{Path, PathBuf};

/// A folder or entry that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot read: {source}")]
pub struct WalkError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// The files of a folder that `accept` takes (recursively, hidden and `_` entries skipped,
/// symlinked folders not followed), as a stream: `(id, path)` of each file `accept` takes, in id order (the
/// order of the ids as strings: a folder's entries are visited as if each folder's name ended
/// in `/`), holding one folder's listing at a time, whatever the tree's size.
pub fn walk_sorted<'a>(
    root: &Path,
    accept: impl Fn(&Path) -> bool + 'a,
) -> impl Iterator<Item = Result<(String, PathBuf), WalkError>> + 'a {
    let root_path = root.to_path_buf();
    // Within a folder, a sub-folder sorts as its name and a `/`, as it does in an id.
    let key = |e: &walkdir::DirEntry| {
        let mut name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().is_dir() {
            name.push('/');
        }
        name
    };
    walkdir::WalkDir::new(root)
        .follow_links(false)
        .sort_by(move |a, b| key(a).cmp(&key(b)))
        .into_iter()
        // Hidden entries and our own bookkeeping (e.g. an output dir inside the input).
        .filter_entry(|e| {
            e.depth() == 0 || !e.file_name().to_string_lossy().starts_with(['.', '_'])
        })
        .filter_map(move |entry| {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    let path = e.path().unwrap_or(&root_path).to_path_buf();
                    let source = e
                        .into_io_error()
                        .unwrap_or_else(|| std::io::Error::other("a symlink loop"));
                    return Some(Err(WalkError { path, source }));
                }
            };
            let path = entry.path();
            // A symlink to a file is a file of the folder; one to a folder is not followed.
            let is_file =
                entry.file_type().is_file() || (entry.file_type().is_symlink() && path.is_file());
            if entry.depth() == 0 || !is_file || !accept(path) {
                return None;
            }
            let rel = path.strip_prefix(&root_path).unwrap_or(path);
            let id = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            Some(Ok((id, path.to_path_buf())))
        })
}
