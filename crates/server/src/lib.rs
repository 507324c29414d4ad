//! sonograph-server: the HTTP service of sonograph, on axum.
//!
//! - `GET /health` (liveness), `GET /ready` (200 once the devices are probed, else 503 with
//!   the reason), `GET /metrics` (OpenMetrics text: `sonograph_*` and dcgm-exporter names);
//! - `GET /api/v1/status`, the jobs API (`POST/GET /api/v1/jobs`, `GET/DELETE
//!   /api/v1/jobs/{id}`: a SQLite queue in the state directory, one job at a time),
//!   `GET /api/v1/alerts`, `GET /api/v1/telemetry?since=SECONDS`, `GET /api/v1/events`
//!   (server-sent events: `sample`, `alert` and `job`);
//! - the dashboard at `/` (one page, embedded in the binary, drawn from the event stream).
//!
//! Safety: loopback by default; any other address needs a token, checked on every endpoint
//! but `/health` and `/ready` (401 without it); a job's paths must resolve, symlinks included,
//! under a `--data-root` (403); bodies over 1 MiB get 413; malformed JSON and unknown fields
//! get 400 with the reason. SIGTERM (or SIGINT) stops taking jobs, stops the running one at a
//! batch boundary (its output resumable; it is queued again for the next start) and exits
//! within [`SHUTDOWN_DEADLINE`].

mod api;
pub mod devices;
mod error;
pub mod jobs;
pub mod metrics;
pub mod webhook;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sonograph_pipeline::telemetry::{Telemetry, TelemetryConfig, TelemetryEvent};
use tokio::sync::{broadcast, watch};

pub use devices::Devices;
pub use error::{ApiError, ServerError};
pub use jobs::{JobRecord, JobState, JobStore};

/// From SIGTERM to exit, at most: the running job stops at its next batch boundary well
/// within it; one that does not is left `running` in the queue and resumes at the next start,
/// as after kill -9.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(9);

/// Largest request body accepted (413 beyond).
pub const BODY_LIMIT: usize = 1 << 20;

/// `sonograph serve`'s settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub addr: SocketAddr,
    /// Where jobs may read and write; canonicalised at start.
    pub data_roots: Vec<PathBuf>,
    pub token: Option<String>,
    pub state_dir: PathBuf,
    /// The device of a job that names none.
    pub device: String,
    pub telemetry: TelemetryConfig,
    pub alert_webhook: Option<String>,
    /// `SONOGRAPH_DISABLE_DEVICES`.
    pub disabled_devices: Vec<String>,
}

/// An event of the stream: its name and JSON.
#[derive(Clone)]
pub(crate) struct Event {
    pub kind: &'static str,
    pub data: Arc<str>,
}

/// Everything the handlers share.
pub(crate) struct App {
    pub addr: SocketAddr,
    pub data_roots: Vec<PathBuf>,
    /// The same folders, opened: every file a job opens is opened beneath them.
    pub roots: sonograph_io::Roots,
    pub token: Option<String>,
    pub default_device: String,
    pub state_dir: Option<PathBuf>,
    pub telemetry: Arc<Telemetry>,
    pub devices: Devices,
    /// `None` for the read-only server of `extract --metrics-addr`.
    pub jobs: Option<Arc<JobStore>>,
    pub events: broadcast::Sender<Event>,
    /// `Ok` once the devices are probed; the reason otherwise.
    pub ready: Mutex<Result<(), String>>,
    pub stopping: AtomicBool,
    pub shutdown: watch::Sender<bool>,
    pub started: Instant,
}

impl App {
    pub fn publish(&self, kind: &'static str, value: &impl serde::Serialize) {
        // Nobody watching: no need to encode the event.
        if self.events.receiver_count() == 0 {
            return;
        }
        if let Ok(json) = serde_json::to_string(value) {
            // A receiver gone since the check above is not an error.
            let _ = self.events.send(Event {
                kind,
                data: json.into(),
            });
        }
    }

    pub fn is_ready(&self) -> Result<(), String> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err("shutting down".into());
        }
        self.ready.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops taking jobs, ends the event streams and cancels the running job.
    fn begin_shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.shutdown.send(true);
        if let Some(jobs) = &self.jobs {
            if let Some((id, live)) = jobs.running() {
                tracing::warn!("shutting down: job {id} stops at its next batch boundary and resumes at the next start");
                live.cancel();
            }
            jobs.notify();
        }
    }
}

impl jobs::Runner for App {
    fn roots(&self) -> sonograph_io::Roots {
        self.roots.clone()
    }
    fn open(
        &self,
        job: &mut jobs::Planned,
    ) -> Result<Vec<Box<dyn sonograph_dsp::Extractor>>, String> {
        self.devices.open(job)
    }
    fn release(&self) {
        self.devices.release();
    }
    fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }
    fn job_event(&self, id: i64, _state: JobState) {
        if let Some(Ok(Some(record))) = self.jobs.as_ref().map(|j| j.get(id)) {
            self.publish("job", &record);
        }
    }
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
    fn ready(&self) -> bool {
        self.is_ready().is_ok()
    }
}

/// Checks the address and token rule: loopback needs nothing, any other address a token.
fn check_bind(addr: &SocketAddr, token: &Option<String>) -> Result<(), ServerError> {
    if let Some(t) = token {
        if t.len() < 16 {
            return Err(ServerError::Config(
                "the token must be at least 16 characters".into(),
            ));
        }
    }
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(ServerError::Config(format!(
            "{addr} is not a loopback address: give --token (or SONOGRAPH_TOKEN) to serve on it"
        )));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn app(
    addr: SocketAddr,
    data_roots: Vec<PathBuf>,
    token: Option<String>,
    default_device: String,
    state_dir: Option<PathBuf>,
    telemetry: Arc<Telemetry>,
    devices: Devices,
    jobs: Option<Arc<JobStore>>,
) -> Arc<App> {
    let (events, _) = broadcast::channel(1024);
    let (shutdown, _) = watch::channel(false);
    // Opened once: the roots were just canonicalised, so only a folder removed since fails,
    // and a server whose roots cannot be opened confines its jobs to none.
    let roots = sonograph_io::Roots::beneath(&data_roots).unwrap_or_else(|e| {
        tracing::error!("the data roots: {e}; jobs can open no file");
        sonograph_io::Roots::beneath(&[]).expect("no folder to open")
    });
    let app = Arc::new(App {
        addr,
        roots,
        data_roots,
        token,
        default_device,
        state_dir,
        telemetry: telemetry.clone(),
        devices,
        jobs,
        events,
        ready: Mutex::new(Err("probing the devices".into())),
        stopping: AtomicBool::new(false),
        shutdown,
        started: Instant::now(),
    });
    let weak = Arc::downgrade(&app);
    telemetry.subscribe(move |e| {
        let Some(app) = weak.upgrade() else { return };
        match e {
            TelemetryEvent::Sample(s) => app.publish("sample", &**s),
            TelemetryEvent::Alert(a) => app.publish("alert", a),
        }
    });
    app
}

/// Runs `sonograph serve` until SIGTERM or SIGINT; `on_listening` is told the bound address
/// (port 0 picks one).
pub fn serve(
    config: ServerConfig,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServerError> {
    check_bind(&config.addr, &config.token)?;
    let mut roots = Vec::new();
    for r in &config.data_roots {
        let c = r
            .canonicalize()
            .map_err(|e| ServerError::Config(format!("--data-root {}: {e}", r.display())))?;
        if !c.is_dir() {
            return Err(ServerError::Config(format!(
                "--data-root {}: not a directory",
                r.display()
            )));
        }
        roots.push(c);
    }
    let store = Arc::new(JobStore::open(&config.state_dir)?);
    let devices = Devices::new(config.disabled_devices.clone());
    let telemetry = Telemetry::start(config.telemetry.clone(), devices.probe());
    if let Some(url) = &config.alert_webhook {
        telemetry.add_alert_sink(Box::new(
            webhook::Webhook::new(url).map_err(ServerError::Config)?,
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(yield_to_jobs)
        .enable_all()
        .build()?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(config.addr))
        .map_err(|source| ServerError::Bind {
            addr: config.addr.to_string(),
            source,
        })?;
    let local = listener.local_addr()?;
    let app = app(
        local,
        roots,
        config.token.clone(),
        config.device.clone(),
        Some(config.state_dir.clone()),
        telemetry.clone(),
        devices.clone(),
        Some(store.clone()),
    );
    {
        let app = app.clone();
        std::thread::Builder::new()
            .name("device-probe".into())
            .spawn(move || {
                let result = app.devices.discover();
                if let Err(e) = &result {
                    tracing::error!("devices: {e}");
                }
                *app.ready.lock().unwrap_or_else(|e| e.into_inner()) = result;
            })?;
    }
    let worker = {
        let (store, runner) = (store.clone(), app.clone() as Arc<dyn jobs::Runner>);
        std::thread::Builder::new()
            .name("jobs".into())
            .spawn(move || jobs::work(store, runner))?
    };
    tracing::info!("sonograph serve listening on http://{local}");
    on_listening(local);
    let router = api::router(app.clone());
    let signal_app = app.clone();
    let stopped_at = Arc::new(Mutex::new(None::<Instant>));
    let stopped = stopped_at.clone();
    let served = runtime.block_on(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                wait_for_signal().await;
                *stopped.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                tracing::info!(
                    "shutting down: no new jobs; the running job stops at a batch boundary"
                );
                signal_app.begin_shutdown();
            })
            .await
    });
    let since = stopped_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or_else(Instant::now);
    // The job stops at its next batch boundary; past the deadline it is left to resume.
    while !worker.is_finished() && since.elapsed() < SHUTDOWN_DEADLINE {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !worker.is_finished() {
        tracing::warn!("the running job did not stop in time; it resumes at the next start");
    }
    telemetry.stop();
    runtime.shutdown_timeout(Duration::from_millis(200));
    served.map_err(ServerError::Io)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The read-only server of `extract --metrics-addr`: `/metrics`, `/health`, the dashboard and
/// its read-only APIs, over the job's telemetry. Stops when dropped.
pub struct Sidecar {
    app: Arc<App>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: SocketAddr,
}

impl Sidecar {
    /// Starts serving on `addr` (a non-loopback address needs `token`).
    pub fn start(
        addr: SocketAddr,
        token: Option<String>,
        telemetry: Arc<Telemetry>,
        devices: Devices,
    ) -> Result<Self, ServerError> {
        check_bind(&addr, &token)?;
        let std_listener =
            std::net::TcpListener::bind(addr).map_err(|source| ServerError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        std_listener.set_nonblocking(true)?;
        let local = std_listener.local_addr()?;
        let app = app(
            local,
            Vec::new(),
            token,
            String::new(),
            None,
            telemetry,
            devices,
            None,
        );
        *app.ready.lock().unwrap_or_else(|e| e.into_inner()) = Ok(());
        let router = api::router(app.clone());
        let mut shutdown = app.shutdown.subscribe();
        let thread = std::thread::Builder::new()
            .name("metrics-server".into())
            .spawn(move || {
                yield_to_jobs();
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => return tracing::error!("metrics server: {e}"),
                };
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(std_listener) {
                        Ok(l) => l,
                        Err(e) => return tracing::error!("metrics server: {e}"),
                    };
                    let _ = axum::serve(listener, router)
                        .with_graceful_shutdown(async move {
                            let _ = shutdown.wait_for(|s| *s).await;
                        })
                        .await;
                });
            })?;
        Ok(Sidecar {
            app,
            thread: Some(thread),
            addr: local,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.app.begin_shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Lowers the calling thread to nice 10. The threads that answer HTTP (scrapes, the
/// dashboard, the API) call it when they start, so that under load a request waits for a core
/// the job is using instead of taking it from the job: a service watched by many clients must
/// not slow the work it reports on (tests/load.rs, whose clients call it too). The job's
/// threads are started elsewhere and keep their priority.
pub fn yield_to_jobs() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority take and return plain integers and touch no memory of
    // ours. On Linux, PRIO_PROCESS with a thread id sets that one thread's nice value. Raising
    // one's own nice value is allowed to any user; if it were refused, the thread would keep its
    // priority, which is only slower under load, so the result is not checked.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
}
