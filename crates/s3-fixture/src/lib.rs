//! A real S3 server for tests: s3s-fs (an S3 implementation over a folder, from crates.io)
//! served on a loopback port by its own runtime, with faults injected on demand — answers of
//! 503 Slow Down and connections dropped before an answer, on a fixed pseudo-random share of
//! requests — and a count of the bytes it served to GETs.
//!
//! A bucket is a folder under the server's root: files written there are objects.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;

mod store;

/// The access key and secret the server takes (and the tests' clients give).
pub const ACCESS_KEY: &str = "sonograph-test";
pub const SECRET_KEY: &str = "sonograph-test-secret";

/// An S3 server on loopback, running until dropped.
pub struct S3Server {
    addr: SocketAddr,
    root: PathBuf,
    state: Arc<State>,
    _runtime: tokio::runtime::Runtime,
}

#[derive(Default)]
struct State {
    requests: AtomicU64,
    /// Faults per 1,000 requests (0: none), and the request they were asked for at: which of
    /// the requests after it fail is the same whatever came before.
    faults_per_mille: AtomicU64,
    faults_from: AtomicU64,
    faults: AtomicU64,
    get_bytes: AtomicU64,
    /// A status every request is answered with (0: none).
    answer_status: AtomicU64,
    /// Milliseconds each request waits before it is served, as a store's round trip does.
    latency_ms: AtomicU64,
    /// Requests being served now, and the most there have been at once.
    in_flight: AtomicU64,
    most_in_flight: AtomicU64,
    /// Requests that write (PUT and POST: an object, a multipart upload's part, its start or
    /// end) being served now.
    writes_in_flight: AtomicU64,
    /// Held through each conditional put: S3 makes "create only where none is" atomic, and
    /// s3s-fs looks, then writes.
    conditional_puts: tokio::sync::Mutex<()>,
}

impl S3Server {
    /// Serves the folder `root` (created if missing): each folder in it is a bucket.
    pub fn start(root: &Path) -> S3Server {
        std::fs::create_dir_all(root).expect("the server's root folder can be created");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the test server");
        let service = {
            let mut b = s3s::service::S3ServiceBuilder::new(store::Store::new(root));
            b.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
            b.build()
        };
        let state = Arc::new(State::default());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a loopback port");
        let addr = listener.local_addr().expect("the bound address");
        let serving = state.clone();
        runtime.spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                // As servers do: without it, an answer's head and body wait on the client's
                // delayed acknowledgement (40 ms a request).
                let _ = socket.set_nodelay(true);
                let (service, state) = (service.clone(), serving.clone());
                let handler = hyper::service::service_fn(move |req| {
                    let (service, state) = (service.clone(), state.clone());
                    async move { handle(&service, &state, req).await }
                });
                tokio::spawn(async move {
                    let _ = ConnBuilder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(socket), handler)
                        .await;
                });
            }
        });
        S3Server {
            addr,
            root: root.to_path_buf(),
            state,
            _runtime: runtime,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The folder of bucket `name`, created.
    pub fn bucket(&self, name: &str) -> PathBuf {
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir).expect("a bucket folder");
        dir
    }

    /// Records the ETag of every file put in a bucket folder directly, as s3s-fs records it
    /// for an object uploaded through it; otherwise it hashes the whole file at every HEAD and
    /// GET, ranged ones included (0.2 s a request for a 115 MB file), which no S3 server does.
    pub fn seal(&self) {
        use md5::Digest;
        use std::io::Read;
        let encode = |s: &str| {
            base64::engine::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, s)
        };
        let buckets = std::fs::read_dir(&self.root).expect("the server's root");
        for bucket in buckets.filter_map(Result::ok).filter(|e| e.path().is_dir()) {
            let name = bucket.file_name().to_string_lossy().into_owned();
            let mut folders = vec![bucket.path()];
            while let Some(folder) = folders.pop() {
                for entry in std::fs::read_dir(&folder)
                    .expect("a bucket's folder")
                    .filter_map(Result::ok)
                {
                    let path = entry.path();
                    if path.is_dir() {
                        folders.push(path);
                        continue;
                    }
                    let key = path
                        .strip_prefix(bucket.path())
                        .expect("under its bucket")
                        .to_string_lossy()
                        .into_owned();
                    let mut hash = md5::Md5::new();
                    let mut file = std::fs::File::open(&path).expect("a bucket's file");
                    let mut buf = vec![0u8; 1 << 20];
                    loop {
                        let n = file.read(&mut buf).expect("a bucket's file reads");
                        if n == 0 {
                            break;
                        }
                        hash.update(&buf[..n]);
                    }
                    let e_tag: String =
                        hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
                    let info = format!(
                        ".bucket-{}.object-{}.internal.json",
                        encode(&name),
                        encode(&key)
                    );
                    std::fs::write(self.root.join(info), format!("{{\"e_tag\":\"{e_tag}\"}}"))
                        .expect("the server's root is writable");
                }
            }
        }
    }

    /// The environment a client (object_store's `AmazonS3Builder::from_env`, the AWS CLI,
    /// boto3) needs to reach it.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// From now on, `per_mille` of every 1,000 requests fail: half answered 503 Slow Down,
    /// half dropped without an answer; which ones, counted from this call, is the same on
    /// every run.
    pub fn inject_faults(&self, per_mille: u64) {
        self.state
            .faults_from
            .store(self.state.requests.load(Ordering::SeqCst), Ordering::SeqCst);
        self.state
            .faults_per_mille
            .store(per_mille.min(1000), Ordering::SeqCst);
    }

    /// From now on, every request is answered with `status` (an S3 error of that status), or
    /// served again (`None`).
    pub fn answer_all_with(&self, status: Option<u16>) {
        self.state
            .answer_status
            .store(status.map_or(0, u64::from), Ordering::SeqCst);
    }

    /// From now on, each request waits `latency` before it is served (a cloud store's round
    /// trip, where loopback has none).
    pub fn set_latency(&self, latency: std::time::Duration) {
        self.state
            .latency_ms
            .store(latency.as_millis() as u64, Ordering::SeqCst);
    }

    /// The most requests that were being served at once so far.
    pub fn most_in_flight(&self) -> u64 {
        self.state.most_in_flight.load(Ordering::SeqCst)
    }

    /// Requests that write (PUT, POST) being served now.
    pub fn writes_in_flight(&self) -> u64 {
        self.state.writes_in_flight.load(Ordering::SeqCst)
    }

    /// Requests answered so far, faults included.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Requests failed on purpose so far.
    pub fn faults(&self) -> u64 {
        self.state.faults.load(Ordering::SeqCst)
    }

    /// Bytes of the object bodies answered to GETs so far.
    pub fn get_bytes(&self) -> u64 {
        self.state.get_bytes.load(Ordering::SeqCst)
    }
}

/// A mixing of the request's number (splitmix64): which requests fail is the same on every run.
fn scramble(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One request counted in `counter` while it is served, also where hyper drops its future.
struct Serving<'a>(&'a AtomicU64);

impl<'a> Serving<'a> {
    fn count(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Serving(counter)
    }
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn handle(
    service: &s3s::service::S3Service,
    state: &State,
    req: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<s3s::Body>, s3s::HttpError> {
    let n = state.requests.fetch_add(1, Ordering::SeqCst);
    let _serving = Serving::count(&state.in_flight);
    state
        .most_in_flight
        .fetch_max(state.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
    let _writing = matches!(*req.method(), http::Method::PUT | http::Method::POST)
        .then(|| Serving::count(&state.writes_in_flight));
    serve(service, state, req, n).await
}

async fn serve(
    service: &s3s::service::S3Service,
    state: &State,
    req: http::Request<hyper::body::Incoming>,
    n: u64,
) -> Result<http::Response<s3s::Body>, s3s::HttpError> {
    let latency = state.latency_ms.load(Ordering::SeqCst);
    if latency > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(latency)).await;
    }
    let status = state.answer_status.load(Ordering::SeqCst);
    if status != 0 {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
            <Error><Code>InvalidRequest</Code><Message>answered by the test</Message></Error>";
        return Ok(http::Response::builder()
            .status(status as u16)
            .header("content-type", "application/xml")
            .body(s3s::Body::from(body.to_string()))
            .expect("a valid response"));
    }
    let per_mille = state.faults_per_mille.load(Ordering::SeqCst);
    let draw = scramble(n.wrapping_sub(state.faults_from.load(Ordering::SeqCst)));
    if per_mille > 0 && draw % 1000 < per_mille {
        state.faults.fetch_add(1, Ordering::SeqCst);
        if draw & (1 << 40) == 0 {
            let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
                <Error><Code>SlowDown</Code><Message>injected</Message></Error>";
            return Ok(http::Response::builder()
                .status(503)
                .header("content-type", "application/xml")
                .body(s3s::Body::from(body.to_string()))
                .expect("a valid response"));
        }
        // An error from the service: hyper closes the connection without an answer.
        return Err(s3s::HttpError::new(Box::new(std::io::Error::other(
            "injected: connection dropped",
        ))));
    }
    let is_get = req.method() == http::Method::GET;
    let conditional = req.method() == http::Method::PUT
        && req.headers().contains_key(http::header::IF_NONE_MATCH);
    let _serialised = if conditional {
        Some(state.conditional_puts.lock().await)
    } else {
        None
    };
    let response = hyper::service::Service::call(service, req).await?;
    if is_get && response.status().is_success() {
        let length = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        state.get_bytes.fetch_add(length, Ordering::SeqCst);
    }
    Ok(response)
}
