//! `sigmf_meta`, `sigmf_archive` and `raw_iq`: IQ recordings as `extract` and `rf-features`
//! list and read them (`list_recordings`, `IqReader`, `ItemReader::Iq`), checked against a
//! decode of the bytes written here from the SigMF datatypes' definitions.

use std::path::Path;

use sonograph_io::manifest::{Entry, Source, SourceOptions};
use sonograph_io::sigmf::{list_recordings, read_sigmf, read_source, IqSource, TarMember};
use sonograph_io::{IqError, IqReader, ItemReader};
use sonograph_rf::sigmf::{DataType, SigmfMeta};

use crate::harness::{assert_names, assert_same, run, Scratch};

/// The most samples a recording may have here (small, so that the limit is reached).
const MAX_SAMPLES: u64 = 2048;
/// The rate given for raw files (`--sample-rate`).
const RAW_RATE: f64 = 1e6;

/// Interleaved I/Q values of `bytes` in `datatype`, from the format's definition: little-
/// endian floats as they are, integers over 2^(bits−1), unsigned ones centred first.
fn reference(bytes: &[u8], datatype: DataType) -> Vec<f32> {
    let sb = datatype.sample_bytes();
    assert_eq!(bytes.len() % sb, 0);
    let half = sb / 2;
    let mut out = Vec::with_capacity(2 * bytes.len() / sb);
    for v in bytes.chunks_exact(half) {
        out.push(match datatype {
            DataType::Cf32Le => f32::from_le_bytes(v.try_into().unwrap()),
            DataType::Cf64Le => f64::from_le_bytes(v.try_into().unwrap()) as f32,
            DataType::Ci16Le => f32::from(i16::from_le_bytes(v.try_into().unwrap())) / 32768.0,
            DataType::Ci8 => f32::from(v[0] as i8) / 128.0,
            DataType::Cu8 => (f32::from(v[0]) - 128.0) / 128.0,
        });
    }
    out
}

/// Reads an opened recording to its end as extract does (an `ItemReader::Iq`, chunk by chunk),
/// checking what it yields against `reference`.
fn read_and_compare(reader: IqReader, bytes: &[u8], what: &str) {
    let datatype = reader.datatype();
    let samples = reader.samples();
    assert_eq!(
        samples * datatype.sample_bytes() as u64,
        bytes.len() as u64,
        "{what}: the sample count is not the data's length"
    );
    assert!(
        samples <= MAX_SAMPLES,
        "{what}: {samples} samples, over the limit"
    );
    let path = reader.path().to_path_buf();
    let item = ItemReader::Iq(reader);
    assert_eq!(
        item.expected_seconds(),
        Some(samples as f64 / item_rate(&item)),
        "{what}: expected_seconds is not samples / rate"
    );
    let mut values = Vec::new();
    let streamed = item.stream::<std::convert::Infallible>(0, |chunk| {
        assert!(
            !chunk.is_empty() && chunk.len() % 2 == 0,
            "{what}: a chunk of {} values",
            chunk.len()
        );
        values.extend_from_slice(chunk);
        Ok(())
    });
    match streamed {
        Ok(n) => assert_eq!(n, samples, "{what}: stream counted another length"),
        Err(e) => panic!(
            "{what}: a recording checked at open fails to read: {e} ({})",
            path.display()
        ),
    }
    let want = reference(bytes, datatype);
    assert_same(what, &values, &want);
    if datatype != DataType::Cf32Le && datatype != DataType::Cf64Le {
        assert!(
            values.iter().all(|v| (-1.0..=1.0).contains(v)),
            "{what}: an integer sample outside [-1, 1]"
        );
    }
}

fn item_rate(item: &ItemReader) -> f64 {
    match item {
        ItemReader::Iq(r) => r.sample_rate(),
        ItemReader::Audio(_) => unreachable!(),
    }
}

/// Raw files of every datatype, named by their extension, at a rate given on the command line.
pub fn raw_iq(data: &[u8]) {
    run("raw_iq", || {
        let scratch = Scratch::new("raw");
        for (ext, datatype) in [
            ("cf32", DataType::Cf32Le),
            ("ci16", DataType::Ci16Le),
            ("cu8", DataType::Cu8),
            ("ci8", DataType::Ci8),
            ("cf64", DataType::Cf64Le),
        ] {
            let path = scratch.write(&format!("rec.{ext}"), data);
            let listed = list_recordings(&path, None).expect("a raw file lists");
            assert_eq!(listed.len(), 1);
            let (id, source) = &listed[0];
            assert_eq!(id, &format!("rec.{ext}"));
            let source = source.as_ref().expect("a raw file is a recording");
            assert!(
                matches!(source, IqSource::Raw { datatype: d, .. } if *d == datatype),
                "rec.{ext} listed as {source:?}"
            );
            let sb = datatype.sample_bytes();
            match IqReader::open(source, Some(RAW_RATE), MAX_SAMPLES) {
                Ok(reader) => {
                    assert_eq!(reader.sample_rate(), RAW_RATE);
                    read_and_compare(reader, data, &format!("rec.{ext}"));
                }
                Err(e) => {
                    assert_names(&e.to_string(), &path);
                    match e {
                        IqError::OddLength { bytes, .. } => {
                            assert_eq!(bytes, data.len() as u64);
                            assert_ne!(data.len() % sb, 0, "a whole number of samples refused");
                        }
                        IqError::TooLarge { samples, .. } => {
                            assert_eq!(data.len() % sb, 0);
                            assert_eq!(samples, (data.len() / sb) as u64);
                            assert!(samples > MAX_SAMPLES);
                        }
                        other => panic!("rec.{ext}: refused for no reason of its bytes: {other}"),
                    }
                }
            }
            // A raw file without a rate is refused, and so is a rate that is no rate.
            for rate in [None, Some(0.0), Some(f64::NAN), Some(-1.0)] {
                assert!(IqReader::open(source, rate, MAX_SAMPLES).is_err());
            }
        }
    })
}

/// The data file beside the metadata: every byte under 0x40, so that every datatype reads
/// finite values, and 1024 bytes, a whole number of samples of each (with ci8 and cu8 over
/// [`MAX_SAMPLES`]).
fn data_bytes() -> Vec<u8> {
    (0..1024u32)
        .map(|i| ((i * 37 + i / 7) % 64) as u8)
        .collect()
}

/// `.sigmf-meta` JSON, as sonograph-rf parses it and as sonograph-io reads a recording by it.
pub fn sigmf_meta(data: &[u8]) {
    run("sigmf_meta", || {
        // sonograph-io reads metadata bytes as lossy UTF-8.
        let text = String::from_utf8_lossy(data);
        let parsed = SigmfMeta::from_json(&text);
        if let Ok(meta) = &parsed {
            check_meta(meta);
        }
        let scratch = Scratch::new("sigmf");
        let meta_path = scratch.write("rec.sigmf-meta", data);
        let bytes = data_bytes();
        scratch.write("rec.sigmf-data", &bytes);
        // The recording is found by its metadata, its data or its base name alike.
        for named in ["rec.sigmf-meta", "rec.sigmf-data", "rec"] {
            let listed =
                list_recordings(&scratch.path().join(named), None).expect("a SigMF pair lists");
            assert_eq!(listed.len(), 1);
            assert_eq!(listed[0].0, "rec");
            assert!(
                matches!(&listed[0].1, Ok(IqSource::Sigmf { meta, .. }) if *meta == meta_path),
                "{named} listed as {:?}",
                listed[0].1
            );
        }
        let source = IqSource::Sigmf {
            id: "rec".into(),
            meta: meta_path.clone(),
        };
        let opened = IqReader::open(&source, None, MAX_SAMPLES);
        match (&parsed, opened) {
            (Err(e), Ok(_)) => {
                panic!("sonograph-io reads a recording whose metadata is refused: {e}")
            }
            (Ok(meta), Ok(reader)) => {
                assert_eq!(
                    reader.meta(),
                    Some(meta),
                    "the reader parsed other metadata"
                );
                assert_eq!(Some(reader.sample_rate()), meta.global.sample_rate);
                assert_eq!(
                    Ok(reader.datatype()),
                    meta.datatype().map_err(|e| e.to_string())
                );
                assert!(
                    meta.claimed_end() <= reader.samples(),
                    "metadata refers to sample {} of {}",
                    meta.claimed_end(),
                    reader.samples()
                );
                read_and_compare(reader, &bytes, "rec.sigmf-data");
                let recording = read_sigmf(&meta_path, "rec", MAX_SAMPLES)
                    .expect("read_sigmf reads what IqReader opened");
                assert_eq!(recording.meta.as_ref(), Some(meta));
                let values: Vec<f32> = recording
                    .samples
                    .iter()
                    .flat_map(|c| [c.re, c.im])
                    .collect();
                assert_same(
                    "read_sigmf",
                    &values,
                    &reference(&bytes, recording_type(meta)),
                );
            }
            (Ok(meta), Err(e)) => {
                assert_names(&e.to_string(), scratch.path());
                let sb = recording_type(meta).sample_bytes() as u64;
                let samples = bytes.len() as u64 / sb;
                // Refused for a reason the metadata and the data give.
                let explained = match &e {
                    IqError::BadMeta { .. } => meta.global.sample_rate.is_none(),
                    IqError::Truncated { .. } => meta.claimed_end() > samples,
                    IqError::TooLarge { .. } => samples > MAX_SAMPLES,
                    _ => false,
                };
                assert!(explained, "valid metadata refused: {e}");
            }
            (Err(_), Err(e)) => assert_names(&e.to_string(), scratch.path()),
        }
    })
}

fn recording_type(meta: &SigmfMeta) -> DataType {
    meta.datatype().expect("parsed metadata has a datatype")
}

/// What `SigmfMeta::from_json` promises of what it returns, and its round trip.
fn check_meta(meta: &SigmfMeta) {
    meta.datatype()
        .expect("parsed metadata has a known datatype");
    assert!(matches!(meta.global.num_channels, None | Some(1)));
    if let Some(fs) = meta.global.sample_rate {
        assert!(fs.is_finite() && fs > 0.0, "sample rate {fs} accepted");
    }
    assert!(
        meta.captures
            .windows(2)
            .all(|w| w[0].sample_start <= w[1].sample_start),
        "captures out of order accepted"
    );
    let end = meta.claimed_end();
    for a in &meta.annotations {
        assert!(a.sample_start <= end);
    }
    let json = meta.to_json();
    let back = SigmfMeta::from_json(&json)
        .unwrap_or_else(|e| panic!("written metadata does not read back: {e}\n{json}"));
    assert_eq!(&back, meta, "metadata changed through a write and a read");
}

/// `.sigmf` archives (tar), listed as `extract` lists them and every member read.
pub fn sigmf_archive(data: &[u8]) {
    run("sigmf_archive", || {
        let scratch = Scratch::new("archive");
        let path = scratch.write("rec.sigmf", data);
        let listed = list_recordings(&path, None).expect("an archive that exists lists");
        assert!(!listed.is_empty());
        let mut read_all = true;
        let mut members = 0;
        for (id, listing) in &listed {
            match listing {
                Err(e) => {
                    assert_eq!(id, "rec.sigmf");
                    assert_eq!(listed.len(), 1, "an archive both listed and refused");
                    assert_names(&e.to_string(), &path);
                    read_all = false;
                }
                Ok(source) => {
                    members += 1;
                    read_all &= check_member(id, source, &path, data);
                }
            }
        }
        assert!(
            listed.windows(2).all(|w| w[0].0 <= w[1].0),
            "recordings not sorted by id"
        );
        // extract's source lists the same ids.
        let options = SourceOptions {
            iq: true,
            ..Default::default()
        };
        let source = Source::open_with(&path, &options).expect("an archive is an IQ source");
        let ids: Vec<String> = source
            .entries()
            .expect("listed entries stream")
            .map(|e| e.expect("listed entries stream").id().to_string())
            .collect();
        let want: Vec<&String> = listed.iter().map(|(id, _)| id).collect();
        assert_eq!(ids.iter().collect::<Vec<_>>(), want);
        for e in source.entries().unwrap() {
            match e.unwrap() {
                Entry::Iq { .. } | Entry::Invalid { .. } => {}
                Entry::Item(item) => panic!("an archive listed audio: {item:?}"),
            }
        }
        // rf-features reads the archive whole: the same recordings when each member reads.
        let whole = IqSource::Archive {
            id: "rec".into(),
            path: path.clone(),
        };
        match read_source(&whole, None, MAX_SAMPLES) {
            Ok(recordings) => {
                assert!(read_all, "the archive reads whole where a member fails");
                assert_eq!(recordings.len(), members);
            }
            Err(e) => {
                assert_names(&e.to_string(), &path);
                assert!(
                    !read_all,
                    "the archive fails whole where every member reads"
                );
            }
        }
    })
}

/// A member's place in the archive: 512-byte aligned, inside it.
fn assert_member_place(m: &TarMember, len: u64) {
    assert_eq!(m.offset % 512, 0, "{} at byte {}", m.name, m.offset);
    assert!(
        m.offset.checked_add(m.size).is_some_and(|end| end <= len),
        "{}: {} bytes at byte {} run past the archive's {len}",
        m.name,
        m.size,
        m.offset
    );
}

/// Checks and reads one listed member; true when it read.
fn check_member(id: &str, source: &IqSource, archive: &Path, data: &[u8]) -> bool {
    let IqSource::Member {
        id: member_id,
        archive: at,
        meta,
        data: data_member,
    } = source
    else {
        panic!("an archive listed {source:?}");
    };
    assert_eq!(id, member_id);
    assert_eq!(at, archive);
    let len = data.len() as u64;
    assert!(meta.name.ends_with(".sigmf-meta"));
    assert_member_place(meta, len);
    let base = meta.name.strip_suffix(".sigmf-meta").unwrap();
    assert_eq!(id, format!("rec.sigmf/{base}"));
    if let Some(d) = data_member {
        assert_eq!(d.name, format!("{base}.sigmf-data"));
        assert_member_place(d, len);
    }
    let bytes = |m: &TarMember| &data[m.offset as usize..(m.offset + m.size) as usize];
    match IqReader::open(source, None, MAX_SAMPLES) {
        Ok(reader) => {
            let d = data_member.as_ref().expect("a member read without data");
            let text = String::from_utf8_lossy(bytes(meta));
            let parsed =
                SigmfMeta::from_json(&text).expect("a member read by metadata that is refused");
            assert_eq!(reader.meta(), Some(&parsed));
            check_meta(&parsed);
            assert!(parsed.claimed_end() <= reader.samples());
            read_and_compare(reader, bytes(d), id);
            true
        }
        Err(e) => {
            let message = e.to_string();
            assert_names(&message, archive);
            false
        }
    }
}
