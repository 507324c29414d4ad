//! `sonograph extract` end to end: a mixed corpus with broken files, kill -9 and resume,
//! shards, long files in flat memory, manifests.

use crate::common;
use common::{bin, repo, stderr, Tmp};

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use sonograph_dsp::{CpuExtractor, FeatureSpec};
use sonograph_io::parquet::{read_part, META_SPEC_ID};
use sonograph_io::{decode_mono, DecodeOptions};
use sonograph_pipeline::Report;

/// A 16-bit PCM mono WAV of `seconds` of a deterministic tone-and-noise mixture.
pub(crate) fn write_wav(path: &Path, rate: u32, seconds: f64, seed: u32) {
    use std::io::Write;
    let n = (seconds * f64::from(rate)) as u32;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut header = Vec::new();
    header.extend_from_slice(b"RIFF");
    header.extend_from_slice(&(36 + 2 * n).to_le_bytes());
    header.extend_from_slice(b"WAVEfmt ");
    header.extend_from_slice(&16u32.to_le_bytes());
    header.extend_from_slice(&1u16.to_le_bytes());
    header.extend_from_slice(&1u16.to_le_bytes());
    header.extend_from_slice(&rate.to_le_bytes());
    header.extend_from_slice(&(2 * rate).to_le_bytes());
    header.extend_from_slice(&2u16.to_le_bytes());
    header.extend_from_slice(&16u16.to_le_bytes());
    header.extend_from_slice(b"data");
    header.extend_from_slice(&(2 * n).to_le_bytes());
    f.write_all(&header).unwrap();
    let mut state = 0x9e37_79b9u32 ^ seed.wrapping_mul(0x85eb_ca6b);
    let mut buf = Vec::with_capacity(1 << 16);
    for i in 0..n {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let noise = (state >> 16) as f64 / 65536.0 - 0.5;
        let t = f64::from(i) / f64::from(rate);
        let f0 = 150.0 + 40.0 * (0.3 * t + f64::from(seed)).sin();
        let v = 0.3 * (std::f64::consts::TAU * f0 * t).sin() + 0.05 * noise;
        buf.extend_from_slice(&((v * 32767.0) as i16).to_le_bytes());
        if buf.len() >= 1 << 16 {
            f.write_all(&buf).unwrap();
            buf.clear();
        }
    }
    f.write_all(&buf).unwrap();
}

/// Fixtures in several formats and rates, generated clips, and broken files.
fn make_corpus(dir: &Path, copies: usize) -> (usize, usize) {
    let sub = dir.join("nested/deeper");
    std::fs::create_dir_all(&sub).unwrap();
    let mut good = 0;
    for name in [
        "speech_44100_stereo.flac",
        "speech_44100_stereo.mp3",
        "speech_44100_stereo.ogg",
        "speech_44100_stereo_s24.wav",
        "speech_48000_mono_s16.wav",
        "speech_8000_mono_s16.wav",
        "sample.flac",
    ] {
        std::fs::copy(repo("tests/data").join(name), dir.join(name)).unwrap();
        good += 1;
    }
    for i in 0..copies {
        write_wav(
            &sub.join(format!("clip{i:03}.wav")),
            16_000,
            2.0 + (i % 5) as f64,
            i as u32,
        );
        good += 1;
    }
    std::fs::write(dir.join("garbage.wav"), b"RIFF....WAVEnot really").unwrap();
    std::fs::write(dir.join("empty.flac"), b"").unwrap();
    let flac = std::fs::read(repo("tests/data/speech_16000_mono_s16.flac")).unwrap();
    std::fs::write(sub.join("cut.flac"), &flac[..flac.len() / 3]).unwrap();
    (good, 3)
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

pub(crate) type Dataset = BTreeMap<(String, u64), (u32, u32, Vec<f32>)>;

/// Every row of every part under `out`, keyed by (id, offset in µs); panics on a duplicate.
pub(crate) fn read_dataset(out: &Path, spec_id: &str) -> Dataset {
    let mut rows = Dataset::new();
    let mut names: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        assert!(
            !name.ends_with(".tmp"),
            "a temporary part was left behind: {name}"
        );
        if !name.ends_with(".parquet") {
            continue;
        }
        let (part_rows, meta) = read_part(&out.join(&name)).unwrap();
        assert_eq!(meta[META_SPEC_ID], spec_id);
        for r in part_rows {
            assert_eq!(r.features.len(), (r.num_frames * r.num_bins) as usize);
            let key = (r.id.clone(), (r.offset_s * 1e6).round() as u64);
            let dup = rows.insert(key.clone(), (r.num_frames, r.num_bins, r.features));
            assert!(dup.is_none(), "row {key:?} written twice");
        }
    }
    rows
}

fn report(out: &Path, name: &str) -> Report {
    serde_json::from_str(
        &std::fs::read_to_string(out.join(sonograph_pipeline::META_DIR).join(name)).unwrap(),
    )
    .unwrap()
}

#[test]
fn mixed_corpus_to_parquet_with_failures_reported() {
    let tmp = Tmp::new("mixed");
    let corpus = tmp.path("corpus");
    let (good, bad) = make_corpus(&corpus, 6);
    let out = tmp.path("out");
    let o = run(&[
        "extract",
        corpus.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--preset",
        "whisper",
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "some items failed → exit 3\n{}",
        stderr(&o)
    );
    let r = report(&out, "report.json");
    assert_eq!(
        (r.items_total, r.items_ok, r.items_failed),
        ((good + bad) as u64, good as u64, bad as u64)
    );
    let failed: Vec<&str> = r.failures.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(
        failed,
        ["empty.flac", "garbage.wav", "nested/deeper/cut.flac"]
    );
    assert!(
        r.failures.iter().all(|f| f.reason.contains(&f.source)),
        "{:?}",
        r.failures
    );
    assert!(r.audio_seconds > 30.0 && r.real_time_factor > 0.0 && r.peak_rss_mb > 0.0);
    // Split float bytes under zstd: the parts are smaller than the raw features.
    assert!(r.compression_ratio > 1.05, "{}", r.compression_ratio);
    assert_eq!(r.devices[0].device, "cpu");
    assert_eq!(r.devices[0].items, good as u64);
    let spec = FeatureSpec::preset("whisper").unwrap();
    let rows = read_dataset(&out, &spec.spec_id());
    assert_eq!(rows.len(), good);
    // Every row equals the library's features of the decoded file.
    // `--precision auto`: the spec's default (f32 for Whisper).
    let mut ex = CpuExtractor::with_precision(&spec, spec.default_precision()).unwrap();
    for ((id, offset), (frames, bins, features)) in &rows {
        assert_eq!((*offset, *bins), (0, 80), "{id}");
        let samples = decode_mono(&corpus.join(id), &DecodeOptions::default(), 16_000).unwrap();
        let mut expect = Vec::new();
        let n = ex.extract(&samples, &mut expect).unwrap();
        assert_eq!(*frames as usize, n, "{id}");
        assert_eq!(features, &expect, "{id}");
    }
    // Running again does nothing and succeeds.
    let again = run(&[
        "extract",
        corpus.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--preset",
        "whisper",
    ]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(stderr(&again).contains("already complete"));
    // A different spec on the same output is refused.
    let other = run(&[
        "extract",
        corpus.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--preset",
        "kaldi",
    ]);
    assert_eq!(other.status.code(), Some(2));
    assert!(stderr(&other).contains("spec"), "{}", stderr(&other));
}

/// A deterministic generator for the kill times; the seed is printed so a failure replays.
#[cfg(feature = "failpoints")]
struct Lcg(u64);
#[cfg(feature = "failpoints")]
impl Lcg {
    fn next_f64(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// kill -9 at random moments while the job runs, and crashes at the ledger's two critical
/// instants (a part written but not renamed; renamed but not committed), each resumed: every
/// row exactly once, equal to a clean run. Each crash is asserted to have happened mid-job:
/// the crash points by the process dying of SIGABRT with a pending part in the ledger, the
/// kills by the process still running when killed. A failpoint sleeps in every executor batch
/// so that the job lasts long enough, whatever the machine's load, for the kills to land.
/// Needs the failpoints build: `cargo test --features failpoints --test integration extract::`.
#[cfg(feature = "failpoints")]
#[test]
fn killed_at_random_moments_and_resumed_equals_a_clean_run() {
    use sonograph_io::ledger::Ledger;
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    let tmp = Tmp::new("kill");
    let corpus = tmp.path("corpus");
    let (good, _) = make_corpus(&corpus, 30);
    // Two long items, streamed in pieces across parts.
    write_wav(&corpus.join("long_a.wav"), 16_000, 150.0, 91);
    write_wav(&corpus.join("long_b.wav"), 22_050, 95.0, 92);
    let good = (good + 2) as u64;
    const SLOW: &str = "executor::batch=sleep(60)";
    let job = |out: &Path, failpoints: &str| {
        let mut cmd = bin();
        cmd.args(["extract", corpus.to_str().unwrap(), "--out"])
            .arg(out)
            .args(["--preset", "nemo", "--part-mb", "1", "--batch-items", "2"])
            .args(["--workers", "2", "--device", "cpu"])
            .env("FAILPOINTS", failpoints);
        cmd
    };
    let ledger = |out: &Path| Ledger::inspect(&out.join("__sonograph/ledger.sqlite")).unwrap();

    let clean = tmp.path("clean");
    let t = Instant::now();
    let o = job(&clean, SLOW).output().unwrap();
    let clean_wall = t.elapsed();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let spec_id = FeatureSpec::preset("nemo").unwrap().spec_id();
    let expect = read_dataset(&clean, &spec_id);
    assert!(expect.len() > 35, "{} rows", expect.len());
    assert_eq!(ledger(&clean).done_items, good);

    // The two crash points, on a fresh output where all the work is still ahead.
    let resumed = tmp.path("resumed");
    for (point, renamed) in [
        ("writer-before-rename", false),
        ("writer-before-commit", true),
    ] {
        let o = job(&resumed, &format!("{SLOW};{point}=return"))
            .output()
            .unwrap();
        assert_eq!(
            o.status.signal(),
            Some(6),
            "{point} did not fire (status {:?}): {}",
            o.status,
            stderr(&o)
        );
        let state = ledger(&resumed);
        assert_eq!(state.pending_parts, 1, "{point}: {state:?}");
        let tmp_parts = std::fs::read_dir(&resumed)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .count();
        assert_eq!(tmp_parts, usize::from(!renamed), "{point}");
        assert!(
            state.done_items < good,
            "{point} fired with the job done: {state:?}"
        );
    }

    let seed = std::env::var("SONOGRAPH_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!(
        "kill-time seed {seed} (replay: SONOGRAPH_KILL_SEED={seed}); clean run {clean_wall:?}"
    );
    let mut rng = Lcg(seed);
    let mut progressed = 0;
    for kill in 0..6 {
        let before = ledger(&resumed).done_items;
        // A random moment within the first half of what is left of the job, by the clean
        // run's pace: the run is still going then, which the assertion below checks.
        let left = 1.0 - before as f64 / good as f64;
        let at = clean_wall.mul_f64(left * (0.05 + 0.45 * rng.next_f64()));
        let mut child = job(&resumed, SLOW).spawn().unwrap();
        std::thread::sleep(at.max(Duration::from_millis(50)));
        assert!(
            child.try_wait().unwrap().is_none(),
            "kill {kill} at {at:?} came after the run ended (seed {seed})"
        );
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(9), "kill {kill}");
        progressed += usize::from(ledger(&resumed).done_items > before);
    }
    assert!(
        progressed > 0,
        "no kill came after any progress (seed {seed})"
    );
    let o = job(&resumed, "").output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    eprintln!(
        "6 kills ({progressed} after progress) and 2 crash points, then resumed to completion"
    );
    let got = read_dataset(&resumed, &spec_id);
    assert_eq!(got.len(), expect.len());
    for (key, value) in &expect {
        assert_eq!(
            got.get(key),
            Some(value),
            "row {key:?} differs from the clean run"
        );
    }
    let (a, b) = (
        report(&clean, "report.json"),
        report(&resumed, "report.json"),
    );
    assert_eq!((a.items_ok, a.items_failed), (b.items_ok, b.items_failed));
    assert_eq!(ledger(&resumed).done_items, good);
}

/// A crash (as kill -9 or a power cut, by failpoint) at each step of publishing each file of
/// a job — job.json, every part, the report, the done marker — and the same command run again
/// finishes it: every item exactly once, no temporary file left or taken as a part, and the
/// dataset a clean run gives. Needs the failpoints build:
/// `cargo test --features failpoints --test integration extract::a_crash_at_any_step`.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_at_any_step_of_any_publish_loses_and_doubles_nothing() {
    use sonograph_io::ledger::Ledger;
    use std::os::unix::process::ExitStatusExt;

    let tmp = Tmp::new("publish-crash");
    let corpus = tmp.path("corpus");
    let (good, bad) = make_corpus(&corpus, 12);
    let job = |out: &Path, failpoints: &str| {
        bin()
            .args(["extract", corpus.to_str().unwrap(), "--out"])
            .arg(out)
            .args([
                "--preset",
                "whisper",
                "--part-mb",
                "1",
                "--batch-items",
                "2",
            ])
            .args(["--workers", "2", "--device", "cpu", "--no-progress"])
            .env("FAILPOINTS", failpoints)
            .output()
            .unwrap()
    };
    let clean = tmp.path("clean");
    let o = job(&clean, "");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let spec_id = FeatureSpec::preset("whisper").unwrap().spec_id();
    let expect = read_dataset(&clean, &spec_id);
    let mut crashes = 0;
    for point in [
        "publish-before-sync",
        "publish-before-rename",
        "publish-before-dir-sync",
    ] {
        // The k-th publish of the run crashes; the first run that publishes fewer ends.
        for k in 0.. {
            let out = tmp.path(&format!("{point}-{k}"));
            let o = job(&out, &format!("{point}={k}*off->return"));
            if o.status.code() == Some(3) {
                // job.json, the report, the done marker and the parts.
                assert!(k >= 5, "{point}: only {k} publishes");
                break;
            }
            assert_eq!(o.status.signal(), Some(6), "{point} #{k}: {}", stderr(&o));
            crashes += 1;
            let o = job(&out, "");
            // 3: finished, with the corpus's bad items; 0: already complete (the crash came
            // after the done marker took its name).
            assert!(
                matches!(o.status.code(), Some(3) | Some(0)),
                "{point} #{k}, resumed: {}",
                stderr(&o)
            );
            let got = read_dataset(&out, &spec_id);
            assert!(got == expect, "{point} #{k}: the resumed dataset differs");
            let state = Ledger::inspect(&out.join("__sonograph/ledger.sqlite")).unwrap();
            assert_eq!(state.done_items, good as u64, "{point} #{k}");
            let report = report(&out, "report.json");
            assert_eq!(
                (report.items_ok, report.items_failed),
                (good as u64, bad as u64),
                "{point} #{k}"
            );
            let left: Vec<String> = walk_names(&out)
                .into_iter()
                .filter(|n| n.ends_with(".tmp"))
                .collect();
            assert!(left.is_empty(), "{point} #{k}: left behind {left:?}");
        }
    }
    assert!(crashes >= 12, "{crashes} crashes");
}

/// Every file name under `dir`, recursively.
#[cfg(feature = "failpoints")]
fn walk_names(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            names.extend(walk_names(&p));
        } else {
            names.push(p.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names
}

#[test]
fn shards_union_equals_one_run_and_finished_shards_exit_at_once() {
    let tmp = Tmp::new("shards");
    let corpus = tmp.path("corpus");
    make_corpus(&corpus, 9);
    let single = tmp.path("single");
    let c = corpus.to_str().unwrap();
    let o = run(&[
        "extract",
        c,
        "--out",
        single.to_str().unwrap(),
        "--preset",
        "kaldi",
    ]);
    assert_eq!(o.status.code(), Some(3));
    let spec_id = FeatureSpec::preset("kaldi").unwrap().spec_id();
    let expect = read_dataset(&single, &spec_id);
    let sharded = tmp.path("sharded");
    let s = sharded.to_str().unwrap();
    let mut total = 0;
    for i in 0..3 {
        // Shard 1 comes from Slurm's environment, the others from flags.
        let mut cmd = bin();
        cmd.args(["extract", c, "--out", s, "--preset", "kaldi"]);
        if i == 1 {
            cmd.env("SLURM_ARRAY_TASK_ID", "8")
                .env("SLURM_ARRAY_TASK_MIN", "7")
                .env("SLURM_ARRAY_TASK_COUNT", "3");
        } else {
            cmd.args(["--shard-index", &i.to_string(), "--shard-count", "3"]);
        }
        let o = cmd.output().unwrap();
        assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(&o));
        let r = report(&sharded, &format!("report-{i:05}.json"));
        assert_eq!((r.shard_index, r.shard_count), (i, 3));
        total += r.items_total;
        let again = run(&[
            "extract",
            c,
            "--out",
            s,
            "--preset",
            "kaldi",
            "--shard-index",
            &i.to_string(),
            "--shard-count",
            "3",
        ]);
        assert_eq!(again.status.code(), Some(0));
        assert!(stderr(&again).contains("already complete"));
    }
    assert_eq!(total, report(&single, "report.json").items_total);
    assert_eq!(read_dataset(&sharded, &spec_id), expect);
}

#[test]
fn a_folder_refuses_a_run_of_another_shard_count() {
    let tmp = Tmp::new("mixshards");
    let corpus = tmp.path("corpus");
    make_corpus(&corpus, 2);
    let (c, out) = (corpus.to_str().unwrap(), tmp.path("out"));
    let o = out.to_str().unwrap();
    let first = run(&["extract", c, "--out", o, "--preset", "kaldi"]);
    assert_eq!(first.status.code(), Some(3));
    let rows = read_dataset(&out, &FeatureSpec::preset("kaldi").unwrap().spec_id());
    let second = run(&[
        "extract",
        c,
        "--out",
        o,
        "--preset",
        "kaldi",
        "--shard-index",
        "0",
        "--shard-count",
        "2",
    ]);
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    assert!(
        stderr(&second).contains("shard_count"),
        "{}",
        stderr(&second)
    );
    // Other piece lengths would mix rows of two layouts: refused too.
    let third = run(&[
        "extract",
        c,
        "--out",
        o,
        "--preset",
        "kaldi",
        "--chunk-seconds",
        "20",
    ]);
    assert_eq!(third.status.code(), Some(2), "{}", stderr(&third));
    assert_eq!(
        read_dataset(&out, &FeatureSpec::preset("kaldi").unwrap().spec_id()),
        rows
    );
}

#[test]
fn a_second_process_on_the_same_shard_is_refused() {
    let tmp = Tmp::new("lock");
    let corpus = tmp.path("corpus");
    make_corpus(&corpus, 1);
    let out = tmp.path("out");
    let meta = out.join(sonograph_pipeline::META_DIR);
    std::fs::create_dir_all(&meta).unwrap();
    // Hold the shard's lock as a running process would.
    let lock = std::fs::File::create(meta.join("shard-00000.lock")).unwrap();
    lock.lock().unwrap();
    let args = [
        "extract",
        corpus.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--device",
        "cpu",
    ];
    let o = run(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("another process"), "{}", stderr(&o));
    drop(lock);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}

/// The largest difference between two datasets of the same rows (same ids, offsets and
/// shapes, asserted).
#[cfg(feature = "gpu")]
fn worst_difference(a: &Dataset, b: &Dataset) -> f32 {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    let mut worst = 0.0f32;
    for (key, (frames, bins, x)) in a {
        let (bf, bb, y) = &b[key];
        assert_eq!((frames, bins), (bf, bb), "{key:?}");
        worst = x
            .iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs())
            .fold(worst, f32::max);
    }
    worst
}

#[cfg(feature = "gpu")]
#[test]
fn gpu_device_gives_the_cpu_dataset_within_tolerance() {
    if !common::has_gpu_adapter() {
        return;
    }
    let tmp = Tmp::new("gpu");
    let corpus = tmp.path("corpus");
    make_corpus(&corpus, 3);
    // A long item: its 30 s pieces run on the GPU too.
    write_wav(&corpus.join("long.wav"), 16_000, 75.0, 5);
    let c = corpus.to_str().unwrap();
    let (cpu_out, gpu_out, all_out) = (tmp.path("cpu"), tmp.path("gpu"), tmp.path("all"));
    // `all`: the GPU and the CPU executors share one queue.
    for (out, device) in [(&cpu_out, "cpu"), (&gpu_out, "gpu"), (&all_out, "all")] {
        let o = run(&[
            "extract",
            c,
            "--out",
            out.to_str().unwrap(),
            "--preset",
            "whisper",
            "--device",
            device,
        ]);
        assert_eq!(o.status.code(), Some(3), "{device}: {}", stderr(&o));
    }
    let spec_id = FeatureSpec::preset("whisper").unwrap().spec_id();
    let a = read_dataset(&cpu_out, &spec_id);
    for out in [&gpu_out, &all_out] {
        let worst = worst_difference(&a, &read_dataset(out, &spec_id));
        eprintln!("{} vs cpu dataset: worst {worst:e}", out.display());
        assert!(worst <= 1e-4, "worst {worst}");
    }
    let r = report(&all_out, "report.json");
    assert_eq!(r.devices.len(), 2, "{:?}", r.devices);
    let r = report(&gpu_out, "report.json");
    assert!(r.devices[0].device.starts_with("gpu"), "{:?}", r.devices);
    let long_rows = a.keys().filter(|(id, _)| id.contains("long")).count();
    assert_eq!(long_rows, 3);
    // Every row, the long item's pieces included, came from the GPU.
    assert_eq!(r.devices[0].items, a.len() as u64, "{:?}", r.devices);
    assert_eq!(r.devices[0].moved_to_cpu, 0, "{:?}", r.devices);
}

#[cfg(feature = "gpu")]
#[test]
fn sixteen_bit_wavs_go_to_the_gpu_as_16_bit_samples_and_give_the_cpu_rows() {
    if !common::has_gpu_adapter() {
        return;
    }
    // 16-bit WAVs at Whisper's rate decode onto the 16-bit grid: the decode workers find it,
    // and the GPU is sent every chunk as 16-bit integers (half the bytes), pieces of the long
    // item included. A 44.1 kHz file is resampled off the grid and goes as f32.
    let tmp = Tmp::new("gpu16");
    let corpus = tmp.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for i in 0..3 {
        write_wav(
            &corpus.join(format!("clip{i}.wav")),
            16_000,
            2.0 + i as f64,
            i,
        );
    }
    write_wav(&corpus.join("long.wav"), 16_000, 45.0, 9);
    let spec_id = FeatureSpec::preset("whisper").unwrap().spec_id();
    let extract = |corpus: &Path, out: &Path, device: &str| {
        let o = run(&[
            "extract",
            corpus.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--preset",
            "whisper",
            "--device",
            device,
        ]);
        assert_eq!(o.status.code(), Some(0), "{device}: {}", stderr(&o));
    };
    let (cpu_out, gpu_out) = (tmp.path("cpu"), tmp.path("gpu"));
    extract(&corpus, &cpu_out, "cpu");
    extract(&corpus, &gpu_out, "gpu");
    let a = read_dataset(&cpu_out, &spec_id);
    let worst = worst_difference(&a, &read_dataset(&gpu_out, &spec_id));
    assert!(worst <= 1e-4, "worst {worst}");
    let r = report(&gpu_out, "report.json");
    let t = r.devices[0].transfer.expect("a GPU reports its data path");
    assert!(t.chunks > 0 && t.pcm16_chunks == t.chunks, "{t:?}");
    // 54 s of samples at 16 kHz (the kernels pad Whisper's items to 30 s themselves), 2 bytes
    // a sample; a later piece also carries the window's overlap with the piece before.
    let samples = 54 * 16_000;
    assert!(
        (2 * samples..2 * samples + 2 * 16_000).contains(&t.sample_bytes_sent),
        "{t:?}"
    );
    // Resampled, off the grid: as f32.
    let resampled = tmp.path("resampled");
    std::fs::create_dir_all(&resampled).unwrap();
    write_wav(&resampled.join("clip.wav"), 44_100, 2.0, 3);
    let out = tmp.path("gpu44");
    extract(&resampled, &out, "gpu");
    let t = report(&out, "report.json").devices[0].transfer.unwrap();
    assert_eq!(
        (t.chunks, t.pcm16_chunks, t.sample_bytes_sent),
        (1, 0, 4 * 32_000),
        "{t:?}"
    );
}

#[cfg(feature = "gpu")]
#[test]
fn a_gpu_job_storing_f16_has_its_rows_sent_back_as_f16_with_the_same_stored_values() {
    if !common::has_gpu_adapter() {
        return;
    }
    // `--dtype f16` with nothing between the executors and the writer: the GPU sends Whisper's
    // rows back as f16 (half the bytes), each value rounded as the writer rounds the f32 rows
    // of the same job in f32, so that the parts hold the same values bit for bit, the long
    // item's pieces included.
    let tmp = Tmp::new("gpu-f16");
    let corpus = tmp.path("corpus");
    make_corpus(&corpus, 3);
    write_wav(&corpus.join("long.wav"), 16_000, 75.0, 9);
    let spec_id = FeatureSpec::preset("whisper").unwrap().spec_id();
    let extract = |out: &Path, dtype: &str| {
        let o = run(&[
            "extract",
            corpus.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--preset",
            "whisper",
            "--device",
            "gpu",
            "--dtype",
            dtype,
        ]);
        assert_eq!(o.status.code(), Some(3), "{dtype}: {}", stderr(&o));
        report(out, "report.json").devices[0]
            .transfer
            .expect("a GPU reports its data path")
    };
    let (f32_out, f16_out) = (tmp.path("f32"), tmp.path("f16"));
    let (a, b) = (extract(&f32_out, "f32"), extract(&f16_out, "f16"));
    assert_eq!(a.f16_chunks, 0, "{a:?}");
    assert!(b.chunks > 0 && b.f16_chunks == b.chunks, "{b:?}");
    assert!(
        2 * b.row_bytes_read >= a.row_bytes_read
            && 2 * b.row_bytes_read <= a.row_bytes_read + 4 * b.chunks,
        "{} bytes of rows as f16, {} as f32",
        b.row_bytes_read,
        a.row_bytes_read
    );
    let (want, got) = (
        read_dataset(&f32_out, &spec_id),
        read_dataset(&f16_out, &spec_id),
    );
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        got.keys().collect::<Vec<_>>()
    );
    assert_eq!(want.keys().filter(|(id, _)| id.contains("long")).count(), 3);
    for (key, (frames, bins, x)) in &want {
        let (gf, gb, y) = &got[key];
        assert_eq!((frames, bins), (gf, gb), "{key:?}");
        let rounded = x.iter().map(|&v| half::f16::from_f32(v).to_f32().to_bits());
        assert!(
            rounded.eq(y.iter().map(|v| v.to_bits())),
            "{key:?}: the stored f16 values differ"
        );
    }
}

#[test]
fn long_items_are_cut_into_pieces_that_concatenate_to_the_whole() {
    let tmp = Tmp::new("pieces");
    let corpus = tmp.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    write_wav(&corpus.join("long.wav"), 16_000, 150.0, 7);
    let out = tmp.path("out");
    let o = run(&[
        "extract",
        corpus.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--preset",
        "kaldi",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let spec = FeatureSpec::preset("kaldi").unwrap();
    let rows = read_dataset(&out, &spec.spec_id());
    let offsets: Vec<u64> = rows.keys().map(|(_, o)| o / 1_000_000).collect();
    assert_eq!(offsets, [0, 30, 60, 90, 120]);
    let joined: Vec<f32> = rows
        .values()
        .flat_map(|(_, _, f)| f.iter().copied())
        .collect();
    let samples = decode_mono(&corpus.join("long.wav"), &DecodeOptions::default(), 16_000).unwrap();
    let mut whole = Vec::new();
    CpuExtractor::new(&spec)
        .unwrap()
        .extract(&samples, &mut whole)
        .unwrap();
    assert_eq!(joined.len(), whole.len());
    assert!(joined == whole, "pieces differ from the whole file");
}

/// `sonograph manifest` lists a folder once (sorted as a folder source is, its files' durations
/// from their headers, a file it cannot read left out and counted), and `extract` of the
/// manifest gives every file the rows `extract` of the folder gives it.
#[test]
fn a_manifest_of_a_folder_extracts_as_the_folder_does() {
    let tmp = Tmp::new("manifest");
    let corpus = tmp.path("corpus");
    let (good, bad) = make_corpus(&corpus, 3);
    let manifest = tmp.path("list.jsonl");
    let o = run(&[
        "manifest",
        corpus.to_str().unwrap(),
        "--out",
        manifest.to_str().unwrap(),
    ]);
    // The corpus's empty and garbage files cannot be listed: exit 3, each named. Its truncated
    // FLAC has a whole header: it is listed, and fails when extracted.
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let listed = good + 1;
    assert!(
        stderr(&o).contains(&format!("{listed} files")),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains(&format!("{} could not be read", bad - 1)),
        "{}",
        stderr(&o)
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&manifest)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), listed);
    let paths: Vec<&str> = lines
        .iter()
        .map(|l| l["audio_filepath"].as_str().unwrap())
        .collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "in id order");
    assert!(
        paths.iter().all(|p| p.starts_with("corpus/")),
        "relative to the manifest"
    );
    for l in &lines {
        let path = tmp.path(l["audio_filepath"].as_str().unwrap());
        let rate = l["sample_rate"].as_u64().unwrap() as u32;
        let Ok(decoded) = decode_mono(&path, &DecodeOptions::default(), rate) else {
            assert!(path.ends_with("cut.flac"), "{l}");
            continue;
        };
        let duration = l["duration"].as_f64().unwrap();
        assert!(
            (duration - decoded.len() as f64 / f64::from(rate)).abs() < 0.05,
            "{l}: {} samples decoded",
            decoded.len()
        );
    }
    let spec = FeatureSpec::preset("kaldi").unwrap();
    let extract = |source: &Path, out: &str| {
        let o = run(&[
            "extract",
            source.to_str().unwrap(),
            "--out",
            tmp.path(out).to_str().unwrap(),
            "--preset",
            "kaldi",
            "--device",
            "cpu",
        ]);
        assert!(
            matches!(o.status.code(), Some(0) | Some(3)),
            "{}",
            stderr(&o)
        );
        read_dataset(&tmp.path(out), &spec.spec_id())
    };
    let by_folder = extract(&corpus, "folder");
    let by_manifest = extract(&manifest, "manifest");
    assert_eq!(by_manifest.len(), good);
    for ((id, offset), rows) in &by_folder {
        let listed = (format!("corpus/{id}"), *offset);
        assert!(by_manifest.get(&listed) == Some(rows), "{id}'s rows differ");
    }
}

/// A header that says "short" and lies costs no more than an honest one: a FLAC whose
/// STREAMINFO claims 10 s of its 90 is read whole only up to --max-seconds, then streamed in
/// pieces like the honest file, with the same rows (on the executors, where short items are
/// held whole, and streamed on the CPU).
#[test]
fn a_header_that_understates_the_length_is_cut_into_pieces_all_the_same() {
    let tmp = Tmp::new("lying-header");
    let (honest, lying) = (tmp.path("honest"), tmp.path("lying"));
    std::fs::create_dir_all(&honest).unwrap();
    std::fs::create_dir_all(&lying).unwrap();
    let mut flac = std::fs::read(repo("tests/fixtures/silence_8000_mono_90s.flac")).unwrap();
    std::fs::write(honest.join("a.flac"), &flac).unwrap();
    // STREAMINFO's 36-bit total sample count: the low nibble of byte 21, bytes 22-25.
    assert_eq!(&flac[..4], b"fLaC");
    let total = |f: &[u8]| u64::from_be_bytes([0, 0, 0, f[21] & 0x0f, f[22], f[23], f[24], f[25]]);
    assert_eq!(total(&flac), 90 * 8000);
    let claimed = 10u64 * 8000;
    flac[21] = (flac[21] & 0xf0) | (claimed >> 32) as u8;
    flac[22..26].copy_from_slice(&(claimed as u32).to_be_bytes());
    assert_eq!(total(&flac), claimed);
    std::fs::write(lying.join("a.flac"), &flac).unwrap();
    let spec = FeatureSpec::preset("kaldi").unwrap();
    for device in ["cpu", "gpu"] {
        if device == "gpu" && !common::has_gpu_adapter() {
            continue;
        }
        let extract = |corpus: &Path, out: &Path| {
            let o = run(&[
                "extract",
                corpus.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--preset",
                "kaldi",
                "--device",
                device,
            ]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            read_dataset(out, &spec.spec_id())
        };
        let want = extract(&honest, &tmp.path(&format!("honest-{device}")));
        let got = extract(&lying, &tmp.path(&format!("lying-{device}")));
        let offsets: Vec<u64> = got.keys().map(|(_, o)| o / 1_000_000).collect();
        assert_eq!(offsets, [0, 30, 60], "{device}");
        assert!(
            got == want,
            "{device}: the lying file's rows differ from the honest one's"
        );
    }
}

#[test]
fn an_hour_long_file_streams_in_flat_memory() {
    let tmp = Tmp::new("hour");
    let mut rss = Vec::new();
    for minutes in [10.0, 60.0] {
        let corpus = tmp.path(&format!("c{minutes}"));
        std::fs::create_dir_all(&corpus).unwrap();
        write_wav(&corpus.join("long.wav"), 16_000, minutes * 60.0, 3);
        // The lower peak of two runs: a peak moves with how many pieces the scheduling left
        // waiting in the queues (the hour's file took 166-201 MiB across runs, below), and
        // holding the file would raise both.
        let mut peaks = Vec::new();
        for round in 0..2 {
            let out = tmp.path(&format!("o{minutes}-{round}"));
            let o = run(&[
                "extract",
                corpus.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--preset",
                "whisper",
            ]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            let r = report(&out, "report.json");
            assert_eq!(r.rows, (minutes * 2.0) as u64);
            assert!((r.audio_seconds - minutes * 60.0).abs() < 0.1);
            peaks.push(r.peak_rss_mb);
            std::fs::remove_dir_all(&out).unwrap();
        }
        rss.push(peaks.into_iter().fold(f64::INFINITY, f64::min));
        std::fs::remove_dir_all(&corpus).unwrap();
    }
    eprintln!(
        "peak RSS: 10 min {:.0} MiB, 60 min {:.0} MiB",
        rss[0], rss[1]
    );
    // The hour's samples alone are 230 MB as f32: a job that held them would be far above
    // this. (The cap was 200 MiB; the hour measured 166-186 MiB alone and 201 MiB once while
    // the rest of the suite ran beside it, 2026-11-26: how many pieces wait in the queues
    // depends on the scheduling. 250 keeps clear of that and far below holding the file.)
    assert!(rss[1] < 250.0, "an hour took {:.0} MiB", rss[1]);
    // Holding the hour's samples would add 190 MiB over ten minutes' worth, its Whisper rows
    // 96 MiB; peak RSS itself moves by up to 20 MiB from run to run here (162-184 MiB for the
    // ten-minute file, 166-186 MiB for the hour alone), so the margin sits between the two.
    assert!(rss[1] < rss[0] + 40.0, "memory grows with length: {rss:?}");
}

#[test]
fn manifests_honour_offsets_and_durations_and_report_bad_lines() {
    let tmp = Tmp::new("manifest");
    let data = repo("tests/data");
    let flac = data.join("sample.flac");
    let manifest = tmp.path("m.jsonl");
    let lines = [
        format!("{{\"audio_filepath\": \"{}\", \"duration\": 6.3, \"text\": \"all\"}}", flac.display()),
        format!("{{\"audio_filepath\": \"{}\", \"offset\": 1.25, \"duration\": 2.0, \"text\": \"part\"}}", flac.display()),
        format!("{{\"audio_filepath\": \"{}\", \"offset\": 99.0, \"duration\": 1.0}}", flac.display()),
        "{not json".to_string(),
    ];
    std::fs::write(&manifest, lines.join("\n")).unwrap();
    let out = tmp.path("out");
    let o = run(&[
        "extract",
        manifest.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--preset",
        "kaldi",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let r = report(&out, "report.json");
    assert_eq!((r.items_total, r.items_ok, r.items_failed), (4, 2, 2));
    assert!(
        r.failures.iter().any(|f| f.reason.contains("past the end")),
        "{:?}",
        r.failures
    );
    assert!(
        r.failures.iter().any(|f| f.id.ends_with("m.jsonl:4")),
        "{:?}",
        r.failures
    );
    let spec = FeatureSpec::preset("kaldi").unwrap();
    let rows = read_dataset(&out, &spec.spec_id());
    let part_key = (format!("{}@1.25", flac.display()), 1_250_000);
    let (frames, _, features) = &rows[&part_key];
    let opts = DecodeOptions {
        offset_s: 1.25,
        duration_s: Some(2.0),
        ..Default::default()
    };
    let samples = decode_mono(&flac, &opts, 16_000).unwrap();
    assert_eq!(samples.len(), 32_000);
    let mut expect = Vec::new();
    let n = CpuExtractor::new(&spec)
        .unwrap()
        .extract(&samples, &mut expect)
        .unwrap();
    assert_eq!((*frames as usize, features), (n, &expect));
    // A CSV manifest of the same span gives the same row.
    let csv = tmp.path("m.csv");
    std::fs::write(
        &csv,
        format!(
            "id,path,offset,duration\nspan,{},1.25,2.0\n",
            flac.display()
        ),
    )
    .unwrap();
    let out2 = tmp.path("out2");
    let o = run(&[
        "extract",
        csv.to_str().unwrap(),
        "--out",
        out2.to_str().unwrap(),
        "--preset",
        "kaldi",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows2 = read_dataset(&out2, &spec.spec_id());
    assert_eq!(rows2[&("span".to_string(), 1_250_000)].2, expect);
}

/// A folder written before the features column became a list of frames (its job.json without
/// `"features": "frames"`) is not resumed into: parts of the two layouts would not read as one
/// dataset.
#[test]
fn a_folder_of_the_flat_features_layout_is_not_resumed() {
    let tmp = Tmp::new("flat-layout");
    let out = tmp.path("out");
    let run = || {
        bin()
            .args(["extract", "--preset", "whisper", "--no-progress", "--out"])
            .arg(&out)
            .arg(repo("tests/data"))
            .output()
            .unwrap()
    };
    let o = run();
    assert!(o.status.success(), "{}", stderr(&o));
    let job = out.join("__sonograph/job.json");
    let mut shape: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&job).unwrap()).unwrap();
    assert_eq!(shape["features"], "frames");
    shape.as_object_mut().unwrap().remove("features");
    std::fs::write(&job, shape.to_string()).unwrap();
    let o = run();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("belongs to another job"),
        "{}",
        stderr(&o)
    );
}

/// Whisper features of the same items from two sources: `files` (every item ok) into
/// `by_file`, and `shards` (with failed items: exit 3) into `by_shard`; both datasets.
fn extract_both(
    files: &Path,
    by_file: &Path,
    shards: &Path,
    by_shard: &Path,
) -> (Dataset, Dataset) {
    let extract = |source: &Path, out: &Path| {
        bin()
            .args(["extract", "--preset", "whisper", "--no-progress", "--out"])
            .arg(out)
            .arg(source)
            .output()
            .unwrap()
    };
    let o = extract(files, by_file);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = extract(shards, by_shard);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let spec_id = report(by_file, "report.json").spec_id;
    (
        read_dataset(by_file, &spec_id),
        read_dataset(by_shard, &spec_id),
    )
}

/// WebDataset shards as a source: a folder's `.tar` shards give one item per audio member,
/// its id the shard's and its sample's key, and the rows the same files give in a folder, with
/// the sample's text members in the `sample` column; a shard cut short is one failed item,
/// naming it.
#[test]
fn webdataset_shards_give_the_rows_of_their_files() {
    let tmp = Tmp::new("wds");
    let (files, shards) = (tmp.path("files"), tmp.path("shards"));
    std::fs::create_dir_all(&files).unwrap();
    std::fs::create_dir_all(shards.join("sub")).unwrap();
    let data = repo("tests/data");
    std::fs::copy(
        data.join("speech_16000_mono_s16.flac"),
        files.join("a.flac"),
    )
    .unwrap();
    std::fs::copy(
        data.join("speech_44100_stereo_s16.wav"),
        files.join("b.wav"),
    )
    .unwrap();
    std::fs::write(files.join("a.json"), "{\"text\": \"hello\"}").unwrap();
    std::fs::write(files.join("b.txt"), "hi there").unwrap();
    std::fs::write(files.join("b.cls"), "3\n").unwrap();
    let shard = shards.join("sub/train-000.tar");
    let o = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&shard)
        .arg("-C")
        .arg(&files)
        .args(["a.flac", "a.json", "b.wav", "b.txt", "b.cls"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let whole = std::fs::read(&shard).unwrap();
    std::fs::write(shards.join("cut.tar"), &whole[..whole.len() / 2]).unwrap();
    std::fs::remove_file(files.join("a.json")).unwrap();
    let (by_file, by_shard) = (tmp.path("by-file"), tmp.path("by-shard"));
    let (file_rows, shard_rows) = extract_both(&files, &by_file, &shards, &by_shard);
    let ids = |d: &Dataset| d.keys().map(|k| k.0.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&file_rows), ["a.flac", "b.wav"]);
    assert_eq!(
        ids(&shard_rows),
        ["sub/train-000.tar/a", "sub/train-000.tar/b"]
    );
    for (file, shard) in file_rows.values().zip(shard_rows.values()) {
        assert_eq!(file, shard);
    }
    // A part holds its rows in the order the items finished.
    let (mut rows, _) = read_part(&by_shard.join("part-00000-00000.parquet")).unwrap();
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    assert!(
        rows[0].source.ends_with("shards/sub/train-000.tar/a.flac"),
        "{}",
        rows[0].source
    );
    // Each row carries its sample's text members, as webdataset decodes them.
    let samples: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| serde_json::from_str(r.sample.as_deref().unwrap()).unwrap())
        .collect();
    assert_eq!(
        samples,
        [
            serde_json::json!({"json": {"text": "hello"}}),
            serde_json::json!({"txt": "hi there", "cls": 3})
        ]
    );
    let (rows, _) = read_part(&by_file.join("part-00000-00000.parquet")).unwrap();
    assert!(rows.iter().all(|r| r.sample.is_none()));
    let r = report(&by_shard, "report.json");
    assert_eq!((r.items_ok, r.items_failed), (2, 1));
    assert_eq!(r.failures[0].id, "cut.tar");
    assert!(
        r.failures[0].reason.contains("cut.tar") && r.failures[0].reason.contains("truncated"),
        "{}",
        r.failures[0].reason
    );
}

/// NeMo's tarred datasets: a manifest whose lines carry `shard_id` reads each line's audio
/// from `audio_{shard_id}.tar` beside it (NeMo's `-subN` entries from the file's member), with
/// the rows a plain manifest of the same files and offsets gives; a member or shard that is not
/// there is one failed line.
#[test]
fn a_nemo_tarred_manifest_reads_its_shards() {
    let tmp = Tmp::new("nemo-tarred");
    let (files, tarred) = (tmp.path("files"), tmp.path("tarred"));
    std::fs::create_dir_all(&files).unwrap();
    std::fs::create_dir_all(&tarred).unwrap();
    let data = repo("tests/data");
    std::fs::copy(data.join("speech_16000_mono_s16.wav"), files.join("a.wav")).unwrap();
    std::fs::copy(
        data.join("speech_16000_mono_s16.flac"),
        files.join("b.flac"),
    )
    .unwrap();
    std::fs::copy(
        data.join("speech_44100_stereo_s16.wav"),
        files.join("c.wav"),
    )
    .unwrap();
    for (shard, members) in [
        ("audio_0.tar", &["a.wav", "b.flac"][..]),
        ("audio_1.tar", &["c.wav"]),
    ] {
        let o = std::process::Command::new("tar")
            .arg("-cf")
            .arg(tarred.join(shard))
            .arg("-C")
            .arg(&files)
            .args(members)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    // The same entries, tarred and plain: (member, shard, extra fields).
    let entries = [
        ("a.wav", 0, ", \"text\": \"one\""),
        ("b.flac", 0, ""),
        ("c.wav", 1, ", \"offset\": 0.5, \"duration\": 1.0"),
        ("a-sub1.wav", 0, ", \"offset\": 0.25"),
    ];
    let mut tarred_lines = String::new();
    let mut plain_lines = String::new();
    for (name, shard, extra) in entries {
        let file = name.replace("-sub1", "");
        tarred_lines +=
            &format!("{{\"audio_filepath\": \"{name}\", \"shard_id\": {shard}{extra}}}\n");
        plain_lines += &format!("{{\"audio_filepath\": \"files/{file}\"{extra}}}\n");
    }
    tarred_lines += "{\"audio_filepath\": \"missing.wav\", \"shard_id\": 1}\n";
    tarred_lines += "{\"audio_filepath\": \"a.wav\", \"shard_id\": 7}\n";
    // A shard_id as text is read as its number; one that is none is a failed line.
    tarred_lines += "{\"audio_filepath\": \"b.flac\", \"shard_id\": \"0\", \"offset\": 0.5}\n";
    tarred_lines += "{\"audio_filepath\": \"a.wav\", \"shard_id\": \"x\"}\n";
    let (tarred_manifest, plain_manifest) = (
        tarred.join("tarred_audio_manifest.json"),
        tmp.path("plain.json"),
    );
    std::fs::write(&tarred_manifest, tarred_lines).unwrap();
    std::fs::write(&plain_manifest, plain_lines).unwrap();
    let (by_file, by_shard) = (tmp.path("by-file"), tmp.path("by-shard"));
    let (file_rows, shard_rows) =
        extract_both(&plain_manifest, &by_file, &tarred_manifest, &by_shard);
    let ids = |d: &Dataset| d.keys().map(|k| k.0.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(&shard_rows),
        [
            "audio_0.tar/a-sub1.wav@0.25",
            "audio_0.tar/a.wav",
            "audio_0.tar/b.flac",
            "audio_0.tar/b.flac@0.5",
            "audio_1.tar/c.wav@0.5"
        ]
    );
    assert_eq!(file_rows.len(), 4);
    let row_of = |d: &Dataset, id: &str| {
        d.iter()
            .find(|(k, _)| k.0 == id)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no row {id}"))
    };
    for (shard_id, file_id) in [
        ("audio_0.tar/a.wav", "files/a.wav"),
        ("audio_0.tar/b.flac", "files/b.flac"),
        ("audio_1.tar/c.wav@0.5", "files/c.wav@0.5"),
        ("audio_0.tar/a-sub1.wav@0.25", "files/a.wav@0.25"),
    ] {
        assert_eq!(
            row_of(&shard_rows, shard_id),
            row_of(&file_rows, file_id),
            "{shard_id}"
        );
    }
    let r = report(&by_shard, "report.json");
    assert_eq!((r.items_ok, r.items_failed), (5, 3));
    let reasons: Vec<&str> = r.failures.iter().map(|f| f.reason.as_str()).collect();
    assert!(
        reasons[0].contains("audio_1.tar: no member named \"missing.wav\""),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("audio_7.tar: cannot open"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].contains("shard_id \"x\" is not a whole number"),
        "{reasons:?}"
    );
}

/// `extract --augment`: a gain gives the rows of the same audio scaled by it, bit for bit (the
/// same f64 product rounded to f32); speed perturbation by 1.25 leaves 0.8 of an item; noise
/// from a folder, a drawn gain and a drawn speed are a function of the seed and the item's id:
/// the same rows with 1 worker or 3, other rows with another seed. SpecAugment (a training
/// batch's masks) and an augmentation of IQ are refused, each in one line.
#[test]
fn augmented_rows_are_drawn_by_id_and_equal_their_reference() {
    let tmp = Tmp::new("augment");
    let (plain, scaled, noise) = (tmp.path("plain"), tmp.path("scaled"), tmp.path("noise"));
    for dir in [&plain, &scaled, &noise] {
        std::fs::create_dir_all(dir).unwrap();
    }
    for (i, name) in ["a.wav", "b.wav", "c.wav"].iter().enumerate() {
        write_wav(&plain.join(name), 16_000, 3.0, i as u32 + 1);
    }
    write_wav(&noise.join("n.wav"), 16_000, 5.0, 9);
    let gain_db: f64 = 6.0;
    let k = 10f64.powf(gain_db / 20.0);
    let x = decode_mono(&plain.join("a.wav"), &DecodeOptions::default(), 16_000).unwrap();
    let y: Vec<f32> = x.iter().map(|&v| (f64::from(v) * k) as f32).collect();
    common::write_wav(&scaled.join("a.wav"), 16_000, &y, true);

    let spec_id = FeatureSpec::preset("nemo").unwrap().spec_id();
    let extract = |source: &Path, out: &Path, more: &[&str]| {
        let o = bin()
            .args([
                "extract",
                "--preset",
                "nemo",
                "--no-progress",
                "--device",
                "cpu",
            ])
            .arg(source)
            .arg("--out")
            .arg(out)
            .args(more)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        read_dataset(out, &spec_id)
    };
    let row = |d: &Dataset, id: &str| {
        d.iter()
            .find(|(k, _)| k.0 == id)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let volume = format!("{{\"volume_db\": [{gain_db}, {gain_db}]}}");
    let gained = extract(&plain, &tmp.path("gained"), &["--augment", &volume]);
    let reference = extract(&scaled, &tmp.path("reference"), &[]);
    let original = extract(&plain, &tmp.path("original"), &[]);
    assert_eq!(row(&gained, "a.wav"), row(&reference, "a.wav"));
    assert_ne!(row(&gained, "a.wav"), row(&original, "a.wav"));

    let faster = extract(
        &plain,
        &tmp.path("faster"),
        &["--augment", "{\"speed\": [1.25]}"],
    );
    let (frames, _, _) = row(&original, "a.wav");
    let (fast_frames, _, _) = row(&faster, "a.wav");
    assert!(
        (f64::from(fast_frames) - 0.8 * f64::from(frames)).abs() <= 2.0,
        "{fast_frames} frames at 1.25x speed, {frames} without"
    );

    let mixed = format!(
        "{{\"speed\": [0.9, 1.0, 1.1], \"volume_db\": [-6, 6], \"noise\": {{\"source\": {:?}, \"snr_db\": [5, 15]}}}}",
        noise.display().to_string()
    );
    let one = extract(
        &plain,
        &tmp.path("one"),
        &["--augment", &mixed, "--augment-seed", "7", "--workers", "1"],
    );
    let three = extract(
        &plain,
        &tmp.path("three"),
        &["--augment", &mixed, "--augment-seed", "7", "--workers", "3"],
    );
    let other = extract(
        &plain,
        &tmp.path("other"),
        &["--augment", &mixed, "--augment-seed", "8", "--workers", "3"],
    );
    assert_eq!(one, three);
    assert_ne!(one, other);
    assert!(one.keys().all(|k| row(&one, &k.0) != row(&original, &k.0)));

    for (args, expect) in [
        (
            vec!["--augment", "{\"spec_augment\": {\"freq_masks\": 2}}"],
            "spec_augment masks a training batch",
        ),
        (
            vec!["--augment", "{\"speed\": [1.0], \"echo\": 1}"],
            "unknown field `echo`",
        ),
    ] {
        let o = bin()
            .args(["extract", "--preset", "nemo", "--no-progress"])
            .arg(&plain)
            .arg("--out")
            .arg(tmp.path("refused"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(expect), "{}", stderr(&o));
        assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
    }
}
