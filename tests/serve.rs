//! `sonograph serve` on loopback, spoken to by a real HTTP client: endpoints, safety rules,
//! the jobs API with its SQLite queue, alerts and their webhook, the event stream, and what
//! kill -9 and SIGTERM leave behind. `extract --metrics-addr` too.

#[cfg(all(feature = "failpoints", feature = "gpu"))]
use crate::common;
use crate::shared::serving;
use crate::shared::skip;
use crate::shared::skip_ort;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serving::{manifest, request, Scratch, Server};
use sonograph_io::parquet::{read_part, FeatureRow};

/// A file of the repository.
fn repo_file(p: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// Every sample of a /metrics text, parsed by a real Prometheus text parser.
fn scrape(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap()
}

fn value_of(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples
        .iter()
        .find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

#[test]
fn health_ready_status_and_metrics() {
    let dir = Scratch::new("basic");
    let server = Server::start(&[
        "--data-root",
        dir.str(),
        "--state-dir",
        &dir.path("state").display().to_string(),
    ]);
    let (status, body) = server.call("GET", "/health", None);
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
    server.wait_ready();
    let status = server.get_json("/api/v1/status");
    let devices = status["devices"].as_array().unwrap();
    assert_eq!(devices.last().unwrap()["id"], "cpu", "{status:#}");
    assert_eq!(status["configuration"]["data_roots"][0], dir.str());
    assert_eq!(status["configuration"]["token_required"], false);
    assert!(status["optimisations"]["gpu_backend_built"].is_boolean());
    assert!(status["configuration"]["alert_rules"]["memory_warning"].as_f64() == Some(0.9));

    let (code, text) = server.call("GET", "/metrics", None);
    assert_eq!(code, 200);
    let m = scrape(&text);
    assert_eq!(
        value_of(&m, "sonograph_items_total", &[("status", "ok")]),
        Some(0.0)
    );
    for level in ["INFO", "WARNING", "ERROR", "CRITICAL"] {
        assert_eq!(
            value_of(&m, "sonograph_alerts_active", &[("level", level)]),
            Some(0.0),
            "{text}"
        );
    }
    assert_eq!(
        value_of(&m, "sonograph_jobs", &[("state", "queued")]),
        Some(0.0)
    );
    assert_eq!(value_of(&m, "sonograph_ready", &[]), Some(1.0));
    assert!(value_of(&m, "process_resident_memory_bytes", &[]).unwrap() > 1e6);
    // One server per state directory.
    let second = serving::command()
        .args(["serve", "--addr", "127.0.0.1:0", "--state-dir"])
        .arg(dir.path("state"))
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("another sonograph serve uses this state directory"),
        "{err}"
    );
    let (code, body) = server.call("GET", "/nope", None);
    assert_eq!(code, 404);
    assert!(body.contains("no such endpoint"));
    // The dashboard is one embedded page.
    let (code, page) = server.call("GET", "/", None);
    assert_eq!(code, 200);
    assert!(
        page.contains("<canvas id=\"chart-throughput\"") && !page.contains("http"),
        "no CDN"
    );
}

/// `/api/v1/openapi.json` describes the API from its own types: every route of the jobs API,
/// the request body's fields exactly the job options' (so the description cannot drift from
/// what the service reads), and errors as `{"error": ...}`, which a path that is not a job id
/// gets too (not axum's plain text).
#[test]
fn the_openapi_description_is_the_apis_own() {
    let dir = Scratch::new("openapi");
    let server = Server::start(&[
        "--data-root",
        dir.str(),
        "--state-dir",
        &dir.path("state").display().to_string(),
    ]);
    let doc = server.get_json("/api/v1/openapi.json");
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    for (path, method) in [
        ("/health", "get"),
        ("/ready", "get"),
        ("/api/v1/status", "get"),
        ("/api/v1/jobs", "get"),
        ("/api/v1/jobs", "post"),
        ("/api/v1/plan", "post"),
        ("/api/v1/jobs/{id}", "get"),
        ("/api/v1/jobs/{id}", "delete"),
        ("/api/v1/alerts", "get"),
        ("/api/v1/telemetry", "get"),
    ] {
        assert!(paths[path][method].is_object(), "{method} {path}");
    }
    let body = &paths["/api/v1/jobs"]["post"]["requestBody"]["content"]["application/json"];
    assert_eq!(body["schema"]["$ref"], "#/components/schemas/JobOptions");
    let schema = &doc["components"]["schemas"]["JobOptions"];
    let documented: std::collections::BTreeSet<&str> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let options = serde_json::to_value(sonograph_pipeline::JobOptions::default()).unwrap();
    let read: std::collections::BTreeSet<&str> = options
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(documented, read);
    assert_eq!(
        schema["additionalProperties"], false,
        "unknown fields are refused"
    );
    assert_eq!(schema["required"], json!(["source", "out"]));
    // The token, as a bearer scheme every path but /health and /ready asks for.
    assert_eq!(
        doc["components"]["securitySchemes"]["token"]["scheme"],
        "bearer"
    );
    assert_eq!(doc["security"], json!([{"token": []}]));
    assert_eq!(paths["/health"]["get"]["security"], json!([{}]));
    let (code, text) = server.call("GET", "/api/v1/jobs/99999999999999999999", None);
    assert_eq!(code, 400);
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert!(answer["error"].as_str().unwrap().contains("i64"), "{text}");
}

/// schemathesis (scripts/requirements-test.txt) fuzzes the jobs API of a server with a token
/// from its OpenAPI description for 45 s — its coverage, fuzzing and stateful phases, every
/// check (the token's included: a request without it must be refused) but
/// "schema-valid data is accepted" (the service refuses valid JSON whose paths are outside its
/// data roots or whose spec does not validate, on purpose) — and finds nothing: no 5xx, no
/// undocumented status or content type, no answer off its schema. The server then still
/// answers and logged no panic.
#[test]
fn schemathesis_finds_nothing_in_the_jobs_api() {
    let probe = std::process::Command::new("schemathesis")
        .arg("--version")
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        skip::skip_unless_required(
            "SONOGRAPH_REQUIRE_PYTHON",
            "no schemathesis on the PATH (pip install -r scripts/requirements-test.txt)",
        );
        return;
    }
    let dir = Scratch::new("schemathesis");
    let token = "schemathesis-test-token";
    let server = Server::start(&[
        "--data-root",
        dir.str(),
        "--state-dir",
        &dir.path("state").display().to_string(),
        "--device",
        "cpu",
        "--token",
        token,
    ]);
    server.wait_ready();
    let o = std::process::Command::new("schemathesis")
        .arg("run")
        .arg(format!("{}/api/v1/openapi.json", server.base))
        .args([
            "--checks",
            "all",
            // DELETE cancels a job, which stays listed as canceled with its report and error
            // (documented in the description's responses): a GET after it answers 200 by
            // design, where `use_after_free` (ST301) expects the job gone.
            "--exclude-checks",
            "positive_data_acceptance,use_after_free",
            "--max-time",
            "45",
            "--workers",
            "2",
            "--seed",
            "1",
            "--header",
            &format!("Authorization: Bearer {token}"),
            "--report-dir",
        ])
        .arg(dir.path("report"))
        .current_dir(dir.str())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // "N generated, N passed[, K skipped]": the run did test cases (a description it could not read
    // would test none).
    let cases = said
        .lines()
        .map(str::trim)
        .find(|l| l.contains(" generated, ") && l.contains(" passed"))
        .unwrap_or_else(|| panic!("no count of test cases: {said}"));
    let generated: u64 = cases.split(' ').next().unwrap().parse().unwrap();
    assert!(generated > 1000, "{cases}");
    eprintln!("schemathesis: {cases}");
    let (code, _) = server.call("GET", "/health", None);
    assert_eq!(code, 200);
    let log = server.log.lock().unwrap().clone();
    assert!(!log.contains("panicked"), "{log}");
}

/// Devices that cannot be set up (here the CPU disabled, which nothing can run without):
/// `/ready` answers 503 with the reason, `/health` stays 200, `sonograph_ready` is 0, and a
/// submitted job waits in the queue instead of running.
#[test]
fn ready_is_503_with_the_reason_while_the_devices_are_not_set_up() {
    let dir = Scratch::new("not-ready");
    let src = manifest(&dir.0, 3, 0);
    let server = Server::start_with(
        &[
            "--data-root",
            dir.str(),
            "--state-dir",
            dir.path("state").to_str().unwrap(),
        ],
        &[("SONOGRAPH_DISABLE_DEVICES", "cpu")],
    );
    let start = Instant::now();
    let reason = loop {
        let (code, body) = server.call("GET", "/ready", None);
        assert_eq!(code, 503, "{body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["status"], "not ready");
        let reason = body["reason"].as_str().unwrap().to_string();
        // "probing the devices" until the probe has run, then why it failed.
        if reason != "probing the devices" {
            break reason;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "probe never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        reason.contains("SONOGRAPH_DISABLE_DEVICES") && reason.contains("fallback"),
        "{reason}"
    );
    assert_eq!(server.call("GET", "/health", None).0, 200);
    let m = scrape(&server.call("GET", "/metrics", None).1);
    assert_eq!(value_of(&m, "sonograph_ready", &[]), Some(0.0));
    let id = server.submit(&json!({"source": src, "out": dir.path("out"), "device": "cpu"}));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        server.job(id)["state"],
        "queued",
        "jobs wait for the devices"
    );
    assert_eq!(server.call("GET", "/ready", None).0, 503);
}

/// `GET /api/v1/telemetry?since=SECONDS` gives the samples of the last SECONDS only, the
/// newest of the history; without it, the whole history. Each carries the process's CPU and
/// RSS.
#[test]
fn telemetry_since_gives_the_last_seconds_of_samples() {
    let dir = Scratch::new("since");
    let server = Server::start(&[
        "--state-dir",
        dir.path("state").to_str().unwrap(),
        "--telemetry-interval",
        "0.1",
    ]);
    let samples = |path: &str| -> Vec<Value> {
        let t = server.get_json(path);
        assert_eq!(t["interval_s"], 0.1);
        t["samples"].as_array().unwrap().clone()
    };
    let span =
        |s: &[Value]| s.last().unwrap()["time"].as_f64().unwrap() - s[0]["time"].as_f64().unwrap();
    let start = Instant::now();
    while samples("/api/v1/telemetry").len() < 20 {
        assert!(start.elapsed() < Duration::from_secs(30), "too few samples");
        std::thread::sleep(Duration::from_millis(100));
    }
    let all = samples("/api/v1/telemetry");
    assert!(span(&all) > 1.0, "the history covers more than the window");
    let recent = samples("/api/v1/telemetry?since=0.5");
    assert!(
        !recent.is_empty() && recent.len() < all.len(),
        "{}",
        recent.len()
    );
    assert!(span(&recent) <= 0.5, "{}", span(&recent));
    // The newest samples, in order: sequence numbers go up by one.
    let seqs: Vec<u64> = recent.iter().map(|s| s["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert!(seqs[0] > all[0]["seq"].as_u64().unwrap());
    let last = recent.last().unwrap();
    assert!(last["process"]["rss_bytes"].as_u64().unwrap() > 1 << 20);
    assert!(last["process"]["cpu_seconds"].as_f64().unwrap() > 0.0);
}

/// The Whisper preset as JSON with some fields changed.
fn whisper_with(changes: &[(&str, Value)]) -> Value {
    let mut spec =
        serde_json::to_value(sonograph_dsp::FeatureSpec::preset("whisper").unwrap()).unwrap();
    for (k, v) in changes {
        spec[*k] = v.clone();
    }
    spec
}

#[test]
fn hostile_requests_get_clear_4xx_answers() {
    let dir = Scratch::new("hostile");
    let root = dir.path("root");
    std::fs::create_dir_all(&root).unwrap();
    let outside = dir.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let src = manifest(&root, 3, 0);
    let secret = manifest(&outside, 3, 0);
    std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
    let server = Server::start(&[
        "--data-root",
        root.to_str().unwrap(),
        "--state-dir",
        dir.path("state").to_str().unwrap(),
    ]);
    let post = |body: &str| server.call("POST", "/api/v1/jobs", Some(body));
    let expect = |(code, body): (u16, String), want: u16, says: &str| {
        assert_eq!(code, want, "{body}");
        let reason = serde_json::from_str::<Value>(&body).unwrap()["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(reason.contains(says), "{reason:?} should say {says:?}");
    };
    let out = root.join("out");
    let (s, o) = (src.to_str().unwrap(), out.to_str().unwrap());
    expect(post("{\"source\": "), 400, "EOF");
    expect(post("[1, 2]"), 400, "invalid job");
    expect(
        post(&json!({"source": s, "out": o, "bogus": 1}).to_string()),
        400,
        "unknown field `bogus`",
    );
    expect(
        post(&json!({"source": s, "out": o, "preset": "nope"}).to_string()),
        400,
        "nope",
    );
    // Every size a request sets is bounded, with the option named: none is tried (a billion
    // workers once took this server past 12 GB in 23 s and was persisted to run again).
    let sizes = [
        (json!({"workers": 0}), "workers 0 is outside 1..=1024"),
        (
            json!({"workers": 1_000_000_000}),
            "workers 1000000000 is outside",
        ),
        (
            json!({"prefetch": 1_000_000}),
            "prefetch 1000000 is outside",
        ),
        (
            json!({"batch-items": 1_000_000}),
            "batch-items 1000000 is outside",
        ),
        (
            json!({"part-mb": 1_000_000_000}),
            "part-mb 1000000000 is outside",
        ),
        (
            json!({"max-seconds": 1e12}),
            "max-seconds 1000000000000 is outside",
        ),
        (
            json!({"chunk-seconds": 1e-9}),
            "chunk-seconds 0.000000001 is outside",
        ),
        (json!({"max-duration": 1e15}), "max-duration"),
        (json!({"max-channels": 1_000_000}), "max-channels"),
        (
            json!({"max-sample-rate": 4_000_000_000u32}),
            "max-sample-rate",
        ),
        (
            json!({"shard-count": 1_000_000_000}),
            "shard-count 1000000000 is outside",
        ),
        (json!({"n-mels": 1_000_000}), "n_mels"),
        (
            json!({"spec": whisper_with(&[("n_fft", json!(1 << 30))])}),
            "n_fft",
        ),
        // A spec whose every row is huge: 32,769 power bins every sample.
        (
            json!({"spec": whisper_with(&[
                ("n_fft", json!(65536)),
                ("hop_length", json!(1)),
                ("output", json!("power")),
                ("log", json!("none")),
                ("dynamic_range", Value::Null),
                ("affine", Value::Null),
            ])}),
            "in flight",
        ),
        // Each within its bounds, and together over the machine's memory.
        (
            json!({"workers": 1024, "prefetch": 64, "batch-items": 1024, "max-seconds": 3600}),
            "in flight",
        ),
    ];
    for (extra, says) in sizes {
        let mut job = json!({"source": s, "out": o, "device": "cpu"});
        job.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let answer = post(&job.to_string());
        assert_eq!(answer.0, 400, "{job}: {}", answer.1);
        expect(answer, 400, says);
    }
    assert!(
        server.rss_mb() < 500.0,
        "the refused sizes allocated: {} MiB",
        server.rss_mb()
    );
    expect(
        post(&json!({"source": s, "out": o, "dtype": "f8"}).to_string()),
        400,
        "unknown variant",
    );
    // A spec is carried by the request: a path would be a file of the server's to read.
    expect(
        post(&json!({"source": s, "out": o, "spec": "/etc/passwd"}).to_string()),
        400,
        "takes a spec inline",
    );
    let big = format!("{{\"source\": \"{}\"}}", "a".repeat(1 << 20));
    let (code, _) = post(&big);
    assert_eq!(code, 413);
    // Paths outside every data root, directly, through a symlink, or with `..`.
    let secret_s = secret.to_str().unwrap();
    expect(
        post(&json!({"source": secret_s, "out": o}).to_string()),
        403,
        "--data-root",
    );
    let via_link = root.join("escape").join(secret.file_name().unwrap());
    expect(
        post(&json!({"source": via_link, "out": o}).to_string()),
        403,
        "does not resolve under",
    );
    expect(
        post(&json!({"source": s, "out": root.join("../outside/new")}).to_string()),
        403,
        "out",
    );
    expect(
        post(&json!({"source": s, "out": root.join("new/../../x")}).to_string()),
        403,
        "out",
    );
    expect(
        post(&json!({"source": root.join("missing.csv"), "out": o}).to_string()),
        400,
        "does not exist",
    );
    // Object storage is outside every data root (a URL was once taken for a relative path and
    // written to a folder named `s3:` beneath the root); so are a work folder and the
    // augmentation's corpora.
    for body in [
        json!({"source": "s3://corpus/audio", "out": o}),
        json!({"source": s, "out": "s3://features/run"}),
        json!({"kind": "rf-features", "source": s, "out": "gs://features/rf"}),
    ] {
        expect(
            post(&body.to_string()),
            403,
            "object storage is outside the data roots",
        );
    }
    expect(
        post(&json!({"source": s, "out": o, "work-dir": root.join("w")}).to_string()),
        403,
        "work-dir: not in the service",
    );
    expect(
        post(&json!({"source": s, "out": o, "augment": {"volume_db": [1.0, 2.0]}}).to_string()),
        403,
        "augment: not in the service",
    );
    assert!(
        !root.join("s3:").exists(),
        "a URL became a folder beneath the root"
    );
    let (code, _) = server.call("GET", "/api/v1/jobs/abc", None);
    assert_eq!(code, 400);
    expect(
        server.call("GET", "/api/v1/jobs/999", None),
        404,
        "no job 999",
    );
    expect(
        server.call("DELETE", "/api/v1/jobs/999", None),
        404,
        "no job 999",
    );
    expect(
        server.call("GET", "/api/v1/telemetry?since=-1", None),
        400,
        "since",
    );
    let (code, _) = server.call("GET", "/api/v1/telemetry?since=abc", None);
    assert_eq!(code, 400);
    let (code, _) = server.call("GET", "/api/v1/telemetry?until=3", None);
    assert_eq!(code, 400);
    // A relative path is taken from the first data root.
    let (code, body) = post(
        &json!({"source": src.file_name().unwrap().to_str(), "out": "out-rel", "device": "cpu"})
            .to_string(),
    );
    assert_eq!(code, 201, "{body}");
    // Still standing.
    assert_eq!(server.call("GET", "/health", None).0, 200);
}

#[test]
fn a_token_guards_everything_but_health_and_ready() {
    let dir = Scratch::new("token");
    // A public address without a token is refused at start.
    let out = serving::command()
        .args([
            "serve",
            "--addr",
            "0.0.0.0:0",
            "--state-dir",
            dir.path("s").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("--token"),
        "{err}"
    );

    let token = "correct-horse-battery-staple";
    let server = Server::start(&[
        "--token",
        token,
        "--state-dir",
        dir.path("state").to_str().unwrap(),
    ]);
    let url = |p: &str| server.url(p);
    assert_eq!(request("GET", &url("/health"), None, None).0, 200);
    server.wait_ready();
    assert_eq!(request("GET", &url("/ready"), None, None).0, 200);
    for path in [
        "/metrics",
        "/api/v1/status",
        "/api/v1/jobs",
        "/api/v1/alerts",
        "/",
        "/api/v1/events",
    ] {
        let (code, body) = request("GET", &url(path), None, None);
        assert_eq!(code, 401, "{path}: {body}");
        let (code, _) = request(
            "GET",
            &url(path),
            None,
            Some("Bearer wrong-token-of-some-length"),
        );
        assert_eq!(code, 401, "{path}");
    }
    assert_eq!(
        request("POST", &url("/api/v1/jobs"), Some("{}"), None).0,
        401
    );
    assert_eq!(
        request(
            "GET",
            &url("/api/v1/status"),
            None,
            Some(&format!("Bearer {token}"))
        )
        .0,
        200
    );
    // The dashboard opened with ?token= keeps it in a cookie for its own calls.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let r = agent.get(&url(&format!("/?token={token}"))).call().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let cookie = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(cookie.starts_with(&format!("sonograph_token={token}")) && cookie.contains("HttpOnly"));
    let pair = cookie.split(';').next().unwrap();
    let r = agent
        .get(&url("/api/v1/alerts"))
        .header("cookie", pair)
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // The token from the environment instead of the command line.
    let server = Server::start_with(
        &["--state-dir", dir.path("state-env").to_str().unwrap()],
        &[("SONOGRAPH_TOKEN", token)],
    );
    let status = server.url("/api/v1/status");
    assert_eq!(request("GET", &status, None, None).0, 401);
    let bearer = format!("Bearer {token}");
    assert_eq!(request("GET", &status, None, Some(&bearer)).0, 200);

    // A token with characters a query and a cookie must encode works through both, decoded
    // before it is compared; its raw spelling in a query does not.
    let odd = "s3cret&token=x; y+z/%41=";
    let server = Server::start(&[
        "--token",
        odd,
        "--state-dir",
        dir.path("state-odd").to_str().unwrap(),
    ]);
    let encoded: String = odd
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let r = agent
        .get(&server.url(&format!("/api/v1/status?token={encoded}")))
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let pair = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let r = agent
        .get(&server.url("/api/v1/alerts"))
        .header("cookie", &pair)
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "the cookie it set: {pair}");
    let raw = server.url("/api/v1/status?token=s3cret&token=x;%20y+z/%41=");
    assert_eq!(agent.get(&raw).call().unwrap().status().as_u16(), 401);
}

/// A server without a token is on loopback; it answers requests addressed to a loopback
/// name only, so a web page whose name an attacker made resolve to 127.0.0.1 (DNS rebinding)
/// cannot drive it from the user's browser.
#[test]
fn a_server_without_a_token_answers_loopback_names_only() {
    use std::io::{Read, Write};
    let dir = Scratch::new("host");
    let server = Server::in_dir(&dir, &[]);
    let addr = server.base.trim_start_matches("http://").to_string();
    let status_for = |host: &str| -> String {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            stream,
            "GET /api/v1/status HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    };
    let port = addr.rsplit(':').next().unwrap();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "[::1]".to_string(),
    ] {
        let answer = status_for(&host);
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer}");
    }
    for host in [
        format!("attacker.example:{port}"),
        "localhost.attacker.example".to_string(),
    ] {
        let answer = status_for(&host);
        assert!(answer.starts_with("HTTP/1.1 421"), "{host}: {answer}");
        assert!(answer.contains("not a loopback name"), "{answer}");
    }
}

/// Reads server-sent events from `path` until one named `name` comes (20 s at most);
/// returns its data.
fn next_event(server: &Server, name: &str) -> Value {
    let addr = server.base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET /api/v1/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut current = String::new();
    let start = Instant::now();
    let mut line = String::new();
    while start.elapsed() < Duration::from_secs(20) {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let l = line.trim_end();
        if let Some(e) = l.strip_prefix("event: ") {
            current = e.to_string();
        } else if let Some(d) = l.strip_prefix("data: ") {
            if current == name {
                return serde_json::from_str(d).unwrap();
            }
        }
    }
    panic!("no {name} event");
}

#[test]
fn jobs_queue_run_one_at_a_time_cancel_and_resume() {
    let dir = Scratch::new("jobs");
    let src = manifest(&dir.0, 200_000, 0);
    let server = Server::in_dir(&dir, &["--telemetry-interval", "0.2"]);
    let job = json!({"source": src, "out": dir.path("out"), "device": "cpu", "workers": 1, "preset": "whisper"});
    let first = server.submit(&job);
    let second = server.submit(&json!({"source": src, "out": dir.path("out2"), "device": "cpu"}));
    let running = server.wait_progress(first, 0);
    assert_eq!(running["progress"]["items_total"], 200_000);
    assert_eq!(running["attempts"], 1);
    // One at a time: the second waits.
    assert_eq!(server.job(second)["state"], "queued");
    // The job's device is busy in the status.
    let status = server.get_json("/api/v1/status");
    let cpu = status["devices"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (cpu["id"].as_str(), cpu["state"].as_str()),
        (Some("cpu"), Some("busy"))
    );
    // The event stream carries samples of the running job.
    let sample = next_event(&server, "sample");
    assert_eq!(sample["job"]["id"], first.to_string(), "{sample:#}");
    // Metrics while it runs.
    let m = scrape(&server.call("GET", "/metrics", None).1);
    assert_eq!(value_of(&m, "sonograph_job_running", &[]), Some(1.0));
    assert!(value_of(&m, "sonograph_queue_capacity", &[("stage", "prefetch")]).unwrap() > 0.0);
    assert!(value_of(&m, "sonograph_items_total", &[("status", "ok")]).unwrap() > 0.0);
    assert!(value_of(&m, "sonograph_audio_seconds_total", &[]).unwrap() > 0.0);
    assert!(value_of(&m, "sonograph_batch_size", &[("device", "cpu")]).is_some());
    assert_eq!(
        value_of(&m, "sonograph_jobs", &[("state", "queued")]),
        Some(1.0)
    );

    // Cancel the queued one (at once), then the running one (at a batch boundary).
    let (code, body) = server.call("DELETE", &format!("/api/v1/jobs/{second}"), None);
    assert_eq!(code, 200, "{body}");
    assert_eq!(server.job(second)["state"], "canceled");
    let (code, _) = server.call("DELETE", &format!("/api/v1/jobs/{second}"), None);
    assert_eq!(code, 409);
    let (code, body) = server.call("DELETE", &format!("/api/v1/jobs/{first}"), None);
    assert_eq!(code, 202, "{body}");
    let canceled = server.wait_job(first, "canceled", |j| j["state"] == "canceled");
    let done_before = canceled["report"]["items_ok"].as_u64().unwrap();
    assert!(done_before > 0, "{canceled:#}");
    assert!(canceled["error"].as_str().unwrap().contains("resumes"));

    // The same job again resumes where the first stopped.
    let again = server.submit(&job);
    let resumed = server.wait_resumed(again);
    assert!(resumed["progress"]["items_resumed"].as_u64().unwrap() >= done_before);
    server.cancel(again);
    let status = server.get_json("/api/v1/status");
    assert_eq!(
        status["devices"].as_array().unwrap().last().unwrap()["state"],
        "available"
    );
    let list = server.get_json("/api/v1/jobs");
    let ids: Vec<i64> = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [again, second, first]);
}

/// Every row of a job's output, by id and offset (µs).
fn rows_of(out: &std::path::Path) -> std::collections::BTreeMap<(String, i64), FeatureRow> {
    let mut rows = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "parquet") {
            for r in read_part(&path).unwrap().0 {
                rows.insert((r.id.clone(), (r.offset_s * 1e6).round() as i64), r);
            }
        }
    }
    rows
}

/// Paths that leave the data roots from inside them: a folder's symlink to a file outside, a
/// manifest naming a file outside, and a symlink planted in the output folder. Each is refused
/// at the moment it is opened: the item fails saying why, and nothing of the file outside is
/// read or written; the rest of the job runs.
#[test]
fn files_outside_the_data_roots_fail_as_items_when_opened() {
    let dir = Scratch::new("escape");
    let (root, outside) = (dir.path("root"), dir.path("outside"));
    let folder = root.join("folder");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let clip = repo_file("tests/data/speech_16000_mono_s16.wav");
    std::fs::copy(&clip, folder.join("inside.wav")).unwrap();
    std::fs::copy(&clip, outside.join("secret.wav")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.wav"), folder.join("zz_escape.wav")).unwrap();
    std::os::unix::fs::symlink(folder.join("inside.wav"), folder.join("alias.wav")).unwrap();
    let manifest = root.join("list.csv");
    std::fs::write(
        &manifest,
        format!(
            "id,path\ninside,{}\nsecret,{}\nclimb,{}/../outside/secret.wav\n",
            folder.join("inside.wav").display(),
            outside.join("secret.wav").display(),
            root.display()
        ),
    )
    .unwrap();
    let server = Server::start(&[
        "--data-root",
        root.to_str().unwrap(),
        "--state-dir",
        dir.path("state").to_str().unwrap(),
    ]);
    let run = |source: &std::path::Path, out: &str| -> Value {
        let id = server.submit(&json!({"source": source, "out": root.join(out), "device": "cpu"}));
        server.wait_job(id, "finished", |j| j["finished"].is_f64())
    };
    let failed_ids = |job: &Value| -> Vec<String> {
        let mut ids: Vec<String> = job["report"]["failures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let reason = f["reason"].as_str().unwrap();
                assert!(reason.contains("outside the data roots"), "{f}");
                f["id"].as_str().unwrap().to_string()
            })
            .collect();
        ids.sort();
        ids
    };
    let job = run(&folder, "out-folder");
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(failed_ids(&job), ["zz_escape.wav"], "{job:#}");
    let rows = rows_of(&root.join("out-folder"));
    let ids: Vec<&str> = rows.keys().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["alias.wav", "inside.wav"],
        "a symlink within the root is followed"
    );

    let job = run(&manifest, "out-manifest");
    assert_eq!(failed_ids(&job), ["climb", "secret"], "{job:#}");
    let rows = rows_of(&root.join("out-manifest"));
    assert_eq!(
        rows.keys().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        ["inside"]
    );

    // A symlink where the job writes its ledger would carry the write out of the root.
    let planted = root.join("out-planted/__sonograph");
    std::fs::create_dir_all(&planted).unwrap();
    std::os::unix::fs::symlink(outside.join("victim"), planted.join("ledger.sqlite")).unwrap();
    let job = run(&folder, "out-planted");
    assert_eq!(job["state"], "failed", "{job:#}");
    assert!(
        job["error"].as_str().unwrap().contains("a symlink"),
        "{job:#}"
    );
    assert!(
        !outside.join("victim").exists(),
        "nothing was written outside"
    );
}

/// A job with a model over speech segments (extract's `--model` and `--vad` options by their
/// flag names) gives the rows `extract` gives with the same flags, model outputs included;
/// the model is held to the data roots, and options that would be ignored are refused.
#[test]
fn jobs_run_a_model_over_speech_segments_as_extract_does() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let dir = Scratch::new("jobs-model");
    let corpus = dir.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for name in ["dialogue_16000", "silence_16000"] {
        let from = repo_file(&format!("crates/model/tests/data/vad/{name}.flac"));
        std::fs::copy(from, corpus.join(format!("{name}.flac"))).unwrap();
    }
    let model = dir.path("ctc.onnx");
    std::fs::copy(
        repo_file("crates/model/tests/data/asr/ctc/model.onnx"),
        &model,
    )
    .unwrap();
    let server = Server::in_dir(&dir, &[]);
    let (src, out, m) = (
        corpus.to_str().unwrap(),
        dir.path("out"),
        model.to_str().unwrap(),
    );
    let refused = |extra: Value, want: u16, says: &str| {
        let mut job = json!({"source": src, "out": out, "preset": "nemo"});
        job.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (code, body) = server.call("POST", "/api/v1/jobs", Some(&job.to_string()));
        assert_eq!(code, want, "{job}: {body}");
        assert!(body.contains(says), "{job}: {body} should say {says:?}");
    };
    refused(
        json!({"model": "/etc/hostname"}),
        403,
        "model /etc/hostname does not resolve",
    );
    refused(json!({"model": src}), 400, "is not a file");
    refused(
        json!({"model": m, "model-batch": 0}),
        400,
        "model-batch 0 is outside 1..=4096",
    );
    refused(
        json!({"model": m, "model-device": "tpu"}),
        400,
        "model-device",
    );
    refused(json!({"model-batch": 4}), 400, "need a model");
    // Sizes that would allocate without bound are refused, not tried.
    refused(
        json!({"model": m, "model-batch": 1_000_000_000_000u64}),
        400,
        "model-batch 1000000000000 is outside 1..=4096",
    );
    refused(
        json!({"prefetch": 1000, "batch-items": 1000}),
        400,
        "at most 65536",
    );
    refused(json!({"threshold": 0.4}), 400, "need vad");
    refused(
        json!({"vad": true, "max-seconds": 20, "chunk-seconds": 10, "max-speech-s": 30}),
        400,
        "over max-seconds 20",
    );

    let flags = ["--model", m, "--vad", "--min-silence-ms", "150"];
    let job = json!({"source": src, "out": out, "preset": "nemo", "device": "cpu",
                     "model": m, "vad": true, "min-silence-ms": 150});
    let id = server.submit(&job);
    let done = server.wait_job(id, "finished", |j| {
        j["state"] == "succeeded" || j["state"] == "failed"
    });
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(
        done["report"]["model"]["rows"], done["report"]["rows"],
        "{done:#}"
    );
    let by_cli = dir.path("by-cli");
    let o = serving::command()
        .args([
            "extract",
            src,
            "--out",
            by_cli.to_str().unwrap(),
            "--preset",
            "nemo",
        ])
        .args(["--device", "cpu"])
        .args(flags)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (api, cli) = (rows_of(&out), rows_of(&by_cli));
    assert!(api.len() > 1, "speech segments: {}", api.len());
    assert!(
        api.keys().all(|(id, _)| id == "dialogue_16000.flac"),
        "silence has no row"
    );
    assert!(api.values().all(|r| r.model.is_some()));
    assert_eq!(api, cli);
}

/// A webhook receiver: answers the first POST with 500 (the sender must retry), the others
/// with 200; keeps the bodies it accepted.
/// Where the receiver listens, the bodies it accepted and how many POSTs it got.
struct Receiver {
    url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
    attempts: Arc<Mutex<usize>>,
}

fn webhook_receiver() -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let attempts = Arc::new(Mutex::new(0usize));
    let (b, a) = (bodies.clone(), attempts.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let l = line.trim_end().to_ascii_lowercase();
                if let Some(v) = l.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                if l.is_empty() {
                    break;
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let n = {
                let mut a = a.lock().unwrap();
                *a += 1;
                *a
            };
            let status = if n == 1 {
                "500 Internal Server Error"
            } else {
                "200 OK"
            };
            if n > 1 {
                b.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
            }
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    Receiver {
        url,
        bodies,
        attempts,
    }
}

#[test]
fn failed_items_alert_once_to_the_api_and_the_webhook() {
    let dir = Scratch::new("alerts");
    let src = manifest(&dir.0, 40, 3);
    let Receiver {
        url: hook,
        bodies,
        attempts,
    } = webhook_receiver();
    let server = Server::start(&[
        "--data-root",
        dir.str(),
        "--state-dir",
        dir.path("state").to_str().unwrap(),
        "--telemetry-interval",
        "0.1",
        "--alert-webhook",
        &hook,
    ]);
    let id = server.submit(&json!({"source": src, "out": dir.path("out"), "device": "cpu", "workers": 1, "batch-items": 2}));
    let done = server.wait_job(id, "succeeded", |j| j["state"] == "succeeded");
    assert_eq!(done["progress"]["items_failed"], 3, "{done:#}");
    assert_eq!(done["progress"]["items_ok"], 40);
    let start = Instant::now();
    let alerts = loop {
        let a = server.get_json("/api/v1/alerts");
        let closed = a["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["rule"] == "items_failed" && !x["ended"].is_null());
        if closed || start.elapsed() > Duration::from_secs(20) {
            break a;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let failed: Vec<&Value> = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["rule"] == "items_failed")
        .collect();
    assert_eq!(failed.len(), 1, "one episode: {alerts:#}");
    let a = failed[0];
    assert_eq!(a["level"], "WARNING");
    assert_eq!(a["subject"], format!("job:{id}"));
    assert!(a["message"].as_str().unwrap().contains("broken000"), "{a}");
    assert!(a["ended"].as_f64().unwrap() >= a["started"].as_f64().unwrap());
    // The webhook got it fired and resolved, the first attempt retried.
    let start = Instant::now();
    while bodies.lock().unwrap().len() < 2 && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = bodies.lock().unwrap().clone();
    let mine: Vec<&Value> = got
        .iter()
        .filter(|b| b["alert"]["rule"] == "items_failed")
        .collect();
    assert_eq!(mine.len(), 2, "{got:#?}");
    assert_eq!(mine[0]["event"], "fired");
    assert_eq!(mine[1]["event"], "resolved");
    assert_eq!(mine[0]["alert"]["id"], a["id"]);
    assert!(*attempts.lock().unwrap() >= 3, "the 500 was retried");
    // And the log: one line when it fired, one when it was resolved.
    let log = server.log();
    let lines = |what: &str| {
        log.lines()
            .filter(|l| l.contains(what) && l.contains("rule=\"items_failed\""))
            .count()
    };
    assert_eq!(
        (
            lines(" WARN "),
            lines(" alert: "),
            lines(" alert resolved: ")
        ),
        (1, 1, 1),
        "{log}"
    );
    let m = scrape(&server.call("GET", "/metrics", None).1);
    assert_eq!(
        value_of(&m, "sonograph_items_total", &[("status", "failed")]),
        Some(3.0)
    );
    assert_eq!(
        value_of(&m, "sonograph_items_total", &[("status", "ok")]),
        Some(40.0)
    );
    assert_eq!(
        value_of(&m, "sonograph_jobs", &[("state", "succeeded")]),
        Some(1.0)
    );
    assert_eq!(
        value_of(&m, "sonograph_alerts_active", &[("level", "WARNING")]),
        Some(0.0)
    );
}

/// kill -9 with a job running: the restarted server lists the job and resumes it.
#[test]
fn a_server_killed_with_minus_9_resumes_its_running_job() {
    let dir = Scratch::new("kill9");
    let src = manifest(&dir.0, 200_000, 0);
    let args = [
        "--data-root",
        dir.str(),
        "--state-dir",
        &dir.path("state").display().to_string(),
    ]
    .map(|s| s.to_string());
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let mut server = Server::start(&args);
    // Parts of 1 MiB (16 items): some are committed by the time of the kill.
    let id = server.submit(&json!({"source": src, "out": dir.path("out"), "device": "cpu", "workers": 1, "part-mb": 1}));
    let queued = server.submit(&json!({"source": src, "out": dir.path("out-b"), "device": "cpu"}));
    server.wait_progress(id, 50);
    server.signal("-KILL");
    let status = server.wait_exit(Duration::from_secs(5));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "killed mid-job");
    drop(server);

    let server = Server::start(&args);
    let resumed = server.wait_resumed(id);
    assert_eq!(resumed["attempts"], 2);
    assert_eq!(server.job(queued)["state"], "queued", "still behind it");
    server.cancel(id);
}

/// SIGTERM: the server takes no new job, the running job stops at a batch boundary, the
/// server exits 0 within 10 s, and the job resumes at the next start.
#[test]
fn sigterm_stops_the_job_resumably_and_exits_0_within_10_s() {
    let dir = Scratch::new("term");
    let src = manifest(&dir.0, 200_000, 0);
    let state = dir.path("state").display().to_string();
    let args = ["--data-root", dir.str(), "--state-dir", &state];
    let mut server = Server::start(&args);
    let job = json!({"source": src, "out": dir.path("out"), "device": "cpu", "workers": 1});
    let id = server.submit(&job);
    server.wait_progress(id, 50);
    let t = Instant::now();
    server.signal("-TERM");
    // Once the server has begun to shut down, a new job is refused: 503 while the listener
    // still answers, or no connection at all once it has closed (what usually happens here:
    // the listener closes right after the line waited for); never 201, and none recorded.
    while !server.log().contains("stops at its next batch boundary") {
        assert!(t.elapsed() < Duration::from_secs(10), "{}", server.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let late = agent
        .post(&server.url("/api/v1/jobs"))
        .content_type("application/json")
        .send(&job.to_string());
    if let Ok(answer) = late {
        assert_eq!(
            answer.status().as_u16(),
            503,
            "a job submitted after SIGTERM"
        );
    }
    let status = server.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{}", server.log());
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(
        server
            .log()
            .contains(&format!("job {id} stops at its next batch boundary")),
        "{}",
        server.log()
    );
    drop(server);
    // The output is resumable: the ledger has what was done, the record says so, and the
    // next start picks the job up again.
    let server = Server::start(&args);
    let resumed = server.wait_resumed(id);
    assert_eq!(resumed["attempts"], 2);
    let ids: Vec<i64> = server.get_json("/api/v1/jobs")["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [id], "no job was taken after SIGTERM");
    server.cancel(id);
}

/// The metrics of a job run with `--metrics-addr` once it has items done and `also` holds of
/// them (30 s at most), after /health answered; the job is still running then.
fn metrics_once(
    job: &Server,
    also: impl Fn(&prometheus_parse::Scrape) -> bool,
) -> prometheus_parse::Scrape {
    assert_eq!(job.call("GET", "/health", None).0, 200);
    let start = Instant::now();
    let m = loop {
        let m = scrape(&job.call("GET", "/metrics", None).1);
        if value_of(&m, "sonograph_items_total", &[("status", "ok")]).unwrap_or(0.0) > 0.0
            && also(&m)
        {
            break m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no progress in /metrics (or not what the test waits for)"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(value_of(&m, "sonograph_job_running", &[]), Some(1.0));
    m
}

/// A job command run with `--metrics-addr` (telemetry sampled every 0.1 s): its metrics once
/// the sample says it runs, it has items done and `also` holds (see [`metrics_once`]); the job
/// is killed then.
fn metrics_of_running_job(
    mut cmd: std::process::Command,
    also: impl Fn(&prometheus_parse::Scrape) -> bool,
) -> prometheus_parse::Scrape {
    cmd.args([
        "--metrics-addr",
        "127.0.0.1:0",
        "--telemetry-interval",
        "0.1",
    ]);
    let mut job = Server::spawn(cmd, None, " on http://");
    // `job_running` and the job's items come from the telemetry's sample, the counts live.
    let m = metrics_once(&job, |m| {
        value_of(m, "sonograph_job_running", &[]) == Some(1.0) && also(m)
    });
    job.signal("-KILL");
    job.wait_exit(Duration::from_secs(5));
    m
}

/// `extract --metrics-addr` serves /metrics, /health and the dashboard while it runs.
#[test]
fn extract_serves_metrics_while_it_runs() {
    let dir = Scratch::new("sidecar");
    let src = manifest(&dir.0, 200_000, 0);
    let mut cmd = serving::command();
    cmd.args([
        "extract",
        src.to_str().unwrap(),
        "--out",
        dir.path("out").to_str().unwrap(),
    ])
    .args([
        "--device",
        "cpu",
        "--workers",
        "1",
        "--metrics-addr",
        "127.0.0.1:0",
    ])
    .args(["--telemetry-interval", "0.1"]);
    let mut job = Server::spawn(cmd, None, " on http://");
    // The item counters are read live and the queues from the telemetry's last sample (every
    // 0.1 s here): the first items can settle before a sample has seen the job's queues.
    metrics_once(&job, |m| {
        value_of(m, "sonograph_queue_depth", &[("stage", "prefetch")]).is_some()
    });
    let (code, page) = job.call("GET", "/", None);
    assert_eq!(code, 200);
    assert!(page.contains("chart-memory"));
    // No jobs API: it runs its own job only.
    assert_eq!(job.call("GET", "/api/v1/jobs", None).0, 404);
    job.signal("-KILL");
    job.wait_exit(Duration::from_secs(5));
}

/// `rf-features --metrics-addr` serves its own job's progress the same way: recordings done,
/// rows, the job running.
#[test]
fn rf_features_serves_metrics_while_it_runs() {
    let dir = Scratch::new("rf-sidecar");
    // One short recording, then enough hard links to it (each its own recording to the job)
    // that one worker is still busy when /metrics is read.
    let one = dir.path("one");
    let o = serving::command()
        .args([
            "synth-iq",
            "--count",
            "1",
            "--samples",
            "4096",
            "--seed",
            "3",
        ])
        .arg("--out")
        .arg(&one)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let corpus = dir.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for i in 0..20_000 {
        for ext in ["sigmf-meta", "sigmf-data"] {
            std::fs::hard_link(
                one.join(format!("sample-000000000.{ext}")),
                corpus.join(format!("r{i:05}.{ext}")),
            )
            .unwrap();
        }
    }
    let mut cmd = serving::command();
    cmd.args(["rf-features", corpus.to_str().unwrap(), "--out"])
        .arg(dir.path("out"))
        .args(["--workers", "1"]);
    let m = metrics_of_running_job(cmd, |_| true);
    let done = value_of(&m, "sonograph_items_total", &[("status", "ok")]).unwrap();
    assert!(done < 20_000.0, "the job ended before it was read: {done}");
}

/// `synth-iq --metrics-addr` serves its progress too: recordings written (items and rows),
/// seconds of signal, the shard's total, the job running.
#[test]
fn synth_iq_serves_metrics_while_it_runs() {
    let dir = Scratch::new("synth-sidecar");
    const COUNT: f64 = 1_000_000.0;
    let mut cmd = serving::command();
    cmd.args([
        "synth-iq",
        "--count",
        "1000000",
        "--samples",
        "4096",
        "--seed",
        "3",
    ])
    .args([
        "--format",
        "parquet",
        "--rows-per-part",
        "64",
        "--workers",
        "1",
    ])
    .arg("--out")
    .arg(dir.path("out"));
    let m = metrics_of_running_job(cmd, |m| {
        value_of(m, "sonograph_job_items", &[("state", "total")]) == Some(COUNT)
    });
    let done = value_of(&m, "sonograph_items_total", &[("status", "ok")]).unwrap();
    assert!(done < COUNT, "the job ended before it was read: {done}");
    // A recording's row, seconds and item are three counters, each added as it is written:
    // a scrape between two of them sees one recording on one side only.
    let rows = value_of(&m, "sonograph_rows_total", &[]).unwrap();
    assert!(
        (rows - done).abs() <= 1.0,
        "{rows} rows for {done} recordings"
    );
    let seconds = value_of(&m, "sonograph_audio_seconds_total", &[]).unwrap();
    // 4096 samples at the spec's default 200 kHz each.
    let each = 4096.0 / 200_000.0;
    assert!(
        (seconds - rows * each).abs() <= each * 1.000_001,
        "{seconds} s for {rows} rows"
    );
}

/// `transcribe --metrics-addr` serves its progress: items done, transcripts written with their
/// seconds once their part is committed, the shard's total, the job running.
#[test]
fn transcribe_serves_metrics_while_it_runs() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    const ITEMS: usize = 5000;
    let dir = Scratch::new("transcribe-sidecar");
    let corpus = dir.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // Copied once, then linked: a hard link cannot cross from the checkout to another mount.
    let clip = dir.path("clip.wav");
    std::fs::copy(repo.join("tests/data/speech_16000_mono_s16.wav"), &clip).unwrap();
    for i in 0..ITEMS {
        std::fs::hard_link(&clip, corpus.join(format!("c{i:05}.wav"))).unwrap();
    }
    let mut cmd = serving::command();
    cmd.arg("transcribe")
        .arg(&corpus)
        .arg("--model")
        .arg(repo.join("crates/model/tests/data/asr/ctc"))
        .arg("--out")
        .arg(dir.path("out"))
        .args(["--threads", "1", "--items-per-part", "4"]);
    let m = metrics_of_running_job(cmd, |m| {
        value_of(m, "sonograph_job_items", &[("state", "total")]) == Some(ITEMS as f64)
            && value_of(m, "sonograph_rows_total", &[]).unwrap_or(0.0) > 0.0
    });
    let done = value_of(&m, "sonograph_items_total", &[("status", "ok")]).unwrap();
    assert!(
        done < ITEMS as f64,
        "the job ended before it was read: {done}"
    );
    let seconds = value_of(&m, "sonograph_audio_seconds_total", &[]).unwrap();
    let rows = value_of(&m, "sonograph_rows_total", &[]).unwrap();
    // Each 2 s clip is transcribed whole: one row of (about) 2 s each.
    assert!(
        (seconds - 2.0 * rows).abs() < 0.01 * rows,
        "{seconds} s in {rows} rows"
    );
}

/// Faults injected into a real GPU (lavapipe in CI) through the gpu crate's failpoints raise
/// their alerts through the server: five OOMs in a row (`oom_burst`, WARNING) and a device
/// lost for good (`device_lost`, ERROR, its work moved to the CPU). Each fires once, on
/// `gpu:0`, and closes when the job ends; every item is still done.
/// Needs the failpoints build: `cargo test --features failpoints --test integration serve::gpu_faults`.
#[cfg(all(feature = "failpoints", feature = "gpu"))]
#[test]
fn gpu_faults_raise_oom_burst_and_device_lost_alerts() {
    if !common::has_gpu_adapter() {
        return;
    }
    let dir = Scratch::new("gpu-faults");
    let src = manifest(&dir.0, 40, 0);
    for (n, (failpoints, rule, level, says)) in [
        (
            "gpu::oom=5*return",
            "oom_burst",
            "WARNING",
            "5 out-of-memory errors",
        ),
        (
            "gpu::device_lost=return;gpu::recover_fails=return",
            "device_lost",
            "ERROR",
            "move to",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let state = dir.path(&format!("state{n}"));
        let server = Server::start_with(
            &[
                "--data-root",
                dir.str(),
                "--state-dir",
                state.to_str().unwrap(),
                "--telemetry-interval",
                "0.05",
            ],
            &[("FAILPOINTS", failpoints)],
        );
        let out = dir.path(&format!("out{n}"));
        let id =
            server.submit(&json!({"source": src, "out": out, "device": "gpu", "batch-items": 16}));
        let done = server.wait_job(id, "finished", |j| j["finished"].is_f64());
        assert_eq!(done["state"], "succeeded", "{done:#}");
        assert_eq!(done["progress"]["items_ok"], 40, "nothing lost: {done:#}");
        let start = Instant::now();
        let mine = loop {
            let alerts = server.get_json("/api/v1/alerts");
            let mine: Vec<Value> = alerts["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["rule"] == rule)
                .cloned()
                .collect();
            if mine.iter().any(|a| !a["ended"].is_null())
                || start.elapsed() > Duration::from_secs(20)
            {
                break mine;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(
            mine.len(),
            1,
            "{failpoints}: one episode: {mine:#?}\n{}",
            server.log()
        );
        let a = &mine[0];
        assert_eq!(
            (a["level"].as_str(), a["subject"].as_str()),
            (Some(level), Some("gpu:0"))
        );
        assert!(a["message"].as_str().unwrap().contains(says), "{a}");
        assert!(!a["ended"].is_null(), "closed at the job's end: {a}");
    }
}

/// A panic inside a job fails that job with its message, and the queue goes on: the next job
/// runs and the server keeps answering. Needs the failpoints build:
/// `cargo test --features failpoints --test integration serve::a_panicking_job`.
#[cfg(feature = "failpoints")]
#[test]
fn a_panicking_job_fails_alone_and_the_queue_goes_on() {
    let dir = Scratch::new("job-panic");
    let src = manifest(&dir.0, 4, 0);
    let server = Server::start_with(
        &[
            "--data-root",
            dir.str(),
            "--state-dir",
            dir.path("state").to_str().unwrap(),
        ],
        &[("FAILPOINTS", "server::job_panic=1*panic(boom)")],
    );
    let first = server.submit(&json!({"source": src, "out": dir.path("a"), "device": "cpu"}));
    let second = server.submit(&json!({"source": src, "out": dir.path("b"), "device": "cpu"}));
    let failed = server.wait_job(first, "finished", |j| j["finished"].is_f64());
    assert_eq!(failed["state"], "failed", "{failed:#}");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("internal error") && error.contains("boom"),
        "{error}"
    );
    let done = server.wait_job(second, "finished", |j| j["finished"].is_f64());
    assert_eq!(done["state"], "succeeded", "the queue went on: {done:#}");
    assert_eq!(done["progress"]["items_ok"], 4, "{done:#}");
    assert_eq!(server.call("GET", "/health", None).0, 200);
}

mod exposition {
    //! `/metrics` of a machine this one is not: an NVIDIA GPU through NVML, rendered from a
    //! sample and read back by the Prometheus parser; and the deploy files' metric names.
    use super::value_of;
    use sonograph_dsp::MemoryStats;
    use sonograph_pipeline::live::DeviceCounters;
    use sonograph_pipeline::telemetry::{
        DeviceReading, DeviceSample, JobSample, QueueSample, Sample, Totals,
    };
    use sonograph_server::metrics::{render, Scrape};
    use sonograph_server::JobState;

    /// A sample as an NVIDIA machine running a job would give it.
    fn nvidia_sample() -> Sample {
        Sample {
            seq: 3,
            time: 1.0,
            devices: vec![DeviceSample {
                reading: DeviceReading {
                    id: "gpu:0".into(),
                    name: "NVIDIA H100 80GB HBM3".into(),
                    state: "busy".into(),
                    uuid: Some("GPU-5f1c0e2a-0000-0000-0000-000000000000".into()),
                    nvml_index: Some(0),
                    utilization_percent: Some(87.0),
                    memory_used_bytes: Some(10 << 30),
                    memory_free_bytes: Some(70 << 30),
                    memory_total_bytes: Some(80 << 30),
                    temperature_c: Some(64.0),
                    power_w: Some(412.5),
                },
                budget_bytes: Some(8 << 30),
                pool: Some(MemoryStats {
                    allocated_bytes: 3 << 30,
                    reserved_bytes: 4 << 30,
                    budget_bytes: 8 << 30,
                    fragmentation: 0.25,
                    ..Default::default()
                }),
                executor: DeviceCounters {
                    batch_size: 32,
                    ..Default::default()
                },
                busy_ratio: Some(0.9),
                ..Default::default()
            }],
            job: Some(JobSample {
                id: "7".into(),
                items_total: 100,
                items_ok: 40,
                items_per_second: 12.5,
                queues: vec![QueueSample {
                    stage: "prefetch".into(),
                    depth: 5,
                    capacity: 64,
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The dcgm-exporter names carry its labels and units (MiB for the framebuffer), and a
    /// real Prometheus text parser reads the whole exposition.
    #[test]
    fn nvidia_devices_get_dcgm_names_and_labels() {
        let sample = nvidia_sample();
        let mut totals = Totals::default();
        totals.ooms.insert("gpu:0".into(), 3);
        totals.items_ok = 40;
        totals.batches.insert("gpu:0".into(), 9);
        totals.stage_busy_s.insert("compute".into(), 2.5);
        let text = render(&Scrape {
            sample: Some(&sample),
            totals: &totals,
            alerts: &[],
            jobs: &[(JobState::Running, 1)],
            job_running: Some(true),
            ready: true,
        })
        .unwrap();
        // Where the server has a queue, the job gauge is the queue's (the sample may be up to
        // a telemetry interval old): a job that just ended reads 0 at once.
        let ended = render(&Scrape {
            sample: Some(&sample),
            totals: &totals,
            alerts: &[],
            jobs: &[(JobState::Succeeded, 1)],
            job_running: Some(false),
            ready: true,
        })
        .unwrap();
        assert!(
            ended.lines().any(|l| l == "sonograph_job_running 0.0"),
            "{ended}"
        );
        let s = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        let dcgm = [
            ("gpu", "0"),
            ("UUID", "GPU-5f1c0e2a-0000-0000-0000-000000000000"),
            ("modelName", "NVIDIA H100 80GB HBM3"),
        ];
        assert_eq!(value_of(&s, "DCGM_FI_DEV_GPU_UTIL", &dcgm), Some(87.0));
        assert_eq!(value_of(&s, "DCGM_FI_DEV_FB_USED", &dcgm), Some(10240.0));
        assert_eq!(value_of(&s, "DCGM_FI_DEV_FB_FREE", &dcgm), Some(71680.0));
        assert_eq!(value_of(&s, "DCGM_FI_DEV_GPU_TEMP", &dcgm), Some(64.0));
        assert_eq!(value_of(&s, "DCGM_FI_DEV_POWER_USAGE", &dcgm), Some(412.5));
        let gpu = [("device", "gpu:0")];
        assert_eq!(
            value_of(
                &s,
                "sonograph_pool_bytes",
                &[("device", "gpu:0"), ("kind", "reserved")]
            ),
            Some((4u64 << 30) as f64)
        );
        assert_eq!(
            value_of(&s, "sonograph_pool_fragmentation_ratio", &gpu),
            Some(0.25)
        );
        assert_eq!(value_of(&s, "sonograph_oom_total", &gpu), Some(3.0));
        assert_eq!(value_of(&s, "sonograph_batch_size", &gpu), Some(32.0));
        assert_eq!(
            value_of(&s, "sonograph_queue_depth", &[("stage", "prefetch")]),
            Some(5.0)
        );
        assert_eq!(value_of(&s, "sonograph_items_per_second", &[]), Some(12.5));
        assert_eq!(
            value_of(&s, "sonograph_jobs", &[("state", "running")]),
            Some(1.0)
        );

        // Every metric the deploy files (Grafana, the Prometheus rules) use is exported.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
        let exported: std::collections::BTreeSet<String> =
            s.samples.iter().map(|x| x.metric.clone()).collect();
        for file in ["grafana-dashboard.json", "prometheus-alerts.yaml"] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            let mut used = 0;
            for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                let ours = word.starts_with("sonograph_") || word.starts_with("DCGM_FI_");
                // "sonograph_*" in prose names the family, not a metric.
                if ours && !word.ends_with('_') && word != "sonograph_token" {
                    assert!(
                        exported.contains(word),
                        "{file} uses {word}, which is not exported"
                    );
                    used += 1;
                }
            }
            assert!(used > 10, "{file}");
        }
    }
}

/// A synth-iq job through the jobs API: it writes the dataset the CLI writes for the same
/// options, beneath the data root; it resumes as the CLI does; a GPU, another kind that reads
/// files, or an output outside the root is refused before anything runs.
#[test]
fn a_synth_iq_job_writes_what_the_cli_writes() {
    let dir = Scratch::new("jobs-synth");
    let server = Server::in_dir(&dir, &["--device", "cpu"]);
    let options = json!({"kind": "synth-iq", "count": 6, "samples": 2048,
        "modulation": "bpsk,qpsk", "seed": 5, "workers": 2});
    let mut job = options.clone();
    job["out"] = json!(dir.path("api"));
    let id = server.submit(&job);
    let record = server.wait_job(id, "done", |j| {
        !matches!(j["state"].as_str(), Some("queued" | "running"))
    });
    assert_eq!(record["state"], "succeeded", "{record:#}");
    assert_eq!(record["report"]["written"], 6, "{record:#}");
    assert_eq!(record["progress"]["items_ok"], 6, "{record:#}");
    let cli = dir.path("cli");
    let o = crate::common::bin()
        .args([
            "synth-iq",
            "--count",
            "6",
            "--samples",
            "2048",
            "--modulation",
            "bpsk,qpsk",
        ])
        .args(["--seed", "5", "--workers", "2", "--out"])
        .arg(&cli)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", crate::common::stderr(&o));
    let names = |d: &std::path::Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("sample-"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&dir.path("api")).len(), 12);
    assert_eq!(names(&dir.path("api")), names(&cli));
    for name in names(&cli) {
        assert_eq!(
            std::fs::read(dir.path("api").join(&name)).unwrap(),
            std::fs::read(cli.join(&name)).unwrap(),
            "{name}"
        );
    }
    // The same job again finds every recording there.
    let again = server.submit(&job);
    let record = server.wait_job(again, "done", |j| {
        !matches!(j["state"].as_str(), Some("queued" | "running"))
    });
    assert_eq!(
        (
            &record["report"]["written"],
            &record["report"]["already_there"]
        ),
        (&json!(0), &json!(6)),
        "{record:#}"
    );
    let refused = |job: Value, want: u16, says: &str| {
        let (code, body) = server.call("POST", "/api/v1/jobs", Some(&job.to_string()));
        assert_eq!(code, want, "{job}: {body}");
        assert!(body.contains(says), "{job}: {body} should say {says:?}");
    };
    let mut outside = options.clone();
    outside["out"] = json!("/tmp/sonograph-synth-outside");
    refused(
        outside,
        403,
        "out /tmp/sonograph-synth-outside does not resolve",
    );
    let mut gpu = job.clone();
    gpu["device"] = json!("gpu");
    refused(gpu, 400, "runs synth-iq jobs on its CPU");
    // A recording the command line may make (2^31 samples, 16 GiB) but the server will not.
    let mut huge = job.clone();
    huge["samples"] = json!(1u64 << 31);
    refused(
        huge,
        400,
        "samples: a recording of 2147483648 samples holds 16.0 GiB",
    );
}

/// A job record that succeeded with `ok` items and one failed, `id`, whose reason names `file`
/// and says it is outside the data roots.
fn assert_one_outside_the_roots(record: &Value, ok: u64, id: &str, file: &str) {
    assert_eq!(record["state"], "succeeded", "{record:#}");
    let report = &record["report"];
    assert_eq!(
        (&report["items_ok"], &report["items_failed"]),
        (&json!(ok), &json!(1)),
        "{record:#}"
    );
    assert_eq!(report["failures"][0]["id"], id, "{record:#}");
    assert!(
        report["failures"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains(file) && r.contains("outside the data roots")),
        "{record:#}"
    );
}

/// An rf-features job through the jobs API: the rows the CLI writes for the same options, its
/// recordings read beneath the data root (a symlink out of it is one failed recording, which
/// the CLI, unconfined, reads); a GPU or a limit on recordings larger than the service holds
/// is refused before anything runs.
#[test]
fn an_rf_features_job_reads_beneath_the_root() {
    let dir = Scratch::new("jobs-rf");
    let iq = dir.path("iq");
    let outside = std::env::temp_dir().join(format!("sonograph-rf-outside-{}", std::process::id()));
    for (out, count) in [(&iq, "4"), (&outside, "1")] {
        let o = crate::common::bin()
            .args([
                "synth-iq",
                "--count",
                count,
                "--samples",
                "4096",
                "--seed",
                "3",
            ])
            .arg("--out")
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", crate::common::stderr(&o));
    }
    // A recording of the folder that is a symlink to one outside the data root.
    for ext in ["sigmf-meta", "sigmf-data"] {
        std::os::unix::fs::symlink(
            outside.join(format!("sample-000000000.{ext}")),
            iq.join(format!("sample-outside.{ext}")),
        )
        .unwrap();
    }
    let server = Server::in_dir(&dir, &["--device", "cpu"]);
    let options = json!({"kind": "rf-features", "source": iq, "psd": true, "nperseg": 256,
        "rows-per-part": 2, "workers": 2});
    let mut job = options.clone();
    job["out"] = json!(dir.path("api"));
    let id = server.submit(&job);
    let record = server.wait_job(id, "done", |j| {
        !matches!(j["state"].as_str(), Some("queued" | "running"))
    });
    assert_one_outside_the_roots(&record, 4, "sample-outside", "sample-outside.sigmf-meta");
    // The CLI reads the symlinked recording too; the four others are the same rows.
    let cli = dir.path("cli");
    let o = crate::common::bin()
        .arg("rf-features")
        .arg(&iq)
        .args([
            "--psd",
            "--nperseg",
            "256",
            "--rows-per-part",
            "2",
            "--workers",
            "2",
            "--out",
        ])
        .arg(&cli)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", crate::common::stderr(&o));
    // Each row of a folder's parts, every column of it, as text.
    let rows = |d: &std::path::Path| {
        use sonograph_io::table::{read_table, Column};
        let mut rows = Vec::new();
        for entry in std::fs::read_dir(d).unwrap() {
            let part = entry.unwrap().path();
            if part.extension().is_none_or(|e| e != "parquet") {
                continue;
            }
            let (columns, _) = read_table(&part).unwrap();
            for i in 0..columns[0].1.len() {
                let row: Vec<String> = columns
                    .iter()
                    .map(|(name, c)| match c {
                        Column::Utf8(v) => format!("{name}={:?}", v[i]),
                        Column::F64(v) => format!("{name}={:?}", v[i]),
                        Column::U64(v) => format!("{name}={:?}", v[i]),
                        Column::ListF32(v) => format!("{name}={:?}", v[i]),
                    })
                    .collect();
                rows.push(row.join(" "));
            }
        }
        rows.sort();
        rows
    };
    let (api_rows, cli_rows) = (rows(&dir.path("api")), rows(&cli));
    assert_eq!(api_rows.len(), 4);
    assert_eq!(cli_rows.len(), 5);
    let cli_inside: Vec<_> = cli_rows
        .into_iter()
        .filter(|r| !r.contains("sample-outside"))
        .collect();
    assert_eq!(api_rows, cli_inside);
    let refused = |job: Value, want: u16, says: &str| {
        let (code, body) = server.call("POST", "/api/v1/jobs", Some(&job.to_string()));
        assert_eq!(code, want, "{job}: {body}");
        assert!(body.contains(says), "{job}: {body} should say {says:?}");
    };
    let mut gpu = job.clone();
    gpu["device"] = json!("gpu");
    refused(gpu, 400, "runs rf-features jobs on its CPU");
    let mut huge = job.clone();
    huge["max-samples"] = json!(1u64 << 30);
    refused(
        huge.clone(),
        400,
        "max-samples: 1073741824 complex samples hold 8.0 GiB",
    );
    // The plan says so too, and shows the service's own default.
    let (code, body) = server.call("POST", "/api/v1/plan", Some(&huge.to_string()));
    assert_eq!(code, 400, "{body}");
    let (code, body) = server.call("POST", "/api/v1/plan", Some(&job.to_string()));
    assert_eq!(code, 200, "{body}");
    let plan: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(plan["max_samples"], 1u64 << 27, "{plan:#}");
    std::fs::remove_dir_all(&outside).unwrap();
}

/// A transcribe job through the jobs API: the CLI's transcripts for the clips inside the data
/// root; a clip that is a symlink out of it fails, naming the roots (the CLI reads it); a model
/// folder with a file out of it fails the job; a batch that would hold more audio than the
/// service allows is refused before anything runs.
#[test]
fn a_transcribe_job_reads_beneath_the_root() {
    if skip_ort::runtime_or_skip().is_none() {
        return;
    }
    let dir = Scratch::new("jobs-transcribe");
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let clip = repo.join("tests/data/speech_16000_mono_s16.wav");
    let corpus = dir.path("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for name in ["a.wav", "b.wav"] {
        std::fs::copy(&clip, corpus.join(name)).unwrap();
    }
    let outside = std::env::temp_dir().join(format!(
        "sonograph-transcribe-outside-{}.wav",
        std::process::id()
    ));
    std::fs::copy(&clip, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, corpus.join("c.wav")).unwrap();
    // The model inside the root, and one whose network is a symlink out of it.
    let ctc = repo.join("crates/model/tests/data/asr/ctc");
    let (model, linked) = (dir.path("model"), dir.path("linked-model"));
    for folder in [&model, &linked] {
        std::fs::create_dir_all(folder).unwrap();
        for name in ["config.json", "vocab.txt"] {
            std::fs::copy(ctc.join(name), folder.join(name)).unwrap();
        }
    }
    std::fs::copy(ctc.join("model.onnx"), model.join("model.onnx")).unwrap();
    std::os::unix::fs::symlink(ctc.join("model.onnx"), linked.join("model.onnx")).unwrap();
    let server = Server::in_dir(&dir, &["--device", "cpu"]);
    // VAD's segments have no longest by default: the service asks for one. A window shorter
    // than the clips (2 s) cuts them, through VAD (or fixed windows below), not whole.
    let job = json!({"kind": "transcribe", "source": corpus, "model": model,
        "out": dir.path("api"), "threads": 1, "items-per-part": 2, "max-speech-s": 30,
        "window-s": 1});
    let finished = |job: &Value| {
        let id = server.submit(job);
        server.wait_job(id, "done", |j| {
            !matches!(j["state"].as_str(), Some("queued" | "running"))
        })
    };
    assert_one_outside_the_roots(&finished(&job), 2, "c.wav", "c.wav");
    let cli = dir.path("cli");
    let o = crate::common::bin()
        .arg("transcribe")
        .arg(&corpus)
        .arg("--model")
        .arg(&ctc)
        .arg("--out")
        .arg(&cli)
        .args(["--threads", "1", "--items-per-part", "2"])
        .args(["--max-speech-s", "30", "--window-s", "1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", crate::common::stderr(&o));
    let (api, cli) = (
        crate::models::transcripts(&dir.path("api")),
        crate::models::transcripts(&cli),
    );
    let of_c = |t: &&Value| t["id"].as_str().is_some_and(|id| id.starts_with("c.wav#"));
    assert!(cli.iter().any(|t| of_c(&t)), "{cli:?}");
    let inside: Vec<&Value> = cli.iter().filter(|t| !of_c(t)).collect();
    assert!(inside.len() >= 2, "{inside:?}");
    assert_eq!(api.iter().collect::<Vec<_>>(), inside);
    // The model's network out of the root: the job fails before any item, saying so.
    let mut with_link = job.clone();
    with_link["model"] = json!(linked);
    with_link["out"] = json!(dir.path("api-linked"));
    let record = finished(&with_link);
    assert_eq!(record["state"], "failed", "{record:#}");
    assert!(
        record["error"]
            .as_str()
            .is_some_and(|e| e.contains("model.onnx") && e.contains("outside the data roots")),
        "{record:#}"
    );
    let mut huge = job.clone();
    huge["batch"] = json!(4096);
    huge["window-s"] = json!(60);
    let mut unbounded = job.clone();
    unbounded.as_object_mut().unwrap().remove("max-speech-s");
    for (request, says) in [
        (huge, "batch: 4096 segments of up to 60 s"),
        (unbounded, "batch: 8 segments of up to 86400 s"),
    ] {
        let (code, body) = server.call("POST", "/api/v1/jobs", Some(&request.to_string()));
        assert_eq!(code, 400, "{body}");
        assert!(
            body.contains(says) && body.contains("GiB of audio"),
            "{body}"
        );
    }
    // Fixed windows need no max-speech-s: they are the window's length.
    let mut fixed = job.clone();
    fixed.as_object_mut().unwrap().remove("max-speech-s");
    fixed["segment"] = json!("fixed");
    fixed["out"] = json!(dir.path("api-fixed"));
    assert_one_outside_the_roots(&finished(&fixed), 2, "c.wav", "c.wav");
    std::fs::remove_file(&outside).unwrap();
}
