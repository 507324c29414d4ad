//! The routes and their handlers.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use crate::error::ApiError;
use crate::jobs::{resolve_under, JobState};
use crate::{metrics, App, BODY_LIMIT};
use sonograph_pipeline::request::{JobRequest, PlannedJob};
use sonograph_pipeline::transcribe::SegmentMode;
use sonograph_pipeline::JobOptions;

type Shared = State<Arc<App>>;

/// The dashboard: one page with its script and styles, embedded (no CDN: the machine may
/// have no internet).
const DASHBOARD: &str = include_str!("../assets/index.html");

pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics_text))
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/v1/status", get(status))
        .route("/api/v1/jobs", get(list_jobs).post(submit_job))
        .route("/api/v1/plan", axum::routing::post(plan_job))
        .route("/api/v1/jobs/{id}", get(get_job).delete(cancel_job))
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/telemetry", get(telemetry))
        .route("/api/v1/events", get(events))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), authorize))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(app)
}

/// The jobs API as OpenAPI 3.1, generated from the handlers and the request types they read
/// ([`JobOptions`], an extract job's, and the other kinds' options, named by `kind`): what a
/// client generator or schemathesis reads.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "sonograph",
        description = "Audio and RF features as a service: jobs on a queue, their plans, \
                       devices, telemetry and alerts. Paths are confined to the service's data \
                       roots; a spec is given as an object (the service reads no spec files)."
    ),
    paths(
        health, ready, status, list_jobs, submit_job, plan_job, get_job, cancel_job, alerts,
        telemetry
    ),
    components(schemas(
        JobOptions,
        sonograph_pipeline::rf_options::RfFeaturesOptions,
        sonograph_pipeline::rf_options::SynthIqOptions,
        sonograph_pipeline::transcribe_options::TranscribeOptions,
        ErrorBody
    )),
    modifiers(&BearerToken)
)]
pub struct ApiDoc;

/// Every path but /health and /ready asks for the server's token (`--token`), as
/// `Authorization: Bearer TOKEN`.
struct BearerToken;

impl utoipa::Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            Http, HttpAuthScheme, SecurityRequirement, SecurityScheme,
        };
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        openapi.security = Some(vec![SecurityRequirement::new(
            "token",
            Vec::<String>::new(),
        )]);
    }
}

/// The answer of every error: `{"error": reason}`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // read by the OpenAPI description only
struct ErrorBody {
    /// Why, in one line.
    error: String,
}

async fn openapi() -> Response {
    use utoipa::OpenApi;
    Json(ApiDoc::openapi()).into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such endpoint")
}

/// Equal in time whatever the token and whatever the first difference: the two are hashed
/// first, so neither a prefix nor the length shows in the time taken.
fn same(offered: &str, token: &str) -> bool {
    use sha2::{Digest, Sha256};
    use subtle::ConstantTimeEq;
    Sha256::digest(offered.as_bytes())
        .ct_eq(&Sha256::digest(token.as_bytes()))
        .into()
}

/// The tokens a request offers, decoded: `Authorization: Bearer`, the dashboard's cookie
/// (percent-encoded, as the server sets it), or `?token=` (form-encoded; the dashboard's first
/// load uses it, and EventSource cannot send headers).
fn presented(headers: &HeaderMap, query: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        if let Some(t) = v.strip_prefix("Bearer ") {
            out.push(t.trim().to_string());
        }
    }
    for header in headers.get_all(header::COOKIE) {
        if let Ok(text) = header.to_str() {
            for cookie in cookie::Cookie::split_parse_encoded(text).flatten() {
                if cookie.name() == TOKEN_COOKIE {
                    out.push(cookie.value().to_string());
                }
            }
        }
    }
    out.extend(query_token(query));
    out
}

/// The dashboard's cookie.
const TOKEN_COOKIE: &str = "sonograph_token";

/// `?token=`, decoded.
fn query_token(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
}

/// A name that only this machine answers to: `localhost` (and its subdomains, RFC 6761), a
/// 127.0.0.0/8 address or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, port)) if port.is_empty() || port.starts_with(':') => addr,
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

async fn authorize(State(app): Shared, request: Request, next: Next) -> Response {
    let Some(token) = app.token.clone() else {
        // Without a token the server is on loopback, and answers only requests addressed to
        // a loopback name: a page elsewhere whose name was made to resolve to 127.0.0.1 (DNS
        // rebinding) must not reach the jobs API through the user's browser.
        if let Some(host) = request.headers().get(header::HOST) {
            let host = host.to_str().unwrap_or("");
            if !is_loopback_host(host) {
                return ApiError::new(
                    StatusCode::MISDIRECTED_REQUEST,
                    format!(
                        "Host {host:?} is not a loopback name: a server without --token answers \
                         localhost, 127.0.0.1 and [::1] only"
                    ),
                )
                .into_response();
            }
        }
        return next.run(request).await;
    };
    let path = request.uri().path();
    if path == "/health" || path == "/ready" {
        return next.run(request).await;
    }
    let offered = presented(request.headers(), request.uri().query());
    if !offered.iter().any(|t| same(t, &token)) {
        let mut r = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "a token is needed: Authorization: Bearer TOKEN",
        )
        .into_response();
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    }
    let from_query = query_token(request.uri().query()).is_some();
    let mut response = next.run(request).await;
    if from_query {
        // The dashboard opened with ?token= keeps it in a cookie for its API calls.
        let cookie = cookie::Cookie::build((TOKEN_COOKIE, token))
            .http_only(true)
            .same_site(cookie::SameSite::Strict)
            .path("/")
            .build();
        if let Ok(v) = HeaderValue::from_str(&cookie.encoded().to_string()) {
            response.headers_mut().insert(header::SET_COOKIE, v);
        }
    }
    response
}

async fn dashboard() -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], Html(DASHBOARD))
}

#[utoipa::path(get, path = "/health", tag = "service", security(()),
    responses((status = 200, description = "the process serves", body = Object)))]
async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

#[utoipa::path(get, path = "/ready", tag = "service", security(()),
    responses((status = 200, description = "ready for jobs", body = Object),
              (status = 503, description = "not ready, and why", body = Object)))]
async fn ready(State(app): Shared) -> Response {
    match app.is_ready() {
        Ok(()) => Json(json!({ "status": "ready" })).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "not ready", "reason": reason })),
        )
            .into_response(),
    }
}

async fn metrics_text(State(app): Shared) -> Result<Response, ApiError> {
    let text = tokio::task::spawn_blocking(move || {
        let sample = app.telemetry.latest();
        let totals = app.telemetry.totals();
        let alerts = app.telemetry.alerts();
        let jobs = match &app.jobs {
            Some(j) => j.counts().unwrap_or_default(),
            None => Vec::new(),
        };
        metrics::render(&metrics::Scrape {
            sample: sample.as_deref(),
            totals: &totals,
            alerts: &alerts,
            jobs: &jobs,
            job_running: app.jobs.as_ref().map(|j| j.running().is_some()),
            ready: app.is_ready().is_ok(),
        })
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response())
}

#[utoipa::path(get, path = "/api/v1/status", tag = "service",
    responses((status = 200, description = "version, devices, pools, running job, configuration", body = Object), (status = 401, description = "a token is required and was not given", body = ErrorBody)))]
async fn status(State(app): Shared) -> Json<Value> {
    let latest = app.telemetry.latest();
    let running = app
        .jobs
        .as_ref()
        .and_then(|j| j.running())
        .map(|(id, _)| id);
    let config = app.telemetry.config();
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": app.started.elapsed().as_secs_f64(),
        "ready": app.is_ready().is_ok(),
        "devices": app.devices.list(),
        "pools": latest.as_ref().map(|s| s.devices.iter()
            .filter_map(|d| d.pool.as_ref().map(|p| json!({"device": d.reading.id, "stats": p})))
            .collect::<Vec<_>>()),
        "running_job": running,
        "configuration": {
            "addr": app.addr.to_string(),
            "data_roots": app.data_roots,
            "state_dir": app.state_dir,
            "default_device": app.default_device,
            "token_required": app.token.is_some(),
            "jobs_api": app.jobs.is_some(),
            "telemetry_interval_s": config.interval.as_secs_f64(),
            "telemetry_history": config.history,
            "alert_rules": config.rules,
            "body_limit_bytes": BODY_LIMIT,
        },
        "optimisations": {
            "gpu_backend_built": sonograph_gpu::GPU_BUILT,
            "nvml_telemetry": sonograph_gpu::nvml::available(),
            "adaptive_batching_with_oom_split": true,
            "bounded_prefetch": true,
            "parquet_byte_stream_split_zstd": true,
        },
    }))
}

/// A job's id from its path, or the API's 400 answer (not axum's plain-text one).
fn job_id(id: Result<Path<i64>, PathRejection>) -> Result<i64, ApiError> {
    id.map(|Path(id)| id)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))
}

fn jobs_of(app: &App) -> Result<&crate::JobStore, ApiError> {
    app.jobs.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no jobs API here (extract --metrics-addr serves its own job only)",
        )
    })
}

#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs",
    responses((status = 200, description = "every job, newest first", body = Object),
              (status = 404, description = "no jobs API here", body = ErrorBody), (status = 401, description = "a token is required and was not given", body = ErrorBody)))]
async fn list_jobs(State(app): Shared) -> Result<Json<Value>, ApiError> {
    tokio::task::spawn_blocking(move || {
        let jobs = jobs_of(&app)?.list()?;
        Ok(Json(json!({ "jobs": jobs })))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = i64, Path, description = "the job's id")),
    responses((status = 200, description = "the job, its state and report", body = Object),
              (status = 400, description = "an id that is not a number", body = ErrorBody),
              (status = 404, description = "no such job", body = ErrorBody), (status = 401, description = "a token is required and was not given", body = ErrorBody)))]
async fn get_job(
    State(app): Shared,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = job_id(id)?;
    tokio::task::spawn_blocking(move || match jobs_of(&app)?.get(id)? {
        Some(job) => Ok(Json(serde_json::to_value(job).unwrap_or(Value::Null))),
        None => Err(ApiError::new(StatusCode::NOT_FOUND, format!("no job {id}"))),
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

#[utoipa::path(delete, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = i64, Path, description = "the job's id")),
    responses((status = 200, description = "a queued job, canceled", body = Object),
              (status = 202, description = "a running job, stopping at its next batch", body = Object),
              (status = 400, description = "an id that is not a number", body = ErrorBody),
              (status = 404, description = "no such job", body = ErrorBody),
              (status = 409, description = "the job has ended already", body = ErrorBody), (status = 401, description = "a token is required and was not given", body = ErrorBody)))]
async fn cancel_job(
    State(app): Shared,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = job_id(id)?;
    tokio::task::spawn_blocking(move || {
        let jobs = jobs_of(&app)?;
        match jobs.cancel(id)? {
            None => Err(ApiError::new(StatusCode::NOT_FOUND, format!("no job {id}"))),
            Some(Err(state)) => Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("job {id} is {} already", state.as_str()),
            )),
            Some(Ok(JobState::Running)) => Ok((
                StatusCode::ACCEPTED,
                Json(json!({"id": id, "state": "running", "canceling": true})),
            )
                .into_response()),
            Some(Ok(state)) => {
                if let Ok(Some(r)) = jobs.get(id) {
                    app.publish("job", &r);
                }
                Ok(Json(json!({"id": id, "state": state})).into_response())
            }
        }
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

/// The largest IQ recording a request may have the service make (synth-iq) or read
/// (rf-features), in bytes of cf32 samples; and the most audio a transcribe job may hold, in
/// bytes of f32 samples at [`TRANSCRIBE_RATE`].
const SERVICE_RECORDING_BYTES: u64 = 1 << 30;

/// The rate transcribe's models take their audio at.
const TRANSCRIBE_RATE: u32 = 16_000;

/// A job as a request gives it (`kind` and the kind's options), planned, held to the data
/// roots and to the service's bounds: what `POST /api/v1/plan` shows and `POST /api/v1/jobs`
/// queues. The paths in the options are resolved (symlinks and all) beneath a root; the plan
/// holds them so.
fn accept(app: &App, body: &[u8]) -> Result<(JobRequest, PlannedJob), ApiError> {
    let bad = |e: String| ApiError::new(StatusCode::BAD_REQUEST, format!("invalid job: {e}"));
    let mut value: Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    if let Some(o) = value.as_object_mut() {
        // The server's default device for a feature job that names none (RF jobs run on the
        // CPU unless they ask for a GPU, as on the command line).
        if o.get("kind").and_then(Value::as_str).unwrap_or("extract") == "extract" {
            o.entry("device")
                .or_insert(app.default_device.clone().into());
        }
    }
    let mut request = JobRequest::from_value(value).map_err(bad)?;
    crate::jobs::plan(&request).map_err(bad)?;
    if app.data_roots.is_empty() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "this server has no --data-root: it runs no job",
        ));
    }
    let roots = &app.data_roots;
    let forbidden = |what: &str, p: &std::path::Path| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "{what} {} does not resolve under a --data-root",
                p.display()
            ),
        )
    };
    let under = |what: &str, p: &std::path::Path| {
        if sonograph_io::remote::is_url(p) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "{what} {}: object storage is outside the data roots",
                    p.display()
                ),
            ));
        }
        resolve_under(p, roots).ok_or_else(|| forbidden(what, p))
    };
    let existing = |what: &str, p: &std::path::Path| {
        let resolved = under(what, p)?;
        if !resolved.exists() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("{what} {} does not exist", p.display()),
            ));
        }
        Ok(resolved)
    };
    match &mut request {
        JobRequest::Extract(o) => {
            // Both read or write outside the data roots: a work folder serves an output in
            // object storage, and the augmentation reads its own corpora.
            for (given, what) in [
                (o.work_dir.is_some(), "work-dir"),
                (o.augment.is_some(), "augment"),
            ] {
                if given {
                    return Err(ApiError::new(
                        StatusCode::FORBIDDEN,
                        format!("{what}: not in the service (it reads and writes beneath its data roots only)"),
                    ));
                }
            }
            o.source = existing("source", &o.source)?;
            o.out = under("out", &o.out)?;
            if let Some(model) = &o.model {
                let resolved = existing("model", model)?;
                if !resolved.is_file() {
                    return Err(ApiError::new(
                        StatusCode::BAD_REQUEST,
                        format!("model {} is not a file", model.display()),
                    ));
                }
                o.model = Some(resolved);
            }
        }
        JobRequest::RfFeatures(o) => {
            o.source = existing("source", &o.source)?;
            o.out = under("out", &o.out)?;
            // The service reads recordings it can hold: its default is its own limit (the
            // command line's default, given explicitly, is taken as the default too).
            if o.max_samples == sonograph_pipeline::defaults::MAX_SAMPLES {
                o.max_samples = o.max_samples.min(SERVICE_RECORDING_BYTES / 8);
            }
        }
        JobRequest::SynthIq(o) => o.out = under("out", &o.out)?,
        JobRequest::Transcribe(o) => {
            o.source = existing("source", &o.source)?;
            o.out = under("out", &o.out)?;
            if let Some(model) = &o.model {
                o.model = Some(existing("model", model)?);
            }
        }
    }
    let planned = crate::jobs::plan(&request).map_err(bad)?;
    service_bounds(&planned).map_err(bad)?;
    Ok((request, planned))
}

/// The memory a job of the service may hold, checked on its plan (so `POST /api/v1/plan` says
/// what `POST /api/v1/jobs` would refuse): a synthetic recording made, an IQ recording read,
/// or a transcribe batch of audio, each at most [`SERVICE_RECORDING_BYTES`].
fn service_bounds(planned: &PlannedJob) -> Result<(), String> {
    let gib = |bytes: f64| bytes / f64::from(1u32 << 30);
    let limit = SERVICE_RECORDING_BYTES as f64;
    let limit_gib = SERVICE_RECORDING_BYTES >> 30;
    match planned {
        PlannedJob::Extract(_) => Ok(()),
        PlannedJob::SynthIq(plan) => {
            let samples = plan.job.spec.n_samples as u64;
            let bytes = (samples * 8) as f64;
            if bytes > limit {
                return Err(format!(
                    "samples: a recording of {samples} samples holds {:.1} GiB; the service \
                     makes recordings of up to {limit_gib} GiB",
                    gib(bytes)
                ));
            }
            Ok(())
        }
        PlannedJob::RfFeatures(plan) => {
            let samples = plan.job.max_samples;
            let bytes = (samples * 8) as f64;
            if bytes > limit {
                return Err(format!(
                    "max-samples: {samples} complex samples hold {:.1} GiB; the service reads \
                     recordings of up to {} samples ({limit_gib} GiB)",
                    gib(bytes),
                    SERVICE_RECORDING_BYTES / 8
                ));
            }
            Ok(())
        }
        // A batch of segments, each up to the window or (cut by VAD) its longest speech.
        PlannedJob::Transcribe(job) => {
            let longest = match job.segment {
                SegmentMode::Vad => job.window_s.max(job.vad.max_speech_duration_s),
                SegmentMode::Fixed => job.window_s,
            };
            let segment_s = longest.min(job.limits.max_seconds);
            let bytes = job.batch as f64 * segment_s * f64::from(TRANSCRIBE_RATE) * 4.0;
            if bytes > limit {
                return Err(format!(
                    "batch: {} segments of up to {segment_s} s (window-s, or with segment vad \
                     max-speech-s, at most max-duration) hold {:.1} GiB of audio; the service \
                     holds up to {limit_gib} GiB: lower batch, or give a shorter max-speech-s",
                    job.batch,
                    gib(bytes)
                ));
            }
            Ok(())
        }
    }
}

/// `POST /api/v1/plan`: the job a request describes, every default filled in and every
/// option resolved, as `extract --plan` prints it; nothing is queued.
#[utoipa::path(post, path = "/api/v1/plan", tag = "jobs", request_body = JobOptions,
    responses((status = 200, description = "the planned job: its options with every default, and what they resolve to", body = Object),
              (status = 400, description = "options that cannot make a job, and why", body = ErrorBody),
              (status = 403, description = "a path outside the data roots", body = ErrorBody),
              (status = 413, description = "a body over the limit", body = ErrorBody),
              (status = 415, description = "a body that is not JSON", body = ErrorBody), (status = 401, description = "a token is required and was not given", body = ErrorBody)))]
async fn plan_job(State(app): Shared, body: Bytes) -> Result<Response, ApiError> {
    let (_, planned) = accept(&app, &body)?;
    Ok(Json(planned.describe()).into_response())
}

#[utoipa::path(post, path = "/api/v1/jobs", tag = "jobs", request_body = JobOptions,
    responses((status = 201, description = "queued: its id (and Location)", body = Object),
              (status = 400, description = "options that cannot make a job, and why", body = ErrorBody),
              (status = 403, description = "a path outside the data roots", body = ErrorBody),
              (status = 404, description = "no jobs API here", body = ErrorBody),
              (status = 413, description = "a body over the limit", body = ErrorBody),
              (status = 415, description = "a body that is not JSON", body = ErrorBody),
              (status = 503, description = "shutting down", body = ErrorBody), (status = 401, description = "a token is required and was not given", body = ErrorBody)))]
async fn submit_job(State(app): Shared, body: Bytes) -> Result<Response, ApiError> {
    jobs_of(&app)?;
    if app.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down and takes no new job",
        ));
    }
    let (request, _) = accept(&app, &body)?;
    match &request {
        // Extract jobs run on the server's devices; the others on its CPU, their memory
        // bounded by accept().
        JobRequest::Extract(_) | JobRequest::Transcribe(_) => {}
        JobRequest::SynthIq(o) if o.device == "cpu" => {}
        JobRequest::RfFeatures(o) if o.device == "cpu" => {}
        JobRequest::SynthIq(_) | JobRequest::RfFeatures(_) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "invalid job: device: the service runs {} jobs on its CPU (device cpu); \
                     its GPUs serve the feature jobs",
                    request.kind()
                ),
            ))
        }
    }
    let id = tokio::task::spawn_blocking(move || {
        let jobs = jobs_of(&app)?;
        let id = jobs.submit(&request)?;
        if let Ok(Some(r)) = jobs.get(id) {
            app.publish("job", &r);
        }
        Ok::<_, ApiError>(id)
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    let mut response = (StatusCode::CREATED, Json(json!({ "id": id }))).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/api/v1/jobs/{id}")) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    Ok(response)
}

#[utoipa::path(get, path = "/api/v1/alerts", tag = "service",
    responses((status = 200, description = "alerts, active and ended", body = Object), (status = 401, description = "a token is required and was not given", body = ErrorBody)))]
async fn alerts(State(app): Shared) -> Json<Value> {
    let all = app.telemetry.alerts();
    let active = all.iter().filter(|a| a.ended.is_none()).count();
    Json(json!({ "active": active, "alerts": all }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TelemetryQuery {
    since: Option<f64>,
    /// The dashboard's token (checked by the middleware).
    #[allow(dead_code)]
    token: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/telemetry", tag = "service",
    params(("since" = Option<f64>, Query, minimum = 0, description = "only samples after this many seconds since the epoch")),
    responses((status = 200, description = "the telemetry samples kept", body = Object),
              (status = 400, description = "a query that is not understood", body = ErrorBody), (status = 401, description = "a token is required and was not given", body = ErrorBody)))]
async fn telemetry(
    State(app): Shared,
    query: Result<Query<TelemetryQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    if let Some(s) = q.since {
        if !(s.is_finite() && s >= 0.0) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "since must be a number of seconds, 0 or more",
            ));
        }
    }
    let samples = app.telemetry.since(q.since);
    Ok(Json(json!({
        "interval_s": app.telemetry.config().interval.as_secs_f64(),
        "samples": samples.iter().map(|s| &**s).collect::<Vec<_>>(),
    })))
}

async fn events(
    State(app): Shared,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let rx = app.events.subscribe();
    let shutdown = app.shutdown.subscribe();
    let stream =
        futures_util::stream::unfold((rx, shutdown), |(mut rx, mut shutdown)| async move {
            loop {
                if *shutdown.borrow() {
                    return None;
                }
                tokio::select! {
                    _ = shutdown.changed() => return None,
                    received = rx.recv() => match received {
                        Ok(e) => {
                            let event = SseEvent::default().event(e.kind).data(&*e.data);
                            return Some((Ok(event), (rx, shutdown)));
                        }
                        // A slow reader misses events, not the stream.
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => return None,
                    },
                }
            }
        });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_no_others() {
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.",
            "app.localhost:1",
            "127.0.0.1",
            "127.1.2.3:9",
            "[::1]",
            "[::1]:8080",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "10.0.0.1",
            "[::2]:80",
            "[::1]x",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn tokens_are_decoded_before_they_are_compared() {
        let token = "a b+c/d%e;f=g&h";
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("x", "1")
            .append_pair("token", token)
            .finish();
        assert_eq!(query_token(Some(&query)).as_deref(), Some(token));
        let cookie = cookie::Cookie::new(TOKEN_COOKIE, token)
            .encoded()
            .to_string();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {cookie}")).unwrap(),
        );
        assert_eq!(presented(&headers, None), vec![token.to_string()]);
        assert!(same(token, token));
        assert!(!same(token, "a b+c/d%e;f=g&i"));
        assert!(!same(token, ""));
    }
}
