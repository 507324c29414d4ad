//! A file, or a range of one (a member of a tar archive), read as a file of its own: the
//! header guards and symphonia see the range alone, and a member is decoded where it lies,
//! without a copy. The file is local or an object in object storage ([`Blob`]).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use crate::remote::RemoteObject;

/// The version of an object a listing opened: its size and ETag, so that later reads take
/// that version without asking again. (`remote::ListedObject` is an entry of a listing.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVersion {
    pub len: u64,
    pub version: Option<String>,
}

/// Bytes to read by offset: a local file, or an object read by byte range.
#[derive(Debug, Clone)]
pub enum Blob {
    File(Arc<File>),
    Remote(Arc<RemoteObject>),
}

impl From<File> for Blob {
    fn from(file: File) -> Blob {
        Blob::File(Arc::new(file))
    }
}

impl Blob {
    /// The object as it was opened (its size and ETag), for reading its members later without
    /// asking again; `None` for a local file.
    pub fn listed(&self) -> Option<ObjectVersion> {
        match self {
            Blob::File(_) => None,
            Blob::Remote(r) => Some(ObjectVersion {
                len: r.len(),
                version: r.version().map(str::to_string),
            }),
        }
    }

    /// Fetches `bytes` of an object now, for the reads that follow (see
    /// [`RemoteObject::prefetch`]); nothing for a local file.
    pub fn prefetch(&self, bytes: std::ops::Range<u64>) -> io::Result<()> {
        match self {
            Blob::File(_) => Ok(()),
            Blob::Remote(r) => r.prefetch(bytes),
        }
    }

    /// Its length in bytes.
    pub fn size(&self) -> io::Result<u64> {
        match self {
            Blob::File(f) => Ok(f.metadata()?.len()),
            Blob::Remote(r) => Ok(r.len()),
        }
    }

    /// Reads into `buf` from byte `at`, as `pread` does.
    pub fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        match self {
            Blob::File(f) => f.read_at(buf, at),
            Blob::Remote(r) => r.read_at(buf, at),
        }
    }
}

/// `len` bytes of a file from byte `start`.
#[derive(Clone)]
pub struct Span {
    blob: Blob,
    start: u64,
    len: u64,
    /// The read position, from `start`.
    pos: u64,
}

impl Span {
    /// All of `blob`.
    pub fn whole(blob: impl Into<Blob>) -> io::Result<Self> {
        let blob = blob.into();
        let len = blob.size()?;
        Ok(Span {
            blob,
            start: 0,
            len,
            pos: 0,
        })
    }

    /// `len` bytes of `blob` from `start`, refused where they pass its end (an archive that
    /// changed since it was listed).
    pub fn range(blob: impl Into<Blob>, start: u64, len: u64) -> io::Result<Self> {
        let blob = blob.into();
        let total = blob.size()?;
        if start.checked_add(len).is_none_or(|end| end > total) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{len} bytes at byte {start} pass the archive's end ({total} bytes)"),
            ));
        }
        Ok(Span {
            blob,
            start,
            len,
            pos: 0,
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Says which bytes of the span the reader expects to read (an object then fetches them
    /// in one request; a local file reads no further ahead than asked anyway).
    pub fn expect(&self, bytes: std::ops::Range<u64>) {
        if let Blob::Remote(object) = &self.blob {
            let end = bytes.end.min(self.len);
            object.expect(self.start + bytes.start.min(end)..self.start + end);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `len` bytes from `at` (fewer at the range's end), leaving the position alone; what
    /// could be read where a read fails (for the header guards, which judge the bytes they
    /// get: the decoder meets the failure itself).
    pub(crate) fn read_at(&self, at: u64, len: usize) -> Vec<u8> {
        self.read_up_to(at, len).0
    }

    /// [`read_at`](Self::read_at), a failed read an error: an object replaced since it was
    /// listed, a connection lost after its retries.
    pub(crate) fn try_read_at(&self, at: u64, len: usize) -> io::Result<Vec<u8>> {
        match self.read_up_to(at, len) {
            (bytes, None) => Ok(bytes),
            (_, Some(e)) => Err(e),
        }
    }

    fn read_up_to(&self, at: u64, len: usize) -> (Vec<u8>, Option<io::Error>) {
        let len = len.min(usize::try_from(self.len.saturating_sub(at)).unwrap_or(usize::MAX));
        let mut buf = vec![0u8; len];
        let mut got = 0;
        let mut failed = None;
        while got < len {
            match self
                .blob
                .read_at(&mut buf[got..], self.start + at + got as u64)
            {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        buf.truncate(got);
        (buf, failed)
    }
}

impl Read for Span {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.len.saturating_sub(self.pos);
        let n = usize::try_from(left).map_or(buf.len(), |left| left.min(buf.len()));
        if n == 0 {
            return Ok(0);
        }
        let got = self.blob.read_at(&mut buf[..n], self.start + self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

impl Seek for Span {
    /// As a file seeks: past the end is allowed (reads there give nothing), before the start
    /// is an error.
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        }
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a seek before the start"))?;
        self.pos = target;
        Ok(target)
    }
}

impl symphonia::core::io::MediaSource for Span {
    fn is_seekable(&self) -> bool {
        true
    }

    fn byte_len(&self) -> Option<u64> {
        Some(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range reads, seeks and ends as a file of its bytes would.
    #[test]
    fn a_range_is_a_file_of_its_bytes() {
        let path = std::env::temp_dir().join(format!("sonograph-span-{}", std::process::id()));
        std::fs::write(&path, b"0123456789").unwrap();
        let mut s = Span::range(File::open(&path).unwrap(), 3, 4).unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        assert_eq!(all, b"3456");
        assert_eq!(s.seek(SeekFrom::End(-1)).unwrap(), 3);
        let mut one = [0u8; 8];
        assert_eq!(s.read(&mut one).unwrap(), 1);
        assert_eq!(one[0], b'6');
        assert_eq!(s.seek(SeekFrom::Current(5)).unwrap(), 9);
        assert_eq!(s.read(&mut one).unwrap(), 0);
        assert!(s.seek(SeekFrom::Current(-10)).is_err());
        assert_eq!(s.read_at(1, 100), b"456");
        assert_eq!(s.read_at(9, 4), b"");
        let past = Span::range(File::open(&path).unwrap(), 8, 3).err().unwrap();
        assert!(past
            .to_string()
            .contains("3 bytes at byte 8 pass the archive's end (10 bytes)"));
        assert_eq!(Span::whole(File::open(&path).unwrap()).unwrap().len(), 10);
        std::fs::remove_file(&path).unwrap();
    }
}
