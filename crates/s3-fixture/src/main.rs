//! The test S3 server as a process, for the benchmarks (bench/storage.py): serves the folder
//! ROOT (each folder in it a bucket; the files there sealed, see `S3Server::seal`) on a
//! loopback port, prints `endpoint URL` on its first
//! line, answers each `stats` line on its standard input with `get_bytes N requests M`, takes
//! `latency MS` as the time each request waits from then on (a store's round trip), and stops
//! at the end of its input.
//!
//!     sonograph-s3-fixture ROOT

use std::io::BufRead;

fn main() {
    let Some(root) = std::env::args_os().nth(1) else {
        eprintln!("usage: sonograph-s3-fixture ROOT");
        std::process::exit(2);
    };
    let server = sonograph_s3_fixture::S3Server::start(std::path::Path::new(&root));
    server.seal();
    println!("endpoint {}", server.endpoint());
    for line in std::io::stdin().lock().lines() {
        match line.as_deref().map(str::trim) {
            Ok("stats") => println!(
                "get_bytes {} requests {}",
                server.get_bytes(),
                server.requests()
            ),
            Ok(other) => {
                if let Some(ms) = other
                    .strip_prefix("latency ")
                    .and_then(|ms| ms.parse().ok())
                {
                    server.set_latency(std::time::Duration::from_millis(ms));
                    println!("latency {ms}");
                }
            }
            Err(_) => break,
        }
    }
}
