//! `sonograph_io::remote` against a real S3 server on loopback (s3s-fs, crates/s3-fixture): a
//! file uploaded in one request and one in a multipart upload come back byte for byte, also
//! while the server fails one request in ten; a prefix lists its objects by id; an object
//! opened by its first read and one opened by its size read the same bytes; a store's answer
//! is not asked again; an object replaced while it is read fails its reader; of threads
//! creating one name at once, one makes it.
//!
//! One test runs the parts in turn: the server's faults and the environment are the process's.

use std::path::{Path, PathBuf};

use sonograph_io::remote::{self, RemoteObject};
use sonograph_s3_fixture::S3Server;

#[path = "../../../tests/shared/wav.rs"]
mod shared_wav;

fn bytes(n: usize, seed: u32) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect()
}

fn read_all(object: &RemoteObject) -> Vec<u8> {
    let len = object.len() as usize;
    let mut out = vec![0u8; len];
    let mut at = 0;
    while at < len {
        let end = (at + 100_000).min(len);
        let n = object.read_at(&mut out[at..end], at as u64).unwrap();
        assert!(n > 0, "a read at {at} of {len} gave nothing");
        at += n;
    }
    out
}

#[test]
fn object_storage_against_a_real_s3_server() {
    let tmp = std::env::temp_dir().join(format!("sonograph-remote-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let server = S3Server::start(&tmp.join("s3"));
    // This test binary's only test: the environment is its own.
    for (key, value) in server.env() {
        std::env::set_var(key, value);
    }
    uploads_and_reads_come_back_byte_for_byte(&server, &tmp);
    a_store_answer_is_not_asked_again(&server);
    an_object_replaced_while_it_is_read_fails_its_reader(&server);
    a_shard_replaced_after_its_listing_fails_its_members(&server);
    of_threads_creating_one_name_one_makes_it(&server);
    drop(server);
    let _ = std::fs::remove_dir_all(&tmp);
}

fn uploads_and_reads_come_back_byte_for_byte(server: &S3Server, tmp: &Path) {
    let bucket = server.bucket("remote-test");
    let local = tmp.join("local");
    std::fs::create_dir_all(&local).unwrap();
    let url = |key: &str| PathBuf::from(format!("s3://remote-test/{key}"));

    let small = bytes(300_000, 1);
    let large = bytes(21 << 20, 2); // five parts of a multipart upload
    std::fs::write(local.join("small.bin"), &small).unwrap();
    std::fs::write(local.join("large.bin"), &large).unwrap();
    remote::upload(&local.join("small.bin"), &url("out/small.bin")).unwrap();
    remote::upload(&local.join("large.bin"), &url("out/large.bin")).unwrap();
    assert_eq!(std::fs::read(bucket.join("out/small.bin")).unwrap(), small);
    assert_eq!(std::fs::read(bucket.join("out/large.bin")).unwrap(), large);

    server.inject_faults(100);
    let before = server.faults();
    remote::upload(&local.join("large.bin"), &url("again/large.bin")).unwrap();
    let opened = RemoteObject::open(&url("out/large.bin")).unwrap();
    assert_eq!(read_all(&opened), large);
    let first = RemoteObject::open_reading(&url("out/small.bin"), 1 << 20).unwrap();
    assert_eq!(read_all(&first), small);
    server.inject_faults(0);
    assert!(server.faults() > before, "no fault was injected");
    assert_eq!(
        std::fs::read(bucket.join("again/large.bin")).unwrap(),
        large
    );

    let listed = remote::list(Path::new("s3://remote-test/out")).unwrap();
    let ids: Vec<_> = listed.iter().map(|o| (o.id.as_str(), o.size)).collect();
    assert_eq!(
        ids,
        [("large.bin", large.len() as u64), ("small.bin", 300_000)]
    );
    assert_eq!(listed[1].url, url("out/small.bin"));
    assert_eq!(
        remote::read_small(&url("out/none.json"), 100).unwrap(),
        None
    );
    let e = remote::read_small(&url("out/small.bin"), 100).unwrap_err();
    assert!(e.to_string().contains("300000 bytes; at most 100"), "{e}");
    let e = RemoteObject::open(&url("out/missing.wav")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
    assert!(
        e.to_string()
            .starts_with("s3://remote-test/out/missing.wav: "),
        "{e}"
    );
}

/// A status the store's client does not retry (400 here) is its answer: the object is asked
/// for once, the error names the URL and the status. (A retry loop around every error asked
/// five times, waiting 3 s in all.)
fn a_store_answer_is_not_asked_again(server: &S3Server) {
    let url = PathBuf::from("s3://remote-test/out/small.bin");
    server.answer_all_with(Some(400));
    let before = server.requests();
    let opened = RemoteObject::open(&url);
    let asked = server.requests() - before;
    let before = server.requests();
    let first_read = RemoteObject::open_reading(&url, 1 << 20);
    let asked_reading = server.requests() - before;
    server.answer_all_with(None);
    let e = opened.unwrap_err();
    assert!(
        e.to_string()
            .starts_with("s3://remote-test/out/small.bin: ")
            && e.to_string().contains("400"),
        "{e}"
    );
    assert_eq!(asked, 1, "{e}");
    // Its first read, then its size (what it falls back to where a read of a range fails).
    assert!(first_read.is_err());
    assert_eq!(asked_reading, 2);
}

/// An object replaced between two reads of one reader (a corpus being rewritten while a job
/// reads it): the read after the change fails, naming both versions, and no bytes of two
/// versions are mixed into one item.
fn an_object_replaced_while_it_is_read_fails_its_reader(server: &S3Server) {
    let bucket = server.bucket("remote-test");
    let url = PathBuf::from("s3://remote-test/changing.bin");
    let (old, new) = (bytes(3 << 20, 7), bytes(3 << 20, 8));
    for open_reading in [false, true] {
        remote::upload_bytes(old.clone(), &url).unwrap();
        let object = if open_reading {
            RemoteObject::open_reading(&url, remote::FIRST_READ_SPAN).unwrap()
        } else {
            RemoteObject::open(&url).unwrap()
        };
        let mut buf = vec![0u8; 1000];
        assert_eq!(object.read_at(&mut buf, 0).unwrap(), 1000);
        assert_eq!(buf, old[..1000]);
        remote::upload_bytes(new.clone(), &url).unwrap();
        assert_eq!(std::fs::read(bucket.join("changing.bin")).unwrap(), new);
        let e = object.read_at(&mut buf, 2 << 20).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("s3://remote-test/changing.bin: the object changed while it was read"),
            "{e}"
        );
        // Opened again, it reads the new bytes.
        let again = RemoteObject::open(&url).unwrap();
        assert_eq!(again.read_at(&mut buf, 2 << 20).unwrap(), 1000);
        assert_eq!(buf, new[2 << 20..(2 << 20) + 1000]);
    }
}

/// A 16 kHz mono 16-bit WAV of `samples` samples.
fn wav(samples: usize, seed: u32) -> Vec<u8> {
    shared_wav::pcm16_wav(16_000, &bytes(2 * samples, seed))
}

/// A WebDataset shard in memory: (name, bytes) members in order.
fn shard(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, name, data.as_slice())
            .unwrap();
    }
    builder.into_inner().unwrap()
}

/// A shard's members are read as its listing saw it (its size and ETag): replaced after the
/// listing, a small sample (fetched whole as its member is opened) and a large one (read as
/// its decoder goes) fail their item naming the change, rather than read the new bytes at the
/// old offsets (or say that a header is short).
fn a_shard_replaced_after_its_listing_fails_its_members(server: &S3Server) {
    use sonograph_io::decode::{AudioReader, DecodeOptions};
    use sonograph_io::manifest::Entry;
    use sonograph_io::roots::Roots;
    server.bucket("remote-test");
    let url = PathBuf::from("s3://remote-test/train-000.tar");
    let members = |seed: u32| {
        shard(&[
            ("small.wav", wav(4_000, seed)),
            ("small.json", b"{}".to_vec()),
            ("big.wav", wav(800_000, seed + 1)),
            ("big.json", b"{}".to_vec()),
        ])
    };
    remote::upload_bytes(members(1), &url).unwrap();
    let roots = Roots::anywhere();
    let entries = sonograph_io::webdataset::shard_entries(&roots, &url, "train-000.tar");
    let items: Vec<_> = entries
        .iter()
        .map(|e| match e {
            Entry::Item(item) => item.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(items.len(), 2);
    for item in &items {
        let member = item.member.as_ref().unwrap();
        assert!(member.listed.as_ref().is_some_and(|l| l.version.is_some()));
        // Listed as it is: read.
        AudioReader::open_item(&roots, item, &DecodeOptions::default()).unwrap();
    }
    remote::upload_bytes(members(5), &url).unwrap();
    for item in &items {
        let e = AudioReader::open_item(&roots, item, &DecodeOptions::default())
            .err()
            .unwrap_or_else(|| panic!("{}: read from the new version", item.id))
            .to_string();
        assert!(
            e.contains("the object changed while it was read") && !e.contains('\n'),
            "{}: {e}",
            item.id
        );
    }
}

/// Of two threads creating one name at the same moment, exactly one makes it, and the object
/// holds what that one put (a job's claim on an output prefix).
fn of_threads_creating_one_name_one_makes_it(server: &S3Server) {
    let bucket = server.bucket("remote-test");
    for round in 0..10 {
        let url = PathBuf::from(format!("s3://remote-test/claims/{round}.json"));
        let barrier = std::sync::Barrier::new(2);
        let outcomes: Vec<(remote::Created, Vec<u8>)> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..2u8)
                .map(|who| {
                    let (url, barrier) = (&url, &barrier);
                    scope.spawn(move || {
                        let mine = vec![b'a' + who; 100];
                        barrier.wait();
                        (remote::create_bytes(mine.clone(), url).unwrap(), mine)
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let made: Vec<_> = outcomes
            .iter()
            .filter(|(c, _)| *c == remote::Created::Made)
            .collect();
        assert_eq!(made.len(), 1, "round {round}: {outcomes:?}");
        let stored = std::fs::read(bucket.join(format!("claims/{round}.json"))).unwrap();
        assert_eq!(stored, made[0].1, "round {round}");
        // And once made, it is found.
        assert_eq!(
            remote::create_bytes(b"late".to_vec(), &url).unwrap(),
            remote::Created::Found
        );
    }
}
