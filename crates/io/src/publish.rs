//! The one way sonograph puts a file in place: written under a temporary name beside it,
//! synced, renamed (or linked) to its name, and the folder synced. A reader — a resumed job, a
//! dataset loader — finds the file whole or not at all, whatever instant the process dies at
//! and after a power cut: the data reaches the disk before the name does, and the name before
//! the writer moves on.
//!
//! The temporary file is created fresh (`O_CREAT | O_EXCL`, which follows no symlink): a stale
//! one left by a crash is removed first, and a symlink planted in its place is never written
//! through.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A file being written under its temporary name ([`tmp_path`]).
#[derive(Debug)]
pub struct Draft {
    path: PathBuf,
    tmp: PathBuf,
}

/// A draft whose contents are on the disk, ready to take its name.
#[derive(Debug)]
pub struct Synced {
    path: PathBuf,
    tmp: PathBuf,
}

/// The temporary name of `path`: `.NAME.tmp` beside it (a rename stays in one filesystem),
/// hidden, so that a dataset reader listing the folder while a file is written, or after a
/// crash, never opens half a file.
pub fn tmp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

impl Draft {
    /// Creates `path`'s temporary file, empty, for writing.
    pub fn create(path: &Path) -> io::Result<(Draft, File)> {
        let tmp = tmp_path(path);
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(named(&tmp, e)),
        }
        let file = OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| named(&tmp, e))?;
        Ok((
            Draft {
                path: path.to_path_buf(),
                tmp,
            },
            file,
        ))
    }

    /// The final name.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary name, where the contents are being written.
    pub fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// Syncs `file` (this draft's) to the disk; it is closed.
    pub fn sync(self, file: File) -> io::Result<Synced> {
        crash_point("publish-before-sync");
        file.sync_all().map_err(|e| named(&self.tmp, e))?;
        Ok(Synced {
            path: self.path,
            tmp: self.tmp,
        })
    }

    /// Gives up: the temporary file is removed.
    pub fn abandon(self) {
        let _ = std::fs::remove_file(&self.tmp);
    }
}

impl Synced {
    /// The final name.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the file to its name, replacing what was there, and syncs the folder.
    pub fn publish(self) -> io::Result<()> {
        crash_point("publish-before-rename");
        std::fs::rename(&self.tmp, &self.path).map_err(|e| named(&self.path, e))?;
        sync_parent(&self.path)
    }

    /// Links the file to its name only where no file has it yet (false, and nothing changed,
    /// where one has): two processes racing to create it both see one whole file.
    pub fn publish_new(self) -> io::Result<bool> {
        crash_point("publish-before-rename");
        let linked = std::fs::hard_link(&self.tmp, &self.path);
        let _ = std::fs::remove_file(&self.tmp);
        match linked {
            Ok(()) => sync_parent(&self.path).map(|()| true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(named(&self.path, e)),
        }
    }
}

/// Puts synced files in place together: each renamed to its name, then each folder they are
/// in synced once, not once per file. Many small files (a batch of SigMF recordings) spent
/// about half of their publishing in folder syncs; this is as safe, since nothing may count a
/// file as done before this returns. A later group published after this one returns finds
/// this one's names on the disk first.
pub fn publish_all(files: Vec<Synced>) -> io::Result<()> {
    let mut folders = std::collections::BTreeSet::new();
    for file in files {
        crash_point("publish-before-rename");
        std::fs::rename(&file.tmp, &file.path).map_err(|e| named(&file.path, e))?;
        folders.insert(parent_of(&file.path).to_path_buf());
    }
    folders.iter().try_for_each(|folder| sync_folder(folder))
}

/// Writes `bytes` as the file `path`, whole (see the module's notes).
pub fn publish_bytes(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (draft, mut file) = Draft::create(path)?;
    if let Err(e) = file.write_all(bytes) {
        draft.abandon();
        return Err(named(path, e));
    }
    draft.sync(file)?.publish()
}

/// Syncs the folder holding `path`, so that a rename or link in it survives a power cut.
fn sync_parent(path: &Path) -> io::Result<()> {
    sync_folder(parent_of(path))
}

fn sync_folder(folder: &Path) -> io::Result<()> {
    crash_point("publish-before-dir-sync");
    File::open(folder)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| named(folder, e))
}

/// The folder holding `path` ("." for a bare name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Ends the process at once, as kill -9 or a power cut would, where the crash tests ask
/// (`FAILPOINTS=publish-before-rename=return`; failpoints builds only, a no-op otherwise).
fn crash_point(name: &str) {
    let _ = name;
    fail::fail_point!(name, |_| std::process::abort());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_published_whole_and_a_planted_symlink_is_not_written_through() {
        let dir = std::env::temp_dir().join(format!("sonograph-publish-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.bin");
        publish_bytes(&path, b"first").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        // A stale temporary file from a crash, then a symlink planted where it is made.
        std::fs::write(tmp_path(&path), b"stale").unwrap();
        publish_bytes(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"untouched").unwrap();
        std::os::unix::fs::symlink(&victim, tmp_path(&path)).unwrap();
        publish_bytes(&path, b"third").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
        assert!(!tmp_path(&path).exists());
        // Linked only where the name is free.
        let (draft, mut file) = Draft::create(&path).unwrap();
        file.write_all(b"fourth").unwrap();
        assert!(!draft.sync(file).unwrap().publish_new().unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
        assert!(!tmp_path(&path).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_published_together_are_all_in_place_and_no_temporary_is_left() {
        let dir =
            std::env::temp_dir().join(format!("sonograph-publish-all-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let names = [
            dir.join("a.bin"),
            dir.join("b.bin"),
            dir.join("sub").join("c.bin"),
        ];
        let synced: Vec<Synced> = names
            .iter()
            .map(|path| {
                let (draft, mut file) = Draft::create(path).unwrap();
                file.write_all(path.to_string_lossy().as_bytes()).unwrap();
                draft.sync(file).unwrap()
            })
            .collect();
        // Nothing is in place before the group is published.
        assert!(names.iter().all(|p| !p.exists()));
        publish_all(synced).unwrap();
        for path in &names {
            assert_eq!(
                std::fs::read(path).unwrap(),
                path.to_string_lossy().as_bytes()
            );
            assert!(!tmp_path(path).exists());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
