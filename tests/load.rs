//! A bounded load test on loopback: 200 concurrent clients for 10 s against `/metrics`,
//! `/api/v1/status` and `/api/v1/jobs` while a job runs. Every request must be answered (200),
//! again and again. The job's throughput against the same job unloaded just before and just
//! after is printed; the < 10 % target is a speed target and lives in `bench/load.sh`, which
//! runs this test several times and compares the median drop with it (with
//! `SONOGRAPH_LOAD_MAX_DROP=0.10` a single run asserts it too). Each client sends a request, waits for the answer, then waits
//! `THINK_MS` before the next (a closed loop, as scrapers and dashboards poll); the figures are
//! printed. Its own test binary, so that no other test shares the machine with it. The
//! clients stand for remote scrapers and dashboards: they run here, on the job's cores, at
//! nice 10 (as the server's own HTTP threads do), so that what is measured is the cost of
//! serving them, not of generating the load (on 2 cores the clients alone took a tenth of the
//! machine).

#[path = "shared/serving.rs"]
mod serving;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use serving::{manifest, Scratch, Server};

const CLIENTS: usize = 200;
const LOAD: Duration = Duration::from_secs(10);
/// Each client's pause between an answer and its next request; `SONOGRAPH_LOAD_THINK_MS`
/// changes it for a heavier run by hand (0: back to back).
const THINK_MS: u64 = 250;
const QUIET: Duration = Duration::from_secs(10);

fn think() -> Duration {
    let ms = std::env::var("SONOGRAPH_LOAD_THINK_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(THINK_MS);
    Duration::from_millis(ms)
}

/// Items the job settled during `window`.
fn rate(server: &Server, id: i64, window: Duration) -> f64 {
    let settled = |s: &Server| {
        let p = &s.job(id)["progress"];
        p["items_ok"].as_u64().unwrap() + p["items_failed"].as_u64().unwrap()
    };
    let (t, a) = (Instant::now(), settled(server));
    std::thread::sleep(window);
    let b = settled(server);
    (b - a) as f64 / t.elapsed().as_secs_f64()
}

#[test]
fn two_hundred_clients_for_ten_seconds_while_a_job_runs() {
    let dir = Scratch::new("load");
    let src = manifest(&dir.0, 500_000, 0);
    let server = Server::in_dir(&dir, &[]);
    let id = server
        .submit(&json!({"source": src, "out": dir.path("out"), "device": "cpu", "workers": 1}));
    server.wait_progress(id, 100);
    let before = rate(&server, id, QUIET);

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, bad, slowest_us) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let paths = ["/metrics", "/api/v1/status", "/api/v1/jobs"];
    let think = think();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (stop, ok, bad, slowest) =
                (stop.clone(), ok.clone(), bad.clone(), slowest_us.clone());
            let base = server.base.clone();
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    sonograph_server::yield_to_jobs();
                    let agent: ureq::Agent = ureq::Agent::config_builder()
                        .http_status_as_error(false)
                        .timeout_global(Some(Duration::from_secs(30)))
                        .build()
                        .into();
                    // Spread the first requests over the think time.
                    std::thread::sleep(think * c as u32 / CLIENTS as u32);
                    let mut k = c;
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        let answered = agent
                            .get(format!("{base}{}", paths[k % paths.len()]))
                            .call()
                            .ok()
                            .and_then(|mut r| {
                                let status = r.status().as_u16();
                                r.body_mut().read_to_vec().ok().map(|_| status)
                            });
                        slowest.fetch_max(t.elapsed().as_micros() as u64, Ordering::Relaxed);
                        match answered {
                            Some(200) => ok.fetch_add(1, Ordering::Relaxed),
                            _ => bad.fetch_add(1, Ordering::Relaxed),
                        };
                        k += 1;
                        std::thread::sleep(think);
                    }
                })
                .unwrap()
        })
        .collect();
    let loaded = rate(&server, id, LOAD);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let after = rate(&server, id, QUIET);
    let (ok, bad) = (ok.load(Ordering::Relaxed), bad.load(Ordering::Relaxed));
    let unloaded = (before + after) / 2.0;
    let drop = 1.0 - loaded / unloaded;
    println!(
        "load: {CLIENTS} clients, {:.0} ms think time, {} s: {ok} requests answered 200 \
         ({:.0}/s), {bad} not; slowest {:.1} ms; job {before:.1} items/s before, {loaded:.1} \
         under load, {after:.1} after: {:+.1} % change",
        think.as_secs_f64() * 1e3,
        LOAD.as_secs(),
        ok as f64 / LOAD.as_secs_f64(),
        slowest_us.load(Ordering::Relaxed) as f64 / 1e3,
        -drop * 100.0
    );
    assert_eq!(bad, 0, "every request is answered 200");
    // Each client was answered again and again, not once.
    assert!(ok >= 10 * CLIENTS as u64, "only {ok} requests were served");
    if let Some(max) = std::env::var("SONOGRAPH_LOAD_MAX_DROP")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
    {
        assert!(
            drop < max,
            "the job's throughput dropped {:.1} %",
            drop * 100.0
        );
    }
    server.cancel(id);
}
