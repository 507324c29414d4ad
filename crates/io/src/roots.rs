//! Where a job may open files: anywhere (the CLI and Python, which act for the user who runs
//! them), or only beneath some folders (the service's `--data-root`s, which a request must not
//! leave). Confinement holds at the moment a file is opened: the path is resolved by the kernel
//! beneath the root's open handle (cap-std: `openat2` with `RESOLVE_BENEATH` where the kernel
//! has it), so neither `..` nor a symlink inside a root — planted before the job or during it —
//! leads out of it.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::remote::RemoteObject;
use crate::span::{Blob, ObjectVersion};

/// Where files may be opened from. Cheap to clone.
#[derive(Clone, Default)]
pub struct Roots(Option<Arc<[Root]>>);

struct Root {
    /// The folder as given and as resolved: a path beneath either names a file beneath it.
    given: PathBuf,
    canonical: PathBuf,
    dir: Dir,
}

impl std::fmt::Debug for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Roots(anywhere)"),
            Some(roots) => f
                .debug_list()
                .entries(roots.iter().map(|r| &r.canonical))
                .finish(),
        }
    }
}

impl Roots {
    /// No confinement.
    pub fn anywhere() -> Roots {
        Roots(None)
    }

    /// Only beneath `folders` (each opened now: a folder that cannot be is an error).
    pub fn beneath(folders: &[PathBuf]) -> io::Result<Roots> {
        let roots = folders
            .iter()
            .map(|given| {
                let canonical = given.canonicalize().map_err(|e| named(given, e))?;
                let dir = Dir::open_ambient_dir(&canonical, ambient_authority())
                    .map_err(|e| named(given, e))?;
                Ok(Root {
                    given: given.clone(),
                    canonical,
                    dir,
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Roots(Some(roots.into())))
    }

    pub fn is_confined(&self) -> bool {
        self.0.is_some()
    }

    /// Refuses object storage to a confined job.
    fn check_remote(&self, path: &Path) -> io::Result<()> {
        if self.is_confined() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{}: object storage is outside the data roots",
                    path.display()
                ),
            ));
        }
        Ok(())
    }

    /// Opens `path` for reading.
    pub fn open(&self, path: &Path) -> io::Result<File> {
        if !self.is_confined() {
            return File::open(path);
        }
        self.resolved(path, |dir, rel| dir.open(rel).map(|f| f.into_std()))
    }

    /// Opens `path` for reading by offset: a local file, or an object in object storage
    /// (which no confined job may read: the service reads beneath its data roots only).
    pub fn open_blob(&self, path: &Path) -> io::Result<Blob> {
        self.open_blob_reading(path, None)
    }

    /// [`open_blob`](Self::open_blob) for an object a listing opened (`listed`): without a
    /// request, and held to the version listed.
    pub fn open_listed(&self, path: &Path, listed: Option<&ObjectVersion>) -> io::Result<Blob> {
        match listed {
            Some(l) if crate::remote::is_url(path) => {
                self.check_remote(path)?;
                RemoteObject::known(path, l.len, l.version.clone())
                    .map(|object| Blob::Remote(Arc::new(object)))
            }
            _ => self.open_blob(path),
        }
    }

    /// [`open_blob`](Self::open_blob), an object read from its start at once where `first`
    /// says how much (see `RemoteObject::open_reading`).
    pub fn open_blob_reading(&self, path: &Path, first: Option<u64>) -> io::Result<Blob> {
        if crate::remote::is_url(path) {
            self.check_remote(path)?;
            let object = match first {
                Some(first) => RemoteObject::open_reading(path, first)?,
                None => RemoteObject::open(path)?,
            };
            return Ok(Blob::Remote(Arc::new(object)));
        }
        self.open(path).map(Blob::from)
    }

    /// Whether `path` is a folder (resolved beneath a root when confined).
    pub fn is_dir(&self, path: &Path) -> io::Result<bool> {
        if !self.is_confined() {
            return Ok(std::fs::metadata(path)?.is_dir());
        }
        self.resolved(path, |dir, rel| {
            if rel.as_os_str().is_empty() {
                dir.dir_metadata()
            } else {
                dir.metadata(rel)
            }
            .map(|m| m.is_dir())
        })
    }

    /// Checks that `path` resolves beneath a root now, every symlink on the way included;
    /// a path that does not exist yet is checked through its nearest existing ancestor.
    pub fn check(&self, path: &Path) -> io::Result<()> {
        if !self.is_confined() {
            return Ok(());
        }
        if crate::remote::is_url(path) {
            return self.check_remote(path);
        }
        let mut existing = path;
        while std::fs::symlink_metadata(existing).is_err() {
            match existing.parent() {
                Some(parent) => existing = parent,
                None => break,
            }
        }
        self.resolved(existing, |dir, rel| {
            if rel.as_os_str().is_empty() {
                dir.dir_metadata()
            } else {
                dir.metadata(rel)
            }
            .map(|_| ())
        })
    }

    /// `op` on `path` beneath the root it lies under. The kernel refuses any resolution that
    /// leaves the root, absolute symlinks included, even those that point back inside it:
    /// such a path is tried once more by its canonical spelling (no symlink left to follow),
    /// again beneath the root, so that the open itself stays confined whatever changed.
    fn resolved<T>(&self, path: &Path, op: impl Fn(&Dir, &Path) -> io::Result<T>) -> io::Result<T> {
        let (root, rel) = self.beneath_which(path)?.expect("confined");
        match op(&root.dir, rel) {
            Ok(v) => Ok(v),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(named(path, e)),
            Err(e) => {
                let canonical = path.canonicalize().map_err(|_| escaped(path, &e))?;
                match self.beneath_which(&canonical) {
                    Ok(Some((root, rel))) => op(&root.dir, rel).map_err(|_| escaped(path, &e)),
                    _ => Err(escaped(path, &e)),
                }
            }
        }
    }

    /// The root `path` lies under (by its spelling) and the rest of the path; `None` when not
    /// confined; an error naming the path when it is under none. `..` is refused outright: a
    /// path that climbs is never needed to name a file beneath a root.
    fn beneath_which<'p>(&self, path: &'p Path) -> io::Result<Option<(&Root, &'p Path)>> {
        let Some(roots) = &self.0 else {
            return Ok(None);
        };
        let outside = || {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: outside the data roots", path.display()),
            )
        };
        if path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(outside());
        }
        roots
            .iter()
            .find_map(|root| {
                [&root.canonical, &root.given]
                    .into_iter()
                    .find_map(|base| path.strip_prefix(base).ok())
                    .map(|rel| (root, rel))
            })
            .map(Some)
            .ok_or_else(outside)
    }
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// cap-std's refusal of a path that leads out of its root says so in its own words; ours
/// names the path and the rule.
fn escaped(path: &Path, e: &io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{}: outside the data roots, through a symlink or otherwise ({e})",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn files_beneath_open_and_no_way_out_does() {
        let tmp = Tmp(std::env::temp_dir().join(format!("sonograph-roots-{}", std::process::id())));
        let (root, outside) = (tmp.0.join("root"), tmp.0.join("outside"));
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("sub/in.txt"), "in").unwrap();
        std::fs::write(outside.join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("dirlink")).unwrap();
        std::os::unix::fs::symlink("sub/in.txt", root.join("inner.txt")).unwrap();
        std::os::unix::fs::symlink(root.join("sub/in.txt"), root.join("absolute.txt")).unwrap();
        let roots = Roots::beneath(std::slice::from_ref(&root)).unwrap();
        let read = |p: PathBuf| -> io::Result<String> {
            let mut s = String::new();
            io::Read::read_to_string(&mut roots.open(&p)?, &mut s)?;
            Ok(s)
        };
        assert_eq!(read(root.join("sub/in.txt")).unwrap(), "in");
        // A symlink that stays inside is followed, relative or absolute.
        assert_eq!(read(root.join("inner.txt")).unwrap(), "in");
        assert_eq!(read(root.join("absolute.txt")).unwrap(), "in");
        for p in [
            root.join("link.txt"),
            root.join("dirlink/secret.txt"),
            root.join("sub/../../outside/secret.txt"),
            outside.join("secret.txt"),
        ] {
            let e = read(p.clone()).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{p:?}: {e}");
            assert!(e.to_string().contains("data roots"), "{e}");
        }
        assert!(roots.is_dir(&root).unwrap());
        assert!(roots.is_dir(&root.join("sub")).unwrap());
        assert!(roots.is_dir(&root.join("dirlink")).is_err());
        roots.check(&root.join("new/deeper")).unwrap();
        assert!(roots.check(&root.join("dirlink/new")).is_err());
        // Unconfined, the same paths open.
        assert_eq!(
            io::read_to_string(Roots::anywhere().open(&root.join("link.txt")).unwrap()).unwrap(),
            "secret"
        );
    }

    /// A confined job reads no object storage: a URL is outside every data root, refused
    /// before any request is made (no credentials are looked for).
    #[test]
    fn object_storage_is_outside_the_data_roots() {
        let tmp =
            Tmp(std::env::temp_dir().join(format!("sonograph-roots-url-{}", std::process::id())));
        std::fs::create_dir_all(&tmp.0).unwrap();
        let roots = Roots::beneath(std::slice::from_ref(&tmp.0)).unwrap();
        let e = roots.open_blob(Path::new("s3://bucket/a.wav")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(
            e.to_string(),
            "s3://bucket/a.wav: object storage is outside the data roots"
        );
        // A source checked before it is listed (rf-features' recordings) likewise.
        let e = roots.check(Path::new("s3://bucket/iq")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "s3://bucket/iq: object storage is outside the data roots"
        );
        std::fs::write(tmp.0.join("a.wav"), "x").unwrap();
        assert!(matches!(
            roots.open_blob(&tmp.0.join("a.wav")).unwrap(),
            Blob::File(_)
        ));
    }
}
