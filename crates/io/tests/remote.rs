//! `sonograph_io::remote` against a real S3 server on loopback (s3s-fs, crates/s3-fixture): a
//! file uploaded in one request and one in a multipart upload come back byte for byte, also
//! while the server fails one request in ten; a prefix lists its objects by id; an object
//! opened by its first read and one opened by its size read the same bytes.

use std::path::{Path, PathBuf};

use sonograph_io::remote::{self, RemoteObject};
use sonograph_s3_fixture::S3Server;

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
fn uploads_and_reads_come_back_byte_for_byte() {
    let tmp = std::env::temp_dir().join(format!("sonograph-remote-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let server = S3Server::start(&tmp.join("s3"));
    // This test binary's only test: the environment is its own.
    for (key, value) in server.env() {
        std::env::set_var(key, value);
    }
    let bucket = server.bucket("remote-test");
    let local = tmp.join("local");
    std::fs::create_dir_all(&local).unwrap();
    let url = |key: &str| PathBuf::from(format!("s3://remote-test/{key}"));

    let small = bytes(300_000, 1);
    let large = bytes(21 << 20, 2); // three parts of a multipart upload
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
    drop(server);
    let _ = std::fs::remove_dir_all(&tmp);
}
