//! NumPy `.npy` (format 1.0) writer for float32 C-order arrays. The format is a 10-byte
//! preamble and a Python-literal header; a dependency would add more than it saves.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::WriteError;

/// Writes `data` as a float32 array of `shape`. The file appears whole or not at all: it is
/// written under a temporary name and renamed.
pub fn write_npy_f32(path: &Path, shape: &[usize], data: &[f32]) -> Result<(), WriteError> {
    let count: usize = shape.iter().product();
    if count != data.len() {
        return Err(WriteError::Shape {
            path: path.to_path_buf(),
            shape: shape.to_vec(),
            len: data.len(),
        });
    }
    let io = |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = Path::new(&tmp_name);
    let mut w = BufWriter::new(File::create(tmp).map_err(io)?);
    w.write_all(&npy_header(shape)).map_err(io)?;
    for v in data {
        w.write_all(&v.to_le_bytes()).map_err(io)?;
    }
    w.into_inner()
        .map_err(|e| io(e.into_error()))?
        .sync_all()
        .map_err(io)?;
    std::fs::rename(tmp, path).map_err(io)
}

/// Preamble + header dict, space-padded so that the data starts on a 64-byte boundary.
pub fn npy_header(shape: &[usize]) -> Vec<u8> {
    let dims = match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

/// Reads a float32 little-endian C-order `.npy` (what [`write_npy_f32`] and numpy write);
/// returns the shape and the values. For tests and tools, not hostile input.
pub fn read_npy_f32(path: &Path) -> Result<(Vec<usize>, Vec<f32>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |why: &str| format!("{}: not a float32 .npy: {why}", path.display());
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("no magic"));
    }
    let (header_len, start) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        _ => return Err(bad("unknown version")),
    };
    let header = std::str::from_utf8(
        bytes
            .get(start..start + header_len)
            .ok_or_else(|| bad("short header"))?,
    )
    .map_err(|_| bad("header is not text"))?;
    if !header.contains("'<f4'") || header.contains("'fortran_order': True") {
        return Err(bad("not little-endian float32 in C order"));
    }
    let shape_text = header
        .split("'shape':")
        .nth(1)
        .and_then(|s| s.split('(').nth(1))
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("no shape"))?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| bad("bad shape")))
        .collect::<Result<_, _>>()?;
    let data: Vec<f32> = bytes[start + header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if data.len() != shape.iter().product::<usize>() {
        return Err(bad("data length does not match the shape"));
    }
    Ok((shape, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_aligned_and_round_trips() {
        for shape in [vec![0, 80], vec![3], vec![123, 4567]] {
            let h = npy_header(&shape);
            assert_eq!(h.len() % 64, 0);
            assert_eq!(*h.last().unwrap(), b'\n');
        }
        let dir = std::env::temp_dir().join(format!("sonograph-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.npy");
        let data: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
        write_npy_f32(&path, &[2, 3], &data).unwrap();
        assert_eq!(read_npy_f32(&path).unwrap(), (vec![2, 3], data));
        assert!(write_npy_f32(&path, &[4, 3], &[0.0]).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
