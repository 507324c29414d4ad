//! Crashes found by fuzzing, fixed outside this crate: each test replays the minimised input
//! from `fuzz/regressions/<target>/` (or the case's own construction) and asserts what the fix
//! made true, so that none comes back.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use sonograph_io::decode::{AudioReader, DecodeOptions};
use sonograph_io::manifest::Source;

#[path = "../../../tests/shared/wav.rs"]
mod shared_wav;

/// The system allocator, noting the largest single request since [`largest_since`] last
/// reset it: a parser that trusts a declared length asks for it at once.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

/// The largest single allocation `f` made (other threads' included: run alone to measure).
fn largest_during(f: impl FnOnce()) -> usize {
    LARGEST.store(0, Ordering::Relaxed);
    f();
    LARGEST.load(Ordering::Relaxed)
}

fn regression(target: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A scratch folder under the temporary folder, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    /// A folder of its own: tests run side by side, and two of them with one tag would remove
    /// each other's files (the FLAC and Ogg allocation tests did).
    fn new(tag: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "sonograph-fuzz-found-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `extract bad.csv` said ": the CSV header must name the columns id and path", naming no
/// file: `Source::count()` (which `extract` calls first, to cut the shards) parses a CSV
/// manifest under the name "". `entries()` names it.
#[test]
fn a_bad_csv_header_is_refused_naming_the_manifest() {
    let scratch = Scratch::new("csv-count");
    let path = scratch.0.join("m.csv");
    std::fs::write(
        &path,
        regression("csv_manifest", "count-error-names-no-file.csv"),
    )
    .unwrap();
    let source = Source::open(&path).unwrap();
    let counted = source.count().unwrap_err().to_string();
    let listed = match source.entries() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("entries() read a manifest count() refused"),
    };
    assert!(listed.contains("m.csv"), "{listed}");
    assert!(counted.contains("m.csv"), "count(): {counted:?}");
}

/// A 16-byte FLAC file made the decoder ask for 4 GiB at once, and a 309-byte one too:
/// symphonia 0.5 allocates the lengths that VORBIS_COMMENT and PICTURE metadata blocks
/// declare (u32, up to 4 GiB each) before reading them, whatever the block's length (24 bits:
/// at most 16 MiB). Where 4 GiB cannot be reserved (a small VM or container, strict
/// overcommit) the process aborts: an allocation failure is no panic, and the decoder's guard
/// cannot turn it into the file's error. The fix: refuse such a header before symphonia sees
/// it (as `check_wav_header` does for WAV), e.g. a `check_flac_header` in `AudioReader::open`
/// that walks the metadata blocks and refuses, as a `BadHeader` naming the file, a comment,
/// MIME type, description or picture longer than its block. The fuzz target skips these
/// inputs meanwhile (`flac_metadata_lies` in src/audio.rs).
#[test]
fn flac_metadata_lengths_are_checked_before_they_are_allocated() {
    for name in [
        "flac-picture-length-4gib.flac",
        "flac-comment-length-4gib.flac",
        // A FLAC stream after 4 bytes of junk (`RIFX`), found by symphonia's probe, which
        // searches the first MiB for a marker.
        "flac-after-4-bytes-comment-4gib.wav",
        // The same, its first metadata block a VORBIS_COMMENT rather than STREAMINFO, which
        // symphonia reads all the same (the third campaign, 2026-11-27).
        "flac-after-4-bytes-comment-first-4gib.wav",
    ] {
        refused_without_a_large_allocation(name);
    }
}

/// symphonia 0.5 reads the comment packets of Vorbis and Opus in Ogg, and the comment blocks of
/// FLAC in Ogg, with the same reader that allocates each comment's declared length (up to
/// 4 GiB) first: found by reading its source after the FLAC case, the files written by
/// `fuzz/regressions/make_ogg.py` (one packet across two pages, so the check must put pages
/// together as the Ogg reader does).
#[test]
fn ogg_comment_lengths_are_checked_before_they_are_allocated() {
    for name in [
        "ogg-vorbis-comment-4gib.ogg",
        "ogg-opus-tags-across-pages-4gib.opus",
        "ogg-flac-comment-4gib.oga",
    ] {
        refused_without_a_large_allocation(name);
    }
}

/// Opening the regression `name` fails with an error naming the file, and no single
/// allocation on the way reaches 64 MiB.
fn refused_without_a_large_allocation(name: &str) {
    let scratch = Scratch::new("alloc");
    let path = scratch.0.join("input.bin");
    std::fs::write(&path, regression("audio", name)).unwrap();
    let mut opened = None;
    let largest = largest_during(|| {
        opened = Some(AudioReader::open(&path, &DecodeOptions::default()).map(|_| ()));
    });
    let message = opened
        .unwrap()
        .expect_err("a file that lies is refused")
        .to_string();
    assert!(message.contains("input.bin"), "{name}: {message}");
    assert!(
        largest < 64 << 20,
        "{name}: opening it allocated {largest} bytes at once ({message})"
    );
}

/// A 55-byte mu-law WAV whose `fmt ` chunk says 67-byte blocks of 808-bit samples: symphonia
/// counts 3 frames from the data length and the block size, and decodes 9 (one a byte), so
/// `features` reads 9 frames while `extract` with a manifest offset of 3 frames refuses it
/// as "past the end of the audio (0.000 s)", and an item whose header under-declares its
/// length is taken for short and read whole, however long it is. The fix: refuse, in
/// `check_wav_header`, a PCM / float / A-law / mu-law `fmt ` whose block_align is not
/// channels × bytes per sample (symphonia's count then agrees with its decode), or check an
/// offset against the frames decoded rather than the header's count.
#[test]
fn a_wav_decodes_to_the_frames_its_header_declares() {
    let scratch = Scratch::new("wav-align");
    let path = scratch.0.join("input.wav");
    std::fs::write(
        &path,
        regression("audio", "wav-block-align-under-declares.wav"),
    )
    .unwrap();
    let Ok(mut reader) = AudioReader::open(&path, &DecodeOptions::default()) else {
        return; // refused whole: consistent
    };
    let declared = reader.info().declared_frames;
    let mut frames = 0u64;
    while let Ok(Some(chunk)) = reader.next_chunk() {
        frames += chunk.len() as u64;
    }
    assert!(
        declared.is_none_or(|d| d >= frames),
        "the header declares {declared:?} frames; the decode gave {frames}"
    );
}

/// A jobs API request may give its spec as a path (`"spec": "/some/file.toml"`), and planning
/// it reads that file from the server's disk: no data root is checked (source, out and model
/// are), and no size is bounded, so `"spec": "/dev/zero"` grows a String until the server
/// runs out of memory, `"/dev/stdin"` or a FIFO blocks the handler for ever, and a TOML
/// file's offending line comes back in the 400 refusal. Found while adapting the fuzz target
/// to `JobOptions` (the target skips such requests meanwhile). The fix: the service takes
/// inline specs only (refuse `SpecSource::File` in `sonograph_server::jobs::plan`, as the
/// API did before `JobOptions`), or resolves the path under a data root and bounds its size.
#[test]
fn a_job_request_never_reads_a_spec_file_from_the_server() {
    let scratch = Scratch::new("spec-file");
    let secret = scratch.0.join("secret.toml");
    std::fs::write(&secret, "token = \"hunter2\"\n").unwrap();
    let request = serde_json::json!({
        "source": "in", "out": "out", "device": "cpu", "spec": secret,
    });
    let options: sonograph_pipeline::JobOptions = serde_json::from_value(request).unwrap();
    let refusal = match sonograph_server::jobs::plan_extract(&options) {
        Ok(_) => panic!("a request planned with a spec read from the server's disk"),
        Err(e) => e,
    };
    assert!(
        !refusal.contains("hunter2") && !refusal.contains("token"),
        "the refusal shows the file's content: {refusal}"
    );
}

/// A 16-bit PCM mono WAV of `samples` samples of a tone at `rate`.
fn wav(rate: u32, samples: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..samples)
        .flat_map(|i| {
            let v = (8000.0 * (i as f64 * 0.05).sin()) as i16;
            v.to_le_bytes()
        })
        .collect();
    shared_wav::pcm16_wav(rate, &data)
}

/// serde_json (without its `float_roundtrip` feature) reads about one f64 in ten back 1 ULP
/// off (`"198.63006851766337"` reads as 198.63006851766335; `"3e100"` as
/// 3.0000000000000002e100). Found by the alert_rules and job_request targets' round trips. It
/// matters where sonograph writes a float as JSON and compares it with the value read back:
/// `job.json` records `max_seconds`, `chunk_seconds` and the VAD parameters, and a resume
/// compares them, so a job started with `--max-seconds 198.63006851766337` (or from Python
/// with a computed float) refuses its own resume: "this output folder belongs to another
/// job". The fix: serde_json's `float_roundtrip` feature in the workspace's dependency
/// (`serde_json = { version = "1", features = ["float_roundtrip"] }` in Cargo.toml; a
/// feature only, Cargo.lock is unchanged).
#[test]
fn a_job_resumes_with_the_floats_it_was_started_with() {
    use sonograph_dsp::{CpuBackend, Extractor, FeatureSpec, Precision};
    let scratch = Scratch::new("resume-float");
    let corpus = scratch.0.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("a.wav"), wav(16_000, 8_000)).unwrap();
    let spec = FeatureSpec::whisper(80);
    let mut config =
        sonograph_pipeline::JobConfig::new(corpus, scratch.0.join("out"), spec.clone());
    config.workers = 1;
    config.max_seconds = 198.630_068_517_663_37;
    let devices = || -> Vec<Box<dyn Extractor>> {
        vec![Box::new(
            CpuBackend::new(&spec, Precision::default()).unwrap(),
        )]
    };
    sonograph_pipeline::run(&config, devices()).expect("the first run");
    let again = sonograph_pipeline::run(&config, devices());
    assert!(again.is_ok(), "the same job, run again: {:?}", again.err());
}

/// An Ogg page (Ogg's CRC-32: polynomial 0x04c11db7, not reflected) at granule `granule`.
fn ogg_page(serial: u32, seq: u32, flags: u8, granule: u64, lacing: &[u8], body: &[u8]) -> Vec<u8> {
    let mut p = b"OggS".to_vec();
    p.extend_from_slice(&[0, flags]);
    p.extend_from_slice(&granule.to_le_bytes());
    p.extend_from_slice(&serial.to_le_bytes());
    p.extend_from_slice(&seq.to_le_bytes());
    p.extend_from_slice(&[0; 4]);
    p.push(lacing.len() as u8);
    p.extend_from_slice(lacing);
    p.extend_from_slice(body);
    let crc = p.iter().fold(0u32, |mut crc, &b| {
        crc ^= u32::from(b) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04c1_1db7
            } else {
                crc << 1
            };
        }
        crc
    });
    p[22..26].copy_from_slice(&crc.to_le_bytes());
    p
}

/// A seek in an Ogg stream bisects the file and takes the first page it finds there, which
/// may be one hidden inside another page's packet, where a read from the start never looks
/// (and so neither does the Ogg check). Found by review (2026-11-27): FLAC in Ogg named
/// `.flac`, opened at an offset, was sought, and a hidden comment block declaring 4 GiB was
/// allocated. An Ogg stream is now decoded from its start whatever the file's name.
#[test]
fn an_ogg_stream_is_never_sought_whatever_its_name() {
    // FLAC in Ogg, 44.1 kHz mono: its first page, then 20 audio pages each holding, inside
    // its one packet, copies of a valid page whose comment block declares 4 GiB.
    let mut ident = b"\x7fFLAC\x01\x00\x00\x01fLaC\x00\x00\x00\x22".to_vec();
    ident.extend_from_slice(&[0x10, 0x00, 0x10, 0x00, 0, 0, 0, 0, 0, 0]);
    ident.extend_from_slice(&[0x0A, 0xC4, 0x40, 0xF0, 0, 0, 0, 0]);
    ident.extend_from_slice(&[0; 16]);
    let mut file = ogg_page(7, 0, 2, 0, &[ident.len() as u8], &ident);
    let mut block = vec![0x84, 0, 0, 12];
    block.extend_from_slice(&0u32.to_le_bytes());
    block.extend_from_slice(&1u32.to_le_bytes());
    block.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    for i in 0..20u32 {
        let granule = 4096 * u64::from(i + 1);
        let mut body = vec![0xff, 0xf8];
        while body.len() < 255 * 200 {
            body.extend(ogg_page(
                7,
                1000 + i,
                0,
                granule,
                &[block.len() as u8],
                &block,
            ));
        }
        body.resize(255 * 200 + 100, 0);
        let mut lacing = vec![255u8; 200];
        lacing.push(100);
        file.extend(ogg_page(7, i + 1, 0, granule, &lacing, &body));
    }
    let scratch = Scratch::new("ogg-seek");
    let path = scratch.0.join("input.flac");
    std::fs::write(&path, &file).unwrap();
    let options = DecodeOptions {
        offset_s: 4096.0 * 15.0 / 44_100.0,
        ..DecodeOptions::default()
    };
    let largest = largest_during(|| {
        let _ = AudioReader::open(&path, &options)
            .map(|mut r| while let Ok(Some(_)) = r.next_chunk() {});
    });
    assert!(
        largest < 64 << 20,
        "opening it at an offset allocated {largest} bytes at once"
    );
}
