//! IQ recordings: SigMF (a `.sigmf-meta` + `.sigmf-data` pair, or a `.sigmf` tar archive of
//! such pairs) and raw `cf32`/`ci16`/`cu8`/`ci8` files, read and written.
//!
//! Sizes are never taken on trust: the samples allocated are what the data file (or the
//! archive member, checked against the archive's real length) holds, up to a limit; metadata
//! that claims more than the data holds is an error naming the file, and so is a byte count
//! that is not a whole number of samples. Writers go through a temporary name and rename, the
//! data before the metadata, so a `.sigmf-meta` on disk means its data is complete.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub use sonograph_rf::sigmf::DataType;
use sonograph_rf::sigmf::SigmfMeta;
use sonograph_rf::Complex32;
use thiserror::Error;

use crate::publish::{publish_all, Draft, Synced};
use crate::remote::ListedObject;
use crate::roots::Roots;
use crate::sha512_lanes::Sha512Lanes;
use crate::span::{Blob, Span};
pub use crate::tar_index::TarMember;
use crate::tar_index::{plain_member_name, TarListError};
use crate::walk::walk_sorted;

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
    /// One recording of a `.sigmf` archive, as [`archive_recordings`] found it: its metadata
    /// member and its data member (`None` when the archive has none).
    Member {
        id: String,
        archive: PathBuf,
        meta: TarMember,
        data: Option<TarMember>,
    },
    /// A raw file of one datatype at a given sample rate.
    Raw {
        id: String,
        path: PathBuf,
        datatype: DataType,
    },
}

impl IqSource {
    /// The file to name in messages: the metadata of a SigMF pair, `archive/member.sigmf-meta`
    /// inside an archive, the raw file.
    pub fn path(&self) -> PathBuf {
        match self {
            IqSource::Sigmf { meta, .. } => meta.clone(),
            IqSource::Archive { path, .. } | IqSource::Raw { path, .. } => path.clone(),
            IqSource::Member { archive, meta, .. } => archive.join(&meta.name),
        }
    }

    pub fn id(&self) -> &str {
        match self {
            IqSource::Sigmf { id, .. }
            | IqSource::Archive { id, .. }
            | IqSource::Member { id, .. }
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

/// A SigMF file, a `.sigmf` archive or a raw IQ file, by its name.
pub fn is_iq_file(path: &Path) -> bool {
    is_sigmf_meta(path)
        || path.to_string_lossy().ends_with(".sigmf-data")
        || is_archive(path)
        || raw_datatype(path).is_some()
}

/// The recordings at `path`: a SigMF file (meta or data, or the base name), a `.sigmf`
/// archive, a raw file (with `raw` as its datatype, else from the extension), or a folder of
/// any of these (walked recursively, sorted by id). In object storage (a URL): one object of
/// those names, or the objects under a prefix, listed as a folder is walked.
pub fn list_sources(path: &Path, raw: Option<DataType>) -> Result<Vec<IqSource>, IqError> {
    sources_at(path, raw, None)
}

/// [`list_sources`], a prefix's objects taken from `listing` where it is given (the listing
/// the caller made of `path`) instead of listed again.
fn sources_at(
    path: &Path,
    raw: Option<DataType>,
    listing: Option<&[ListedObject]>,
) -> Result<Vec<IqSource>, IqError> {
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
    let open_error = |source| IqError::Open {
        path: path.to_path_buf(),
        source,
    };
    let listed =
        |p: &Path| is_sigmf_meta(p) || is_archive(p) || raw.is_some() || raw_datatype(p).is_some();
    // A folder's files or a prefix's objects, by id: a raw datatype given for a folder applies
    // to files without a known extension of their own, and SigMF data files are read through
    // their metadata.
    let of_files = |files: Vec<(String, PathBuf)>| -> Result<Vec<IqSource>, IqError> {
        let mut out = Vec::new();
        for (id, file) in files {
            if listed(&file) && !file.to_string_lossy().ends_with(".sigmf-data") {
                out.push(one(&file, strip_sigmf(&id).to_string())?);
            }
        }
        out.sort_by(|a, b| a.id().cmp(b.id()));
        Ok(out)
    };
    if crate::remote::is_url(path) {
        if is_iq_file(path) {
            // There now, as a local file is checked to be.
            crate::remote::RemoteObject::open(path).map_err(open_error)?;
            return Ok(vec![one(path, name(path))?]);
        }
        let files = match listing {
            // Only its recordings' names: a corpus's listing may hold millions of clips.
            Some(objects) => objects
                .iter()
                .filter(|o| listed(&o.url))
                .map(|o| (o.id.clone(), o.url.clone()))
                .collect(),
            None => crate::remote::list(path)
                .map_err(open_error)?
                .into_iter()
                .map(|o| (o.id, o.url))
                .collect(),
        };
        return of_files(files);
    }
    if path.is_dir() {
        let mut files = Vec::new();
        for file in walk_sorted(path, listed) {
            files.push(file.map_err(|e| IqError::Open {
                path: e.path,
                source: e.source,
            })?);
        }
        return of_files(files);
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
    read_source_in(&Roots::anywhere(), source, sample_rate, max_samples)
}

/// [`read_source`], its files opened beneath `roots`.
pub fn read_source_in(
    roots: &Roots,
    source: &IqSource,
    sample_rate: Option<f64>,
    max_samples: u64,
) -> Result<Vec<IqRecording>, IqError> {
    let read =
        |s: &IqSource| IqReader::open_in(roots, s, sample_rate, max_samples)?.into_recording();
    match source {
        IqSource::Archive { id, path } => archive_recordings_in(roots, path, id)?
            .iter()
            .map(read)
            .collect(),
        _ => Ok(vec![read(source)?]),
    }
}

/// `path` beneath `roots`, a local file or an object in object storage, as a whole.
fn open_span(roots: &Roots, path: &Path) -> Result<Span, IqError> {
    open_blob(roots, path).and_then(|blob| span_of(Span::whole(blob), path))
}

fn open_blob(roots: &Roots, path: &Path) -> Result<Blob, IqError> {
    roots.open_blob(path).map_err(|source| IqError::Open {
        path: path.to_path_buf(),
        source,
    })
}

fn span_of(span: std::io::Result<Span>, path: &Path) -> Result<Span, IqError> {
    span.map_err(|source| IqError::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a `.sigmf-meta` and its `.sigmf-data`.
pub fn read_sigmf(meta_path: &Path, id: &str, max_samples: u64) -> Result<IqRecording, IqError> {
    let source = IqSource::Sigmf {
        id: id.to_string(),
        meta: meta_path.to_path_buf(),
    };
    IqReader::open(&source, None, max_samples)?.into_recording()
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

/// Metadata text of at most [`MAX_META_BYTES`], `len` bytes at the reader's position.
fn read_meta(r: &mut impl Read, len: u64, path: &Path) -> Result<SigmfMeta, IqError> {
    if len > MAX_META_BYTES {
        return Err(IqError::BadMeta {
            path: path.to_path_buf(),
            reason: format!("{len} bytes of metadata (at most {MAX_META_BYTES})"),
        });
    }
    let mut text = Vec::with_capacity(len as usize);
    r.take(len)
        .read_to_end(&mut text)
        .map_err(|e| IqError::BadMeta {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    parse_meta(&String::from_utf8_lossy(&text), path)
}

/// Samples read per block.
const BLOCK_SAMPLES: u64 = 65_536;

/// A recording opened for reading: its metadata parsed and checked, its length checked
/// against the data and the limit, and its samples read a block at a time, so that a
/// recording of any length streams in flat memory.
pub struct IqReader {
    id: String,
    /// The data: a file, or `archive/member` inside an archive.
    path: PathBuf,
    sample_rate: f64,
    meta: Option<SigmfMeta>,
    datatype: DataType,
    samples: u64,
    left: u64,
    data: Span,
    buf: Vec<u8>,
}

/// A recording's data: a file, an object, or a member of an archive (whose path is then
/// `archive/member`).
struct Data {
    path: PathBuf,
    span: Span,
}

impl IqReader {
    /// Opens a recording (a SigMF pair, an archive member, or a raw file at `sample_rate`)
    /// and checks everything its size depends on before any sample is read: the datatype,
    /// the sample rate, a data length of whole samples that backs what the metadata refers
    /// to, and at most `max_samples` samples.
    pub fn open(
        source: &IqSource,
        sample_rate: Option<f64>,
        max_samples: u64,
    ) -> Result<Self, IqError> {
        Self::open_in(&Roots::anywhere(), source, sample_rate, max_samples)
    }

    /// [`open`](Self::open), its files opened beneath `roots`.
    pub fn open_in(
        roots: &Roots,
        source: &IqSource,
        sample_rate: Option<f64>,
        max_samples: u64,
    ) -> Result<Self, IqError> {
        match source {
            IqSource::Sigmf { id, meta } => {
                let mut mf = open_span(roots, meta)?;
                let meta_len = mf.len();
                let parsed = read_meta(&mut mf, meta_len, meta)?;
                let base = meta.to_string_lossy();
                let path = PathBuf::from(format!("{}.sigmf-data", strip_sigmf(&base)));
                let span = open_span(roots, &path)?;
                Self::sigmf(id, parsed, Data { path, span }, max_samples)
            }
            IqSource::Member {
                id,
                archive,
                meta,
                data,
            } => {
                let inner = archive.join(&meta.name);
                let data = data.as_ref().ok_or_else(|| IqError::Truncated {
                    path: inner.clone(),
                    reason: format!("the archive has no {}.sigmf-data", strip_sigmf(&meta.name)),
                })?;
                let blob = open_blob(roots, archive)?;
                let total = blob.size().map_err(|source| IqError::Open {
                    path: archive.clone(),
                    source,
                })?;
                // The archive was listed before it is read: it may have changed since.
                for m in [meta, data] {
                    if m.offset.saturating_add(m.size) > total {
                        return Err(IqError::Truncated {
                            path: archive.join(&m.name),
                            reason: format!(
                                "{} bytes at byte {} are past the archive's end ({total})",
                                m.size, m.offset
                            ),
                        });
                    }
                }
                let member =
                    |m: &TarMember| span_of(Span::range(blob.clone(), m.offset, m.size), archive);
                let parsed = read_meta(&mut member(meta)?, meta.size, &inner)?;
                let path = archive.join(&data.name);
                let span = member(data)?;
                Self::sigmf(id, parsed, Data { path, span }, max_samples)
            }
            IqSource::Raw { id, path, datatype } => {
                let fs = sample_rate.ok_or_else(|| IqError::Unsupported {
                    path: path.clone(),
                    reason: "a raw IQ file needs --sample-rate".into(),
                })?;
                if !(fs.is_finite() && fs > 0.0) {
                    return Err(IqError::Unsupported {
                        path: path.clone(),
                        reason: format!("sample rate {fs} is not positive"),
                    });
                }
                let data = Data {
                    path: path.clone(),
                    span: open_span(roots, path)?,
                };
                Self::new(id, None, data, *datatype, fs, max_samples)
            }
            IqSource::Archive { path, .. } => Err(IqError::Unsupported {
                path: path.clone(),
                reason: "an archive holds recordings of its own: open its members \
                         (archive_recordings)"
                    .into(),
            }),
        }
    }

    /// A SigMF recording: the datatype and rate from its metadata, whose annotations and
    /// captures the data must hold.
    fn sigmf(id: &str, meta: SigmfMeta, data: Data, max_samples: u64) -> Result<Self, IqError> {
        let bad = |reason: String| IqError::BadMeta {
            path: data.path.clone(),
            reason,
        };
        let datatype = meta.datatype().map_err(|e| bad(e.to_string()))?;
        let rate = meta
            .global
            .sample_rate
            .ok_or_else(|| bad("core:sample_rate is missing".into()))?;
        let sb = datatype.sample_bytes() as u64;
        let claimed = meta.claimed_end();
        let len = data.span.len();
        if claimed > len / sb && len.is_multiple_of(sb) {
            return Err(IqError::Truncated {
                path: data.path,
                reason: format!(
                    "the metadata refers to sample {claimed}, the data holds {}",
                    len / sb
                ),
            });
        }
        Self::new(id, Some(meta), data, datatype, rate, max_samples)
    }

    /// The reader of `data`, once its length is found to be whole samples within the limit.
    fn new(
        id: &str,
        meta: Option<SigmfMeta>,
        data: Data,
        datatype: DataType,
        sample_rate: f64,
        max_samples: u64,
    ) -> Result<Self, IqError> {
        let sb = datatype.sample_bytes() as u64;
        let len = data.span.len();
        if !len.is_multiple_of(sb) {
            return Err(IqError::OddLength {
                path: data.path,
                bytes: len,
                sample_bytes: sb as usize,
                datatype: datatype.name(),
            });
        }
        let samples = len / sb;
        if samples > max_samples {
            return Err(IqError::TooLarge {
                path: data.path,
                samples,
                limit: max_samples,
            });
        }
        Ok(IqReader {
            id: id.to_string(),
            path: data.path,
            sample_rate,
            meta,
            datatype,
            samples,
            left: samples,
            data: data.span,
            buf: Vec::new(),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The data's path (`archive/member` inside an archive).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Samples per second, from the metadata (or the raw file's given rate).
    pub fn sample_rate(&self) -> f64 {
        self.sample_rate
    }

    pub fn meta(&self) -> Option<&SigmfMeta> {
        self.meta.as_ref()
    }

    pub fn datatype(&self) -> DataType {
        self.datatype
    }

    /// Complex samples in the recording (from the data's length, which is real).
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Reads the next block's bytes (up to 65,536 samples) into `buf`; returns the samples
    /// read, 0 at the end.
    fn next_block(&mut self) -> Result<usize, IqError> {
        if self.left == 0 {
            return Ok(0);
        }
        let sb = self.datatype.sample_bytes();
        let n = self.left.min(BLOCK_SAMPLES) as usize;
        self.buf.resize(n * sb, 0);
        self.data
            .read_exact(&mut self.buf)
            .map_err(|e| IqError::Truncated {
                path: self.path.clone(),
                reason: format!(
                    "{e} after {} of {} samples",
                    self.samples - self.left,
                    self.samples
                ),
            })?;
        self.left -= n as u64;
        Ok(n)
    }

    /// Appends the next block to `out` as interleaved I/Q values (as samples travel through
    /// sonograph's sample buffers); returns the samples read, 0 at the end.
    pub fn read_interleaved(&mut self, out: &mut Vec<f32>) -> Result<usize, IqError> {
        let n = self.next_block()?;
        let start = out.len();
        out.resize(start + 2 * n, 0.0);
        let (pairs, _) = out[start..].as_chunks_mut::<2>();
        decode(&self.buf, self.datatype, pairs, |i, q| [i, q]);
        Ok(n)
    }

    /// Appends the next block to `out`; returns the samples read, 0 at the end.
    pub fn read_complex(&mut self, out: &mut Vec<Complex32>) -> Result<usize, IqError> {
        let n = self.next_block()?;
        let start = out.len();
        out.resize(start + n, Complex32::default());
        decode(&self.buf, self.datatype, &mut out[start..], Complex32::new);
        Ok(n)
    }

    /// The rest of the recording, in memory.
    pub fn into_recording(mut self) -> Result<IqRecording, IqError> {
        let mut samples = Vec::with_capacity(self.left as usize);
        while self.read_complex(&mut samples)? > 0 {}
        Ok(IqRecording {
            id: self.id,
            path: self.path,
            sample_rate: self.sample_rate,
            meta: self.meta,
            samples,
        })
    }
}

/// Writes each sample of `bytes` into `out` (one element a sample) as `make(I, Q)`, in f32
/// full scale, as the `sigmf` package converts them (integers divided by 2^(bits−1),
/// unsigned ones centred first). Into a slice sized beforehand, not pushed one by one: the
/// pushes' capacity checks kept the conversion from vectorising (6 % of `rf-features` in
/// perf).
fn decode<T>(bytes: &[u8], datatype: DataType, out: &mut [T], make: impl Fn(f32, f32) -> T) {
    match datatype {
        DataType::Cf32Le => convert(bytes, out, &make, |b: &[u8; 8]| {
            (
                f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                f32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            )
        }),
        DataType::Cf64Le => convert(bytes, out, &make, |b: &[u8; 16]| {
            let f = |o: usize| {
                let mut a = [0u8; 8];
                a.copy_from_slice(&b[o..o + 8]);
                f64::from_le_bytes(a) as f32
            };
            (f(0), f(8))
        }),
        DataType::Ci16Le => convert(bytes, out, &make, |b: &[u8; 4]| {
            let s = 1.0 / 32_768.0;
            (
                f32::from(i16::from_le_bytes([b[0], b[1]])) * s,
                f32::from(i16::from_le_bytes([b[2], b[3]])) * s,
            )
        }),
        DataType::Ci8 => convert(bytes, out, &make, |b: &[u8; 2]| {
            (f32::from(b[0] as i8) / 128.0, f32::from(b[1] as i8) / 128.0)
        }),
        DataType::Cu8 => convert(bytes, out, &make, |b: &[u8; 2]| {
            (
                (f32::from(b[0]) - 128.0) / 128.0,
                (f32::from(b[1]) - 128.0) / 128.0,
            )
        }),
    }
}

/// `out[k] = make(sample(k-th W bytes))`, for [`decode`].
#[inline(always)]
fn convert<T, const W: usize>(
    bytes: &[u8],
    out: &mut [T],
    make: &impl Fn(f32, f32) -> T,
    sample: impl Fn(&[u8; W]) -> (f32, f32),
) {
    let (samples, _) = bytes.as_chunks::<W>();
    for (o, b) in out.iter_mut().zip(samples) {
        let (i, q) = sample(b);
        *o = make(i, q);
    }
}

/// The regular files of a tar archive (what `sigmf.archive` writes), every size checked
/// against the archive's real length before anything is read; a recording's name must stay
/// under the archive and on one line.
fn tar_members(f: &crate::span::Blob, path: &Path) -> Result<Vec<TarMember>, IqError> {
    let members = crate::tar_index::tar_members(f).map_err(|e| match e {
        TarListError::Bad(reason) => IqError::BadMeta {
            path: path.to_path_buf(),
            reason,
        },
        TarListError::Truncated(reason) => IqError::Truncated {
            path: path.to_path_buf(),
            reason,
        },
    })?;
    for m in &members {
        let recording = m.name.ends_with(".sigmf-meta") || m.name.ends_with(".sigmf-data");
        if recording && !plain_member_name(&m.name) {
            // A recording's name becomes its id and, joined to the archive's path, the path
            // its messages and rows name: it must stay under the archive and on one line.
            return Err(IqError::BadMeta {
                path: path.to_path_buf(),
                reason: format!(
                    "tar member at byte {} is named {:?}: a recording's name must be a \
                     relative path without `..` or control characters",
                    m.header_at(),
                    m.name
                ),
            });
        }
    }
    Ok(members)
}

/// The recordings of a `.sigmf` archive, one per metadata member, in the archive's order,
/// with ids `id/member`: found from the tar headers alone (every size checked against the
/// archive's length), each read when it is opened.
pub fn archive_recordings(path: &Path, id: &str) -> Result<Vec<IqSource>, IqError> {
    archive_recordings_in(&Roots::anywhere(), path, id)
}

/// [`archive_recordings`], the archive opened beneath `roots`.
pub fn archive_recordings_in(
    roots: &Roots,
    path: &Path,
    id: &str,
) -> Result<Vec<IqSource>, IqError> {
    let members = tar_members(&open_blob(roots, path)?, path)?;
    let out: Vec<IqSource> = members
        .iter()
        .filter(|m| m.name.ends_with(".sigmf-meta"))
        .map(|meta| {
            let base = strip_sigmf(&meta.name);
            let data_name = format!("{base}.sigmf-data");
            IqSource::Member {
                id: format!("{id}/{base}"),
                archive: path.to_path_buf(),
                meta: meta.clone(),
                data: members.iter().find(|d| d.name == data_name).cloned(),
            }
        })
        .collect();
    if out.is_empty() {
        return Err(IqError::BadMeta {
            path: path.to_path_buf(),
            reason: "the archive holds no .sigmf-meta".into(),
        });
    }
    Ok(out)
}

/// One recording of a listing, by id: where it is, or why the archive it is in cannot be
/// listed.
pub type Listed = (String, Result<IqSource, IqError>);

/// Every recording at `path` ([`list_sources`]), archives opened up into their members:
/// `(id, recording)`, or `(id, why)` for an archive that cannot be listed — one item that
/// fails, where a job goes on with the others.
pub fn list_recordings(path: &Path, raw: Option<DataType>) -> Result<Vec<Listed>, IqError> {
    list_recordings_in(&Roots::anywhere(), path, raw, None)
}

/// [`list_recordings`], archives opened beneath `roots` (a recording is read beneath them
/// too, when it is opened); a prefix's objects taken from `listing` where the caller has
/// listed `path` already (a listing is a store's slowest request, 1,000 keys a page).
pub fn list_recordings_in(
    roots: &Roots,
    path: &Path,
    raw: Option<DataType>,
    listing: Option<&[ListedObject]>,
) -> Result<Vec<Listed>, IqError> {
    let mut out = Vec::new();
    for source in sources_at(path, raw, listing)? {
        match &source {
            IqSource::Archive { id, path } => match archive_recordings_in(roots, path, id) {
                Ok(members) => out.extend(members.into_iter().map(|m| (m.id().to_string(), Ok(m)))),
                Err(e) => out.push((id.clone(), Err(e))),
            },
            _ => out.push((source.id().to_string(), Ok(source))),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
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
    meta: SigmfMeta,
) -> Result<u64, IqError> {
    let (recording, clipped) = write_sigmf_unsynced(base, iq, dtype, meta)?;
    publish_sigmf(vec![recording.sync()?])?;
    Ok(clipped)
}

/// A recording written under temporary names, not yet synced: many are written on the
/// cores, then synced side by side on threads that only wait for the disk (a writer that
/// synced each file as it wrote it left the cores idle for the disk's time).
/// The data file stays open until it is synced (a writeback error reaches only the
/// descriptors open when it happened); the metadata, a few hundred bytes, is written then.
#[derive(Debug)]
pub struct SigmfWritten {
    data: (Draft, File),
    meta_path: PathBuf,
    meta_json: String,
}

impl SigmfWritten {
    /// Syncs the data, then writes and syncs the metadata: the recording is ready for
    /// [`publish_sigmf`].
    pub fn sync(self) -> Result<SigmfDraft, IqError> {
        let (draft, file) = self.data;
        let path = draft.tmp().to_path_buf();
        let data = draft
            .sync(file)
            .map_err(|source| IqError::Write { path, source })?;
        let werr = |source| IqError::Write {
            path: self.meta_path.clone(),
            source,
        };
        let (draft, mut file) = Draft::create(&self.meta_path).map_err(werr)?;
        if let Err(e) = file.write_all(self.meta_json.as_bytes()) {
            draft.abandon();
            return Err(werr(e));
        }
        let meta = draft.sync(file).map_err(werr)?;
        Ok(SigmfDraft { data, meta })
    }
}

/// A recording written and synced under temporary names, not yet in place.
#[derive(Debug)]
pub struct SigmfDraft {
    data: Synced,
    meta: Synced,
}

/// Puts recordings in place, their data first: every data file renamed and its folder synced
/// before any metadata file is, so a recording whose metadata exists has all its data, even
/// after a power cut (one folder sync for the group's data and one for its metadata; see
/// [`publish_all`]).
pub fn publish_sigmf(recordings: Vec<SigmfDraft>) -> Result<(), IqError> {
    let (data, meta): (Vec<Synced>, Vec<Synced>) =
        recordings.into_iter().map(|r| (r.data, r.meta)).unzip();
    // Errors name the file (publish_all's messages do); the folder is the error's path.
    let folder = |files: &[Synced]| {
        files
            .first()
            .and_then(|f| f.path().parent())
            .map_or_else(PathBuf::new, Path::to_path_buf)
    };
    for files in [data, meta] {
        let path = folder(&files);
        publish_all(files).map_err(|source| IqError::Write { path, source })?;
    }
    Ok(())
}

/// [`write_sigmf`]'s writing, without syncing or putting the files in place: `base.sigmf-data`
/// and `base.sigmf-meta` (with the data's SHA-512) under temporary names, for
/// [`SigmfWritten::sync`] and then [`publish_sigmf`]. Returns how many values were clipped
/// (ci16 only).
pub fn write_sigmf_unsynced(
    base: &Path,
    iq: &[Complex32],
    dtype: WriteType,
    meta: SigmfMeta,
) -> Result<(SigmfWritten, u64), IqError> {
    let mut one = write_sigmf_group_unsynced(vec![SigmfRecording { base, iq, meta }], dtype)?;
    Ok(one.pop().expect("one recording written"))
}

/// A recording for [`write_sigmf_group_unsynced`]: where it goes, its samples and its metadata.
pub struct SigmfRecording<'a> {
    pub base: &'a Path,
    pub iq: &'a [Complex32],
    pub meta: SigmfMeta,
}

/// Recordings hashed side by side by [`write_sigmf_group_unsynced`] (on one thread).
pub const HASHED_TOGETHER: usize = crate::sha512_lanes::LANES;

/// [`write_sigmf_unsynced`] of each recording, in order, on this thread: recordings of one
/// length, [`HASHED_TOGETHER`] at a time, have their SHA-512s computed side by side (where the
/// CPU has AVX-512, eight one-second recordings are written in 18 ms against 49 ms one at a
/// time: `cargo bench -p sonograph-io --bench sigmf`).
pub fn write_sigmf_group_unsynced(
    recordings: Vec<SigmfRecording<'_>>,
    dtype: WriteType,
) -> Result<Vec<(SigmfWritten, u64)>, IqError> {
    let mut out = Vec::with_capacity(recordings.len());
    let mut rest = recordings.into_iter().peekable();
    while let Some(first) = rest.next() {
        let len = first.iq.len();
        let mut lanes = vec![first];
        while lanes.len() < HASHED_TOGETHER && rest.peek().is_some_and(|r| r.iq.len() == len) {
            lanes.extend(rest.next());
        }
        out.extend(write_lanes(lanes, dtype)?);
    }
    Ok(out)
}

/// Samples of each recording encoded, hashed and written at a time: 64 kB of cf32, so that
/// eight recordings' chunks stay in the core's cache from encoding to hashing.
const WRITE_CHUNK: usize = 8192;

/// Writes recordings of one length side by side, a chunk of each at a time, hashing the
/// chunks together. The chunks go to the files as they are (64 kB writes): a buffered writer
/// would only copy them once more.
fn write_lanes(
    recordings: Vec<SigmfRecording<'_>>,
    dtype: WriteType,
) -> Result<Vec<(SigmfWritten, u64)>, IqError> {
    let werr = |p: &Path| {
        let p = p.to_path_buf();
        move |source| IqError::Write {
            path: p.clone(),
            source,
        }
    };
    let paths: Vec<(PathBuf, PathBuf)> = recordings.iter().map(|r| sigmf_paths(r.base)).collect();
    let mut files = Vec::with_capacity(recordings.len());
    for (_, data_path) in &paths {
        let (draft, file) = Draft::create(data_path).map_err(werr(data_path))?;
        files.push((draft, file));
    }
    let mut hasher = Sha512Lanes::new(recordings.len());
    let mut clipped = vec![0u64; recordings.len()];
    let mut bytes: Vec<Vec<u8>> = recordings.iter().map(|_| Vec::new()).collect();
    let len = recordings[0].iq.len();
    for start in (0..len).step_by(WRITE_CHUNK) {
        let end = (start + WRITE_CHUNK).min(len);
        for ((r, b), c) in recordings.iter().zip(&mut bytes).zip(&mut clipped) {
            *c += encode(&r.iq[start..end], dtype, b);
        }
        hasher.update(&bytes.iter().map(Vec::as_slice).collect::<Vec<_>>());
        for ((_, w), (b, (_, data_path))) in files.iter_mut().zip(bytes.iter().zip(&paths)) {
            w.write_all(b).map_err(werr(data_path))?;
        }
    }
    let digests = hasher.finalize();
    let mut out = Vec::with_capacity(recordings.len());
    for (k, (r, (draft, file))) in recordings.into_iter().zip(files).enumerate() {
        let meta_path = &paths[k].0;
        let mut meta = r.meta;
        meta.global.datatype = dtype.datatype().name().into();
        meta.global.sha512 = Some(digests[k].iter().map(|b| format!("{b:02x}")).collect());
        let written = SigmfWritten {
            data: (draft, file),
            meta_path: meta_path.clone(),
            meta_json: meta.to_json(),
        };
        out.push((written, clipped[k]));
    }
    Ok(out)
}

/// `chunk` as `dtype`'s little-endian bytes into `bytes` (replacing what it held); returns how
/// many values were clipped (ci16 only).
fn encode(chunk: &[Complex32], dtype: WriteType, bytes: &mut Vec<u8>) -> u64 {
    bytes.clear();
    let mut clipped = 0u64;
    match dtype {
        WriteType::Cf32 => {
            // Into a sized buffer, 8 bytes a sample: a plain copy where the machine is
            // little-endian (appending 4 bytes at a time was 9 % of synth-iq's time).
            bytes.resize(8 * chunk.len(), 0);
            for (out, v) in bytes.chunks_exact_mut(8).zip(chunk) {
                out[..4].copy_from_slice(&v.re.to_le_bytes());
                out[4..].copy_from_slice(&v.im.to_le_bytes());
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
    clipped
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
