//! `audio`: WAV, FLAC, MP3 and Ogg Vorbis files, decoded as `features` reads them
//! (`AudioReader`, chunk by chunk at the file's rate) and as `extract` does (an
//! `ItemReader::Audio` read whole and resampled to the spec's rate), then again with a
//! manifest's offset and duration and with one channel chosen.

use std::path::Path;

use sonograph_io::decode::{AudioInfo, AudioReader, ChannelMix, DecodeOptions, Limits};
use sonograph_io::ItemReader;

use crate::harness::{assert_names, assert_same, run, Scratch};

/// Small limits, as a careful service would set them.
const LIMITS: Limits = Limits {
    max_seconds: 60.0,
    max_channels: 8,
    max_sample_rate: 192_000,
};

/// The rate extract resamples to (the Whisper and NeMo presets').
const SPEC_RATE: u32 = 16_000;

/// Decodes `data` as an audio file (named by its first bytes, as a file on disk would be).
pub fn audio(data: &[u8]) {
    run("audio", || {
        let scratch = Scratch::new("audio");
        let path = scratch.write(&format!("input.{}", extension(data)), data);
        check(&path);
    })
}

/// The extension such a file would have: the container its first bytes announce.
fn extension(data: &[u8]) -> &'static str {
    if data.starts_with(b"RIFF") || data.starts_with(b"RIFX") {
        "wav"
    } else if data.starts_with(b"fLaC") {
        "flac"
    } else if data.starts_with(b"OggS") {
        "ogg"
    } else {
        "mp3"
    }
}

/// Integer codecs, whose samples convert into [-1, 1] (lossy and float ones may go past).
fn integer_codec(codec: &str) -> bool {
    codec == "flac"
        || codec.starts_with("adpcm")
        || (codec.starts_with("pcm_") && !codec.starts_with("pcm_f"))
}

/// A file read to its end (or to its first error) through `AudioReader::next_chunk`.
struct Decoded {
    info: AudioInfo,
    samples: Vec<f32>,
    /// The error that ended the stream, if one did.
    failed: Option<String>,
}

fn options(mix: ChannelMix, offset_s: f64, duration_s: Option<f64>) -> DecodeOptions {
    DecodeOptions {
        mix,
        limits: LIMITS,
        offset_s,
        duration_s,
    }
}

/// Opens and reads `path` chunk by chunk; `Err` is the message of a file refused at open.
fn decode(path: &Path, opts: &DecodeOptions) -> Result<Decoded, String> {
    let mut reader = AudioReader::open(path, opts).map_err(|e| {
        let message = e.to_string();
        assert_names(&message, path);
        message
    })?;
    let info = reader.info().clone();
    assert!(
        (sonograph_io::decode::MIN_RATE..=LIMITS.max_sample_rate).contains(&info.sample_rate),
        "opened a file at {} Hz, outside the limits",
        info.sample_rate
    );
    assert!(
        (1..=LIMITS.max_channels).contains(&info.channels),
        "opened a file of {} channels, outside the limits",
        info.channels
    );
    if let Some(frames) = info.declared_frames {
        assert!(
            frames as f64 / f64::from(info.sample_rate) <= LIMITS.max_seconds,
            "opened a file whose header declares {frames} frames at {} Hz, over the limit",
            info.sample_rate
        );
    }
    let integer = integer_codec(&info.codec);
    let mut samples = Vec::new();
    let failed = loop {
        match reader.next_chunk() {
            Ok(Some(chunk)) => {
                assert!(!chunk.is_empty(), "an empty chunk before the end");
                if let Some(i) = chunk.iter().position(|s| !s.is_finite()) {
                    panic!(
                        "sample {} is {} ({})",
                        samples.len() + i,
                        chunk[i],
                        info.codec
                    );
                }
                if integer {
                    if let Some(i) = chunk.iter().position(|s| s.abs() > 1.0) {
                        panic!(
                            "sample {} of an integer codec ({}) is {}, outside [-1, 1]",
                            samples.len() + i,
                            info.codec,
                            chunk[i]
                        );
                    }
                }
                samples.extend_from_slice(chunk);
            }
            Ok(None) => break None,
            Err(e) => {
                let message = e.to_string();
                assert_names(&message, path);
                break Some(message);
            }
        }
    };
    assert_eq!(
        reader.frames_read(),
        samples.len() as u64,
        "frames_read disagrees with the chunks delivered"
    );
    let most = LIMITS.max_seconds * f64::from(info.sample_rate);
    assert!(
        samples.len() as f64 <= most,
        "{} frames delivered at {} Hz: over the {} s limit",
        samples.len(),
        info.sample_rate,
        LIMITS.max_seconds
    );
    Ok(Decoded {
        info,
        samples,
        failed,
    })
}

fn check(path: &Path) {
    // As `features` reads a file: the mean of the channels, chunk by chunk, at its own rate.
    let whole = decode(path, &options(ChannelMix::Mean, 0.0, None));

    // As `extract` reads an item: an ItemReader, read whole and resampled to the spec's rate.
    let item = AudioReader::open(path, &options(ChannelMix::Mean, 0.0, None))
        .map(ItemReader::Audio)
        .and_then(|reader| {
            let expected = reader.expected_seconds();
            if let Some(s) = expected {
                assert!(
                    s.is_finite() && (0.0..=LIMITS.max_seconds).contains(&s),
                    "expected_seconds {s} outside 0..={}",
                    LIMITS.max_seconds
                );
            }
            reader.read_all(SPEC_RATE)
        });
    match (&whole, &item) {
        (Ok(d), Ok(resampled)) => {
            assert!(
                d.failed.is_none(),
                "extract's read succeeded where the same decode failed: {:?}",
                d.failed
            );
            if let Some(i) = resampled.iter().position(|s| !s.is_finite()) {
                panic!("resampled sample {i} is {}", resampled[i]);
            }
            // The resampler gives ceil(n · out / in) samples (as librosa and soxr do).
            let n = d.samples.len() as u64;
            let want = (n * u64::from(SPEC_RATE)).div_ceil(u64::from(d.info.sample_rate));
            assert_eq!(
                resampled.len() as u64,
                want,
                "{n} frames at {} Hz resampled to {SPEC_RATE} Hz",
                d.info.sample_rate
            );
        }
        (Ok(d), Err(e)) => {
            let message = e.to_string();
            assert_names(&message, path);
            assert!(
                d.failed.is_some(),
                "extract's read failed where the same decode succeeded: {message}"
            );
        }
        (Err(_), Ok(_)) => panic!("extract's read opened a file the same open refused"),
        (Err(_), Err(e)) => assert_names(&e.to_string(), path),
    }

    let Ok(whole) = whole else { return };
    if whole.failed.is_some() {
        return;
    }
    let n = whole.samples.len();
    let rate = f64::from(whole.info.sample_rate);

    // A manifest's span: the middle third. WAV and FLAC reach it by seeking, the others by
    // decoding from the start; either way its samples are those of the whole decode.
    if n >= 3 {
        let (skip, take) = (n / 3, n / 3);
        let span = options(
            ChannelMix::Mean,
            skip as f64 / rate,
            Some(take as f64 / rate),
        );
        match decode(path, &span) {
            Ok(d) => {
                if let Some(e) = d.failed {
                    panic!("the span {skip}+{take} fails where the whole file decodes: {e}");
                }
                assert_same(
                    &format!("frames {skip}..{} read with an offset", skip + take),
                    &d.samples,
                    &whole.samples[skip..skip + take],
                );
            }
            Err(e) => panic!("the span {skip}+{take} is refused where the whole file decodes: {e}"),
        }
    }

    // One channel: as many frames; for a mono file, the same samples as the mean.
    let last = whole.info.channels - 1;
    match decode(path, &options(ChannelMix::Select(last), 0.0, None)) {
        Ok(d) => {
            if let Some(e) = d.failed {
                panic!("channel {last} fails where the mean decodes: {e}");
            }
            assert_eq!(d.samples.len(), n, "channel {last} has another length");
            if last == 0 {
                assert_same("channel 0 of a mono file", &d.samples, &whole.samples);
            }
        }
        Err(e) => panic!("channel {last} is refused where the mean decodes: {e}"),
    }
}
