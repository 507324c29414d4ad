//! The dashboard in a real browser: Debian's headless Chromium, driven through its DevTools
//! protocol, opens `/` of a server running a job. The page must load, draw its charts from
//! the job's real telemetry (the values it plots are the server's own samples), and show the
//! alert the job raises. A screenshot is written to dashboard.png in cargo's temporary folder
//! for integration tests (CARGO_TARGET_TMPDIR, wherever the build directory is), and to
//! docs/dashboard.png with `SONOGRAPH_UPDATE_SCREENSHOT=1`.

use crate::shared::serving;
use crate::shared::skip;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use serving::{manifest, Scratch, Server};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

const CHROMIUM: &str = "/usr/bin/chromium";

/// Chromium with the flags this machine's closed network needs, and a fresh profile.
struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    session: Option<String>,
}

impl Browser {
    fn launch(profile: &std::path::Path) -> Browser {
        let mut child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-quic",
                "--no-first-run",
                "--window-size=1400,1100",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("ws://") {
                    let _ = tx.send(line[at..].trim().to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("chromium printed no DevTools address");
        let (ws, _) = tungstenite::connect(url.as_str()).expect("connect to DevTools");
        Browser {
            child,
            ws,
            next_id: 1,
            session: None,
        }
    }

    /// Sends a DevTools command (to the attached page, once there is one) and returns its
    /// result; events in between are skipped.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        self.ws.send(Message::Text(msg.to_string().into())).unwrap();
        loop {
            let reply = self.ws.read().unwrap();
            let Ok(text) = reply.to_text() else { continue };
            let v: Value = serde_json::from_str(text).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Opens `url` in a new page and attaches to it.
    fn open(&mut self, url: &str) {
        let target = self.call("Target.createTarget", json!({"url": url}));
        let attached = self.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        self.session = Some(attached["sessionId"].as_str().unwrap().to_string());
    }

    /// Evaluates `expr` in the page; returns its value (JSON).
    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the page shows: the values each chart drew, the alert rules listed, the job rows.
const PAGE_STATE: &str = r##"JSON.stringify({
  connected: !!(window.dashboard && window.dashboard.connected),
  drawn: window.dashboard ? window.dashboard.drawn : {},
  points: Object.fromEntries([...document.querySelectorAll("canvas")].map(c => [c.id, Number(c.dataset.points)])),
  alerts: [...document.querySelectorAll("#alerts tr")].map(r => r.dataset.rule),
  jobs: [...document.querySelectorAll("#jobs tr")].map(r => r.innerText),
  pixels: (() => { const c = document.getElementById("chart-throughput"); const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
                   let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0) n++; return n; })()
})"##;

#[test]
fn the_dashboard_draws_a_running_job_and_its_alert_in_chromium() {
    if !std::path::Path::new(CHROMIUM).exists() {
        skip::skip("chromium is not installed (apt-get install chromium; .ci/run does)");
        return;
    }
    let dir = Scratch::new("dashboard");
    // Broken items first: the job raises its `items_failed` alert at once.
    let src = manifest(&dir.0, 200_000, 3);
    let server = Server::in_dir(&dir, &["--telemetry-interval", "0.25"]);
    // Every device: with a wgpu adapter (lavapipe in CI) the memory chart has a pool to draw.
    let id = server
        .submit(&json!({"source": src, "out": dir.path("out"), "device": "all", "workers": 1}));
    server.wait_progress(id, 0);

    let mut browser = Browser::launch(&dir.path("profile"));
    browser.open(&server.url("/"));
    let start = Instant::now();
    let page = loop {
        let text = browser.eval(PAGE_STATE);
        let page: Value =
            serde_json::from_str(text.as_str().unwrap_or("{}")).unwrap_or(Value::Null);
        let rates = page["drawn"]["throughput"]["items/s"]
            .as_array()
            .map_or(0, |v| v.iter().filter(|x| x.as_f64() > Some(0.0)).count());
        let ready = page["connected"] == true
            && rates >= 3
            && page["points"]["chart-queues"].as_u64() > Some(0)
            && page["points"]["chart-batch"].as_u64() > Some(0)
            && page["points"]["chart-util"].as_u64() > Some(0)
            && page["alerts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|r| r == "items_failed"));
        if ready {
            break page;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the page never showed the job: {page:#}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    // The charts drew the server's samples: every items/s value plotted is one the server's
    // telemetry holds (the history, then the event stream, carry the same figures).
    let telemetry = server.get_json("/api/v1/telemetry");
    let served: Vec<f64> = telemetry["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["job"]["items_per_second"].as_f64())
        .collect();
    for v in page["drawn"]["throughput"]["items/s"].as_array().unwrap() {
        let v = v.as_f64().unwrap();
        assert!(
            served.iter().any(|s| (s - v).abs() < 1e-9),
            "{v} items/s was drawn but is not in the server's telemetry"
        );
    }
    assert!(
        page["pixels"].as_u64() > Some(500),
        "the throughput chart drew nothing"
    );
    // The history read and the event stream meet without a gap or a sample twice: the page's
    // samples are a run of the server's consecutive sequence numbers (every sample is sent),
    // once the page holds samples the stream brought after the telemetry read above.
    let newest_served = telemetry["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["seq"].as_u64())
        .max()
        .unwrap();
    let start = Instant::now();
    let mut seqs: Vec<u64> = loop {
        let seqs = browser.eval(r#"JSON.stringify(window.dashboard.samples.map(s => s.seq))"#);
        let seqs: Vec<u64> = serde_json::from_str(seqs.as_str().unwrap()).unwrap();
        if seqs.iter().any(|&s| s > newest_served + 2) {
            break seqs;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no sample came on the page's stream after seq {newest_served}: {seqs:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let drawn = seqs.len();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), drawn, "the page holds a sample twice: {seqs:?}");
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "the page misses samples between the history and the stream: {seqs:?}"
    );
    // With a GPU among the devices (lavapipe in CI), its pool is drawn against its budget.
    let pooled = telemetry["samples"].as_array().unwrap().iter().any(|s| {
        s["devices"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["pool"].is_object()))
    });
    if pooled {
        // The telemetry was read after the page: its first pooled sample may still be on its
        // way to the page's event stream, so the page gets a few telemetry intervals to draw it.
        let start = Instant::now();
        loop {
            let memory = browser.eval(r#"JSON.stringify(window.dashboard.drawn.memory ?? {})"#);
            let memory: Value = serde_json::from_str(memory.as_str().unwrap()).unwrap();
            if memory
                .as_object()
                .is_some_and(|m| m.keys().any(|k| k.ends_with("budget")))
            {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the server's telemetry has a GPU pool but the page drew no budget: {memory}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let row = page["jobs"][0].as_str().unwrap();
    assert!(row.starts_with(&format!("{id}\trunning")), "{row:?}");

    let update = std::env::var("SONOGRAPH_UPDATE_SCREENSHOT").is_ok_and(|v| v == "1");
    if update {
        // A screenshot for the docs shows a minute of the job, not its first seconds.
        std::thread::sleep(Duration::from_secs(60));
    }
    let shot = browser.call("Page.captureScreenshot", json!({"format": "png"}));
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::write(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png"),
        &png,
    )
    .unwrap();
    if update {
        std::fs::write(root.join("docs/dashboard.png"), &png).unwrap();
    }
    drop(browser);
    server.cancel(id);
}
