//! Streaming decode through symphonia: one packet at a time, downmixed to mono.

use std::path::{Path, PathBuf};

use symphonia::core::audio::{AudioBuffer, AudioBufferRef, Signal};
use symphonia::core::codecs::{Decoder, DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::conv::IntoSample;
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::{FormatOptions, FormatReader};
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;
use symphonia::core::sample::Sample;

use crate::declared::check_flac_block;
use crate::error::DecodeError;
use crate::item::{ArchiveMember, SourceItem};
use crate::ogg_guard::check_ogg_comments;
use crate::roots::Roots;
use crate::span::{Blob, Span};

/// Sample rates under this are taken as a lying header (no audio format goes lower).
pub const MIN_RATE: u32 = 1_000;

/// Resource limits against hostile headers and streams. Every path that decodes (`features`,
/// `extract`, `bench`) applies them: a header that declares more is refused before anything is
/// decoded or allocated, and a stream that runs past `max_seconds` stops with an error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Longest file, in seconds of audio (default 24 h).
    pub max_seconds: f64,
    /// Most channels (default 64).
    pub max_channels: usize,
    /// Highest sample rate in Hz (default 768 kHz).
    pub max_sample_rate: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

impl Limits {
    /// Checks the limits themselves (options a user set), each within [`Limits::BOUNDS`]'s.
    pub fn validate(&self) -> Result<(), String> {
        let bounds = Limits::BOUNDS;
        if !(self.max_seconds > 0.0 && self.max_seconds <= bounds.max_seconds) {
            return Err(format!(
                "max-duration {} s is outside (0, {}] s",
                self.max_seconds, bounds.max_seconds
            ));
        }
        if !(1..=bounds.max_channels).contains(&self.max_channels) {
            return Err(format!(
                "max-channels {} is outside 1..={}",
                self.max_channels, bounds.max_channels
            ));
        }
        if !(MIN_RATE..=bounds.max_sample_rate).contains(&self.max_sample_rate) {
            return Err(format!(
                "max-sample-rate {} Hz is outside {MIN_RATE}..={} Hz",
                self.max_sample_rate, bounds.max_sample_rate
            ));
        }
        Ok(())
    }

    /// 24 hours, 64 channels, 768 kHz.
    pub const DEFAULT: Limits = Limits {
        max_seconds: 24.0 * 3600.0,
        max_channels: 64,
        max_sample_rate: 768_000,
    };

    /// The highest limits a user may set: 30 days of audio (a longer file is streamed in
    /// pieces, but `features` holds it whole), 1,024 channels (a decoded packet holds each),
    /// 3.072 MHz (four times the default; the resampler's filters grow with the ratio).
    pub const BOUNDS: Limits = Limits {
        max_seconds: 30.0 * 86_400.0,
        max_channels: 1024,
        max_sample_rate: 3_072_000,
    };

    /// Why a header's rate and channel count are refused, if they are.
    fn check_format(&self, rate: u32, channels: usize) -> Result<(), String> {
        if !(MIN_RATE..=self.max_sample_rate).contains(&rate) {
            return Err(format!(
                "sample rate {rate} Hz is outside {MIN_RATE}..={} (--max-sample-rate)",
                self.max_sample_rate
            ));
        }
        if channels == 0 || channels > self.max_channels {
            return Err(format!(
                "{channels} channels is outside 1..={} (--max-channels)",
                self.max_channels
            ));
        }
        Ok(())
    }
}

/// How channels become the one signal features are computed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelMix {
    /// The mean of all channels (librosa's `to_mono`).
    #[default]
    Mean,
    /// One channel, 0-based.
    Select(usize),
}

#[derive(Debug, Clone, Default)]
pub struct DecodeOptions {
    pub mix: ChannelMix,
    /// Resource limits (duration, channels, sample rate).
    pub limits: Limits,
    /// Start this many seconds into the file (NeMo manifests' `offset`).
    pub offset_s: f64,
    /// Stop after this many seconds (NeMo manifests' `duration`); `None` = to the end.
    pub duration_s: Option<f64>,
}

/// What the container says about the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioInfo {
    pub sample_rate: u32,
    pub channels: usize,
    /// Frames per channel the header declares, when it does.
    pub declared_frames: Option<u64>,
    pub codec: String,
}

/// A file being decoded, chunk by chunk.
pub struct AudioReader {
    path: PathBuf,
    format: Box<dyn FormatReader>,
    decoder: Box<dyn Decoder>,
    track_id: u32,
    info: AudioInfo,
    opts: DecodeOptions,
    mono: Vec<f32>,
    frames_read: u64,
    /// Frames still to drop before `offset_s` is reached.
    skip_left: u64,
    /// Frames still to deliver before `duration_s` is reached.
    take_left: Option<u64>,
    /// Frames decoded from the file, including skipped ones.
    frames_decoded: u64,
    /// Frames decoded only to be dropped before the offset.
    skipped: u64,
    /// The container symphonia's probe took, as `probed_marker` emulates it.
    container: Option<Probed>,
}

/// What opening an object reads first: all of a clip, or the header of a span.
fn first_read(opts: &DecodeOptions) -> u64 {
    if opts.offset_s > 0.0 || opts.duration_s.is_some() {
        crate::remote::FIRST_READ_SPAN
    } else {
        crate::remote::FIRST_READ_WHOLE
    }
}

impl AudioReader {
    pub fn open(path: &Path, opts: &DecodeOptions) -> Result<Self, DecodeError> {
        Self::open_in(&Roots::anywhere(), path, opts)
    }

    /// [`open`](Self::open), the file opened beneath `roots`.
    pub fn open_in(roots: &Roots, path: &Path, opts: &DecodeOptions) -> Result<Self, DecodeError> {
        Self::open_reading(roots, path, opts, first_read(opts))
    }

    /// Starts fetching what [`open_in`](Self::open_in) will read first where `path` is an
    /// object (`RemoteObject::read_ahead`): nothing for a local file, nor beneath confined
    /// roots, which refuse object storage.
    pub fn read_ahead(roots: &Roots, path: &Path, opts: &DecodeOptions) {
        if crate::remote::is_url(path) && !roots.is_confined() {
            crate::remote::RemoteObject::read_ahead(path, first_read(opts));
        }
    }

    /// [`open`](Self::open) for a reader after the header (a listing's durations): an object
    /// is opened by a read of its header's size, not of a whole clip's.
    pub fn open_for_header(path: &Path, opts: &DecodeOptions) -> Result<Self, DecodeError> {
        Self::open_reading(
            &Roots::anywhere(),
            path,
            opts,
            crate::remote::FIRST_READ_SPAN,
        )
    }

    fn open_reading(
        roots: &Roots,
        path: &Path,
        opts: &DecodeOptions,
        first: u64,
    ) -> Result<Self, DecodeError> {
        Self::open_span(path, opts, || {
            let file = roots
                .open_blob_reading(path, Some(first))
                .map_err(|source| DecodeError::Open {
                    path: path.to_path_buf(),
                    source,
                })?;
            Span::whole(file).map_err(|source| DecodeError::Open {
                path: path.to_path_buf(),
                source,
            })
        })
    }

    /// A source's item, opened beneath `roots`: its file, or its bytes in a tar archive (a
    /// WebDataset or NeMo shard's member, named `item.path`, the archive's path joined with
    /// its name).
    pub fn open_item(
        roots: &Roots,
        item: &SourceItem,
        opts: &DecodeOptions,
    ) -> Result<Self, DecodeError> {
        match &item.member {
            None => Self::open_in(roots, &item.path, opts),
            Some(member) => {
                let archive = member.open(roots).map_err(|source| DecodeError::Open {
                    path: item.path.clone(),
                    source,
                })?;
                Self::open_member(&archive, member, &item.path, opts)
            }
        }
    }

    /// `member`'s bytes of its `archive` (as [`ArchiveMember::open`] opens it, which a caller
    /// reading the sample's text members too shares), decoded where they lie, as the file
    /// `path`.
    pub fn open_member(
        archive: &Blob,
        member: &ArchiveMember,
        path: &Path,
        opts: &DecodeOptions,
    ) -> Result<Self, DecodeError> {
        Self::open_span(path, opts, || {
            // The archive was listed before it is read: it may have changed since.
            Span::range(archive.clone(), member.offset, member.size).map_err(|e| {
                DecodeError::Corrupt {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                }
            })
        })
    }

    /// Opens what `open` gives (again, where a first reader cannot be used) as `path`.
    fn open_span(
        path: &Path,
        opts: &DecodeOptions,
        open: impl Fn() -> Result<Span, DecodeError>,
    ) -> Result<Self, DecodeError> {
        let span = open()?;
        let container = check_wav_header(&span, path, &opts.limits)?;
        // A seek that fails (a damaged FLAC's search) leaves the reader in no known place:
        // the file is opened again and decoded from the start.
        match guard(path, || {
            Self::open_unguarded(span, path, opts, container, true)
        })? {
            (reader, true) => Ok(reader),
            (_, false) => guard(path, || {
                Self::open_unguarded(open()?, path, opts, container, false)
            })
            .map(|r| r.0),
        }
    }

    /// Reads `file` (opened from `path`); with `seek`, reaches the offset by seeking where
    /// that is exact. Returns the reader and whether it is usable (false: the seek failed).
    fn open_unguarded(
        file: Span,
        path: &Path,
        opts: &DecodeOptions,
        container: Option<Probed>,
        seek: bool,
    ) -> Result<(Self, bool), DecodeError> {
        if file.is_empty() {
            return Err(DecodeError::Empty {
                path: path.to_path_buf(),
            });
        }
        let span = file.clone();
        let mss = MediaSourceStream::new(Box::new(file), Default::default());
        let mut hint = Hint::new();
        if let Some(ext) = path.extension().and_then(|e| e.to_str()) {
            hint.with_extension(ext);
        }
        let format_opts = FormatOptions {
            // Trim encoder delay and padding (MP3 LAME header, Vorbis), as ffmpeg does.
            enable_gapless: true,
            ..Default::default()
        };
        let probed = symphonia::default::get_probe()
            .format(&hint, mss, &format_opts, &MetadataOptions::default())
            .map_err(|e| classify(path, e, "not a recognised audio container"))?;
        let format = probed.format;
        let track = format
            .tracks()
            .iter()
            .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
            .ok_or_else(|| DecodeError::Unsupported {
                path: path.to_path_buf(),
                reason: "no audio track".into(),
            })?;
        let params = &track.codec_params;
        let sample_rate = params.sample_rate.unwrap_or(0);
        let channels = params.channels.map(|c| c.count()).unwrap_or(0);
        opts.limits
            .check_format(sample_rate, channels)
            .map_err(|reason| DecodeError::BadHeader {
                path: path.to_path_buf(),
                reason,
            })?;
        if let ChannelMix::Select(c) = opts.mix {
            if c >= channels {
                return Err(DecodeError::Unsupported {
                    path: path.to_path_buf(),
                    reason: format!("channel {c} asked for, the file has {channels}"),
                });
            }
        }
        let declared_frames = params.n_frames;
        if !opts.offset_s.is_finite() || opts.offset_s < 0.0 {
            return Err(DecodeError::Unsupported {
                path: path.to_path_buf(),
                reason: format!("offset {} s must be finite and ≥ 0", opts.offset_s),
            });
        }
        // An offset past the end is found by decoding (`next_chunk`), not from the header's
        // count: a header may under-declare (the fuzzer found a WAV whose probe declared one
        // frame and decoded three), and refusing an offset the audio reaches loses an item.
        if let Some(n) = declared_frames {
            let seconds = n as f64 / f64::from(sample_rate);
            let max = opts.limits.max_seconds;
            if seconds > max {
                return Err(DecodeError::ResourceLimit {
                    path: path.to_path_buf(),
                    reason: format!(
                        "the header declares {n} frames ({seconds:.0} s); the limit is {max} s (--max-duration)"
                    ),
                });
            }
        }
        if let (Some(duration), Some(frames)) =
            (opts.duration_s, declared_frames.filter(|&n| n > 0))
        {
            // An object read by range fetches the span's bytes in one request, placed by the
            // file's bytes per frame (exact for PCM WAV, an average for FLAC), with margins
            // for the header before the data and a seek that lands early.
            let per_second = span.len() as f64 / frames as f64 * f64::from(sample_rate);
            let start = opts.offset_s * per_second;
            let end = start + duration * per_second * 1.02;
            span.expect(
                (start as u64).saturating_sub(64 << 10)..(end as u64).saturating_add(16 << 10),
            );
        }
        let codec = symphonia::default::get_codecs()
            .get_codec(params.codec)
            .map(|d| d.short_name.to_string())
            .unwrap_or_else(|| "unknown".into());
        let decoder = symphonia::default::get_codecs()
            .make(params, &DecoderOptions::default())
            .map_err(|e| classify(path, e, "no decoder for this codec"))?;
        let track_id = track.id;
        let mut reader = AudioReader {
            path: path.to_path_buf(),
            track_id,
            info: AudioInfo {
                sample_rate,
                channels,
                declared_frames,
                codec,
            },
            format,
            decoder,
            skip_left: (opts.offset_s.max(0.0) * f64::from(sample_rate)).round() as u64,
            take_left: opts
                .duration_s
                .map(|d| (d.max(0.0) * f64::from(sample_rate)).round() as u64),
            opts: opts.clone(),
            mono: Vec::new(),
            frames_read: 0,
            frames_decoded: 0,
            skipped: 0,
            container,
        };
        let usable = !seek || reader.seek_to_offset();
        Ok((reader, usable))
    }

    /// Reaches the offset by seeking instead of decoding everything before it, where that is
    /// exact: PCM WAV and native FLAC decode each frame on its own, so the samples after a seek
    /// are those of a decode from the start. symphonia's accurate seek lands at or before the
    /// offset; the rest is skipped sample by sample as without a seek. Lossy codecs carry
    /// decoder state across frames, and FLAC in Ogg seeks through the Ogg reader (whatever the
    /// file's name: a seek there reads pages a read from the start never meets, which
    /// `ogg_guard` has not checked): they decode from the start. Returns false when the seek
    /// failed (the reader is then unusable).
    fn seek_to_offset(&mut self) -> bool {
        use symphonia::core::formats::{SeekMode, SeekTo};
        let container = self
            .path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        let exact = matches!(container.as_deref(), Some("wav" | "wave" | "flac"))
            && matches!(self.container, Some(Probed::Flac | Probed::Other))
            && (self.info.codec == "flac" || self.info.codec.starts_with("pcm"));
        if self.skip_left == 0 || !exact {
            return true;
        }
        let to = SeekTo::TimeStamp {
            ts: self.skip_left,
            track_id: self.track_id,
        };
        match self.format.seek(SeekMode::Accurate, to) {
            Ok(at) if at.actual_ts <= at.required_ts => {
                self.decoder.reset();
                self.skip_left = at.required_ts - at.actual_ts;
                self.frames_decoded = at.actual_ts;
                true
            }
            _ => false,
        }
    }

    pub fn info(&self) -> &AudioInfo {
        &self.info
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Frames per channel delivered so far.
    pub fn frames_read(&self) -> u64 {
        self.frames_read
    }

    /// Frames per channel decoded and dropped to reach the offset: all of them for a lossy
    /// file, at most one codec frame's worth after a seek.
    pub fn frames_skipped(&self) -> u64 {
        self.skipped
    }

    /// Seconds of audio this reader will deliver, when the header says: what is left after
    /// the offset, capped by the duration.
    pub fn expected_seconds(&self) -> Option<f64> {
        let rate = f64::from(self.info.sample_rate);
        let total = self.info.declared_frames? as f64 / rate;
        let left = (total - self.opts.offset_s).max(0.0);
        Some(self.opts.duration_s.map_or(left, |d| d.min(left)))
    }

    /// The next decoded chunk, mixed to mono at the file's own rate, within the offset and
    /// duration; `None` at the end.
    pub fn next_chunk(&mut self) -> Result<Option<&[f32]>, DecodeError> {
        let path = self.path.clone();
        loop {
            if self.take_left == Some(0) {
                return Ok(None);
            }
            if !guard(&path, || self.decode_next())? {
                // Past the end, or exactly at it: an offset that leaves nothing to read.
                if self.skip_left > 0 || (self.opts.offset_s > 0.0 && self.frames_read == 0) {
                    return Err(DecodeError::OffsetPastEnd {
                        path,
                        offset_s: self.opts.offset_s,
                        length_s: self.frames_decoded as f64 / f64::from(self.info.sample_rate),
                    });
                }
                return Ok(None);
            }
            let n = self.mono.len() as u64;
            let skip = self.skip_left.min(n);
            self.skip_left -= skip;
            self.skipped += skip;
            let mut end = n;
            if let Some(left) = &mut self.take_left {
                end = end.min(skip + *left);
                *left -= end - skip;
            }
            if end > skip {
                self.frames_read += end - skip;
                return Ok(Some(&self.mono[skip as usize..end as usize]));
            }
        }
    }

    /// Decodes the next packet into `self.mono`; false at the end of the stream.
    fn decode_next(&mut self) -> Result<bool, DecodeError> {
        loop {
            let packet = match self.format.next_packet() {
                Ok(p) => p,
                Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return self.end_of_stream().map(|()| false);
                }
                Err(e) => return Err(classify(&self.path, e, "cannot read the next packet")),
            };
            if packet.track_id() != self.track_id {
                continue;
            }
            let decoded = match self.decoder.decode(&packet) {
                Ok(d) => d,
                Err(e) => return Err(classify(&self.path, e, "cannot decode a packet")),
            };
            let spec = *decoded.spec();
            if spec.rate != self.info.sample_rate || spec.channels.count() != self.info.channels {
                return Err(DecodeError::Unsupported {
                    path: self.path.clone(),
                    reason: format!(
                        "the stream changes format mid-way ({} Hz × {} → {} Hz × {})",
                        self.info.sample_rate,
                        self.info.channels,
                        spec.rate,
                        spec.channels.count()
                    ),
                });
            }
            let frames = decoded.frames();
            if frames == 0 {
                continue;
            }
            // Straight from the decoder's planes into the mono signal, converted once.
            self.mono.clear();
            let mix = self.opts.mix;
            match decoded {
                AudioBufferRef::U8(b) => mix_planes(&b, mix, &mut self.mono),
                AudioBufferRef::U16(b) => mix_planes(&b, mix, &mut self.mono),
                AudioBufferRef::U24(b) => mix_planes(&b, mix, &mut self.mono),
                AudioBufferRef::U32(b) => mix_planes(&b, mix, &mut self.mono),
                AudioBufferRef::S8(b) => mix_planes(&b, mix, &mut self.mono),
                AudioBufferRef::S16(b) => mix_planes(&b, mix, &mut self.mono),
                AudioBufferRef::S24(b) => mix_planes(&b, mix, &mut self.mono),
                AudioBufferRef::S32(b) => mix_planes(&b, mix, &mut self.mono),
                AudioBufferRef::F32(b) => mix_planes(&b, mix, &mut self.mono),
                AudioBufferRef::F64(b) => mix_planes(&b, mix, &mut self.mono),
            }
            if !all_in_range(&self.mono) {
                return Err(self.out_of_range());
            }
            self.frames_decoded += self.mono.len() as u64;
            let max = self.opts.limits.max_seconds;
            if self.frames_decoded as f64 / f64::from(self.info.sample_rate) > max {
                return Err(DecodeError::ResourceLimit {
                    path: self.path.clone(),
                    reason: format!("longer than the limit of {max} s (--max-duration)"),
                });
            }
            return Ok(true);
        }
    }

    /// Why a packet that [`all_in_range`] refused is refused: its first non-finite sample, or
    /// else its first sample beyond ±[`MAX_SAMPLE_MAGNITUDE`].
    fn out_of_range(&self) -> DecodeError {
        if let Some(i) = self.mono.iter().position(|s| !s.is_finite()) {
            return DecodeError::Corrupt {
                path: self.path.clone(),
                reason: format!("sample {} is not finite", self.frames_decoded + i as u64),
            };
        }
        // Full scale is ±1. A float sample 120 dB above it is no recording, and values
        // near f32's range overflow the resampler's sums and the power spectra into
        // inf and NaN (the fuzzer's 3e38 in a float WAV): refused, saying why.
        if let Some(i) = self
            .mono
            .iter()
            .position(|s| s.abs() > MAX_SAMPLE_MAGNITUDE)
        {
            return DecodeError::Corrupt {
                path: self.path.clone(),
                reason: format!(
                    "sample {} is {:e}, beyond ±{MAX_SAMPLE_MAGNITUDE:e} (full scale is ±1)",
                    self.frames_decoded + i as u64,
                    self.mono[i]
                ),
            };
        }
        // all_in_range refuses nothing else; said plainly rather than a panic.
        DecodeError::Corrupt {
            path: self.path.clone(),
            reason: format!("a sample is not finite or beyond ±{MAX_SAMPLE_MAGNITUDE:e}"),
        }
    }

    fn end_of_stream(&mut self) -> Result<(), DecodeError> {
        if self.frames_decoded == 0 {
            return Err(DecodeError::Empty {
                path: self.path.clone(),
            });
        }
        // Lossy codecs' declared counts include priming; only a clear shortfall is truncation.
        if let Some(expected) = self.info.declared_frames {
            let lossless = matches!(self.info.codec.as_str(), "flac" | "alac")
                || self.info.codec.starts_with("pcm");
            if lossless && self.frames_decoded < expected {
                return Err(DecodeError::Truncated {
                    path: self.path.clone(),
                    expected,
                    got: self.frames_decoded,
                });
            }
        }
        Ok(())
    }
}

/// Whether every sample is finite and within ±[`MAX_SAMPLE_MAGNITUDE`], tested 64 at a time
/// without a branch a sample (NaN compares false): the two `position` searches this replaces
/// were 3 % of a Loader epoch of FLAC clips in perf, and now run only on a packet that fails.
fn all_in_range(samples: &[f32]) -> bool {
    samples.chunks(64).all(|chunk| {
        chunk
            .iter()
            .fold(true, |ok, s| ok & (s.abs() <= MAX_SAMPLE_MAGNITUDE))
    })
}

/// The largest sample magnitude decoded (2^20, 120 dB above full scale): every stage after
/// (resampling, spectra of up to 65,536 points, their power) stays finite in f32 below it.
pub const MAX_SAMPLE_MAGNITUDE: f32 = 1_048_576.0;

/// Appends the frames of `buf` to `mono` as f32: one channel, or the mean of all (summed in
/// channel order and scaled, as an interleaved mix would). Each sample is converted once, by
/// symphonia's own conversion.
fn mix_planes<S>(buf: &AudioBuffer<S>, mix: ChannelMix, mono: &mut Vec<f32>)
where
    S: Sample + IntoSample<f32>,
{
    let channels = buf.spec().channels.count();
    let start = mono.len();
    let channel = match mix {
        ChannelMix::Select(c) => c,
        ChannelMix::Mean => 0,
    };
    mono.extend(buf.chan(channel).iter().map(|&s| s.into_sample()));
    if mix == ChannelMix::Mean && channels > 1 {
        for c in 1..channels {
            for (m, &s) in mono[start..].iter_mut().zip(buf.chan(c)) {
                *m += IntoSample::<f32>::into_sample(s);
            }
        }
        let inv = 1.0 / channels as f32;
        mono[start..].iter_mut().for_each(|m| *m *= inv);
    }
}

/// Runs a symphonia call, turning a panic inside it (symphonia 0.5 asserts on some hostile
/// headers instead of returning an error) into a `Corrupt` error for this file.
fn guard<T>(path: &Path, f: impl FnOnce() -> Result<T, DecodeError>) -> Result<T, DecodeError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        Err(DecodeError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("the decoder gave up: {what}"),
        })
    })
}

/// Reads a RIFF/WAVE `fmt ` chunk, if the file is one, and refuses the lies symphonia would
/// trip over (zero or absurd rates and channel counts); checks the lengths declared in the
/// FLAC or Ogg stream symphonia's probe would take. Returns the container the probe takes.
fn check_wav_header(
    file: &Span,
    path: &Path,
    limits: &Limits,
) -> Result<Option<Probed>, DecodeError> {
    // A read that fails here (an object replaced since it was listed) is said as it is, not
    // taken for a short header.
    let head = file
        .try_read_at(0, 4096)
        .map_err(|source| DecodeError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    let bad = |reason: String| DecodeError::BadHeader {
        path: path.to_path_buf(),
        reason,
    };
    // symphonia's probe looks for a container's marker anywhere in the first MiB, so a FLAC
    // stream may begin past a file's start (the fuzzer's `RIFX` + `fLaC` files, whose comment
    // blocks declared 4 GiB): the one it would take is checked, and so are Ogg's comments.
    let probed = probed_marker(|at, len| file.read_at(at, len));
    match probed {
        Some((Probed::Flac, at)) => check_flac_metadata(file, at).map_err(bad)?,
        Some((Probed::Ogg, at)) => check_ogg_comments(file, at).map_err(bad)?,
        _ => {}
    }
    let container = probed.map(|p| p.0);
    if head.len() >= 4 && &head[..4] == b"fLaC" {
        return Ok(container);
    }
    if head.len() < 12 || &head[..4] != b"RIFF" || &head[8..12] != b"WAVE" {
        return Ok(container);
    }
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]);
    let mut pos = 12;
    while pos + 8 <= head.len() {
        let id = &head[pos..pos + 4];
        let len = u32::from_le_bytes([head[pos + 4], head[pos + 5], head[pos + 6], head[pos + 7]]);
        if id == b"fmt " && pos + 16 <= head.len() {
            let channels = u16_at(pos + 10);
            let rate = u32::from_le_bytes([
                head[pos + 12],
                head[pos + 13],
                head[pos + 14],
                head[pos + 15],
            ]);
            if let Err(reason) = limits.check_format(rate, usize::from(channels)) {
                return Err(bad(reason));
            }
            // PCM, float, A-law, mu-law (and their extensible form): a block is one sample
            // per channel. A header that says otherwise decodes to another count of frames
            // than it declares (a file taken for short, an offset inside it refused as past
            // its end).
            if pos + 24 <= head.len() {
                let (format, align, bits) = (u16_at(pos + 8), u16_at(pos + 20), u16_at(pos + 22));
                let whole_samples = matches!(format, 1 | 3 | 6 | 7 | 0xFFFE);
                let expected = u32::from(channels) * u32::from(bits).div_ceil(8);
                if whole_samples && u32::from(align) != expected {
                    return Err(bad(format!(
                        "block_align {align} is not {channels} channels of {bits}-bit samples \
                         ({expected} bytes)"
                    )));
                }
            }
            return Ok(container);
        }
        pos += 8 + len as usize + (len as usize & 1);
    }
    Ok(container)
}

/// How far symphonia 0.5's probe searches a file for a container's marker
/// (`Probe::PROBE_SEARCH_LIMIT`).
const PROBE_SEARCH_LIMIT: usize = 1 << 20;

/// The container that symphonia 0.5's probe would read, and where it begins.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Probed {
    Flac,
    Ogg,
    /// RIFF or MPEG audio: nothing to check beyond the WAV header.
    Other,
}

/// Where the stream that symphonia 0.5's probe would read begins, and its kind: the probe scans byte by byte for the markers of the readers registered (those of the
/// features sonograph builds: `RIFF`, `OggS`, an MPEG audio frame sync, `fLaC`) and takes
/// the first it finds within [`PROBE_SEARCH_LIMIT`] bytes of where its scan began. An ID3v2
/// tag (a metadata reader's marker) is read whole (10 bytes and its size; a footer flag is not
/// honoured) and the scan begins again after it, with a fresh limit. A FLAC stream need not
/// begin with STREAMINFO for it. A marker listed here that no reader registered would end the
/// scan too soon, so only those are. `read(at, len)` gives up to `len` bytes of the file from
/// `at`.
fn probed_marker(read: impl Fn(u64, usize) -> Vec<u8>) -> Option<(Probed, u64)> {
    // The second byte of each MPEG layer 1-3 frame sync symphonia-bundle-mp3 registers.
    const MPEG_SYNC: [u8; 18] = [
        0xfe, 0xff, 0xf6, 0xf7, 0xe6, 0xe7, 0xfc, 0xfd, 0xf4, 0xf5, 0xe4, 0xe5, 0xfa, 0xfb, 0xf2,
        0xf3, 0xe2, 0xe3,
    ];
    const CHUNK: usize = 1 << 16;
    // The file read in chunks as the scan goes (a tag may send it far ahead).
    let (mut chunk_at, mut chunk) = (0u64, read(0, CHUNK));
    let (mut scan_start, mut at) = (0u64, 0u64);
    while at - scan_start < PROBE_SEARCH_LIMIT as u64 {
        if at < chunk_at || at + 10 > chunk_at + chunk.len() as u64 {
            (chunk_at, chunk) = (at, read(at, CHUNK));
        }
        let w = &chunk[((at - chunk_at) as usize).min(chunk.len())..];
        if w.is_empty() {
            return None; // the end of the file
        }
        if w.starts_with(b"fLaC") {
            return Some((Probed::Flac, at));
        }
        if w.starts_with(b"OggS") {
            return Some((Probed::Ogg, at));
        }
        if w.starts_with(b"RIFF") || (w.len() >= 2 && w[0] == 0xff && MPEG_SYNC.contains(&w[1])) {
            return Some((Probed::Other, at));
        }
        if w.starts_with(b"ID3") && w.len() >= 10 {
            // 10 bytes and the tag's size (28 bits, 7 per byte).
            let size = w[6..10]
                .iter()
                .fold(0u64, |n, &b| (n << 7) | u64::from(b & 0x7f));
            at += 10 + size;
            scan_start = at;
            continue;
        }
        at += 1;
    }
    None
}

/// Refuses the metadata of the FLAC stream whose marker is at byte `marker` when a block's
/// inner lengths pass it (see [`check_flac_block`]).
fn check_flac_metadata(file: &Span, marker: u64) -> Result<(), String> {
    let mut pos = marker + 4;
    loop {
        let header = file.read_at(pos, 4);
        if header.len() < 4 {
            return Ok(()); // symphonia says what is wrong with a truncated file
        }
        let last = header[0] & 0x80 != 0;
        let len = u64::from(u32::from_be_bytes([0, header[1], header[2], header[3]]));
        let start = pos + 4;
        if matches!(header[0] & 0x7f, 4 | 6) {
            check_flac_block(header[0] & 0x7f, &file.read_at(start, len as usize))?;
        }
        if last {
            return Ok(());
        }
        pos = start + len;
    }
}

/// Maps symphonia's errors onto ours, with the file name and a reason a person can act on.
fn classify(path: &Path, e: SymError, context: &str) -> DecodeError {
    let path = path.to_path_buf();
    match e {
        SymError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            DecodeError::Corrupt {
                path,
                reason: format!("{context}: the file ends too early"),
            }
        }
        SymError::IoError(io) => DecodeError::Corrupt {
            path,
            reason: format!("{context}: {io}"),
        },
        SymError::Unsupported(what) => DecodeError::Unsupported {
            path,
            reason: format!("{context}: {what}"),
        },
        SymError::LimitError(what) => DecodeError::ResourceLimit {
            path,
            reason: format!("{context}: {what}"),
        },
        other => DecodeError::Corrupt {
            path,
            reason: format!("{context}: {other}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{probed_marker, Probed, PROBE_SEARCH_LIMIT};

    #[test]
    fn the_flac_stream_checked_is_the_one_the_probe_takes() {
        let probe = |bytes: &[u8]| {
            let bytes = bytes.to_vec();
            probed_marker(move |at, len| {
                let from = (at as usize).min(bytes.len());
                bytes[from..(from + len).min(bytes.len())].to_vec()
            })
            .and_then(|(kind, at)| (kind == Probed::Flac).then_some(at))
        };
        let mut junk_then_flac = b"RIFX".to_vec();
        junk_then_flac.extend_from_slice(b"fLaC\x04\0\0\x59");
        assert_eq!(probe(&junk_then_flac), Some(4));
        assert_eq!(probe(b"fLaC\0\0\0\x22"), Some(0));
        // A WAV whose samples hold the four bytes: the probe took the RIFF marker at 0.
        let mut wav = b"RIFF\0\0\0\0WAVEdata".to_vec();
        wav.extend_from_slice(b"\0\x11fLaC\x04\0\0\x59");
        assert_eq!(probe(&wav), None);
        // An MPEG frame sync first: an MP3 to the probe.
        assert_eq!(probe(b"\0\xff\xfb\x90fLaC"), None);
        // An ID3v2 tag of 6 bytes holding "RIFF", skipped as the probe skips it.
        let mut tagged = b"ID3\x04\0\0\0\0\0\x06RIFF\0\0".to_vec();
        tagged.extend_from_slice(b"fLaC\0\0\0\x22");
        assert_eq!(probe(&tagged), Some(16));
        // A footer flag (0x10) changes nothing: symphonia reads 10 bytes and the size.
        let mut footer = b"ID3\x04\0\x10\0\0\0\x04\0\0\0\0".to_vec();
        footer.extend_from_slice(b"fLaC\x04\0\0\x59");
        assert_eq!(probe(&footer), Some(14));
        // The search limit begins again after a tag: a marker 1 MiB - 10 bytes after a tag
        // that ends 20 bytes in is found, at 1,048,586 bytes into the file.
        let mut far = b"ID3\x04\0\0\0\0\0\x0a".to_vec();
        far.resize(20, 0);
        far.resize(20 + PROBE_SEARCH_LIMIT - 10, 0);
        far.extend_from_slice(b"fLaC\x04\0\0\x59");
        assert_eq!(probe(&far), Some(20 + PROBE_SEARCH_LIMIT as u64 - 10));
        // Without the tag the same marker is past the limit.
        let mut past = vec![0u8; PROBE_SEARCH_LIMIT + 10];
        past.extend_from_slice(b"fLaC\x04\0\0\x59");
        assert_eq!(probe(&past), None);
        assert_eq!(probe(b"nothing here"), None);
        assert_eq!(probe(b""), None);
        // An Ogg page first: its comments are what is checked.
        let ogg = b"xxOggS\0\x02fLaC";
        let read = |at: u64, len: usize| {
            let from = (at as usize).min(ogg.len());
            ogg[from..(from + len).min(ogg.len())].to_vec()
        };
        assert_eq!(probed_marker(read), Some((Probed::Ogg, 2)));
    }
}
