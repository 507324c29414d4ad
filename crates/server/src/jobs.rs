//! The jobs API's queue: jobs of every kind as JSON (their `kind` and options), their records
//! in SQLite in the state directory (`jobs.sqlite`), and one worker thread that runs them one at
//! a time on the server's devices, in the order they came. A server killed with a job running
//! finds it `running` at its next start, puts it back at the head of the queue, and the job's
//! own ledger resumes it.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sonograph_pipeline::request::{JobRequest, PlannedJob};
use sonograph_pipeline::{JobError, JobOptions, LiveJob, Plan, Report, Stages};

use crate::error::ServerError;

/// What the worker runs: a job's plan and its devices, parsed.
pub struct Planned {
    pub plan: Plan,
    pub devices: sonograph_gpu::JobDevices,
}

/// Plans a job of the jobs API: any kind, with the same options as the CLI and Python,
/// checked as they check them. A request never reads the server's environment (no shard from
/// its variables) nor a file of the server's by a path it gives (a spec is inline). The paths
/// are checked by [`resolve_under`].
pub fn plan(request: &JobRequest) -> Result<PlannedJob, String> {
    let spec_file = match request {
        JobRequest::Extract(o) => o.spec.as_ref().is_some_and(|s| s.is_file()),
        JobRequest::SynthIq(o) => o.spec.as_ref().is_some_and(|s| s.is_file()),
        JobRequest::RfFeatures(_) | JobRequest::Transcribe(_) => false,
    };
    if spec_file {
        // Reading a file the request names would let it read (or block on, or exhaust memory
        // with) any file of the server's; a request carries its spec.
        return Err(
            "spec: the service takes a spec inline (a JSON object, as `sonograph presets NAME` \
             prints it), not a file path"
                .into(),
        );
    }
    let planned = request.plan(|_| None).map_err(|e| e.to_string())?;
    if let PlannedJob::Extract(plan) = &planned {
        sonograph_gpu::JobDevices::parse(&plan.device, plan.gpu_memory.as_deref())?;
    }
    Ok(planned)
}

/// An extract job of the jobs API planned, with its devices parsed: what the worker runs.
pub fn plan_extract(options: &JobOptions) -> Result<Planned, String> {
    let PlannedJob::Extract(plan) = plan(&JobRequest::Extract(Box::new(options.clone())))? else {
        unreachable!("an extract request plans an extract job")
    };
    let devices = sonograph_gpu::JobDevices::parse(&plan.device, plan.gpu_memory.as_deref())?;
    Ok(Planned {
        plan: *plan,
        devices,
    })
}

/// `path` (relative ones taken from the first root) with every symlink resolved, when it lies
/// under one of `roots` (already canonical); `None` otherwise. A path that does not exist yet
/// (an output folder) is resolved through its nearest existing ancestor; `..` is refused in
/// the part that does not exist, where it could not be resolved.
pub fn resolve_under(path: &Path, roots: &[PathBuf]) -> Option<PathBuf> {
    let first = roots.first()?;
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        first.join(path)
    };
    let mut existing = path.as_path();
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let resolved = loop {
        match existing.canonicalize() {
            Ok(p) => break p,
            Err(_) => {
                let name = existing.file_name()?;
                rest.push(name);
                existing = existing.parent()?;
            }
        }
    };
    let mut full = resolved;
    for name in rest.iter().rev() {
        if Path::new(name)
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            return None;
        }
        full.push(name);
    }
    // `file_name` skips a trailing `..`: refuse any `..` left in what was asked.
    if path.components().any(|c| c == Component::ParentDir) && !rest.is_empty() {
        return None;
    }
    roots.iter().any(|r| full.starts_with(r)).then_some(full)
}

/// A job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Canceled,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Canceled => "canceled",
        }
    }

    fn parse(s: &str) -> JobState {
        match s {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "succeeded" => JobState::Succeeded,
            "canceled" => JobState::Canceled,
            _ => JobState::Failed,
        }
    }

    pub const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Canceled,
    ];
}

/// Where a job is.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Progress {
    pub items_total: u64,
    pub items_ok: u64,
    pub items_failed: u64,
    pub items_resumed: u64,
    pub audio_seconds: f64,
    /// Settled over total, 0 to 1.
    pub fraction: f64,
}

/// A job's record, as the API returns it.
#[derive(Debug, Clone, Serialize)]
pub struct JobRecord {
    pub id: i64,
    pub state: JobState,
    pub request: Value,
    pub created: f64,
    pub started: Option<f64>,
    pub finished: Option<f64>,
    /// How many times the job started (a server restart or a resubmission resumes it).
    pub attempts: i64,
    pub progress: Progress,
    pub report: Option<Value>,
    pub error: Option<String>,
    /// A cancel was asked for and the job stops at its next batch boundary.
    pub canceling: bool,
}

/// The jobs' records (SQLite) and the running job's live counters.
pub struct JobStore {
    /// Held while the server runs: two servers on one state directory would run its jobs
    /// twice.
    _lock: std::fs::File,
    db: Mutex<Connection>,
    running: Mutex<Option<(i64, Arc<LiveJob>)>>,
    wake: Condvar,
    wake_lock: Mutex<bool>,
}

fn db_err(e: rusqlite::Error) -> ServerError {
    ServerError::State(e.to_string())
}

impl JobStore {
    /// Opens (or creates) `state_dir/jobs.sqlite`; jobs left `running` by a killed server go
    /// back to `queued`, ahead of the others (they keep their ids, which are the queue order).
    pub fn open(state_dir: &Path) -> Result<Self, ServerError> {
        std::fs::create_dir_all(state_dir)
            .map_err(|e| ServerError::State(format!("{}: {e}", state_dir.display())))?;
        let lock_path = state_dir.join("serve.lock");
        let lock = std::fs::File::create(&lock_path)
            .map_err(|e| ServerError::State(format!("{}: {e}", lock_path.display())))?;
        if lock.try_lock().is_err() {
            return Err(ServerError::Config(format!(
                "{}: another sonograph serve uses this state directory",
                state_dir.display()
            )));
        }
        let path = state_dir.join("jobs.sqlite");
        let db = Connection::open(&path)
            .map_err(|e| ServerError::State(format!("{}: {e}", path.display())))?;
        db.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE IF NOT EXISTS jobs (
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 request TEXT NOT NULL,
                 state TEXT NOT NULL,
                 created REAL NOT NULL,
                 started REAL,
                 finished REAL,
                 attempts INTEGER NOT NULL DEFAULT 0,
                 progress TEXT,
                 report TEXT,
                 error TEXT
             );",
        )
        .map_err(db_err)?;
        let resumed = db
            .execute(
                "UPDATE jobs SET state = 'queued' WHERE state = 'running'",
                [],
            )
            .map_err(db_err)?;
        if resumed > 0 {
            tracing::warn!(
                jobs = resumed,
                "jobs were running when the server stopped; they resume first"
            );
        }
        Ok(JobStore {
            _lock: lock,
            db: Mutex::new(db),
            running: Mutex::new(None),
            wake: Condvar::new(),
            wake_lock: Mutex::new(false),
        })
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a job; returns its id.
    pub fn submit(&self, request: &JobRequest) -> Result<i64, ServerError> {
        let json = request.to_value().to_string();
        let db = self.db();
        db.execute(
            "INSERT INTO jobs (request, state, created) VALUES (?1, 'queued', ?2)",
            params![json, sonograph_pipeline::telemetry::unix_now()],
        )
        .map_err(db_err)?;
        let id = db.last_insert_rowid();
        drop(db);
        self.notify();
        Ok(id)
    }

    /// Wakes the worker (a job was queued, or the server is stopping).
    pub fn notify(&self) {
        *self.wake_lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
    }

    /// Waits up to `timeout` for [`Self::notify`].
    fn wait(&self, timeout: std::time::Duration) {
        let guard = self.wake_lock.lock().unwrap_or_else(|e| e.into_inner());
        let (mut woken, _) = self
            .wake
            .wait_timeout_while(guard, timeout, |woken| !*woken)
            .unwrap_or_else(|e| e.into_inner());
        *woken = false;
    }

    pub fn list(&self) -> Result<Vec<JobRecord>, ServerError> {
        let ids: Vec<i64> = {
            let db = self.db();
            let mut stmt = db
                .prepare("SELECT id FROM jobs ORDER BY id DESC LIMIT 1000")
                .map_err(db_err)?;
            let rows = stmt.query_map([], |r| r.get(0)).map_err(db_err)?;
            rows.collect::<Result<_, _>>().map_err(db_err)?
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(r) = self.get(id)? {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Counts by state.
    pub fn counts(&self) -> Result<Vec<(JobState, i64)>, ServerError> {
        let db = self.db();
        let mut stmt = db
            .prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state")
            .map_err(db_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((JobState::parse(&r.get::<_, String>(0)?), r.get(1)?))
            })
            .map_err(db_err)?;
        rows.collect::<Result<_, _>>().map_err(db_err)
    }

    pub fn get(&self, id: i64) -> Result<Option<JobRecord>, ServerError> {
        let row = self
            .db()
            .query_row(
                "SELECT request, state, created, started, finished, attempts, progress, report, error
                 FROM jobs WHERE id = ?1",
                params![id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, f64>(2)?,
                        r.get::<_, Option<f64>>(3)?,
                        r.get::<_, Option<f64>>(4)?,
                        r.get::<_, i64>(5)?,
                        r.get::<_, Option<String>>(6)?,
                        r.get::<_, Option<String>>(7)?,
                        r.get::<_, Option<String>>(8)?,
                    ))
                },
            )
            .optional()
            .map_err(db_err)?;
        let Some((request, state, created, started, finished, attempts, progress, report, error)) =
            row
        else {
            return Ok(None);
        };
        let state = JobState::parse(&state);
        let report: Option<Value> = report.and_then(|r| serde_json::from_str(&r).ok());
        let live = self.live(id);
        let progress = match (&live, &report) {
            (Some(live), _) => {
                let c = live.counters();
                progress_of(
                    c.items_total,
                    c.items_ok,
                    c.items_failed,
                    c.items_resumed,
                    c.audio_seconds,
                )
            }
            // An extract, rf-features or transcribe job's report counts its items; a synth-iq
            // job's does not (its progress as last saved stands).
            (None, Some(r)) if r.get("items_total").is_some() => {
                let n = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
                progress_of(
                    n("items_total"),
                    n("items_ok").saturating_sub(n("items_resumed")),
                    n("items_failed"),
                    n("items_resumed"),
                    r.get("audio_seconds")
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0),
                )
            }
            (None, _) => progress
                .and_then(|p| serde_json::from_str::<Value>(&p).ok())
                .map(|p| {
                    let n = |k: &str| p.get(k).and_then(Value::as_u64).unwrap_or(0);
                    progress_of(
                        n("items_total"),
                        n("items_ok"),
                        n("items_failed"),
                        n("items_resumed"),
                        p.get("audio_seconds")
                            .and_then(Value::as_f64)
                            .unwrap_or(0.0),
                    )
                })
                .unwrap_or_default(),
        };
        Ok(Some(JobRecord {
            id,
            state,
            request: serde_json::from_str(&request).unwrap_or(Value::Null),
            created,
            started,
            finished,
            attempts,
            progress,
            report,
            error,
            canceling: live.is_some_and(|l| l.is_canceled()),
        }))
    }

    fn live(&self, id: i64) -> Option<Arc<LiveJob>> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .filter(|(r, _)| *r == id)
            .map(|(_, l)| l.clone())
    }

    /// The running job, if any.
    pub fn running(&self) -> Option<(i64, Arc<LiveJob>)> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Cancels job `id`: a queued one at once, a running one at its next batch boundary.
    /// `Ok(None)` when there is no such job; `Err(state)` when it has already ended.
    pub fn cancel(&self, id: i64) -> Result<Option<Result<JobState, JobState>>, ServerError> {
        if let Some(live) = self.live(id) {
            live.cancel();
            return Ok(Some(Ok(JobState::Running)));
        }
        let db = self.db();
        let changed = db
            .execute(
                "UPDATE jobs SET state = 'canceled', finished = ?2 WHERE id = ?1 AND state = 'queued'",
                params![id, sonograph_pipeline::telemetry::unix_now()],
            )
            .map_err(db_err)?;
        if changed == 1 {
            return Ok(Some(Ok(JobState::Canceled)));
        }
        let state: Option<String> = db
            .query_row("SELECT state FROM jobs WHERE id = ?1", params![id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(db_err)?;
        Ok(state.map(|s| Err(JobState::parse(&s))))
    }

    /// The oldest queued job, marked running.
    fn claim(&self) -> Result<Option<(i64, JobRequest)>, ServerError> {
        let db = self.db();
        let next: Option<(i64, String)> = db
            .query_row(
                "SELECT id, request FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db_err)?;
        let Some((id, request)) = next else {
            return Ok(None);
        };
        db.execute(
            "UPDATE jobs SET state = 'running', started = ?2, attempts = attempts + 1, error = NULL
             WHERE id = ?1",
            params![id, sonograph_pipeline::telemetry::unix_now()],
        )
        .map_err(db_err)?;
        match serde_json::from_str(&request) {
            Ok(r) => Ok(Some((id, r))),
            Err(e) => {
                self.finish_locked(&db, id, JobState::Failed, None, Some(e.to_string()))?;
                Ok(None)
            }
        }
    }

    fn finish(
        &self,
        id: i64,
        state: JobState,
        report: Option<&Value>,
        error: Option<String>,
    ) -> Result<(), ServerError> {
        let db = self.db();
        self.finish_locked(&db, id, state, report, error)
    }

    fn finish_locked(
        &self,
        db: &Connection,
        id: i64,
        state: JobState,
        report: Option<&Value>,
        error: Option<String>,
    ) -> Result<(), ServerError> {
        let report = report.map(Value::to_string);
        let finished = (state != JobState::Queued).then(sonograph_pipeline::telemetry::unix_now);
        db.execute(
            "UPDATE jobs SET state = ?2, finished = ?3, report = COALESCE(?4, report), error = ?5
             WHERE id = ?1",
            params![id, state.as_str(), finished, report, error],
        )
        .map_err(db_err)?;
        Ok(())
    }

    fn save_progress(&self, id: i64, live: &LiveJob) {
        let c = live.counters();
        let p = progress_of(
            c.items_total,
            c.items_ok,
            c.items_failed,
            c.items_resumed,
            c.audio_seconds,
        );
        if let Ok(json) = serde_json::to_string(&p) {
            let _ = self.db().execute(
                "UPDATE jobs SET progress = ?2 WHERE id = ?1",
                params![id, json],
            );
        }
    }
}

fn progress_of(total: u64, ok: u64, failed: u64, resumed: u64, audio_seconds: f64) -> Progress {
    let settled = ok + failed + resumed;
    Progress {
        items_total: total,
        items_ok: ok,
        items_failed: failed,
        items_resumed: resumed,
        audio_seconds,
        fraction: if total == 0 {
            0.0
        } else {
            (settled as f64 / total as f64).min(1.0)
        },
    }
}

/// What the worker needs from the server: where to open devices, the telemetry to attach the
/// job to, and whom to tell about job events.
pub trait Runner: Send + Sync {
    /// Where jobs may open files: every file of a job is opened beneath these.
    fn roots(&self) -> sonograph_io::Roots;
    /// Opens the job's devices.
    fn open(&self, job: &mut Planned) -> Result<Vec<Box<dyn sonograph_dsp::Extractor>>, String>;
    /// The job has ended: its devices are free again.
    fn release(&self);
    fn telemetry(&self) -> &sonograph_pipeline::telemetry::Telemetry;
    /// A job changed state.
    fn job_event(&self, id: i64, state: JobState);
    /// The server is stopping: take no new job, and requeue one that is stopped by it.
    fn stopping(&self) -> bool;
    /// The devices are probed: jobs may start.
    fn ready(&self) -> bool;
}

/// The worker: runs queued jobs one at a time until the server stops.
pub fn work(store: Arc<JobStore>, runner: Arc<dyn Runner>) {
    loop {
        if runner.stopping() {
            return;
        }
        if !runner.ready() {
            // Jobs start once the devices are probed (what /ready says).
            store.wait(std::time::Duration::from_millis(100));
            continue;
        }
        let claimed = match store.claim() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("job queue: {e}");
                store.wait(std::time::Duration::from_secs(1));
                continue;
            }
        };
        let Some((id, request)) = claimed else {
            store.wait(std::time::Duration::from_millis(500));
            continue;
        };
        run_one(&store, runner.as_ref(), id, &request);
    }
}

/// Runs the job `request` of the queue, by its kind.
fn run_one(store: &JobStore, runner: &dyn Runner, id: i64, request: &JobRequest) {
    match request {
        JobRequest::Extract(options) => run_extract(store, runner, id, options),
        JobRequest::SynthIq(options) => run_on_cpu(store, runner, id, |live, roots| {
            let mut plan = options.plan(|_| None).map_err(planning_failed)?;
            plan.job.roots = roots;
            let report = sonograph_pipeline::synth_iq::run_synth_iq_on_threads(
                &plan.job,
                None,
                plan.workers,
                live,
            )
            .map_err(job_state)?;
            report_value(&report)
        }),
        JobRequest::RfFeatures(options) => run_on_cpu(store, runner, id, |live, roots| {
            let mut plan = options.plan(|_| None).map_err(planning_failed)?;
            plan.job.roots = roots;
            plan.job.max_group_bytes = Some(RF_GROUP_BYTES);
            let outcome =
                sonograph_pipeline::rf_features::run_rf_features_live(&plan.job, None, live)
                    .map_err(job_state)?;
            report_value(outcome.report())
        }),
        // onnxruntime on the server's CPU, the library the server's (SONOGRAPH_ORT_LIB).
        JobRequest::Transcribe(options) => run_on_cpu(store, runner, id, |live, roots| {
            let mut job = options.plan(|_| None).map_err(planning_failed)?;
            job.roots = roots;
            let outcome = sonograph_pipeline::transcribe::run_transcribe_live(&job, live)
                .map_err(job_state)?;
            report_value(outcome.report())
        }),
    }
}

/// The samples an rf-features job of the service reads at once: four recordings of the
/// largest it reads (1 GiB each, see the API's bounds).
const RF_GROUP_BYTES: u64 = 4 << 30;

/// A job that runs on the server's CPU threads (synth-iq, rf-features, transcribe): `run` gets
/// its live counters and the data roots its reads and writes are held beneath, and gives its
/// report.
fn run_on_cpu(
    store: &JobStore,
    runner: &dyn Runner,
    id: i64,
    run: impl FnOnce(&LiveJob, sonograph_io::Roots) -> Result<Value, (JobState, String)>,
) {
    runner.job_event(id, JobState::Running);
    let live = LiveJob::new();
    *store.running.lock().unwrap_or_else(|e| e.into_inner()) = Some((id, live.clone()));
    let telemetry = runner.telemetry();
    telemetry.attach_job(&id.to_string(), live.clone());
    let outcome = caught(id, || run(&live, runner.roots()));
    telemetry.detach_job();
    record_end(store, runner, id, &live, outcome, || None);
}

fn planning_failed(e: JobError) -> (JobState, String) {
    (JobState::Failed, e.to_string())
}

fn report_value(report: &impl serde::Serialize) -> Result<Value, (JobState, String)> {
    serde_json::to_value(report).map_err(|e| (JobState::Failed, e.to_string()))
}

/// A job's error as the state it ends in, and why.
fn job_state(e: JobError) -> (JobState, String) {
    match e {
        JobError::Canceled { .. } => (JobState::Canceled, e.to_string()),
        e => (JobState::Failed, e.to_string()),
    }
}

/// `run`'s outcome; a bug tripped by one job fails that job, with its message, and the queue
/// goes on (the worker thread would otherwise end, and every later job wait forever).
fn caught<T>(
    id: i64,
    run: impl FnOnce() -> Result<T, (JobState, String)>,
) -> Result<T, (JobState, String)> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|payload| {
        let text = sonograph_pipeline::panic_text(&*payload);
        tracing::error!("job {id}: internal error: {text}");
        Err((JobState::Failed, format!("internal error: {text}")))
    })
}

/// Records how job `id` ended: its progress, state and report (the one the run wrote, from
/// `written_report`, where it stopped early), and tells the runner.
fn record_end(
    store: &JobStore,
    runner: &dyn Runner,
    id: i64,
    live: &LiveJob,
    outcome: Result<Value, (JobState, String)>,
    written_report: impl FnOnce() -> Option<Value>,
) {
    store.save_progress(id, live);
    let (state, report, error) = match outcome {
        Ok(report) => (JobState::Succeeded, Some(report), None),
        // Stopped by the server's shutdown rather than a user: the job goes back to the queue
        // and resumes at the next start.
        Err((JobState::Canceled, _)) if runner.stopping() => (
            JobState::Queued,
            None,
            Some("stopped by a server shutdown; resumes at the next start".into()),
        ),
        Err((state, e)) => (state, written_report(), Some(e)),
    };
    *store.running.lock().unwrap_or_else(|e| e.into_inner()) = None;
    if let Err(e) = store.finish(id, state, report.as_ref(), error) {
        tracing::error!("job {id}: cannot record its end: {e}");
    }
    runner.job_event(id, state);
}

fn run_extract(store: &JobStore, runner: &dyn Runner, id: i64, request: &JobOptions) {
    runner.job_event(id, JobState::Running);
    let live = LiveJob::new();
    *store.running.lock().unwrap_or_else(|e| e.into_inner()) = Some((id, live.clone()));
    let mut opened = false;
    let run = || -> Result<Value, (JobState, String)> {
        let mut job = plan_extract(request).map_err(|e| (JobState::Failed, e))?;
        job.plan.config.roots = runner.roots();
        let devices = runner.open(&mut job).map_err(|e| (JobState::Failed, e))?;
        opened = true;
        let telemetry = runner.telemetry();
        telemetry.attach_job(&id.to_string(), live.clone());
        fail::fail_point!("server::job_panic");
        let result = sonograph_pipeline::run_live(
            &job.plan.config,
            devices,
            Stages::default(),
            live.clone(),
        );
        telemetry.detach_job();
        runner.release();
        opened = false;
        let outcome = result.map_err(job_state)?;
        serde_json::to_value(outcome.report()).map_err(|e| (JobState::Failed, e.to_string()))
    };
    let outcome = caught(id, run);
    if opened {
        runner.telemetry().detach_job();
        runner.release();
    }
    // A job that stopped early still wrote its report: the record keeps it.
    let written_report = || -> Option<Value> {
        let layout = sonograph_pipeline::OutputLayout::new(
            &request.out,
            request.shard_index.unwrap_or(0),
            request.shard_count.unwrap_or(1),
        );
        let text = std::fs::read_to_string(layout.report).ok()?;
        let report: Report = serde_json::from_str(&text).ok()?;
        serde_json::to_value(report).ok()
    };
    record_end(store, runner, id, &live, outcome, written_report);
}
