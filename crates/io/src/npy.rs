//! NumPy `.npy` (format 1.0) writer for float32 or float16 C-order arrays. The format is a
//! 10-byte preamble and a Python-literal header; a dependency would add more than it saves.

use std::io::Write;
use std::path::Path;

use crate::error::WriteError;
use crate::parquet::Dtype;
use crate::publish::{Draft, Synced};

/// numpy's `descr` of each storage type.
fn descr(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "<f4",
        Dtype::F16 => "<f2",
    }
}

/// Writes `data` as an array of `shape`, stored as `dtype` (f16 rounds to nearest). The file
/// appears whole or not at all: it is written under a temporary name and renamed. It is not
/// fsynced (as numpy.save does not): a killed process leaves the old file or the new one, and
/// durability across a power loss is the filesystem's (a sync cost `features` half its time).
pub fn write_npy(
    path: &Path,
    shape: &[usize],
    data: &[f32],
    dtype: Dtype,
) -> Result<(), WriteError> {
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
    let (draft, mut file) = Draft::create(path).map_err(io)?;
    encode_npy(shape, data, dtype, &mut file).map_err(io)?;
    draft.sync(file).and_then(Synced::publish).map_err(io)
}

/// Writes the `.npy` of `data` (`shape`'s product of values, checked by the caller) to `out`.
pub(crate) fn encode_npy(
    shape: &[usize],
    data: &[f32],
    dtype: Dtype,
    out: &mut impl Write,
) -> std::io::Result<()> {
    out.write_all(&npy_header(shape, dtype))?;
    // Converted a block at a time: one write per block, a loop the compiler vectorises.
    let mut bytes = Vec::with_capacity(1 << 16);
    for block in data.chunks(1 << 14) {
        bytes.clear();
        match dtype {
            Dtype::F32 => block
                .iter()
                .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes())),
            Dtype::F16 => block
                .iter()
                .for_each(|&v| bytes.extend_from_slice(&half::f16::from_f32(v).to_le_bytes())),
        }
        out.write_all(&bytes)?;
    }
    Ok(())
}

/// Preamble + header dict, space-padded so that the data starts on a 64-byte boundary.
pub fn npy_header(shape: &[usize], dtype: Dtype) -> Vec<u8> {
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
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}",
        descr(dtype)
    );
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

/// Reads a float32 or float16 little-endian C-order `.npy` (what [`write_npy`] and numpy
/// write); returns the shape and the values as f32. For tests and tools, not hostile input.
pub fn read_npy_f32(path: &Path) -> Result<(Vec<usize>, Vec<f32>), String> {
    read_npy(path).map(|(shape, _, data)| (shape, data))
}

/// [`read_npy_f32`] that also says how the values were stored.
pub fn read_npy(path: &Path) -> Result<(Vec<usize>, Dtype, Vec<f32>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |why: &str| format!("{}: not a float32/float16 .npy: {why}", path.display());
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
    let dtype = [Dtype::F32, Dtype::F16]
        .into_iter()
        .find(|&d| header.contains(&format!("'{}'", descr(d))))
        .ok_or_else(|| bad("not little-endian float32 or float16"))?;
    if header.contains("'fortran_order': True") {
        return Err(bad("not in C order"));
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
    let body = &bytes[start + header_len..];
    let data: Vec<f32> = match dtype {
        Dtype::F32 => body
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => body
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    };
    if data.len() != shape.iter().product::<usize>() {
        return Err(bad("data length does not match the shape"));
    }
    Ok((shape, dtype, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_aligned_and_round_trips() {
        for shape in [vec![0, 80], vec![3], vec![123, 4567]] {
            let h = npy_header(&shape, Dtype::F32);
            assert_eq!(h.len() % 64, 0);
            assert_eq!(*h.last().unwrap(), b'\n');
        }
        let dir = std::env::temp_dir().join(format!("sonograph-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.npy");
        let data: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
        write_npy(&path, &[2, 3], &data, Dtype::F32).unwrap();
        assert_eq!(read_npy_f32(&path).unwrap(), (vec![2, 3], data.clone()));
        assert!(write_npy(&path, &[4, 3], &[0.0], Dtype::F32).is_err());
        // f16: half the bytes; values round to the nearest f16 (these are exact in f16, 1/3
        // is not).
        let mut data16 = data.clone();
        data16.push(1.0 / 3.0);
        write_npy(&path, &[7], &data16, Dtype::F16).unwrap();
        let (shape, dtype, back) = read_npy(&path).unwrap();
        assert_eq!((shape, dtype), (vec![7], Dtype::F16));
        assert_eq!(back[..6], data[..]);
        assert_eq!(back[6], half::f16::from_f32(1.0 / 3.0).to_f32());
        assert_ne!(back[6], 1.0 / 3.0);
        let header = npy_header(&[7], Dtype::F16);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len() as usize,
            header.len() + 7 * 2
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
