//! Decoding against the committed fixtures (tests/data, made by scripts/make_test_audio.sh)
//! and against hostile files made on the spot.

use std::path::{Path, PathBuf};

use sonograph_io::{
    decode_mono, read_npy_f32, AudioReader, ChannelMix, DecodeError, DecodeOptions, Limits,
};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

fn manifest() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(data_dir().join("decode.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["files"].as_array().unwrap().clone()
}

fn decode(path: &Path, mix: ChannelMix, rate: u32) -> Result<Vec<f32>, DecodeError> {
    let opts = DecodeOptions {
        mix,
        ..Default::default()
    };
    decode_mono(path, &opts, rate)
}

#[test]
fn lossless_files_decode_exactly_per_channel_and_mixed() {
    let mut checked = 0;
    for f in manifest() {
        let Some(refs) = f["reference"].as_array() else {
            continue;
        };
        let path = data_dir().join(f["path"].as_str().unwrap());
        let rate = f["rate"].as_u64().unwrap() as u32;
        let atol = f["atol"].as_f64().unwrap() as f32;
        let channels: Vec<Vec<f32>> = refs
            .iter()
            .map(|r| {
                read_npy_f32(&data_dir().join(r.as_str().unwrap()))
                    .unwrap()
                    .1
            })
            .collect();
        let info = AudioReader::open(&path, &DecodeOptions::default())
            .unwrap()
            .info()
            .clone();
        assert_eq!(info.sample_rate, rate, "{}", path.display());
        assert_eq!(info.channels, channels.len(), "{}", path.display());
        for (c, expect) in channels.iter().enumerate() {
            let got = decode(&path, ChannelMix::Select(c), rate).unwrap();
            assert_eq!(got.len(), expect.len(), "{} channel {c}", path.display());
            let worst = got
                .iter()
                .zip(expect)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(
                worst <= atol,
                "{} channel {c}: max error {worst} > {atol}",
                path.display()
            );
        }
        let mixed = decode(&path, ChannelMix::Mean, rate).unwrap();
        for (i, m) in mixed.iter().enumerate() {
            let mean = channels.iter().map(|c| c[i]).sum::<f32>() / channels.len() as f32;
            assert!(
                (m - mean).abs() <= atol + 1e-7,
                "{} sample {i}",
                path.display()
            );
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} lossless fixtures found");
}

#[test]
fn lossy_files_have_the_right_length_and_content() {
    let reference = read_npy_f32(&data_dir().join("ref/speech_44100_left.npy"))
        .unwrap()
        .1;
    for name in ["speech_44100_stereo.mp3", "speech_44100_stereo.ogg"] {
        let path = data_dir().join(name);
        let got = decode(&path, ChannelMix::Select(0), 44_100).unwrap();
        // Gapless trimming (LAME header, Vorbis granule positions) gives ffmpeg's count.
        assert_eq!(got.len(), 88_200, "{name}");
        let dot: f64 = got
            .iter()
            .zip(&reference)
            .map(|(a, b)| f64::from(a * b))
            .sum();
        let ea: f64 = got.iter().map(|a| f64::from(a * a)).sum();
        let eb: f64 = reference.iter().map(|b| f64::from(b * b)).sum();
        let corr = dot / (ea * eb).sqrt();
        assert!(corr > 0.99, "{name}: correlation {corr}");
    }
}

#[test]
fn resampled_decode_has_the_librosa_length() {
    let path = data_dir().join("speech_48000_mono_s16.wav");
    let got = decode(&path, ChannelMix::Mean, 16_000).unwrap();
    assert_eq!(got.len(), 32_000);
    let path = data_dir().join("speech_44100_stereo_s16.wav");
    let got = decode(&path, ChannelMix::Mean, 16_000).unwrap();
    assert_eq!(got.len(), (88_200usize * 16_000).div_ceil(44_100));
}

#[test]
fn streaming_hands_over_chunks_before_the_end() {
    let path = data_dir().join("sample.flac");
    let mut chunks = 0;
    let mut total = 0;
    let summary = sonograph_io::stream_mono::<std::convert::Infallible>(
        &path,
        &DecodeOptions::default(),
        16_000,
        |c| {
            chunks += 1;
            total += c.len();
            Ok(())
        },
    )
    .unwrap();
    assert!(chunks > 10, "{chunks} chunks");
    assert_eq!(total as u64, summary.output_samples);
    assert_eq!(summary.source_frames, 101_062);
}

struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("sonograph-io-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A canonical 44-byte-header PCM WAV.
fn wav(rate: u32, channels: u16, bits: u16, data: &[u8], declared_data_len: u32) -> Vec<u8> {
    let block = channels * bits / 8;
    let mut v = Vec::new();
    v.extend_from_slice(b"RIFF");
    v.extend_from_slice(&declared_data_len.wrapping_add(36).to_le_bytes());
    v.extend_from_slice(b"WAVEfmt ");
    v.extend_from_slice(&16u32.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&channels.to_le_bytes());
    v.extend_from_slice(&rate.to_le_bytes());
    v.extend_from_slice(&(rate * u32::from(block)).to_le_bytes());
    v.extend_from_slice(&block.to_le_bytes());
    v.extend_from_slice(&bits.to_le_bytes());
    v.extend_from_slice(b"data");
    v.extend_from_slice(&declared_data_len.to_le_bytes());
    v.extend_from_slice(data);
    v
}

fn expect_err(path: &Path, needle: &str) {
    let err = decode(path, ChannelMix::Mean, 16_000).expect_err("must fail");
    let msg = err.to_string();
    assert!(
        msg.contains(&*path.to_string_lossy()),
        "message names the file: {msg}"
    );
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(msg.contains(needle), "expected {needle:?} in {msg}");
}

#[test]
fn bad_files_get_one_line_errors_naming_file_and_reason() {
    let dir = TempDir::new("bad");
    let pcm: Vec<u8> = (0..3200i16).flat_map(|i| (i * 7).to_le_bytes()).collect();
    expect_err(&dir.0.join("missing.wav"), "cannot open");
    expect_err(&dir.write("empty.wav", b""), "");
    expect_err(&dir.write("noise.mp3", &[0x5a; 4096]), "");
    expect_err(&dir.write("text.flac", b"this is not audio at all"), "");
    expect_err(&dir.write("zero_hz.wav", &wav(0, 1, 16, &pcm, 6400)), "");
    expect_err(
        &dir.write("many_channels.wav", &wav(16_000, 1000, 16, &pcm, 6000)),
        "",
    );
    expect_err(
        &dir.write("no_samples.wav", &wav(16_000, 1, 16, &[], 0)),
        "",
    );
    expect_err(
        &dir.write("lying_length.wav", &wav(16_000, 1, 16, &pcm, 64_000)),
        "truncated",
    );
    let flac = std::fs::read(data_dir().join("speech_16000_mono_s16.flac")).unwrap();
    expect_err(&dir.write("cut.flac", &flac[..flac.len() / 2]), "");
    let float_wav = |samples: &[(usize, f32)]| {
        let mut bytes = Vec::new();
        for i in 0..1000 {
            let v = samples.iter().find(|s| s.0 == i).map_or(0.1, |s| s.1);
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let mut file = wav(16_000, 1, 32, &bytes, 4000);
        file[20] = 3; // WAVE_FORMAT_IEEE_FLOAT
        file
    };
    expect_err(
        &dir.write("nan.wav", &float_wav(&[(500, f32::NAN)])),
        "sample 500 is not finite",
    );
    expect_err(
        &dir.write("inf.wav", &float_wav(&[(63, f32::NEG_INFINITY)])),
        "sample 63 is not finite",
    );
    expect_err(
        &dir.write("huge.wav", &float_wav(&[(700, 3e38)])),
        "sample 700 is 3e38, beyond",
    );
    // A packet with both: the non-finite sample is said, wherever it is.
    expect_err(
        &dir.write("both.wav", &float_wav(&[(300, 2e6), (800, f32::NAN)])),
        "sample 800 is not finite",
    );
    // A streamed WAV (placeholder lengths 0xFFFFFFFF): symphonia 0.5 refuses it; what
    // matters here is a clear error, not a hang or a panic.
    expect_err(
        &dir.write("streamed.wav", &wav(16_000, 1, 16, &pcm, 0xFFFF_FFFF)),
        "",
    );
    // A good file decodes, as a control.
    let ok = dir.write("ok.wav", &wav(16_000, 1, 16, &pcm, 6400));
    assert_eq!(decode(&ok, ChannelMix::Mean, 16_000).unwrap().len(), 3200);
}

/// A header that declares more audio than the duration limit is refused before anything is
/// decoded or allocated; duration, channel and rate limits are the caller's to set.
#[test]
fn headers_beyond_the_limits_are_refused_up_front() {
    let dir = TempDir::new("limits");
    let pcm: Vec<u8> = (0..3200i16).flat_map(|i| (i * 7).to_le_bytes()).collect();
    // 0xFFFF_FF00 bytes of 8-bit mono at 8 kHz: 149 hours declared, 6400 bytes present.
    expect_err(
        &dir.write("huge.wav", &wav(8_000, 1, 8, &pcm, 0xFFFF_FF00)),
        "the limit is 86400 s",
    );
    let ok = dir.write("ok.wav", &wav(16_000, 2, 16, &pcm, 6400));
    let with = |limits: Limits| {
        let opts = DecodeOptions {
            limits,
            ..Default::default()
        };
        decode_mono(&ok, &opts, 16_000).map_err(|e| e.to_string())
    };
    assert_eq!(with(Limits::default()).unwrap().len(), 1600);
    let err = with(Limits {
        max_seconds: 0.05,
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.contains("the limit is 0.05 s"), "{err}");
    let err = with(Limits {
        max_channels: 1,
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.contains("2 channels is outside 1..=1"), "{err}");
    let err = with(Limits {
        max_sample_rate: 8_000,
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.contains("16000 Hz is outside"), "{err}");
    assert!(Limits {
        max_seconds: f64::NAN,
        ..Default::default()
    }
    .validate()
    .is_err());
}

/// Offsets into lossless files are reached by seeking, and the samples are exactly those of a
/// decode from the start (the same samples, sliced), at any offset and in every format.
#[test]
fn offsets_by_seeking_equal_a_decode_from_the_start() {
    for name in [
        "speech_16000_mono_s16.wav",
        "speech_16000_mono_s16.flac",
        "speech_44100_stereo_s24.wav",
        "speech_44100_stereo.flac",
        "speech_44100_stereo.mp3",
    ] {
        let path = data_dir().join(name);
        let whole = decode_mono(&path, &DecodeOptions::default(), 16_000).unwrap();
        let native = AudioReader::open(&path, &DecodeOptions::default())
            .unwrap()
            .info()
            .sample_rate;
        let all = {
            let mut r = AudioReader::open(&path, &DecodeOptions::default()).unwrap();
            let mut v = Vec::new();
            while let Some(c) = r.next_chunk().unwrap() {
                v.extend_from_slice(c);
            }
            v
        };
        assert!(!whole.is_empty());
        for offset_s in [0.0, 0.01, 0.3337, 1.25, 1.9] {
            let opts = DecodeOptions {
                offset_s,
                duration_s: Some(0.05),
                ..Default::default()
            };
            let mut r = AudioReader::open(&path, &opts).unwrap();
            let mut got = Vec::new();
            while let Some(c) = r.next_chunk().unwrap() {
                got.extend_from_slice(c);
            }
            let start = (offset_s * f64::from(native)).round() as usize;
            let len = (0.05 * f64::from(native)).round() as usize;
            assert_eq!(got, all[start..start + len], "{name} at {offset_s} s");
            // Lossless files seek: at most one codec frame is decoded to be dropped.
            let skipped = r.frames_skipped() as usize;
            if name.ends_with(".mp3") {
                assert_eq!(skipped, start, "{name}: lossy files decode from the start");
            } else {
                assert!(
                    skipped <= 4608.min(start),
                    "{name} at {offset_s} s: {skipped}"
                );
            }
        }
    }
}

/// An offset at the end of the audio, or past it, is an error naming the file and the length
/// decoded (found by decoding, not from the header's count), in every format: an item with
/// nothing to read is never taken for an empty one.
#[test]
fn an_offset_at_or_past_the_end_is_an_error() {
    for name in [
        "speech_16000_mono_s16.wav",
        "speech_16000_mono_s16.flac",
        "speech_44100_stereo.mp3",
    ] {
        let path = data_dir().join(name);
        let mut r = AudioReader::open(&path, &DecodeOptions::default()).unwrap();
        let rate = f64::from(r.info().sample_rate);
        let mut frames = 0usize;
        while let Some(c) = r.next_chunk().unwrap() {
            frames += c.len();
        }
        for offset_s in [frames as f64 / rate, frames as f64 / rate + 1.0] {
            let opts = DecodeOptions {
                offset_s,
                ..Default::default()
            };
            let result = AudioReader::open(&path, &opts).and_then(|mut r| {
                while r.next_chunk()?.is_some() {}
                Ok(r.frames_read())
            });
            let e = result.expect_err(&format!("{name} at {offset_s} s"));
            let message = e.to_string();
            assert!(
                message.contains(name) && message.contains("past the end"),
                "{name} at {offset_s} s: {message}"
            );
        }
    }
}

/// The mean of the channels is computed as an interleaved mix would: each sample converted
/// once, summed in channel order, times 1/channels — bit for bit, every lossless format.
#[test]
fn the_channel_mean_is_exact() {
    let (_, left) = read_npy_f32(&data_dir().join("ref/speech_44100_left.npy")).unwrap();
    let (_, right) = read_npy_f32(&data_dir().join("ref/speech_44100_right.npy")).unwrap();
    let want: Vec<f32> = left
        .iter()
        .zip(&right)
        .map(|(l, r)| (l + r) * 0.5)
        .collect();
    for name in [
        "speech_44100_stereo_s16.wav",
        "speech_44100_stereo_s24.wav",
        "speech_44100_stereo_f32.wav",
        "speech_44100_stereo.flac",
    ] {
        let mut r = AudioReader::open(&data_dir().join(name), &DecodeOptions::default()).unwrap();
        let mut got = Vec::new();
        while let Some(c) = r.next_chunk().unwrap() {
            got.extend_from_slice(c);
        }
        assert!(got == want, "{name}: the mean differs from (l + r) / 2");
    }
}
