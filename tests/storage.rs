//! Corpora and outputs in object storage, against a real S3 server on loopback (s3s-fs, from
//! crates.io, started by each test on a port of its own): a prefix, its WebDataset shards, a
//! manifest in the bucket with offsets into a long file, an output in the bucket, a server
//! that fails requests, and kill -9 between a part's upload and its commit. A bucket is a
//! folder of the server's root, so a test reads what the job wrote from the folder itself.

use crate::common;
use crate::extract::{read_dataset, write_wav, Dataset};
use common::{bin, repo, stderr, Tmp};

use std::path::Path;
use std::process::{Command, Output};

use sonograph_dsp::FeatureSpec;
use sonograph_io::remote;
use sonograph_s3_fixture::S3Server;

/// `sonograph` with the server's credentials and endpoint in its environment, and nothing of
/// the machine's own AWS configuration.
fn bin_for(server: &S3Server) -> Command {
    let mut cmd = bin();
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("AWS_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(server.env());
    cmd
}

fn extract(server: &S3Server, source: &str, out: &str, more: &[&str]) -> Output {
    bin_for(server)
        .args(["extract", source, "--out", out, "--preset", "whisper"])
        .args(["--no-progress", "--device", "cpu", "--workers", "2"])
        .args(more)
        .output()
        .unwrap()
}

fn list_to_manifest(server: &S3Server, source: &str, out: &Path) -> Output {
    bin_for(server)
        .args(["manifest", source, "--out"])
        .arg(out)
        .output()
        .unwrap()
}

/// The entries of `dir` whose names pass `named`.
fn entries_named(dir: &Path, named: impl Fn(&str) -> bool) -> std::io::Result<usize> {
    let mut count = 0;
    for entry in std::fs::read_dir(dir)? {
        count += usize::from(named(&entry?.file_name().to_string_lossy()));
    }
    Ok(count)
}

fn whisper_id() -> String {
    FeatureSpec::preset("whisper").unwrap().spec_id()
}

/// A corpus in `dir`: real recordings in four containers, clips in a sub-folder, a WebDataset
/// shard of two of them, a hidden file, and a file that is not audio.
fn make_corpus(dir: &Path) {
    let data = repo("tests/data");
    std::fs::create_dir_all(dir.join("clips")).unwrap();
    for name in [
        "speech_16000_mono_s16.flac",
        "speech_44100_stereo.mp3",
        "speech_44100_stereo.ogg",
        "speech_48000_mono_s16.wav",
    ] {
        std::fs::copy(data.join(name), dir.join(name)).unwrap();
    }
    for i in 0..4 {
        write_wav(
            &dir.join(format!("clips/c{i}.wav")),
            16_000,
            1.0 + i as f64,
            i,
        );
    }
    std::fs::write(dir.join("garbage.wav"), b"RIFF....WAVEnot really").unwrap();
    std::fs::write(dir.join(".hidden.wav"), b"not listed").unwrap();
    std::fs::write(dir.join("notes.txt"), b"not audio").unwrap();
    let shard = dir.join("shards/train-000.tar");
    std::fs::create_dir_all(shard.parent().unwrap()).unwrap();
    let o = Command::new("tar")
        .arg("-cf")
        .arg(&shard)
        .arg("-C")
        .arg(dir.join("clips"))
        .args(["c0.wav", "c1.wav"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

fn ids(d: &Dataset) -> Vec<String> {
    d.keys().map(|k| k.0.clone()).collect()
}

/// A WebDataset shard in a bucket costs about a request a sample, and about its bytes twice:
/// its listing streams through the small members in doubling blocks (it asked once per member
/// header, 32 kB each time), and each sample's audio and text members come in one read of the
/// shard as listed (no HEAD), whichever comes first in the shard. (On
/// 200 2-s samples this was 1,802 requests and 6.9 times the shard's bytes; 209 and 2.0 now.)
#[test]
fn a_shard_in_a_bucket_costs_about_a_request_a_sample() {
    let tmp = Tmp::new("s3-shard-requests");
    let server = S3Server::start(&tmp.path("s3"));
    let clips = tmp.path("clips");
    std::fs::create_dir_all(&clips).unwrap();
    let samples = 40u64;
    let mut members = Vec::new();
    for i in 0..samples {
        write_wav(&clips.join(format!("s{i:02}.wav")), 16_000, 1.0, i as u32);
        std::fs::write(
            clips.join(format!("s{i:02}.json")),
            format!("{{\"i\": {i}}}"),
        )
        .unwrap();
        // Half the samples with their text first, half with their audio first.
        let (wav, json) = (format!("s{i:02}.wav"), format!("s{i:02}.json"));
        members.extend(if i % 2 == 0 { [wav, json] } else { [json, wav] });
    }
    let shard = server.bucket("corpus").join("train-000.tar");
    let o = Command::new("tar")
        .arg("-cf")
        .arg(&shard)
        .arg("-C")
        .arg(&clips)
        .args(&members)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    server.seal();
    let size = std::fs::metadata(&shard).unwrap().len();
    let (requests, bytes) = (server.requests(), server.get_bytes());
    let out = tmp.path("out");
    let o = extract(
        &server,
        "s3://corpus/train-000.tar",
        out.to_str().unwrap(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (requests, bytes) = (server.requests() - requests, server.get_bytes() - bytes);
    eprintln!("{samples} samples, a shard of {size} bytes: {requests} requests, {bytes} bytes");
    // A request a sample, and the listing's few (doubling blocks over 1.4 MB).
    assert!(
        requests <= samples + 10,
        "{requests} requests for {samples} samples"
    );
    assert!(
        bytes <= 3 * size,
        "{bytes} bytes fetched for a shard of {size}"
    );
    let rows = read_dataset(&out, &whisper_id());
    assert_eq!(rows.len() as u64, samples);
    // Every sample's text came with it, whichever member came first.
    let (parts, _) = sonograph_io::parquet::read_part(
        &std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "parquet"))
            .unwrap(),
    )
    .unwrap();
    for row in parts {
        let i: u64 = row
            .id
            .trim_start_matches("train-000.tar/s")
            .parse()
            .unwrap();
        assert_eq!(
            row.sample.as_deref(),
            Some(format!("{{\"json\":{{\"i\":{i}}}}}").as_str()),
            "{}",
            row.id
        );
    }
}

/// A prefix in a bucket is a folder: its files and its shards' members give the rows the
/// same folder on disk gives, with the same ids, and its broken file the same failure. The
/// output written to a bucket holds the same rows as one written to disk, and so does one
/// written while the server fails one request in four (503s and dropped connections).
/// Credentials as the AWS tools keep them: with no keys in the environment, a job reads the
/// profile `AWS_PROFILE` names from the shared credentials file and its region from the config
/// file; a profile with the wrong secret is refused by the server, and one that neither file
/// has fails in one line naming both files.
#[test]
fn credentials_come_from_the_aws_profile_files_when_the_environment_has_none() {
    let tmp = Tmp::new("s3-profile");
    let server = S3Server::start(&tmp.path("s3"));
    let corpus = server.bucket("corpus").join("audio");
    std::fs::create_dir_all(&corpus).unwrap();
    write_wav(&corpus.join("a.wav"), 16_000, 1.0, 1);
    let (credentials, config) = (tmp.path("credentials"), tmp.path("config"));
    std::fs::write(
        &credentials,
        format!(
            "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n\
             [ci]\naws_access_key_id = {}\naws_secret_access_key = {}\n\n\
             [bad]\naws_access_key_id = {}\naws_secret_access_key = not-the-secret\n",
            sonograph_s3_fixture::ACCESS_KEY,
            sonograph_s3_fixture::SECRET_KEY,
            sonograph_s3_fixture::ACCESS_KEY,
        ),
    )
    .unwrap();
    std::fs::write(
        &config,
        "[profile ci]\nregion = us-east-1\n[profile bad]\nregion = us-east-1\n",
    )
    .unwrap();
    let listed = tmp.path("listed.jsonl");
    let manifest = |profile: &str| {
        let mut cmd = bin_for(&server);
        for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"] {
            cmd.env_remove(key);
        }
        cmd.env("AWS_PROFILE", profile)
            .env("AWS_SHARED_CREDENTIALS_FILE", &credentials)
            .env("AWS_CONFIG_FILE", &config)
            .args(["manifest", "s3://corpus/audio", "--out"])
            .arg(&listed)
            .output()
            .unwrap()
    };
    let o = manifest("ci");
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = std::fs::read_to_string(&listed).unwrap();
    assert!(lines.contains("s3://corpus/audio/a.wav"), "{lines}");
    let o = manifest("bad");
    assert!(
        !o.status.success(),
        "the server should refuse the wrong secret"
    );
    let o = manifest("nowhere");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let said = stderr(&o);
    assert!(
        said.contains("AWS_PROFILE=nowhere: no such profile in "),
        "{said}"
    );
    assert!(said.contains(credentials.to_str().unwrap()), "{said}");
}

#[test]
fn a_bucket_prefix_and_an_output_in_a_bucket_give_the_rows_of_a_folder() {
    let tmp = Tmp::new("s3-prefix");
    let server = S3Server::start(&tmp.path("s3"));
    let corpus = server.bucket("corpus").join("audio");
    make_corpus(&corpus);
    server.bucket("features");

    let local = tmp.path("local");
    let o = extract(
        &server,
        corpus.to_str().unwrap(),
        local.to_str().unwrap(),
        &[],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let expected = read_dataset(&local, &whisper_id());
    assert_eq!(expected.len(), 10, "{:?}", ids(&expected));

    // From the bucket to the disk.
    let from_bucket = tmp.path("from-bucket");
    let o = extract(
        &server,
        "s3://corpus/audio",
        from_bucket.to_str().unwrap(),
        &[],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(
        ids(&read_dataset(&from_bucket, &whisper_id())),
        ids(&expected)
    );
    assert_eq!(read_dataset(&from_bucket, &whisper_id()), expected);
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(from_bucket.join("__sonograph/report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report["failures"][0]["id"], "garbage.wav", "{report}");
    assert!(
        report["failures"][0]["source"]
            .as_str()
            .unwrap()
            .starts_with("s3://corpus/audio/garbage.wav"),
        "{report}"
    );

    // From the bucket to the bucket, staged in a work folder of the test's.
    let work = tmp.path("work");
    let o = extract(
        &server,
        "s3://corpus/audio/",
        "s3://features/run1",
        &["--work-dir", work.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let in_bucket = server.bucket("features").join("run1");
    assert_eq!(read_dataset(&in_bucket, &whisper_id()), expected);
    for meta in ["job.json", "report.json", "shard-00000-of-00001.done"] {
        assert!(in_bucket.join("__sonograph").join(meta).is_file(), "{meta}");
    }
    // Every part left the work folder once uploaded; the ledger stays there.
    let left: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".parquet"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(work.join("__sonograph/ledger.sqlite").is_file());

    // The same with one request in four failing: every item once, the same rows. (At one in
    // eight, fewer than three of the job's requests failed once the shard's samples came a
    // read each.)
    server.inject_faults(250);
    let before = server.faults();
    let o = extract(
        &server,
        "s3://corpus/audio",
        "s3://features/run2",
        &["--work-dir", tmp.path("work2").to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    server.inject_faults(0);
    assert!(
        server.faults() - before >= 3,
        "{} faults",
        server.faults() - before
    );
    let faulty = server.bucket("features").join("run2");
    assert_eq!(read_dataset(&faulty, &whisper_id()), expected);

    // Another work folder on the same prefix would write the same part names again.
    let o = extract(
        &server,
        "s3://corpus/audio",
        "s3://features/run1",
        &["--work-dir", tmp.path("work3").to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("holds parts of shard 0") && stderr(&o).contains("--work-dir"),
        "{}",
        stderr(&o)
    );
    // A work folder belongs to its prefix: given another, its ledger would be taken for it.
    let o = extract(
        &server,
        "s3://corpus/audio",
        "s3://features/run9",
        &["--work-dir", work.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("belongs to another job"),
        "{}",
        stderr(&o)
    );
    // A manifest of the prefix, listed once (each header read by range), gives the same rows
    // through the URLs it lists.
    let listed = tmp.path("listed.jsonl");
    let o = list_to_manifest(&server, "s3://corpus/audio", &listed);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let lines = std::fs::read_to_string(&listed).unwrap();
    assert_eq!(lines.lines().count(), 8, "{lines}");
    assert!(
        lines.contains("\"audio_filepath\":\"s3://corpus/audio/clips/c3.wav\",\"duration\":4.0"),
        "{lines}"
    );
    let by_manifest = tmp.path("by-manifest");
    let o = extract(
        &server,
        listed.to_str().unwrap(),
        by_manifest.to_str().unwrap(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = read_dataset(&by_manifest, &whisper_id());
    let from_files: Vec<_> = expected
        .iter()
        .filter(|(k, _)| !k.0.contains(".tar/"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(rows.values().collect::<Vec<_>>(), from_files);
    // A prefix that holds nothing is said so, as a folder that does not exist is.
    let o = extract(
        &server,
        "s3://corpus/nothing-here",
        local.to_str().unwrap(),
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no object under this prefix"),
        "{}",
        stderr(&o)
    );
}

/// A NeMo manifest in a bucket, its relative paths beside it: spans of a 10-minute file are
/// read by byte range, fetching at most twice the bytes the spans hold (the server's count of
/// bytes answered), with the rows the same manifest gives on disk.
#[test]
fn offsets_into_a_long_file_in_a_bucket_fetch_little_more_than_they_read() {
    let tmp = Tmp::new("s3-offsets");
    let server = S3Server::start(&tmp.path("s3"));
    let bucket = server.bucket("corpus");
    let rate = 16_000;
    write_wav(&bucket.join("long.wav"), rate, 600.0, 7);
    let spans: Vec<(f64, f64)> = (0..12).map(|i| (17.0 + 45.0 * f64::from(i), 8.0)).collect();
    let manifest: String = spans
        .iter()
        .map(|(offset, duration)| {
            format!(
                "{{\"audio_filepath\": \"long.wav\", \"offset\": {offset}, \"duration\": {duration}}}\n"
            )
        })
        .collect();
    std::fs::write(bucket.join("spans.jsonl"), &manifest).unwrap();

    let local = tmp.path("local");
    let manifest_path = bucket.join("spans.jsonl");
    let o = extract(
        &server,
        manifest_path.to_str().unwrap(),
        local.to_str().unwrap(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = read_dataset(&local, &whisper_id());
    assert_eq!(expected.len(), 12);

    let before = server.get_bytes();
    let from_bucket = tmp.path("from-bucket");
    let o = extract(
        &server,
        "s3://corpus/spans.jsonl",
        from_bucket.to_str().unwrap(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let fetched = server.get_bytes() - before;
    assert_eq!(read_dataset(&from_bucket, &whisper_id()), expected);
    let needed: f64 = spans.iter().map(|(_, d)| d * f64::from(rate) * 2.0).sum();
    eprintln!(
        "fetched {fetched} bytes for spans of {needed} bytes ({:.2}x; the file is {} bytes)",
        fetched as f64 / needed,
        std::fs::metadata(bucket.join("long.wav")).unwrap().len()
    );
    assert!(
        (fetched as f64) < 2.0 * needed,
        "fetched {fetched} bytes for {needed} bytes of spans"
    );
    // A manifest line naming an object that is not there is one failed line.
    std::fs::write(
        bucket.join("missing.jsonl"),
        "{\"audio_filepath\": \"long.wav\", \"duration\": 1.0}\n{\"audio_filepath\": \"gone.wav\"}\n",
    )
    .unwrap();
    let out = tmp.path("missing");
    let o = extract(
        &server,
        "s3://corpus/missing.jsonl",
        out.to_str().unwrap(),
        &[],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("__sonograph/report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report["items_ok"], 1, "{report}");
    let reason = report["failures"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("s3://corpus/gone.wav"), "{reason}");
    // A listing's durations read each header, not the first MiB a clip opened whole gets.
    let before = server.get_bytes();
    let listed = tmp.path("listed.jsonl");
    let o = list_to_manifest(&server, "s3://corpus", &listed);
    assert!(o.status.success(), "{}", stderr(&o));
    let fetched = server.get_bytes() - before;
    let lines = std::fs::read_to_string(&listed).unwrap();
    assert!(
        lines.contains("\"audio_filepath\":\"s3://corpus/long.wav\",\"duration\":600.0"),
        "{lines}"
    );
    // (98,304 bytes: its 32 KiB header read, then the decoder's buffer reading ahead as it
    // opens the stream.)
    assert!(
        fetched < remote::FIRST_READ_WHOLE / 4,
        "{fetched} bytes fetched to list one header: {lines}"
    );
}

/// kill -9 of a job writing to a bucket, at the instants that matter (a part written but not
/// uploaded; uploaded but not committed) and at random, each resumed from the same work
/// folder: every row exactly once in the bucket, equal to a clean run's.
/// Needs the failpoints build: `cargo test --features failpoints --test integration storage::`.
#[cfg(feature = "failpoints")]
#[test]
fn a_bucket_output_killed_and_resumed_holds_every_row_once() {
    use std::os::unix::process::ExitStatusExt;
    let tmp = Tmp::new("s3-kill");
    let server = S3Server::start(&tmp.path("s3"));
    let corpus = server.bucket("corpus").join("audio");
    make_corpus(&corpus);
    std::fs::create_dir_all(corpus.join("more")).unwrap();
    for i in 0..40 {
        write_wav(
            &corpus.join(format!("more/m{i:02}.wav")),
            16_000,
            3.0,
            40 + i,
        );
    }
    server.bucket("features");
    let job = |out: &str, work: &Path, failpoints: &str| {
        let mut cmd = bin_for(&server);
        cmd.args([
            "extract",
            "s3://corpus/audio",
            "--out",
            out,
            "--preset",
            "whisper",
        ])
        .args(["--no-progress", "--device", "cpu", "--workers", "2"])
        .args(["--part-mb", "1", "--batch-items", "2", "--work-dir"])
        .arg(work)
        .env("FAILPOINTS", failpoints);
        cmd
    };
    let o = job("s3://features/clean", &tmp.path("w-clean"), "")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let expected = read_dataset(&server.bucket("features").join("clean"), &whisper_id());
    assert!(expected.len() >= 45, "{}", expected.len());

    let work = tmp.path("w-resumed");
    for point in ["writer-before-commit", "writer-after-upload"] {
        let o = job("s3://features/resumed", &work, &format!("{point}=return"))
            .output()
            .unwrap();
        assert_eq!(o.status.signal(), Some(6), "{point}: {}", stderr(&o));
    }
    // Each item sleeps 200 ms in its worker: the job is still running when it is killed.
    let mut child = job("s3://features/resumed", &work, "executor::batch=sleep(200)")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    if let Some(status) = child.try_wait().unwrap() {
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        panic!("the job ended before the kill ({status}): {err}");
    }
    child.kill().unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(9));
    let o = job("s3://features/resumed", &work, "").output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(
        read_dataset(&server.bucket("features").join("resumed"), &whisper_id()),
        expected
    );
    let parts_left = entries_named(&work, |n| n.starts_with("part-")).unwrap();
    assert_eq!(
        parts_left, 0,
        "every part left the work folder once uploaded"
    );
}

/// IQ recordings in a bucket read as their files do: a prefix of SigMF pairs beside a `.sigmf`
/// archive of them and a raw `.ci16` file, one recording by its metadata object, and
/// `rf-features` over the prefix, each giving the rows of the same files on disk (IQ was
/// read from local files only).
#[test]
fn iq_recordings_in_a_bucket_give_the_rows_of_their_files() {
    use crate::extract_iq::rows;
    use crate::rf_cli::read_rows;
    let tmp = Tmp::new("s3-iq");
    let server = S3Server::start(&tmp.path("s3"));
    let local = tmp.path("rec");
    let o = bin()
        .args(["synth-iq", "--count", "3", "--samples", "20000"])
        .args([
            "--modulation",
            "qpsk,fm",
            "--snr-db",
            "10",
            "--seed",
            "7",
            "--out",
        ])
        .arg(&local)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let pairs: Vec<String> = (0..3)
        .flat_map(|k| ["sigmf-meta", "sigmf-data"].map(|ext| format!("sample-00000000{k}.{ext}")))
        .collect();
    let o = Command::new("tar")
        .arg("-cf")
        .arg(local.join("pack.sigmf"))
        .arg("-C")
        .arg(&local)
        .args(&pairs)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // A raw recording: a pair's data as 16-bit I/Q at the rate given.
    std::fs::copy(
        local.join("sample-000000002.sigmf-data"),
        local.join("raw.ci16"),
    )
    .unwrap();
    let in_bucket = server.bucket("corpus").join("iq");
    std::fs::create_dir_all(&in_bucket).unwrap();
    for entry in std::fs::read_dir(&local).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, in_bucket.join(path.file_name().unwrap())).unwrap();
        }
    }
    server.seal();
    let extract_iq = |source: &str, out: &Path| {
        let o = bin_for(&server)
            .args(["extract", source, "--out"])
            .arg(out)
            .args(["--preset", "iq-power", "--sample-rate", "200000"])
            .args(["--no-progress", "--device", "cpu", "--workers", "2"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{source}: {}", stderr(&o));
        rows(out)
    };
    let on_disk = extract_iq(local.to_str().unwrap(), &tmp.path("local"));
    let ids: Vec<&str> = on_disk.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), 7, "{ids:?}");
    assert!(
        ids.contains(&"pack.sigmf/sample-000000001") && ids.contains(&"raw.ci16"),
        "{ids:?}"
    );
    let from_bucket = extract_iq("s3://corpus/iq", &tmp.path("bucket"));
    assert!(from_bucket
        .iter()
        .all(|r| r.source.starts_with("s3://corpus/iq/")));
    let without_source = |rows: &[sonograph_io::parquet::FeatureRow]| {
        let mut rows = rows.to_vec();
        rows.iter_mut().for_each(|r| r.source.clear());
        rows
    };
    assert!(
        without_source(&from_bucket) == without_source(&on_disk),
        "the prefix's rows"
    );
    let one = extract_iq(
        "s3://corpus/iq/sample-000000001.sigmf-meta",
        &tmp.path("one"),
    );
    assert_eq!(one.len(), 1);
    let local_one = on_disk.iter().find(|r| r.id == one[0].id).unwrap();
    assert!(one[0].features == local_one.features);

    let rf_features = |source: &str, out: &Path| {
        let o = bin_for(&server)
            .args(["rf-features", source, "--out"])
            .arg(out)
            .args(["--psd", "--sample-rate", "200000", "--rows-per-part", "5"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{source}: {}", stderr(&o));
        read_rows(out)
    };
    let on_disk = rf_features(local.to_str().unwrap(), &tmp.path("rf-local"));
    let from_bucket = rf_features("s3://corpus/iq/", &tmp.path("rf-bucket"));
    assert!(!on_disk.is_empty());
    let (ids_disk, ids_bucket) = (&on_disk[0], &from_bucket[0]);
    assert_eq!(ids_disk, ids_bucket);
    for ((name, disk), (other, bucket)) in on_disk.iter().zip(&from_bucket) {
        assert_eq!(name, other);
        // (Debug's text holds NaN, the truth of a recording without it, equal to NaN.)
        if name != "source" {
            assert_eq!(
                format!("{disk:?}"),
                format!("{bucket:?}"),
                "rf-features' {name}"
            );
        } else if let sonograph_io::table::Column::Utf8(sources) = bucket {
            assert!(
                sources.iter().all(|s| s.starts_with("s3://corpus/iq/")),
                "{sources:?}"
            );
        } else {
            panic!("rf-features' source is text");
        }
    }
}

/// Clips in a bucket are fetched ahead of the workers that decode them: with a store's round
/// trip (100 ms a request here) and two workers, the server sees many more requests at once
/// than there are workers, and still a request a clip and each clip's bytes once (a read
/// ahead is the read its worker makes, not one more), the rows those of the same clips on disk.
#[test]
fn clips_in_a_bucket_are_fetched_ahead_of_their_workers_once_each() {
    let tmp = Tmp::new("s3-read-ahead");
    let server = S3Server::start(&tmp.path("s3"));
    let clips = server.bucket("corpus").join("clips");
    std::fs::create_dir_all(&clips).unwrap();
    let n = 40;
    for i in 0..n {
        write_wav(&clips.join(format!("c{i:02}.wav")), 16_000, 0.5, i);
    }
    server.seal();
    let bytes: u64 = (0..n)
        .map(|i| {
            std::fs::metadata(clips.join(format!("c{i:02}.wav")))
                .unwrap()
                .len()
        })
        .sum();
    let local = tmp.path("local");
    let o = extract(
        &server,
        clips.to_str().unwrap(),
        local.to_str().unwrap(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    server.set_latency(std::time::Duration::from_millis(100));
    let (requests, fetched) = (server.requests(), server.get_bytes());
    let from_bucket = tmp.path("from-bucket");
    let o = extract(
        &server,
        "s3://corpus/clips",
        from_bucket.to_str().unwrap(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (requests, fetched) = (server.requests() - requests, server.get_bytes() - fetched);
    eprintln!(
        "{n} clips: {requests} requests, {fetched} bytes of {bytes}, at most {} at once",
        server.most_in_flight()
    );
    // A clip's GET, and the one listing (audio and IQ recordings are found in the same).
    assert!(
        requests <= u64::from(n) + 1,
        "{requests} requests for {n} clips"
    );
    assert_eq!(fetched, bytes);
    // `extract` above runs two workers.
    assert!(
        server.most_in_flight() >= 8,
        "{} requests at once",
        server.most_in_flight()
    );
    assert_eq!(
        read_dataset(&from_bucket, &whisper_id()),
        read_dataset(&local, &whisper_id())
    );
}

/// A part uploads while the writer goes on with the next: with a store's round trip (400 ms a
/// request here), the next part's draft is being written in the work folder while the server
/// is still taking the one before (an upload on the writer's thread held every stage up for
/// each part's round trips). The bucket then holds the rows of the same clips on disk, each
/// once.
#[test]
fn a_part_uploads_while_the_next_is_written() {
    let tmp = Tmp::new("s3-upload-overlap");
    let server = S3Server::start(&tmp.path("s3"));
    let clips = tmp.path("clips");
    std::fs::create_dir_all(&clips).unwrap();
    std::fs::create_dir_all(server.bucket("features")).unwrap();
    for i in 0..16 {
        write_wav(&clips.join(format!("c{i:02}.wav")), 16_000, 10.0, i);
    }
    let local = tmp.path("local");
    let o = extract(
        &server,
        clips.to_str().unwrap(),
        local.to_str().unwrap(),
        &["--part-mb", "1"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    server.set_latency(std::time::Duration::from_millis(400));
    let work = tmp.path("work");
    // A 10-s clip's row is 320 kB of values: a part every four clips, four parts.
    let mut child = bin_for(&server)
        .args([
            "extract",
            clips.to_str().unwrap(),
            "--out",
            "s3://features/run",
        ])
        .args(["--preset", "whisper", "--no-progress", "--device", "cpu"])
        .args(["--workers", "2", "--part-mb", "1", "--work-dir"])
        .arg(&work)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A part, or the draft of one (`.part-….tmp`).
    let parts_in_work = || entries_named(&work, |n| n.contains("part-"));
    let mut overlapped = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        // The work folder appears once the job has started.
        if server.writes_in_flight() > 0 && parts_in_work().unwrap_or(0) >= 2 {
            overlapped += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(
        overlapped > 0,
        "no part was being written while one uploaded: {err}"
    );
    assert_eq!(parts_in_work().unwrap(), 0, "the work folder keeps parts");
    let uploaded = server.bucket("features").join("run");
    let parts = entries_named(&uploaded, |n| n.starts_with("part-")).unwrap();
    assert_eq!(parts, 4, "{err}");
    assert_eq!(
        read_dataset(&uploaded, &whisper_id()),
        read_dataset(&local, &whisper_id())
    );
}
