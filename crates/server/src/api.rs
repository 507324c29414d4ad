//! The routes and their handlers.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
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
use crate::jobs::{resolve_under, JobRequest, JobState};
use crate::{metrics, App, BODY_LIMIT};

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
        .route("/api/v1/status", get(status))
        .route("/api/v1/jobs", get(list_jobs).post(submit_job))
        .route("/api/v1/jobs/{id}", get(get_job).delete(cancel_job))
        .route("/api/v1/alerts", get(alerts))
        .route("/api/v1/telemetry", get(telemetry))
        .route("/api/v1/events", get(events))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), authorize))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(app)
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such endpoint")
}

/// Equal in time whatever the first difference (a token compared byte by byte early-out
/// would leak its prefix through timing).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of a request: `Authorization: Bearer`, the dashboard's cookie, or `?token=`
/// (which the dashboard's first load uses; EventSource cannot send headers).
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
    for cookie in headers.get_all(header::COOKIE) {
        if let Ok(c) = cookie.to_str() {
            for part in c.split(';') {
                if let Some(t) = part.trim().strip_prefix("sonograph_token=") {
                    out.push(t.to_string());
                }
            }
        }
    }
    if let Some(q) = query {
        for pair in q.split('&') {
            if let Some(t) = pair.strip_prefix("token=") {
                out.push(t.to_string());
            }
        }
    }
    out
}

async fn authorize(State(app): Shared, request: Request, next: Next) -> Response {
    let Some(token) = app.token.clone() else {
        return next.run(request).await;
    };
    let path = request.uri().path();
    if path == "/health" || path == "/ready" {
        return next.run(request).await;
    }
    let offered = presented(request.headers(), request.uri().query());
    if !offered.iter().any(|t| same(t.as_bytes(), token.as_bytes())) {
        let mut r = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "a token is needed: Authorization: Bearer TOKEN",
        )
        .into_response();
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    }
    let from_query = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p.starts_with("token=")));
    let mut response = next.run(request).await;
    if from_query {
        // The dashboard opened with ?token= keeps it in a cookie for its API calls.
        if let Ok(v) = HeaderValue::from_str(&format!(
            "sonograph_token={token}; HttpOnly; SameSite=Strict; Path=/"
        )) {
            response.headers_mut().insert(header::SET_COOKIE, v);
        }
    }
    response
}

async fn dashboard() -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], Html(DASHBOARD))
}

async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

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
            ready: app.is_ready().is_ok(),
        })
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response())
}

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

fn jobs_of(app: &App) -> Result<&crate::JobStore, ApiError> {
    app.jobs.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no jobs API here (extract --metrics-addr serves its own job only)",
        )
    })
}

async fn list_jobs(State(app): Shared) -> Result<Json<Value>, ApiError> {
    tokio::task::spawn_blocking(move || {
        let jobs = jobs_of(&app)?.list()?;
        Ok(Json(json!({ "jobs": jobs })))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

async fn get_job(State(app): Shared, Path(id): Path<i64>) -> Result<Json<Value>, ApiError> {
    tokio::task::spawn_blocking(move || match jobs_of(&app)?.get(id)? {
        Some(job) => Ok(Json(serde_json::to_value(job).unwrap_or(Value::Null))),
        None => Err(ApiError::new(StatusCode::NOT_FOUND, format!("no job {id}"))),
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

async fn cancel_job(State(app): Shared, Path(id): Path<i64>) -> Result<Response, ApiError> {
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

async fn submit_job(State(app): Shared, body: Bytes) -> Result<Response, ApiError> {
    jobs_of(&app)?;
    if app.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down and takes no new job",
        ));
    }
    let mut request: JobRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("invalid job: {e}")))?;
    request
        .plan(&app.default_device)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("invalid job: {e}")))?;
    if app.data_roots.is_empty() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "this server has no --data-root: it runs no job",
        ));
    }
    let forbidden = |what: &str, p: &std::path::Path| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "{what} {} does not resolve under a --data-root",
                p.display()
            ),
        )
    };
    let source = resolve_under(&request.source, &app.data_roots)
        .ok_or_else(|| forbidden("source", &request.source))?;
    if !source.exists() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("source {} does not exist", request.source.display()),
        ));
    }
    let out = resolve_under(&request.out, &app.data_roots)
        .ok_or_else(|| forbidden("out", &request.out))?;
    if let Some(model) = &request.model {
        let resolved =
            resolve_under(model, &app.data_roots).ok_or_else(|| forbidden("model", model))?;
        if !resolved.is_file() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("model {} is not a file", model.display()),
            ));
        }
        request.model = Some(resolved);
    }
    request.source = source;
    request.out = out;
    if request.device.is_none() {
        request.device = Some(app.default_device.clone());
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
