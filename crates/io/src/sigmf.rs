//! IQ recordings: SigMF (a `.sigmf-meta` + `.sigmf-data` pair, or a `.sigmf` tar archive of
//! such pairs) and raw `cf32`/`ci16`/`cu8`/`ci8` files, read and written.
//!
//! Sizes are never taken on trust: the samples allocated are what the data file (or the
//! archive member, checked against the archive's real length) holds, up to a limit; metadata
//! that claims more than the data holds is an error naming the file, and so is a byte count
//! that is not a whole number of samples. Writers go through a temporary name and rename, the
//! data before the metadata, so a `.sigmf-meta` on disk means its data is complete.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha512};
use sonograph_rf::sigmf::{DataType, SigmfMeta};
use sonograph_rf::Complex32;
use thiserror::Error;

use crate::manifest::{walk_files, Entry, SourceError};

/// Why an IQ recording could not be read or written. One line, naming the file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum IqError {
    #[error("{path}: cannot open: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: bad metadata: {reason}")]
    BadMeta { path: PathBuf, reason: String },
    #[error(
        "{path}: {bytes} bytes is not a whole number of {sample_bytes}-byte {datatype} samples"
    )]
    OddLength {
        path: PathBuf,
        bytes: u64,
        sample_bytes: usize,
        datatype: &'static str,
    },
    #[error("{path}: truncated: {reason}")]
    Truncated { path: PathBuf, reason: String },
    #[error("{path}: {samples} samples is over the limit of {limit} (raise --max-samples)")]
    TooLarge {
        path: PathBuf,
        samples: u64,
        limit: u64,
    },
    #[error("{path}: {reason}")]
    Unsupported { path: PathBuf, reason: String },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Largest metadata file read (a `.sigmf-meta` is JSON text; anything larger is hostile).
pub const MAX_META_BYTES: u64 = 64 << 20;
/// Default limit on the samples of one recording (2^28 complex samples: 2 GiB as cf32).
pub const DEFAULT_MAX_SAMPLES: u64 = 1 << 28;

/// A recording in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct IqRecording {
    /// Stable id: the SigMF base name relative to the source (or `archive/member`).
    pub id: String,
    pub path: PathBuf,
    pub sample_rate: f64,
    pub meta: Option<SigmfMeta>,
    pub samples: Vec<Complex32>,
}

/// Where a recording is.
#[derive(Debug, Clone, PartialEq)]
pub enum IqSource {
    /// A `.sigmf-meta` file (its data beside it).
    Sigmf { id: String, meta: PathBuf },
    /// A `.sigmf` archive: every recording in it.
    Archive { id: String, path: PathBuf },
    /// A raw file of one datatype at a given sample rate.
    Raw {
        id: String,
        path: PathBuf,
        datatype: DataType,
    },
}

impl IqSource {
    pub fn id(&self) -> &str {
        match self {
            IqSource::Sigmf { id, .. }
            | IqSource::Archive { id, .. }
            | IqSource::Raw { id, .. } => id,
        }
    }
}

/// The datatype of a raw file's extension (`.cf32`, `.cfile`, `.ci16`, `.cs16`, `.cu8`, `.ci8`, `.cs8`).
pub fn raw_datatype(path: &Path) -> Option<DataType> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "cf32" | "cfile" | "fc32" => DataType::Cf32Le,
        "ci16" | "cs16" | "sc16" => DataType::Ci16Le,
        "cu8" => DataType::Cu8,
        "ci8" | "cs8" | "sc8" => DataType::Ci8,
        "cf64" => DataType::Cf64Le,
        _ => return None,
    })
}

fn is_sigmf_meta(p: &Path) -> bool {
    p.to_string_lossy().ends_with(".sigmf-meta")
}

fn is_archive(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "sigmf")
}

/// The recordings at `path`: a SigMF file (meta or data, or the base name), a `.sigmf`
/// archive, a raw file (with `raw` as its datatype, else from the extension), or a folder of
/// any of these (walked recursively, sorted by id).
pub fn list_sources(path: &Path, raw: Option<DataType>) -> Result<Vec<IqSource>, IqError> {
    let one = |p: &Path, id: String| -> Result<IqSource, IqError> {
        let s = p.to_string_lossy();
        if let Some(base) = s.strip_suffix(".sigmf-data") {
            return Ok(IqSource::Sigmf {
                id,
                meta: PathBuf::from(format!("{base}.sigmf-meta")),
            });
        }
        if is_sigmf_meta(p) {
            return Ok(IqSource::Sigmf {
                id,
                meta: p.to_path_buf(),
            });
        }
        if is_archive(p) {
            return Ok(IqSource::Archive {
                id,
                path: p.to_path_buf(),
            });
        }
        match raw.or_else(|| raw_datatype(p)) {
            Some(datatype) => Ok(IqSource::Raw {
                id,
                path: p.to_path_buf(),
                datatype,
            }),
            None => Err(IqError::Unsupported {
                path: p.to_path_buf(),
                reason: "not a SigMF file (.sigmf-meta, .sigmf-data, .sigmf) or a raw IQ file \
                         (.cf32, .ci16, .cu8, .ci8; or give --format)"
                    .into(),
            }),
        }
    };
    let name = |p: &Path| {
        let s = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        strip_sigmf(&s).to_string()
    };
    if path.is_dir() {
        let entries = walk_files(path, |p| {
            is_sigmf_meta(p) || is_archive(p) || raw.is_some() || raw_datatype(p).is_some()
        })
        .map_err(|e| match e {
            SourceError::Io { path, source } => IqError::Open { path, source },
            other => IqError::Unsupported {
                path: path.to_path_buf(),
                reason: other.to_string(),
            },
        })?;
        let mut out = Vec::new();
        for e in entries {
            if let Entry::Item(item) = e {
                // A raw datatype given for a folder applies to files without a known extension
                // of their own, and SigMF data files are read through their metadata.
                if item.path.to_string_lossy().ends_with(".sigmf-data") {
                    continue;
                }
                out.push(one(&item.path, strip_sigmf(&item.id).to_string())?);
            }
        }
        out.sort_by(|a, b| a.id().cmp(b.id()));
        return Ok(out);
    }
    let s = path.to_string_lossy();
    if !path.exists() && !s.ends_with(".sigmf-meta") {
        let meta = PathBuf::from(format!("{s}.sigmf-meta"));
        if meta.exists() {
            return Ok(vec![IqSource::Sigmf {
                id: name(path),
                meta,
            }]);
        }
    }
    if !path.exists() {
        return Err(IqError::Open {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        });
    }
    Ok(vec![one(path, name(path))?])
}

fn strip_sigmf(s: &str) -> &str {
    for ext in [".sigmf-meta", ".sigmf-data"] {
        if let Some(b) = s.strip_suffix(ext) {
            return b;
        }
    }
    s
}

/// Reads every recording of `source` (an archive may hold several).
pub fn read_source(
    source: &IqSource,
    sample_rate: Option<f64>,
    max_samples: u64,
) -> Result<Vec<IqRecording>, IqError> {
    match source {
        IqSource::Sigmf { id, meta } => Ok(vec![read_sigmf(meta, id, max_samples)?]),
        IqSource::Raw { id, path, datatype } => {
            let fs = sample_rate.ok_or_else(|| IqError::Unsupported {
                path: path.clone(),
                reason: "a raw IQ file needs --sample-rate".into(),
            })?;
            let mut f = File::open(path).map_err(|source| IqError::Open {
                path: path.clone(),
                source,
            })?;
            let len = file_len(&f, path)?;
            let samples = read_samples(&mut f, path, len, *datatype, max_samples)?;
            Ok(vec![IqRecording {
                id: id.clone(),
                path: path.clone(),
                sample_rate: fs,
                meta: None,
                samples,
            }])
        }
        IqSource::Archive { id, path } => read_archive(path, id, max_samples),
    }
}

fn file_len(f: &File, path: &Path) -> Result<u64, IqError> {
    f.metadata()
        .map(|m| m.len())
        .map_err(|source| IqError::Open {
            path: path.to_path_buf(),
            source,
        })
}

/// Reads a `.sigmf-meta` and its `.sigmf-data`.
pub fn read_sigmf(meta_path: &Path, id: &str, max_samples: u64) -> Result<IqRecording, IqError> {
    let open = |p: &Path| {
        File::open(p).map_err(|source| IqError::Open {
            path: p.to_path_buf(),
            source,
        })
    };
    let mut mf = open(meta_path)?;
    let meta_len = file_len(&mf, meta_path)?;
    if meta_len > MAX_META_BYTES {
        return Err(IqError::BadMeta {
            path: meta_path.to_path_buf(),
            reason: format!("{meta_len} bytes of metadata (at most {MAX_META_BYTES})"),
        });
    }
    let mut text = String::new();
    mf.read_to_string(&mut text).map_err(|e| IqError::BadMeta {
        path: meta_path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let meta = parse_meta(&text, meta_path)?;
    let base = meta_path.to_string_lossy();
    let data_path = PathBuf::from(format!("{}.sigmf-data", strip_sigmf(&base)));
    let mut df = open(&data_path)?;
    let len = file_len(&df, &data_path)?;
    recording(meta, &mut df, &data_path, len, id, max_samples)
}

fn parse_meta(text: &str, path: &Path) -> Result<SigmfMeta, IqError> {
    SigmfMeta::from_json(text).map_err(|e| IqError::BadMeta {
        path: path.to_path_buf(),
        reason: e
            .to_string()
            .trim_start_matches("bad SigMF metadata: ")
            .to_string(),
    })
}

/// A recording from its metadata and `len` bytes of data at the reader's position.
fn recording(
    meta: SigmfMeta,
    data: &mut impl Read,
    data_path: &Path,
    len: u64,
    id: &str,
    max_samples: u64,
) -> Result<IqRecording, IqError> {
    let datatype = meta.datatype().map_err(|e| IqError::BadMeta {
        path: data_path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let sample_rate = meta.global.sample_rate.ok_or_else(|| IqError::BadMeta {
        path: data_path.to_path_buf(),
        reason: "core:sample_rate is missing".into(),
    })?;
    let samples_in_file = len / datatype.sample_bytes() as u64;
    let claimed = meta.claimed_end();
    if claimed > samples_in_file && len.is_multiple_of(datatype.sample_bytes() as u64) {
        return Err(IqError::Truncated {
            path: data_path.to_path_buf(),
            reason: format!(
                "the metadata refers to sample {claimed}, the data holds {samples_in_file}"
            ),
        });
    }
    let samples = read_samples(data, data_path, len, datatype, max_samples)?;
    Ok(IqRecording {
        id: id.to_string(),
        path: data_path.to_path_buf(),
        sample_rate,
        meta: Some(meta),
        samples,
    })
}

/// `len` bytes of `datatype` samples, converted to f32 full scale as the `sigmf` package does
/// (integers divided by 2^(bits−1), unsigned ones centred first).
fn read_samples(
    r: &mut impl Read,
    path: &Path,
    len: u64,
    datatype: DataType,
    max_samples: u64,
) -> Result<Vec<Complex32>, IqError> {
    let sb = datatype.sample_bytes() as u64;
    if !len.is_multiple_of(sb) {
        return Err(IqError::OddLength {
            path: path.to_path_buf(),
            bytes: len,
            sample_bytes: sb as usize,
            datatype: datatype.name(),
        });
    }
    let count = len / sb;
    if count > max_samples {
        return Err(IqError::TooLarge {
            path: path.to_path_buf(),
            samples: count,
            limit: max_samples,
        });
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut buf = vec![0u8; (sb as usize) * 65_536];
    let mut left = count;
    while left > 0 {
        let n = left.min(65_536) as usize;
        let bytes = &mut buf[..n * sb as usize];
        r.read_exact(bytes).map_err(|e| IqError::Truncated {
            path: path.to_path_buf(),
            reason: format!("{e} after {} of {count} samples", count - left),
        })?;
        decode(bytes, datatype, &mut out);
        left -= n as u64;
    }
    Ok(out)
}

fn decode(bytes: &[u8], datatype: DataType, out: &mut Vec<Complex32>) {
    match datatype {
        DataType::Cf32Le => out.extend(bytes.chunks_exact(8).map(|b| {
            Complex32::new(
                f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                f32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            )
        })),
        DataType::Cf64Le => out.extend(bytes.chunks_exact(16).map(|b| {
            let f = |o: usize| {
                let mut a = [0u8; 8];
                a.copy_from_slice(&b[o..o + 8]);
                f64::from_le_bytes(a) as f32
            };
            Complex32::new(f(0), f(8))
        })),
        DataType::Ci16Le => out.extend(bytes.chunks_exact(4).map(|b| {
            let s = 1.0 / 32_768.0;
            Complex32::new(
                f32::from(i16::from_le_bytes([b[0], b[1]])) * s,
                f32::from(i16::from_le_bytes([b[2], b[3]])) * s,
            )
        })),
        DataType::Ci8 => {
            out.extend(bytes.chunks_exact(2).map(|b| {
                Complex32::new(f32::from(b[0] as i8) / 128.0, f32::from(b[1] as i8) / 128.0)
            }))
        }
        DataType::Cu8 => out.extend(bytes.chunks_exact(2).map(|b| {
            Complex32::new(
                (f32::from(b[0]) - 128.0) / 128.0,
                (f32::from(b[1]) - 128.0) / 128.0,
            )
        })),
    }
}

/// One member of a tar archive: name, offset of its bytes, and size.
struct TarMember {
    name: String,
    offset: u64,
    size: u64,
}

/// The members of a ustar archive (what `sigmf.archive` writes), every size checked against
/// the archive's real length before anything is read.
fn tar_members(f: &mut File, path: &Path) -> Result<Vec<TarMember>, IqError> {
    let total = file_len(f, path)?;
    let bad = |reason: String| IqError::BadMeta {
        path: path.to_path_buf(),
        reason,
    };
    let mut members = Vec::new();
    let mut pos = 0u64;
    let mut header = [0u8; 512];
    while pos + 512 <= total {
        f.seek(SeekFrom::Start(pos))
            .and_then(|_| f.read_exact(&mut header))
            .map_err(|e| bad(format!("cannot read a tar header at byte {pos}: {e}")))?;
        if header.iter().all(|&b| b == 0) {
            break;
        }
        let field = |a: usize, b: usize| {
            let raw = &header[a..b];
            let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
            String::from_utf8_lossy(&raw[..end]).trim().to_string()
        };
        let size_text = field(124, 136);
        let size = u64::from_str_radix(&size_text, 8).map_err(|_| {
            bad(format!(
                "tar header at byte {pos} has no valid size ({size_text:?})"
            ))
        })?;
        let start = pos + 512;
        if size > total.saturating_sub(start) {
            return Err(IqError::Truncated {
                path: path.to_path_buf(),
                reason: format!(
                    "archive member at byte {pos} claims {size} bytes, the archive has {} left",
                    total.saturating_sub(start)
                ),
            });
        }
        let prefix = field(345, 500);
        let name = field(0, 100);
        let name = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let kind = header[156];
        if kind == b'0' || kind == 0 {
            members.push(TarMember {
                name,
                offset: start,
                size,
            });
        }
        pos = start + size.div_ceil(512) * 512;
    }
    Ok(members)
}

/// Every recording of a `.sigmf` archive, by member name.
fn read_archive(path: &Path, id: &str, max_samples: u64) -> Result<Vec<IqRecording>, IqError> {
    let mut f = File::open(path).map_err(|source| IqError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let members = tar_members(&mut f, path)?;
    let mut out = Vec::new();
    for m in members.iter().filter(|m| m.name.ends_with(".sigmf-meta")) {
        let inner = path.join(&m.name);
        if m.size > MAX_META_BYTES {
            return Err(IqError::BadMeta {
                path: inner,
                reason: format!("{} bytes of metadata (at most {MAX_META_BYTES})", m.size),
            });
        }
        let mut text = vec![0u8; m.size as usize];
        f.seek(SeekFrom::Start(m.offset))
            .and_then(|_| f.read_exact(&mut text))
            .map_err(|e| IqError::Truncated {
                path: inner.clone(),
                reason: e.to_string(),
            })?;
        let meta = parse_meta(&String::from_utf8_lossy(&text), &inner)?;
        let data_name = format!("{}.sigmf-data", strip_sigmf(&m.name));
        let data = members
            .iter()
            .find(|d| d.name == data_name)
            .ok_or_else(|| IqError::Truncated {
                path: inner.clone(),
                reason: format!("the archive has no {data_name}"),
            })?;
        f.seek(SeekFrom::Start(data.offset))
            .map_err(|source| IqError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        let member_id = format!("{id}/{}", strip_sigmf(&m.name));
        let mut reader = (&mut f).take(data.size);
        out.push(recording(
            meta,
            &mut reader,
            &path.join(&data_name),
            data.size,
            &member_id,
            max_samples,
        )?);
    }
    if out.is_empty() {
        return Err(IqError::BadMeta {
            path: path.to_path_buf(),
            reason: "the archive holds no .sigmf-meta".into(),
        });
    }
    Ok(out)
}

/// Sample formats `write_sigmf` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteType {
    Cf32,
    /// Integers `round(x · 32768)` clamped to the int16 range.
    Ci16,
}

impl WriteType {
    pub fn datatype(self) -> DataType {
        match self {
            WriteType::Cf32 => DataType::Cf32Le,
            WriteType::Ci16 => DataType::Ci16Le,
        }
    }
}

/// `base.sigmf-meta` beside `base.sigmf-data`.
pub fn sigmf_paths(base: &Path) -> (PathBuf, PathBuf) {
    let b = base.to_string_lossy();
    (
        PathBuf::from(format!("{b}.sigmf-meta")),
        PathBuf::from(format!("{b}.sigmf-data")),
    )
}

/// Writes `base.sigmf-data` (with its SHA-512 in the metadata) and then `base.sigmf-meta`,
/// each through a temporary name; returns how many values were clipped (ci16 only).
pub fn write_sigmf(
    base: &Path,
    iq: &[Complex32],
    dtype: WriteType,
    mut meta: SigmfMeta,
) -> Result<u64, IqError> {
    let (meta_path, data_path) = sigmf_paths(base);
    let werr = |p: &Path| {
        let p = p.to_path_buf();
        move |source| IqError::Write {
            path: p.clone(),
            source,
        }
    };
    let tmp = crate::parquet::part_tmp_path(&data_path);
    let mut hasher = Sha512::new();
    let mut clipped = 0u64;
    {
        let mut w =
            BufWriter::with_capacity(1 << 20, File::create(&tmp).map_err(werr(&data_path))?);
        let mut bytes = Vec::with_capacity(8 * 8192);
        for chunk in iq.chunks(8192) {
            bytes.clear();
            match dtype {
                WriteType::Cf32 => {
                    for v in chunk {
                        bytes.extend_from_slice(&v.re.to_le_bytes());
                        bytes.extend_from_slice(&v.im.to_le_bytes());
                    }
                }
                WriteType::Ci16 => {
                    for v in chunk {
                        for x in [v.re, v.im] {
                            let (q, clip) = to_i16(x);
                            clipped += u64::from(clip);
                            bytes.extend_from_slice(&q.to_le_bytes());
                        }
                    }
                }
            }
            hasher.update(&bytes);
            w.write_all(&bytes).map_err(werr(&data_path))?;
        }
        w.flush().map_err(werr(&data_path))?;
    }
    std::fs::rename(&tmp, &data_path).map_err(werr(&data_path))?;
    meta.global.datatype = dtype.datatype().name().into();
    meta.global.sha512 = Some(
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    );
    let tmp = crate::parquet::part_tmp_path(&meta_path);
    std::fs::write(&tmp, meta.to_json()).map_err(werr(&meta_path))?;
    std::fs::rename(&tmp, &meta_path).map_err(werr(&meta_path))?;
    Ok(clipped)
}

/// `round(x · 32768)` (half away from zero) in the int16 range; true when it had to clip.
fn to_i16(x: f32) -> (i16, bool) {
    let v = (f64::from(x) * 32_768.0).round();
    if v > 32_767.0 {
        (i16::MAX, true)
    } else if v < -32_768.0 {
        (i16::MIN, true)
    } else {
        (v as i16, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci16_rounds_and_clips() {
        assert_eq!(to_i16(0.5), (16_384, false));
        assert_eq!(to_i16(1.0), (32_767, true));
        assert_eq!(to_i16(-1.0), (-32_768, false));
        assert_eq!(to_i16(-1.5), (-32_768, true));
        assert_eq!(to_i16(1.5 / 32_768.0), (2, false));
    }
}
