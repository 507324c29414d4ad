//! SigMF and raw IQ files: round trips, and hostile inputs that must give one clear error
//! naming the file (never a panic or an allocation the data does not back).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha512};
use sonograph_io::sigmf::{
    list_sources, publish_sigmf, read_sigmf, read_source, sigmf_paths, write_sigmf,
    write_sigmf_group_unsynced, IqSource, SigmfRecording, WriteType, DEFAULT_MAX_SAMPLES,
    HASHED_TOGETHER,
};
use sonograph_io::IqError;
use sonograph_rf::sigmf::{DataType, SigmfMeta};
use sonograph_rf::Complex32;

struct Tmp(PathBuf);
impl Tmp {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("sonograph-sigmf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn signal(n: usize) -> Vec<Complex32> {
    (0..n)
        .map(|i| {
            let t = i as f32;
            Complex32::new((0.01 * t).cos() * 0.7, (0.013 * t).sin() * -0.6 + 1e-7 * t)
        })
        .collect()
}

fn write(base: &Path, iq: &[Complex32], dt: WriteType) {
    let meta = SigmfMeta::new(DataType::Cf32Le, 1e6);
    write_sigmf(base, iq, dt, meta).unwrap();
}

/// Recordings written as a group, their hashes computed side by side (runs of one length, up
/// to [`HASHED_TOGETHER`] at a time, a lone one by itself): each metadata's `core:sha512` is
/// the SHA-512 of its own data file, each file holds its own samples, and each ci16 recording
/// counts its own clipped values.
#[test]
fn a_group_written_side_by_side_has_each_files_own_sha512() {
    let tmp = Tmp::new("group");
    // Lengths: a run longer than the lanes (split in two), a lone one, a run of three.
    let lengths = [[5_000usize; 11].as_slice(), &[777], &[8_193; 3]].concat();
    assert!(lengths.iter().filter(|&&n| n == 5_000).count() > HASHED_TOGETHER);
    for dt in [WriteType::Cf32, WriteType::Ci16] {
        let signals: Vec<Vec<Complex32>> = lengths
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                let mut iq = signal(n);
                // Recording k's k-th sample out of range: clipped once in ci16 (k > 0).
                iq[k] = Complex32::new(if k > 0 { 1.5 } else { 0.25 }, 0.0);
                iq.iter_mut()
                    .skip(k + 1)
                    .for_each(|v| v.re += k as f32 * 1e-3);
                iq
            })
            .collect();
        let bases: Vec<PathBuf> = (0..lengths.len())
            .map(|k| tmp.0.join(format!("{dt:?}-{k}")))
            .collect();
        let recordings = bases
            .iter()
            .zip(&signals)
            .map(|(base, iq)| SigmfRecording {
                base,
                iq,
                meta: SigmfMeta::new(DataType::Cf32Le, 1e6),
            })
            .collect();
        let written = write_sigmf_group_unsynced(recordings, dt).unwrap();
        assert_eq!(written.len(), lengths.len());
        let mut drafts = Vec::new();
        for (k, (w, clipped)) in written.into_iter().enumerate() {
            let want = u64::from(dt == WriteType::Ci16 && k > 0);
            assert_eq!(clipped, want, "{dt:?} recording {k}");
            drafts.push(w.sync().unwrap());
        }
        publish_sigmf(drafts).unwrap();
        for (k, base) in bases.iter().enumerate() {
            let (meta_path, data_path) = sigmf_paths(base);
            let data = std::fs::read(&data_path).unwrap();
            let hex: String = Sha512::digest(&data)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let rec = read_sigmf(&meta_path, "r", DEFAULT_MAX_SAMPLES).unwrap();
            let meta = rec.meta.unwrap();
            assert_eq!(
                meta.global.sha512.as_deref(),
                Some(hex.as_str()),
                "{dt:?} {k}"
            );
            assert_eq!(rec.samples.len(), lengths[k], "{dt:?} {k}");
            if dt == WriteType::Cf32 {
                assert_eq!(rec.samples, signals[k], "{dt:?} {k}");
            }
        }
    }
}

#[test]
fn cf32_round_trips_bit_exact_and_ci16_within_half_an_lsb() {
    let tmp = Tmp::new("roundtrip");
    let iq = signal(10_007);
    let base = tmp.0.join("a");
    write(&base, &iq, WriteType::Cf32);
    let (meta_path, data_path) = sigmf_paths(&base);
    let rec = read_sigmf(&meta_path, "a", DEFAULT_MAX_SAMPLES).unwrap();
    assert_eq!(rec.samples, iq);
    assert_eq!(rec.sample_rate, 1e6);
    assert_eq!(std::fs::metadata(&data_path).unwrap().len(), 8 * 10_007);
    let meta = rec.meta.unwrap();
    assert_eq!(meta.global.sha512.as_ref().unwrap().len(), 128);

    let base = tmp.0.join("b");
    write(&base, &iq, WriteType::Ci16);
    let rec = read_sigmf(&sigmf_paths(&base).0, "b", DEFAULT_MAX_SAMPLES).unwrap();
    assert_eq!(rec.meta.unwrap().global.datatype, "ci16_le");
    for (a, b) in rec.samples.iter().zip(&iq) {
        assert!((a.re - b.re).abs() <= 0.5 / 32768.0 + 1e-9);
        assert!((a.im - b.im).abs() <= 0.5 / 32768.0 + 1e-9);
    }
}

fn err_of(r: Result<Vec<sonograph_io::IqRecording>, IqError>) -> String {
    r.unwrap_err().to_string()
}

fn read_one(path: &Path) -> Result<Vec<sonograph_io::IqRecording>, IqError> {
    let sources = list_sources(path, None)?;
    let mut out = Vec::new();
    for s in &sources {
        out.extend(read_source(s, Some(1e6), DEFAULT_MAX_SAMPLES)?);
    }
    Ok(out)
}

#[test]
fn hostile_files_give_one_line_naming_the_file() {
    let tmp = Tmp::new("hostile");
    let base = tmp.0.join("rec");
    write(&base, &signal(100), WriteType::Cf32);
    let (meta, data) = sigmf_paths(&base);

    // Truncated data: the annotation claims more samples than the file has.
    let mut m = SigmfMeta::from_json(&std::fs::read_to_string(&meta).unwrap()).unwrap();
    m.annotations.push(sonograph_rf::sigmf::Annotation {
        sample_start: 0,
        sample_count: Some(1_000_000_000_000),
        label: None,
        freq_lower_edge: None,
        freq_upper_edge: None,
        comment: None,
        extra: Default::default(),
    });
    std::fs::write(&meta, m.to_json()).unwrap();
    let e = err_of(read_one(&meta));
    assert!(
        e.contains("rec.sigmf-data") && e.contains("truncated") && e.contains("1000000000000"),
        "{e}"
    );

    // Odd byte count.
    write(&base, &signal(100), WriteType::Cf32);
    let mut bytes = std::fs::read(&data).unwrap();
    bytes.truncate(797);
    std::fs::write(&data, &bytes).unwrap();
    let e = err_of(read_one(&meta));
    assert!(
        e.contains("797 bytes is not a whole number of 8-byte cf32_le samples"),
        "{e}"
    );

    // Missing fields and junk metadata.
    for (text, want) in [
        (
            "{\"global\": {\"core:version\": \"1.2.0\"}}",
            "core:datatype",
        ),
        ("not json", "bad metadata"),
        (
            "{\"global\": {\"core:datatype\": \"cf32_le\", \"core:version\": \"1.2.0\"}}",
            "core:sample_rate is missing",
        ),
    ] {
        std::fs::write(&meta, text).unwrap();
        let e = err_of(read_one(&meta));
        assert!(e.contains("rec.sigmf-") && e.contains(want), "{e}");
        assert!(!e.contains('\n'));
    }

    // A missing data file.
    write(&base, &signal(10), WriteType::Cf32);
    std::fs::remove_file(&data).unwrap();
    let e = err_of(read_one(&meta));
    assert!(e.contains("rec.sigmf-data: cannot open"), "{e}");

    // Over the sample limit.
    write(&base, &signal(1000), WriteType::Cf32);
    let src = &list_sources(&meta, None).unwrap()[0];
    let e = read_source(src, None, 999).unwrap_err().to_string();
    assert!(e.contains("1000 samples is over the limit of 999"), "{e}");

    // A raw file without a sample rate, and an unknown extension.
    let raw = tmp.0.join("x.ci16");
    std::fs::write(&raw, [0u8, 1, 2, 3, 4, 5, 6, 7]).unwrap();
    let src = &list_sources(&raw, None).unwrap()[0];
    assert!(read_source(src, None, 10)
        .unwrap_err()
        .to_string()
        .contains("--sample-rate"));
    let got = read_source(src, Some(2e6), 10).unwrap();
    assert_eq!(got[0].samples.len(), 2);
    assert_eq!(
        got[0].samples[0],
        Complex32::new(256.0 / 32768.0, 770.0 / 32768.0)
    );
    let junk = tmp.0.join("x.txt");
    std::fs::write(&junk, "hello").unwrap();
    assert!(list_sources(&junk, None)
        .unwrap_err()
        .to_string()
        .contains("x.txt: not a SigMF file"));
}

/// A ustar header for `name` claiming `size` bytes.
fn tar_header(name: &str, size: u64) -> Vec<u8> {
    let mut h = vec![0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..108].copy_from_slice(b"0000644\0");
    let s = format!("{size:011o}\0");
    h[124..136].copy_from_slice(s.as_bytes());
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

fn member(out: &mut Vec<u8>, name: &str, bytes: &[u8]) {
    out.extend(tar_header(name, bytes.len() as u64));
    out.extend_from_slice(bytes);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

#[test]
fn archives_read_and_hostile_archives_fail_cleanly() {
    let tmp = Tmp::new("archive");
    let base = tmp.0.join("a");
    let iq = signal(300);
    write(&base, &iq, WriteType::Cf32);
    let (meta, data) = sigmf_paths(&base);
    let mut tar = Vec::new();
    member(
        &mut tar,
        "rec/rec.sigmf-meta",
        &std::fs::read(&meta).unwrap(),
    );
    member(
        &mut tar,
        "rec/rec.sigmf-data",
        &std::fs::read(&data).unwrap(),
    );
    tar.extend(vec![0u8; 1024]);
    let archive = tmp.0.join("set.sigmf");
    std::fs::write(&archive, &tar).unwrap();
    let recs = read_one(&archive).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].samples, iq);
    assert_eq!(recs[0].id, "set.sigmf/rec/rec");

    // A member claiming 8 GB (the most an octal size field holds).
    let mut bad = Vec::new();
    bad.extend(tar_header("rec/rec.sigmf-data", 8_000_000_000));
    bad.extend(vec![0u8; 4096]);
    std::fs::write(&archive, &bad).unwrap();
    let e = err_of(read_one(&archive));
    assert!(
        e.contains("set.sigmf: truncated") && e.contains("8000000000"),
        "{e}"
    );
    // Junk in the size field (the header's checksum then fails too).
    let mut bad = tar_header("x", 1);
    bad[124..136].copy_from_slice(b"zzzzzzzzzzz\0");
    std::fs::write(&archive, &bad).unwrap();
    let e = err_of(read_one(&archive));
    assert!(
        e.contains("set.sigmf") && e.contains("cannot be read"),
        "{e}"
    );
    // No metadata inside.
    let mut none = Vec::new();
    member(&mut none, "x.txt", b"hello");
    std::fs::write(&archive, &none).unwrap();
    assert!(err_of(read_one(&archive)).contains("holds no .sigmf-meta"));
}

#[test]
fn folders_list_sigmf_archives_and_raw_files_sorted() {
    let tmp = Tmp::new("folder");
    std::fs::create_dir_all(tmp.0.join("sub")).unwrap();
    write(&tmp.0.join("sub/b"), &signal(10), WriteType::Cf32);
    write(&tmp.0.join("a"), &signal(10), WriteType::Ci16);
    std::fs::write(tmp.0.join("c.cu8"), [128u8, 0, 255, 128]).unwrap();
    std::fs::write(tmp.0.join("notes.txt"), "x").unwrap();
    let s = list_sources(&tmp.0, None).unwrap();
    let ids: Vec<&str> = s.iter().map(|s| s.id()).collect();
    assert_eq!(ids, ["a", "c.cu8", "sub/b"]);
    assert!(matches!(
        s[1],
        IqSource::Raw {
            datatype: DataType::Cu8,
            ..
        }
    ));
    let c = read_source(&s[1], Some(1.0), 10).unwrap();
    assert_eq!(
        c[0].samples,
        vec![
            Complex32::new(0.0, -1.0),
            Complex32::new(127.0 / 128.0, 0.0)
        ]
    );
    // The base name of a pair works too.
    assert_eq!(list_sources(&tmp.0.join("a"), None).unwrap().len(), 1);
}

/// A recording streamed a block at a time (interleaved I/Q, as `extract` reads it) is the
/// recording read whole, over several blocks, for every datatype the readers take.
#[test]
fn streamed_blocks_equal_the_whole_recording() {
    use sonograph_io::{IqReader, ItemReader};
    let tmp = Tmp::new("stream");
    let iq = signal(150_001);
    let base = tmp.0.join("long");
    write(&base, &iq, WriteType::Ci16);
    let meta = sigmf_paths(&base).0;
    // Raw files of each integer type, from the same bytes pattern.
    let bytes: Vec<u8> = (0..40_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let mut sources = list_sources(&meta, None).unwrap();
    for (name, dt) in [
        ("r.cu8", DataType::Cu8),
        ("r.ci8", DataType::Ci8),
        ("r.ci16", DataType::Ci16Le),
        ("r.cf32", DataType::Cf32Le),
    ] {
        let path = tmp.0.join(name);
        std::fs::write(&path, &bytes).unwrap();
        let s = list_sources(&path, None).unwrap();
        assert!(matches!(&s[0], IqSource::Raw { datatype, .. } if *datatype == dt));
        sources.extend(s);
    }
    for source in &sources {
        let whole = read_source(source, Some(5e5), DEFAULT_MAX_SAMPLES).unwrap();
        let want: Vec<f32> = whole[0].samples.iter().flat_map(|c| [c.re, c.im]).collect();
        let mut reader = IqReader::open(source, Some(5e5), DEFAULT_MAX_SAMPLES).unwrap();
        assert_eq!(reader.samples() as usize, whole[0].samples.len());
        let (mut got, mut blocks) = (Vec::new(), 0);
        while reader.read_interleaved(&mut got).unwrap() > 0 {
            blocks += 1;
        }
        // Bit for bit: random bytes read as cf32 hold NaNs.
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
        assert!(bits(&got) == bits(&want), "{}", source.id());
        let reader = IqReader::open(source, Some(5e5), DEFAULT_MAX_SAMPLES).unwrap();
        let mut streamed = Vec::new();
        let n = ItemReader::Iq(reader)
            .stream(0, |chunk| {
                assert!(chunk.len() % 2 == 0 && chunk.len() <= 2 * 65_536);
                streamed.extend_from_slice(chunk);
                Ok::<(), std::convert::Infallible>(())
            })
            .unwrap();
        assert_eq!(n as usize, want.len() / 2);
        assert!(bits(&streamed) == bits(&want), "{}", source.id());
        if source.id() == "long" {
            assert_eq!(blocks, 3);
        }
    }
}

/// A folder's recordings with archives opened up into their members (ids `archive/member`),
/// sorted; an archive that cannot be listed is one entry with its reason, and a member whose
/// data is missing, or an archive cut short after it was listed, fails when opened, naming
/// the file.
#[test]
fn recordings_of_folders_and_archives_are_listed_one_by_one() {
    use sonograph_io::sigmf::list_recordings;
    use sonograph_io::IqReader;
    let tmp = Tmp::new("recordings");
    let dir = tmp.0.join("set");
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (signal(300), signal(500));
    let mut tar = Vec::new();
    for (name, iq) in [("a", &a), ("b", &b)] {
        let base = tmp.0.join(name);
        write(&base, iq, WriteType::Cf32);
        let (meta, data) = sigmf_paths(&base);
        member(
            &mut tar,
            &format!("{name}.sigmf-meta"),
            &std::fs::read(meta).unwrap(),
        );
        member(
            &mut tar,
            &format!("{name}.sigmf-data"),
            &std::fs::read(data).unwrap(),
        );
    }
    // A third recording with metadata and no data.
    member(
        &mut tar,
        "c.sigmf-meta",
        &std::fs::read(sigmf_paths(&tmp.0.join("a")).0).unwrap(),
    );
    tar.extend(vec![0u8; 1024]);
    std::fs::write(dir.join("pack.sigmf"), &tar).unwrap();
    let mut junk = tar_header("x.sigmf-meta", 1);
    junk[124..136].copy_from_slice(b"zzzzzzzzzzz\0");
    std::fs::write(dir.join("bad.sigmf"), &junk).unwrap();
    write(&dir.join("solo"), &signal(10), WriteType::Cf32);
    let listed = list_recordings(&dir, None).unwrap();
    let ids: Vec<&str> = listed.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "bad.sigmf",
            "pack.sigmf/a",
            "pack.sigmf/b",
            "pack.sigmf/c",
            "solo"
        ]
    );
    let e = listed[0].1.as_ref().unwrap_err().to_string();
    assert!(
        e.contains("bad.sigmf") && e.contains("a tar header cannot be read"),
        "{e}"
    );
    let open = |k: usize| IqReader::open(listed[k].1.as_ref().unwrap(), None, 1 << 20);
    assert_eq!(open(1).unwrap().into_recording().unwrap().samples, a);
    let rec_b = open(2).unwrap().into_recording().unwrap();
    assert_eq!((rec_b.samples, rec_b.id.as_str()), (b, "pack.sigmf/b"));
    let e = open(3).err().unwrap().to_string();
    assert!(
        e.contains("pack.sigmf/c.sigmf-meta") && e.contains("no c.sigmf-data"),
        "{e}"
    );
    // Cut short after listing: b's data is past the end now.
    std::fs::write(dir.join("pack.sigmf"), &tar[..tar.len() / 2]).unwrap();
    let e = open(2).err().unwrap().to_string();
    assert!(
        e.contains("pack.sigmf/b.sigmf-") && e.contains("past the archive's end"),
        "{e}"
    );
}

/// `Source::open_with` lists a folder's IQ recordings beside its audio (archives by member,
/// sorted by id) only when asked to, and opens a single recording or archive as a source;
/// plain `Source::open` is unchanged: audio only, and no IQ file as a source.
#[test]
fn extract_sources_list_iq_recordings_beside_audio_when_asked() {
    use sonograph_io::manifest::{Entry, Source, SourceOptions};
    let tmp = Tmp::new("source");
    let dir = tmp.0.join("mixed");
    std::fs::create_dir_all(&dir).unwrap();
    write(&dir.join("rec"), &signal(64), WriteType::Cf32);
    std::fs::write(dir.join("clip.wav"), b"not decoded while listing").unwrap();
    std::fs::write(dir.join("cap.cu8"), [128u8; 64]).unwrap();
    let mut tar = Vec::new();
    let (meta, data) = sigmf_paths(&dir.join("rec"));
    member(&mut tar, "m.sigmf-meta", &std::fs::read(meta).unwrap());
    member(&mut tar, "m.sigmf-data", &std::fs::read(data).unwrap());
    tar.extend(vec![0u8; 1024]);
    std::fs::write(dir.join("pack.sigmf"), &tar).unwrap();
    let iq = SourceOptions {
        iq: true,
        ..Default::default()
    };
    let ids = |s: &Source| -> Vec<(String, bool)> {
        s.entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.id().to_string(), matches!(e, Entry::Iq { .. }))
            })
            .collect()
    };
    let listed = ids(&Source::open_with(&dir, &iq).unwrap());
    let want = [
        ("cap.cu8", true),
        ("clip.wav", false),
        ("pack.sigmf/m", true),
        ("rec", true),
    ];
    assert_eq!(listed, want.map(|(i, k)| (i.to_string(), k)));
    assert_eq!(
        ids(&Source::open(&dir).unwrap()),
        [("clip.wav".to_string(), false)]
    );
    let one = ids(&Source::open_with(&dir.join("rec.sigmf-meta"), &iq).unwrap());
    assert_eq!(one, [("rec".to_string(), true)]);
    let archive = ids(&Source::open_with(&dir.join("pack.sigmf"), &iq).unwrap());
    assert_eq!(archive, [("pack.sigmf/m".to_string(), true)]);
    assert!(Source::open(&dir.join("rec.sigmf-meta")).is_err());
    // A file that is neither audio source nor IQ says what a source may be.
    let e = Source::open_with(&dir.join("clip.wav"), &iq)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("clip.wav") && e.contains("raw IQ file"), "{e}");
}

/// Archives of other tar writers: a member name over 100 bytes in a PAX extended header (what
/// Python's tarfile and GNU tar --format=pax write) and in a GNU long-name entry, both read
/// under their whole names; and a member whose size is in base-256 (over 8 GiB), whose claim is
/// checked against the archive's length.
#[test]
fn archives_with_pax_and_gnu_long_names_read_whole() {
    let tmp = Tmp::new("long-names");
    let base = tmp.0.join("r");
    let iq = signal(64);
    write(&base, &iq, WriteType::Cf32);
    let (meta, data) = sigmf_paths(&base);
    let (meta, data) = (std::fs::read(meta).unwrap(), std::fs::read(data).unwrap());
    let long = format!(
        "{}/capture",
        "a-rather-long-folder-name-of-a-campaign".repeat(3)
    );
    assert!(long.len() > 100);
    for gnu in [false, true] {
        let mut builder = tar::Builder::new(Vec::new());
        for (ext, bytes) in [("sigmf-meta", &meta), ("sigmf-data", &data)] {
            let name = format!("{long}.{ext}");
            let mut header = if gnu {
                tar::Header::new_gnu()
            } else {
                tar::Header::new_ustar()
            };
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            if gnu {
                // The builder writes a GNU long-name entry for a path over 100 bytes.
                builder
                    .append_data(&mut header, &name, bytes.as_slice())
                    .unwrap();
            } else {
                builder
                    .append_pax_extensions([("path", name.as_bytes())])
                    .unwrap();
                header.set_path("short.sigmf-x").unwrap();
                header.set_cksum();
                builder.append(&header, bytes.as_slice()).unwrap();
            }
        }
        let archive = tmp.0.join(if gnu { "gnu.sigmf" } else { "pax.sigmf" });
        std::fs::write(&archive, builder.into_inner().unwrap()).unwrap();
        let recs = read_one(&archive).unwrap();
        assert_eq!(recs.len(), 1, "gnu: {gnu}");
        assert_eq!(recs[0].samples, iq);
        let name = archive.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(recs[0].id, format!("{name}/{long}"));
    }
    // A base-256 size (a member over 8 GiB) that the archive does not hold.
    let mut header = tar::Header::new_gnu();
    header.set_path("big.sigmf-data").unwrap();
    header.set_mode(0o644);
    header.set_size(20 << 30);
    header.set_cksum();
    assert_eq!(header.as_bytes()[124] & 0x80, 0x80, "base-256");
    let mut bytes = header.as_bytes().to_vec();
    bytes.extend(vec![0u8; 4096]);
    let archive = tmp.0.join("big.sigmf");
    std::fs::write(&archive, &bytes).unwrap();
    let e = err_of(read_one(&archive));
    assert!(
        e.contains("truncated") && e.contains(&(20u64 << 30).to_string()),
        "{e}"
    );
}
