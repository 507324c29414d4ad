//! A real `sonograph serve` on loopback for the server's tests: started on port 0 (the port
//! read from its stderr), spoken to with a real HTTP client (ureq), stopped by signals.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running server process.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub log: Arc<Mutex<String>>,
    pub token: Option<String>,
}

/// The binary without the environment that would change it (as `common::bin`).
pub fn command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sonograph"));
    for (k, _) in std::env::vars() {
        if k.starts_with("SONOGRAPH_") || k == "FAILPOINTS" {
            c.env_remove(k);
        }
    }
    c
}

impl Server {
    /// `sonograph serve --addr 127.0.0.1:0 ARGS...`, once it listens.
    pub fn start(args: &[&str]) -> Server {
        Self::start_with(args, &[])
    }

    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = command();
        cmd.args(["serve", "--addr", "127.0.0.1:0"]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let token = args
            .iter()
            .position(|a| *a == "--token")
            .map(|i| args[i + 1].to_string());
        Self::spawn(cmd, token, "serving on http://")
    }

    /// Spawns `cmd` and waits for the stderr line holding `marker` and the address after it.
    pub fn spawn(mut cmd: Command, token: Option<String>, marker: &str) -> Server {
        let mut child = cmd
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            let marker = marker.to_string();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(at) = line.find(&marker) {
                        let addr = line[at + marker.len()..].trim().to_string();
                        let _ = tx.send(addr);
                    }
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the server did not start: {}", log.lock().unwrap()));
        Server {
            child,
            base: format!("http://{addr}"),
            log,
            token,
        }
    }

    /// A server whose data root is `dir` and whose state lives in `dir/state`, with `extra`
    /// arguments.
    pub fn in_dir(dir: &Scratch, extra: &[&str]) -> Server {
        let state = dir.path("state");
        let mut args = vec![
            "--data-root",
            dir.str(),
            "--state-dir",
            state.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        Server::start(&args)
    }

    /// Waits until job `id` runs and has done more than `items` items.
    pub fn wait_progress(&self, id: i64, items: u64) -> Value {
        self.wait_job(id, "running with progress", |j| {
            j["state"] == "running" && j["progress"]["items_ok"].as_u64() > Some(items)
        })
    }

    /// Waits until job `id` runs again, resumed from what an earlier run did.
    pub fn wait_resumed(&self, id: i64) -> Value {
        self.wait_job(id, "resumed", |j| {
            j["state"] == "running" && j["progress"]["items_resumed"].as_u64() > Some(0)
        })
    }

    /// Cancels running job `id` and waits until it has stopped.
    pub fn cancel(&self, id: i64) -> Value {
        let (code, body) = self.call("DELETE", &format!("/api/v1/jobs/{id}"), None);
        assert_eq!(code, 202, "{body}");
        self.wait_job(id, "canceled", |j| j["state"] == "canceled")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// (status, body) of a request; the server's token is sent when it has one.
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        request(method, &self.url(path), body, auth.as_deref())
    }

    pub fn get_json(&self, path: &str) -> Value {
        let (status, body) = self.call("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// Submits a job; returns its id.
    pub fn submit(&self, job: &Value) -> i64 {
        let (status, body) = self.call("POST", "/api/v1/jobs", Some(&job.to_string()));
        assert_eq!(status, 201, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["id"]
            .as_i64()
            .unwrap()
    }

    pub fn job(&self, id: i64) -> Value {
        self.get_json(&format!("/api/v1/jobs/{id}"))
    }

    /// Polls job `id` until `done(job)` holds (60 s at most).
    pub fn wait_job(&self, id: i64, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let job = self.job(id);
            if done(&job) {
                return job;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "job {id} never became {what}: {job:#}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn wait_ready(&self) {
        let start = Instant::now();
        while self.call("GET", "/ready", None).0 != 200 {
            assert!(start.elapsed() < Duration::from_secs(60), "never ready");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The server's peak resident memory so far (VmHWM), in MiB.
    pub fn rss_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: f64 = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .expect("VmHWM in /proc/PID/status");
        kb / 1024.0
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    /// Waits for the process to end (`limit` at most); returns its status.
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < limit, "still running after {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP request with a real client; any status is an answer (only a transport error
/// fails).
pub fn request(method: &str, url: &str, body: Option<&str>, auth: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let result = match (method, body) {
        ("GET", _) => {
            let mut r = agent.get(url);
            if let Some(a) = auth {
                r = r.header("authorization", a);
            }
            r.call()
        }
        ("DELETE", _) => {
            let mut r = agent.delete(url);
            if let Some(a) = auth {
                r = r.header("authorization", a);
            }
            r.call()
        }
        (_, body) => {
            let mut r = agent.post(url).content_type("application/json");
            if let Some(a) = auth {
                r = r.header("authorization", a);
            }
            r.send(body.unwrap_or(""))
        }
    };
    let mut response = result.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()
        .unwrap_or_default();
    (status, text)
}

/// A CSV manifest in `dir` of `n` items, each the repository's 2-second speech clip (copied
/// into `dir`), plus `broken` items naming files that do not exist: a long job from a few
/// bytes of disk.
pub fn manifest(dir: &Path, n: usize, broken: usize) -> PathBuf {
    let clip = dir.join("clip.wav");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/speech_16000_mono_s16.wav"),
        &clip,
    )
    .unwrap();
    let mut text = String::from("id,path\n");
    for i in 0..broken {
        text.push_str(&format!("broken{i:03},{}/missing{i}.wav\n", dir.display()));
    }
    for i in 0..n {
        text.push_str(&format!("clip{i:07},{}\n", clip.display()));
    }
    let path = dir.join(format!("manifest-{n}-{broken}.csv"));
    std::fs::write(&path, text).unwrap();
    path
}

/// A fresh folder under the temp dir, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("sonograph-serve-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p.canonicalize().unwrap())
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn str(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
