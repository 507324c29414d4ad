//! A file, or a range of one (a member of a tar archive), read as a file of its own: the
//! header guards and symphonia see the range alone, and a member is decoded where it lies,
//! without a copy.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

/// `len` bytes of a file from byte `start`.
pub struct Span {
    file: File,
    start: u64,
    len: u64,
    /// The read position, from `start`.
    pos: u64,
}

impl Span {
    /// All of `file`.
    pub fn whole(file: File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(Span {
            file,
            start: 0,
            len,
            pos: 0,
        })
    }

    /// `len` bytes of `file` from `start`, refused where they pass its end (an archive that
    /// changed since it was listed).
    pub fn range(file: File, start: u64, len: u64) -> io::Result<Self> {
        let total = file.metadata()?.len();
        if start.checked_add(len).is_none_or(|end| end > total) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{len} bytes at byte {start} pass the archive's end ({total} bytes)"),
            ));
        }
        Ok(Span {
            file,
            start,
            len,
            pos: 0,
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `len` bytes from `at` (fewer at the range's end), leaving the position alone.
    pub(crate) fn read_at(&self, at: u64, len: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let len = len.min(usize::try_from(self.len.saturating_sub(at)).unwrap_or(usize::MAX));
        let mut buf = vec![0u8; len];
        let mut got = 0;
        while got < len {
            match self
                .file
                .read_at(&mut buf[got..], self.start + at + got as u64)
            {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        buf.truncate(got);
        buf
    }
}

impl Read for Span {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let left = self.len.saturating_sub(self.pos);
        let n = usize::try_from(left).map_or(buf.len(), |left| left.min(buf.len()));
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.start + self.pos)?;
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
