//! Objects in object storage (S3, Google Cloud Storage, Azure Blob Storage, HTTP), through the
//! `object_store` crate: a prefix listed, an object read as a file by byte range with bounded
//! read-ahead, a file uploaded whole. A URL stands wherever a path does (`s3://bucket/key`
//! held in a `PathBuf`); [`is_url`] tells them apart.
//!
//! Credentials are found as each cloud's own tools find them in the environment (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*`: keys, tokens, web identity, container and instance metadata), never
//! from the command line: nothing here writes them anywhere.
//!
//! The stores are asynchronous; sonograph's readers are threads. Each call runs on one small
//! runtime of its own and the calling thread waits for the answer, so that a reader works the
//! same from a decode worker, a Python thread or a thread of the service's runtime (where
//! `block_on` would panic).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, RetryConfig};

/// The URL schemes taken for object storage.
const SCHEMES: &[&str] = &[
    "s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "http", "https",
];

/// A read-ahead starts at this many bytes and doubles while reads stay sequential, up to
/// [`MAX_READ_AHEAD`]: a whole file is read in a few large requests, a header costs one small
/// one, and one reader holds at most one block. Where the reader says which bytes it expects
/// to read ([`RemoteObject::expect`]: a span of a long file), a read among them fetches to
/// their end at once.
const FIRST_READ_AHEAD: u64 = 32 << 10;

/// The first read of an item opened whole ([`RemoteObject::open_reading`]): a clip of speech
/// (a few hundred kB) comes in the request that opens it.
pub const FIRST_READ_WHOLE: u64 = 1 << 20;

/// The first read of an item opened for a span of it: the header, before a seek.
pub const FIRST_READ_SPAN: u64 = FIRST_READ_AHEAD;
const MAX_READ_AHEAD: u64 = 8 << 20;

/// A read this far past the block's end, at most (and no further than the last fetch's
/// read-ahead), fetches from the block's end, the gap included, instead of asking again where
/// it lands: a tar listing hops from header to header over small members (a WebDataset shard
/// of 2-s clips cost a request per member; it now streams in doubling blocks), and a
/// request's round trip costs more than this many bytes.
const READ_THROUGH: u64 = 1 << 20;

/// Attempts of one read or upload: the store's client retries a request that fails with a
/// transient status itself; a body cut short or a connection dropped mid-answer is retried
/// here, after the same backoff.
const ATTEMPTS: u32 = 5;

/// The parts of a multipart upload (visible only when complete, as a single request is):
/// S3's smallest. An upload holds its parts in flight in memory, and with 8 MiB parts a 15 MB
/// Parquet part was all in memory at once, the largest thing a bucket job held beyond a local
/// one (heaptrack; bench/RESULTS.md, 2026-12-04).
const UPLOAD_PART: usize = 5 << 20;
/// Parts sent while the next is read: two requests at once, 10 MiB held at most.
const UPLOADS_IN_FLIGHT: usize = 1;
/// Uploads in one request up to this size, which holds no more than a multipart upload does
/// and saves its two extra round trips (its start and its completion).
const SINGLE_UPLOAD_MAX: usize = (UPLOADS_IN_FLIGHT + 1) * UPLOAD_PART;

/// Bytes fetched from object storage by this process: what the benchmarks and tests compare
/// against the bytes an item needs.
static BYTES_FETCHED: AtomicU64 = AtomicU64::new(0);

/// Bytes fetched from object storage so far by this process.
pub fn bytes_fetched() -> u64 {
    BYTES_FETCHED.load(Ordering::Relaxed)
}

/// Whether `path` is an object storage URL (`s3://`, `gs://`, `az://`, `http(s)://`, ...)
/// rather than a local path.
pub fn is_url(path: &Path) -> bool {
    path.to_str()
        .and_then(|s| s.split_once("://"))
        .is_some_and(|(scheme, _)| SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()))
}

/// A URL split where the store ends and the key begins.
struct Location {
    /// `scheme://authority`, the store's identity (a bucket, a container, a web server).
    store: String,
    /// The object's key within the store, without a leading `/`.
    key: String,
}

impl Location {
    fn parse(url: &Path) -> io::Result<Location> {
        let text = url.to_str().ok_or_else(|| invalid(url, "not UTF-8"))?;
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| invalid(url, "not a URL"))?;
        let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.is_empty() {
            return Err(invalid(url, "no bucket or host"));
        }
        // A URL is shown in rows, reports and errors: credentials have no place in it (they
        // come from the environment), and a query would be taken for a part of the key.
        if authority.contains('@') {
            return Err(invalid(
                url,
                "credentials in a URL are refused; give them in the environment",
            ));
        }
        if key.contains(['?', '#']) {
            return Err(invalid(
                url,
                "a query or fragment in a URL is not supported",
            ));
        }
        Ok(Location {
            store: format!("{}://{authority}", scheme.to_ascii_lowercase()),
            key: key.to_string(),
        })
    }

    /// The key as the store names it: as given, never re-encoded (a listing gives keys so,
    /// and `100%.wav` must stay `100%.wav`).
    fn object_path(&self, url: &Path) -> io::Result<ObjectPath> {
        ObjectPath::parse(self.key.trim_end_matches('/')).map_err(|e| invalid(url, &e.to_string()))
    }

    /// The URL of `key` in the same store.
    fn url_of(&self, key: &str) -> PathBuf {
        PathBuf::from(format!("{}/{key}", self.store))
    }
}

fn invalid(url: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: {why}", url.display()),
    )
}

/// An `object_store` error as an I/O error of the same kind, naming the URL.
///
/// A request that never got its whole answer (a connection refused or dropped, a timeout, a
/// body cut off) is `Interrupted`, and may pass on a second try. Any other error is the
/// store's answer (a status the store's client does not retry, or one it retried to the end
/// of its own budget: up to 20 tries over 2 minutes), and asking again gets the same answer.
fn store_error(url: &Path, e: object_store::Error) -> io::Error {
    let kind = match &e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        object_store::Error::NotSupported { .. } | object_store::Error::NotImplemented { .. } => {
            io::ErrorKind::Unsupported
        }
        object_store::Error::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
        _ if cut_off(&e) => io::ErrorKind::Interrupted,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("{}: {e}", url.display()))
}

/// Whether `e` comes from the HTTP exchange itself (object_store's `HttpError`: connecting,
/// sending, a timeout, the body), rather than from a status the store answered.
fn cut_off(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.is::<object_store::client::HttpError>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// Whether an error may pass on a second try: a request cut off, or an answer cut short.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::UnexpectedEof | io::ErrorKind::TimedOut
    )
}

/// Runs `attempt` until it succeeds, fails for good, or [`ATTEMPTS`] are spent, waiting
/// between tries (0.2 s, doubling).
fn with_retries<T>(mut attempt: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut wait = Duration::from_millis(200);
    let mut tries = 1;
    loop {
        match attempt() {
            Err(e) if tries < ATTEMPTS && is_transient(&e) => {
                tracing::debug!(error = %e, tries, "object storage: retrying");
                std::thread::sleep(wait);
                wait *= 2;
                tries += 1;
            }
            other => return other,
        }
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("object-store")
            .enable_all()
            .build()
            .expect("a tokio runtime for object storage (threads and a timer) starts")
    })
}

/// Runs `future` on the object storage runtime and waits for it from this thread; a task
/// that ended without an answer (a panic in the client) is an error, not a panic here.
fn wait<T: Send + 'static, E: From<Lost> + Send + 'static>(
    future: impl Future<Output = Result<T, E>> + Send + 'static,
) -> Result<T, E> {
    spawn(future).recv().unwrap_or_else(|_| Err(Lost.into()))
}

/// Starts `future` on the object storage runtime; its answer comes on the channel, which
/// closes without one where the task ended first (a panic in the client).
fn spawn<T: Send + 'static>(
    future: impl Future<Output = T> + Send + 'static,
) -> std::sync::mpsc::Receiver<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime().spawn(async move {
        // A receiver that was let go (a read ahead whose reader never came) drops the answer.
        let _ = tx.send(future.await);
    });
    rx
}

/// A request whose task ended without an answer.
struct Lost;

/// An object's first read: its size, ETag and first `first` bytes (all of them, or an error).
type FirstRead = io::Result<(u64, Option<String>, Bytes)>;

/// `first` bytes of `path` from its start, with the size and ETag the answer gives.
async fn first_read(
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: PathBuf,
    first: u64,
) -> FirstRead {
    let options = object_store::GetOptions {
        range: Some(object_store::GetRange::Bounded(0..first)),
        ..Default::default()
    };
    let answer = async {
        let result = store.get_opts(&path, options).await?;
        let (size, version) = (result.meta.size, result.meta.e_tag.clone());
        Ok::<_, object_store::Error>((size, version, result.bytes().await?))
    };
    let (size, version, bytes) = answer.await.map_err(|e| store_error(&url, e))?;
    BYTES_FETCHED.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    if bytes.len() as u64 != first.min(size) {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{}: an answer cut short", url.display()),
        ));
    }
    Ok((size, version, bytes))
}

impl From<Lost> for io::Error {
    fn from(_: Lost) -> io::Error {
        io::Error::other("the object storage request ended without an answer")
    }
}

/// First reads started ahead of their readers ([`RemoteObject::read_ahead`]) held at most, a
/// MiB each at most: past it the oldest is let go, which bounds the reads whose readers never
/// came (an item failed before it was opened). A job's window leaves room under it for the
/// entries queued behind the window (`JobConfig::read_ahead_items`).
pub const READ_AHEAD_OBJECTS: usize = 256;

mod read_ahead {
    use std::collections::VecDeque;
    use std::path::{Path, PathBuf};
    use std::sync::mpsc::Receiver;
    use std::sync::{Mutex, OnceLock};

    use super::{spawn, FirstRead, READ_AHEAD_OBJECTS};

    type Pending = VecDeque<(PathBuf, u64, Receiver<FirstRead>)>;

    fn pending() -> &'static Mutex<Pending> {
        static PENDING: OnceLock<Mutex<Pending>> = OnceLock::new();
        PENDING.get_or_init(Default::default)
    }

    pub(super) fn start(
        url: &Path,
        first: u64,
        read: impl std::future::Future<Output = FirstRead> + Send + 'static,
    ) {
        let rx = spawn(read);
        let mut pending = pending().lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() == READ_AHEAD_OBJECTS {
            pending.pop_front();
        }
        pending.push_back((url.to_path_buf(), first, rx));
    }

    /// The first read of `url` started ahead, waited for; `None` where none was.
    pub(super) fn take(url: &Path, first: u64) -> Option<FirstRead> {
        let rx = {
            let mut pending = pending().lock().unwrap_or_else(|e| e.into_inner());
            let at = pending
                .iter()
                .position(|(u, f, _)| u == url && *f == first)?;
            pending.remove(at)?.2
        };
        Some(rx.recv().unwrap_or_else(|_| Err(super::Lost.into())))
    }
}

impl From<Lost> for object_store::Error {
    fn from(_: Lost) -> Self {
        object_store::Error::Generic {
            store: "sonograph",
            source: "the request's task ended without an answer".into(),
        }
    }
}

impl From<Lost> for UploadError {
    fn from(lost: Lost) -> Self {
        UploadError::Store(lost.into())
    }
}

/// The store of `location` (one client per bucket or host, kept for the process: its
/// connections and credentials are reused).
fn store(url: &Path, location: &Location) -> io::Result<Arc<dyn ObjectStore>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    let stores = STORES.get_or_init(Default::default);
    let mut stores = stores.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(store) = stores.get(&location.store) {
        return Ok(store.clone());
    }
    let built = build_store(&location.store).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: {e}", url.display()),
        )
    })?;
    stores.insert(location.store.clone(), built.clone());
    Ok(built)
}

fn build_store(store_url: &str) -> object_store::Result<Arc<dyn ObjectStore>> {
    // reqwest is built without a TLS provider of its own (see the workspace's Cargo.toml):
    // ring is the process's, unless the embedding program installed one first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The client's default backoff (100 ms, jittered) spends 8 retries in a few seconds: a
    // burst of 503 Slow Down would outlast it. Backing off from 250 ms by up to 3x a step,
    // to 15 s, 20 retries reach the 2-minute limit, which is what ends the retrying.
    let retry = RetryConfig {
        max_retries: 20,
        retry_timeout: Duration::from_secs(120),
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(15),
            base: 3.0,
        },
    };
    let scheme = store_url.split_once("://").map_or("", |(s, _)| s);
    Ok(match scheme {
        "s3" | "s3a" => Arc::new(
            s3_builder(&|k| std::env::var(k).ok())?
                .with_url(store_url)
                .with_retry(retry)
                .build()?,
        ),
        "gs" => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(store_url)
                .with_retry(retry)
                .build()?,
        ),
        "az" | "azure" | "abfs" | "abfss" => Arc::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(store_url)
                .with_retry(retry)
                .build()?,
        ),
        _ => Arc::new(
            object_store::http::HttpBuilder::new()
                .with_url(store_url)
                .with_retry(retry)
                .build()?,
        ),
    })
}

/// object_store's S3 client from the environment, completed from the AWS tools' shared files
/// (`crate::aws_profile`): a profile's keys where the environment has none, its region and
/// endpoint where the environment names neither.
fn s3_builder(
    env: &dyn Fn(&str) -> Option<String>,
) -> object_store::Result<object_store::aws::AmazonS3Builder> {
    let mut builder = object_store::aws::AmazonS3Builder::from_env();
    let profile =
        crate::aws_profile::from_files(env).map_err(|e| object_store::Error::Generic {
            store: "S3",
            source: e.into(),
        })?;
    let Some(p) = profile else {
        return Ok(builder);
    };
    let unset = |vars: &[&str]| vars.iter().all(|v| env(v).is_none());
    if unset(&["AWS_ACCESS_KEY_ID"]) {
        if let (Some(id), Some(secret)) = (p.access_key_id, p.secret_access_key) {
            builder = builder
                .with_access_key_id(id)
                .with_secret_access_key(secret);
            if let Some(token) = p.session_token {
                builder = builder.with_token(token);
            }
        }
    }
    if let (true, Some(region)) = (unset(&["AWS_REGION", "AWS_DEFAULT_REGION"]), p.region) {
        builder = builder.with_region(region);
    }
    if let (true, Some(endpoint)) = (unset(&["AWS_ENDPOINT", "AWS_ENDPOINT_URL"]), p.endpoint_url) {
        builder = builder.with_endpoint(endpoint);
    }
    Ok(builder)
}

/// An object listed under a prefix.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedObject {
    /// Its key after the prefix, as a folder's walk names a file (`a/b.wav`).
    pub id: String,
    /// Its URL.
    pub url: PathBuf,
    pub size: u64,
}

/// The objects under `prefix` (a URL; the listing treats it as a folder: `s3://b/corpus`
/// lists `s3://b/corpus/...`), in id order, less those whose name or folder starts with `.`
/// or `_` (as a folder's walk leaves them: hidden files, an output's `__sonograph/`).
pub fn list(prefix: &Path) -> io::Result<Vec<ListedObject>> {
    let location = Location::parse(prefix)?;
    let store = store(prefix, &location)?;
    let folder = location.key.trim_end_matches('/').to_string();
    let listed = with_retries(|| {
        let store = store.clone();
        let folder = folder.clone();
        wait(async move {
            let prefix = (!folder.is_empty())
                .then(|| ObjectPath::parse(folder.as_str()))
                .transpose()?;
            store.list(prefix.as_ref()).try_collect::<Vec<_>>().await
        })
        .map_err(|e| store_error(prefix, e))
    })?;
    let mut objects: Vec<ListedObject> = listed
        .into_iter()
        .filter_map(|meta| {
            let key = meta.location.as_ref();
            let id = if folder.is_empty() {
                key
            } else {
                key.strip_prefix(folder.as_str())?.strip_prefix('/')?
            };
            let hidden = id.split('/').any(|part| part.starts_with(['.', '_']));
            (!hidden && !id.is_empty()).then(|| ListedObject {
                id: id.to_string(),
                url: location.url_of(key),
                size: meta.size,
            })
        })
        .collect();
    objects.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(objects)
}

/// An object opened for reading by byte range: each read that misses the block held fetches
/// the next block from that point (read-ahead doubling while reads stay in order).
pub struct RemoteObject {
    url: PathBuf,
    store: Arc<dyn ObjectStore>,
    location: ObjectPath,
    len: u64,
    /// The object's ETag when it was opened: every later answer must carry the same, so that
    /// an item is never read from two versions of an object replaced while it was read.
    version: Option<String>,
    block: Mutex<Block>,
}

#[derive(Default)]
struct Block {
    start: u64,
    bytes: Bytes,
    /// What the last fetch asked for beyond the read that made it: the next fetch in order
    /// asks twice as much.
    read_ahead: u64,
    /// The bytes the reader expects to read (see [`RemoteObject::expect`]).
    expected: Option<Range<u64>>,
    /// The object's first block, kept when the reader moves on: the header guards and the
    /// container's probe come back to it after reading on (a seek back within the probe).
    head: Bytes,
}

impl std::fmt::Debug for RemoteObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteObject")
            .field("url", &self.url)
            .field("len", &self.len)
            .finish()
    }
}

impl RemoteObject {
    /// Opens `url`, asking the store its size (one request).
    pub fn open(url: &Path) -> io::Result<RemoteObject> {
        let location = Location::parse(url)?;
        let store = store(url, &location)?;
        Self::open_in(store, location.object_path(url)?, url)
    }

    /// Opens `url` by reading its first `first` bytes, whose answer gives its size too: a file
    /// that fits comes in one request, where [`open`](Self::open) asks its size first. (An
    /// empty object, which answers a range with 416, is opened by its size.)
    pub fn open_reading(url: &Path, first: u64) -> io::Result<RemoteObject> {
        let location = Location::parse(url)?;
        let store = store(url, &location)?;
        let path = location.object_path(url)?;
        // One attempt: an empty object answers a range with 416, a server may not take ranges,
        // and a transient failure is retried by the open by size that follows any failure.
        let got = match read_ahead::take(url, first) {
            Some(got) => got,
            None => wait(first_read(
                store.clone(),
                path.clone(),
                url.to_path_buf(),
                first,
            )),
        };
        let (len, version, bytes) = match got {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
                ) =>
            {
                return Err(e)
            }
            Err(_) => return Self::open_in(store, path, url),
        };
        Ok(RemoteObject {
            url: url.to_path_buf(),
            store,
            location: path,
            len,
            version: Self::pinnable(url, version),
            block: Mutex::new(Block {
                start: 0,
                read_ahead: (bytes.len() as u64).max(FIRST_READ_AHEAD),
                bytes,
                ..Block::default()
            }),
        })
    }

    /// Starts reading `url`'s first `first` bytes now, on the runtime, for the
    /// [`open_reading`](Self::open_reading) of the same bytes that comes later (a job's
    /// upcoming items: the decode workers then find their clips fetched instead of each
    /// waiting a round trip). At most [`READ_AHEAD_OBJECTS`] are held; past that the oldest is
    /// let go (its reader then asks itself).
    pub fn read_ahead(url: &Path, first: u64) {
        let Ok(location) = Location::parse(url) else {
            return;
        };
        let (Ok(store), Ok(path)) = (store(url, &location), location.object_path(url)) else {
            return;
        };
        read_ahead::start(
            url,
            first,
            first_read(store, path, url.to_path_buf(), first),
        );
    }

    /// The object's ETag where its store keeps one per version (S3, GCS, Azure). A web server's
    /// may differ between two answers for the same bytes (servers behind a balancer, inode
    /// ETags), so an HTTP object is read unpinned.
    fn pinnable(url: &Path, etag: Option<String>) -> Option<String> {
        etag.filter(|_| !Location::parse(url).is_ok_and(|l| l.store.starts_with("http")))
    }

    fn open_in(store: Arc<dyn ObjectStore>, path: ObjectPath, url: &Path) -> io::Result<Self> {
        let meta = with_retries(|| {
            let (store, path) = (store.clone(), path.clone());
            wait(async move { store.head(&path).await }).map_err(|e| store_error(url, e))
        })?;
        Ok(RemoteObject {
            url: url.to_path_buf(),
            store,
            location: path,
            len: meta.size,
            version: Self::pinnable(url, meta.e_tag),
            block: Mutex::new(Block::default()),
        })
    }

    /// `url` as a listing saw it (`len` bytes, ETag `version`): opened without a request, and
    /// every answer must come from that version.
    pub fn known(url: &Path, len: u64, version: Option<String>) -> io::Result<RemoteObject> {
        let location = Location::parse(url)?;
        Ok(RemoteObject {
            url: url.to_path_buf(),
            store: store(url, &location)?,
            location: location.object_path(url)?,
            len,
            version: Self::pinnable(url, version),
            block: Mutex::new(Block::default()),
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Fetches `bytes` (at most [`MAX_READ_AHEAD`]) now, in one request, for the reads that
    /// follow (a shard's sample: its audio and text members, wherever the first read lands).
    pub fn prefetch(&self, bytes: Range<u64>) -> io::Result<()> {
        let range = bytes.start.min(self.len)..bytes.end.min(self.len);
        if range.is_empty() || range.end - range.start > MAX_READ_AHEAD {
            return Ok(());
        }
        let mut block = self.block.lock().unwrap_or_else(|e| e.into_inner());
        block.bytes = self.fetch(range.clone())?;
        block.start = range.start;
        block.read_ahead = FIRST_READ_AHEAD;
        Ok(())
    }

    /// The ETag the object was opened at (`None` where it is read unpinned).
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Says which bytes the reader expects to read (a span of a long file, which the decoder
    /// estimates): a read among them fetches to their end in one request, and no further;
    /// a read elsewhere fetches as before.
    pub fn expect(&self, bytes: Range<u64>) {
        let mut block = self.block.lock().unwrap_or_else(|e| e.into_inner());
        block.expected = Some(bytes);
    }

    /// Reads into `buf` from byte `at`: as many bytes as the block holds from there (none only
    /// at the object's end).
    pub fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        if at >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let mut block = self.block.lock().unwrap_or_else(|e| e.into_inner());
        if at < block.head.len() as u64 {
            let from = at as usize;
            let n = buf.len().min(block.head.len() - from);
            buf[..n].copy_from_slice(&block.head[from..from + n]);
            return Ok(n);
        }
        let end = block.start + block.bytes.len() as u64;
        if !(block.start..end).contains(&at) {
            if block.start == 0
                && block.head.is_empty()
                && block.bytes.len() as u64 <= FIRST_READ_AHEAD
            {
                block.head = block.bytes.clone();
            }
            let expected = block.expected.clone().filter(|e| e.contains(&at));
            // A short way on, and no expected bytes to read instead: read through the gap.
            let through = expected.is_none()
                && !block.bytes.is_empty()
                && at > end
                && at - end <= block.read_ahead.min(READ_THROUGH);
            // In order (the read starts where the block ended): read further ahead next time.
            block.read_ahead = if (at == end || through) && !block.bytes.is_empty() {
                (block.read_ahead * 2).min(MAX_READ_AHEAD)
            } else {
                FIRST_READ_AHEAD
            };
            let want = match &expected {
                Some(expected) => expected.end - at,
                None => block.read_ahead,
            }
            .max(buf.len() as u64)
            .min(MAX_READ_AHEAD);
            let range = if through {
                // The gap and the read-ahead, in one fetch no larger than a block.
                end..(at + want).min(end + MAX_READ_AHEAD).min(self.len)
            } else {
                at..(at + want).min(self.len)
            };
            let start = range.start;
            block.bytes = self.fetch(range)?;
            block.start = start;
        }
        let from = (at - block.start) as usize;
        let n = buf.len().min(block.bytes.len() - from);
        buf[..n].copy_from_slice(&block.bytes[from..from + n]);
        Ok(n)
    }

    fn fetch(&self, range: Range<u64>) -> io::Result<Bytes> {
        let expected = range.end - range.start;
        let bytes = with_retries(|| {
            let (store, path, asked) = (self.store.clone(), self.location.clone(), range.clone());
            let (version, got) = wait(async move {
                let options = object_store::GetOptions {
                    range: Some(object_store::GetRange::Bounded(asked)),
                    ..Default::default()
                };
                let result = store.get_opts(&path, options).await?;
                let version = result.meta.e_tag.clone();
                Ok::<_, object_store::Error>((version, result.bytes().await?))
            })
            .map_err(|e| store_error(&self.url, e))?;
            BYTES_FETCHED.fetch_add(got.len() as u64, Ordering::Relaxed);
            // The ETag is compared here rather than sent as If-Match: a server whose ETags are
            // weak (W/"...", common on web servers) fails every If-Match.
            if let (Some(opened), Some(now)) = (&self.version, &version) {
                if strong(opened) != strong(now) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: the object changed while it was read (ETag {opened} when \
                             opened, {now} at byte {}); read it again when it is no longer \
                             being written",
                            self.url.display(),
                            range.start
                        ),
                    ));
                }
            }
            if got.len() as u64 != expected {
                // The object shrank since it was opened, or the answer was cut short.
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{}: {} bytes at byte {} asked for, {} came",
                        self.url.display(),
                        expected,
                        range.start,
                        got.len()
                    ),
                ));
            }
            Ok(got)
        })?;
        Ok(bytes)
    }
}

/// An ETag without the weak mark (`W/"x"` and `"x"` name the same version).
fn strong(etag: &str) -> &str {
    etag.strip_prefix("W/").unwrap_or(etag)
}

/// The whole of a small object (a job's `job.json`), or `None` where there is none.
pub fn read_small(url: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let object = match RemoteObject::open(url) {
        Ok(o) => o,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if object.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: {} bytes; at most {max} expected",
                url.display(),
                object.len()
            ),
        ));
    }
    let mut bytes = vec![0u8; object.len() as usize];
    let mut got = 0;
    while got < bytes.len() {
        match object.read_at(&mut bytes[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    bytes.truncate(got);
    Ok(Some(bytes))
}

/// Uploads the local file `from` to `url` whole: in one request, or in parts of a multipart
/// upload completed at the end. Either way the object appears only complete, and an upload
/// that fails leaves the name as it was (an earlier object, or none); it is tried again from
/// the start where the failure may pass.
pub fn upload(from: &Path, url: &Path) -> io::Result<()> {
    let location = Location::parse(url)?;
    let store = store(url, &location)?;
    let path = location.object_path(url)?;
    with_retries(|| {
        let file = std::fs::File::open(from)?;
        let size = file.metadata()?.len();
        let (store, path) = (store.clone(), path.clone());
        let from = from.to_path_buf();
        wait(async move { upload_file(store, path, file, size).await }).map_err(|e| match e {
            UploadError::Read(e) => io::Error::new(e.kind(), format!("{}: {e}", from.display())),
            UploadError::Store(e) => store_error(url, e),
        })
    })
}

/// Uploads `bytes` to `url` in one request (a job's small files).
pub fn upload_bytes(bytes: Vec<u8>, url: &Path) -> io::Result<()> {
    put_bytes(bytes, url, object_store::PutMode::Overwrite)
}

/// `bytes` put at `url` in one request, in `mode`.
fn put_bytes(bytes: Vec<u8>, url: &Path, mode: object_store::PutMode) -> io::Result<()> {
    let location = Location::parse(url)?;
    let store = store(url, &location)?;
    let path = location.object_path(url)?;
    let payload = Bytes::from(bytes);
    with_retries(|| {
        let (store, path, payload) = (store.clone(), path.clone(), payload.clone());
        let options = object_store::PutOptions {
            mode: mode.clone(),
            ..Default::default()
        };
        wait(async move { store.put_opts(&path, payload.into(), options).await })
            .map(|_| ())
            .map_err(|e| store_error(url, e))
    })
}

/// Whether [`create_bytes`] made the object or found one there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// This call made it.
    Made,
    /// An object of that name was there already (this call changed nothing).
    Found,
}

/// Puts `bytes` at `url` only where no object of that name is (S3's, GCS's and Azure's
/// conditional create), in one request: of several processes creating one name at once,
/// exactly one makes it. A store that cannot create conditionally (a plain web server) is
/// an `Unsupported` error.
pub fn create_bytes(bytes: Vec<u8>, url: &Path) -> io::Result<Created> {
    match put_bytes(bytes, url, object_store::PutMode::Create) {
        Ok(()) => Ok(Created::Made),
        // Also where an earlier try of this call made it and its answer was lost: the
        // caller reads what is there, which is what it put.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Created::Found),
        Err(e) => Err(e),
    }
}

enum UploadError {
    Read(io::Error),
    Store(object_store::Error),
}

async fn upload_file(
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    mut file: std::fs::File,
    size: u64,
) -> Result<(), UploadError> {
    use std::io::Read;
    let mut read = |n: usize| -> Result<Vec<u8>, UploadError> {
        let mut buf = vec![0u8; n];
        file.read_exact(&mut buf).map_err(UploadError::Read)?;
        Ok(buf)
    };
    if size <= SINGLE_UPLOAD_MAX as u64 {
        let bytes = read(size as usize)?;
        store
            .put(&path, Bytes::from(bytes).into())
            .await
            .map_err(UploadError::Store)?;
        return Ok(());
    }
    let upload = store
        .put_multipart(&path)
        .await
        .map_err(UploadError::Store)?;
    let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, UPLOAD_PART);
    let mut left = size;
    let mut failed = None;
    while left > 0 {
        let n = left.min(UPLOAD_PART as u64) as usize;
        // Memory stays at two parts whatever the file's size.
        if let Err(e) = writer.wait_for_capacity(UPLOADS_IN_FLIGHT).await {
            failed = Some(UploadError::Store(e));
            break;
        }
        match read(n) {
            Ok(bytes) => writer.put(Bytes::from(bytes)),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
        left -= n as u64;
    }
    match failed {
        None => writer
            .finish()
            .await
            .map(|_| ())
            .map_err(UploadError::Store),
        Some(e) => {
            // The parts sent so far are dropped (a store bills for parts never completed).
            let _ = writer.abort().await;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths() {
        for url in [
            "s3://b/k.wav",
            "gs://b/x",
            "az://c/x",
            "https://h/x.wav",
            "S3://b/k",
        ] {
            assert!(is_url(Path::new(url)), "{url}");
        }
        for path in [
            "/data/a.wav",
            "a.wav",
            "file.s3://x",
            "ftp://h/x",
            "s3:/b/k",
        ] {
            assert!(!is_url(Path::new(path)), "{path}");
        }
    }

    /// reqwest is built without a TLS provider of its own: a store whose client speaks HTTPS
    /// builds (reqwest panics at a client's build when rustls has no provider).
    #[test]
    fn https_stores_build_with_ring_as_the_tls_provider() {
        for url in ["https://example.com", "s3://bucket", "gs://bucket"] {
            build_store(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }

    #[test]
    fn a_url_splits_into_its_store_and_key() {
        let l = Location::parse(Path::new("s3://bucket/a/b c.wav")).unwrap();
        assert_eq!(
            (l.store.as_str(), l.key.as_str()),
            ("s3://bucket", "a/b c.wav")
        );
        assert_eq!(l.url_of("x/y.wav"), PathBuf::from("s3://bucket/x/y.wav"));
        let l = Location::parse(Path::new("gs://bucket")).unwrap();
        assert_eq!((l.store.as_str(), l.key.as_str()), ("gs://bucket", ""));
        assert!(Location::parse(Path::new("s3:///key")).is_err());
        for refused in [
            "https://user:secret@host/a.wav",
            "https://host/a.wav?X-Amz-Signature=1",
        ] {
            assert!(Location::parse(Path::new(refused)).is_err(), "{refused}");
        }
        let l = Location::parse(Path::new("s3://b/100%.wav")).unwrap();
        assert_eq!(
            l.object_path(Path::new("s3://b/100%.wav"))
                .unwrap()
                .as_ref(),
            "100%.wav"
        );
    }

    /// A store that counts the ranges asked of it.
    #[derive(Debug, Default)]
    struct Counted {
        inner: object_store::memory::InMemory,
        ranges: Mutex<Vec<Range<u64>>>,
    }

    impl std::fmt::Display for Counted {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Counted")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Counted {
        async fn put_opts(
            &self,
            location: &ObjectPath,
            payload: object_store::PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }

        async fn put_multipart_opts(
            &self,
            location: &ObjectPath,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }

        async fn get_opts(
            &self,
            location: &ObjectPath,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            if let Some(object_store::GetRange::Bounded(r)) = &options.range {
                self.ranges.lock().unwrap().push(r.clone());
            }
            self.inner.get_opts(location, options).await
        }

        fn delete_stream(
            &self,
            locations: futures_util::stream::BoxStream<'static, object_store::Result<ObjectPath>>,
        ) -> futures_util::stream::BoxStream<'static, object_store::Result<ObjectPath>> {
            self.inner.delete_stream(locations)
        }

        fn list(
            &self,
            prefix: Option<&ObjectPath>,
        ) -> futures_util::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.inner.list(prefix)
        }

        async fn list_with_delimiter(
            &self,
            prefix: Option<&ObjectPath>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }

        async fn copy_opts(
            &self,
            from: &ObjectPath,
            to: &ObjectPath,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    /// A read a short way past the block reads through the gap, reading further ahead each
    /// time (a tar listing hopping over small members streams in doubling blocks); one far
    /// past it fetches where it lands; bytes prefetched serve every read among them, wherever
    /// the first one lands (a sample's text member before its audio).
    #[test]
    fn short_hops_read_through_and_prefetched_bytes_serve_every_read() {
        let data: Vec<u8> = (0..4_000_000u32).map(|i| (i * 13 % 251) as u8).collect();
        let store = Arc::new(Counted::default());
        let path = ObjectPath::from("shard.tar");
        let payload = Bytes::from(data.clone());
        let put = store.clone();
        let p = path.clone();
        wait(async move { put.put(&p, payload.into()).await }).unwrap();
        let object =
            RemoteObject::open_in(store.clone(), path, Path::new("mem://shard.tar")).unwrap();
        let read = |at: u64| {
            let mut buf = vec![0u8; 512];
            let got = object.read_at(&mut buf, at).unwrap();
            assert_eq!(got, 512);
            assert_eq!(buf, data[at as usize..at as usize + 512], "at {at}");
        };
        for at in (0..=400_000).step_by(20_000) {
            read(at);
        }
        read(3_000_000);
        object.prefetch(3_500_000..3_600_000).unwrap();
        read(3_550_000);
        read(3_500_000);
        let ranges = store.ranges.lock().unwrap().clone();
        assert_eq!(
            ranges,
            [
                0..32_768,
                32_768..105_536,
                105_536..251_072,
                251_072..522_144,
                3_000_000..3_032_768,
                3_500_000..3_600_000,
            ]
        );
    }

    /// Reads in order fetch doubling blocks, the first block is kept for a return to the
    /// header, and a read among the bytes the reader expects fetches to their end at once:
    /// every byte read equals the object's.
    #[test]
    fn reads_fetch_doubling_blocks_and_an_expected_span_at_once() {
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let store = Arc::new(Counted::default());
        let path = ObjectPath::from("a.wav");
        let payload = Bytes::from(data.clone());
        let put = store.clone();
        let p = path.clone();
        wait(async move { put.put(&p, payload.into()).await }).unwrap();
        let object = RemoteObject::open_in(store.clone(), path, Path::new("mem://a.wav")).unwrap();
        assert_eq!(object.len(), 1_000_000);
        let read = |at: u64, n: usize| {
            let mut buf = vec![0u8; n];
            let got = object.read_at(&mut buf, at).unwrap();
            assert_eq!(
                &buf[..got],
                &data[at as usize..at as usize + got],
                "at {at}"
            );
            got
        };
        let mut at = 0;
        while at < 200_000 {
            at += read(at, 4096) as u64;
        }
        read(100, 44);
        object.expect(600_000..700_000);
        at = 600_000;
        while at < 700_000 {
            at += read(at, 8192) as u64;
        }
        assert_eq!(read(999_990, 100), 10);
        assert_eq!(read(1_000_000, 100), 0);
        let ranges = store.ranges.lock().unwrap().clone();
        let k = 1u64 << 10;
        assert_eq!(
            ranges,
            [
                0..32 * k,
                32 * k..96 * k,
                96 * k..224 * k,
                600_000..700_000,
                999_990..1_000_000
            ]
        );
    }
}
