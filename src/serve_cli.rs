//! `sonograph serve` and the `--metrics-addr` of every job command: the HTTP service
//! (crates/server).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use sonograph_pipeline::alerts::AlertRules;
use sonograph_pipeline::telemetry::{Telemetry, TelemetryConfig};
use sonograph_pipeline::LiveJob;
use sonograph_server::{Devices, ServerConfig, Sidecar};

use crate::user;

/// Telemetry and alert settings, shared by `serve` and `extract`.
#[derive(Args)]
pub struct TelemetryArgs {
    /// Seconds between telemetry samples (devices, the job, the process).
    #[arg(long, env = "SONOGRAPH_TELEMETRY_INTERVAL", default_value_t = 1.0)]
    telemetry_interval: f64,
    /// Alert thresholds, a TOML file (see the README's alert rules; every key optional).
    #[arg(long, env = "SONOGRAPH_ALERTS")]
    alerts: Option<PathBuf>,
    /// POST every alert fired or resolved to this URL as JSON (retried with backoff).
    #[arg(long, env = "SONOGRAPH_ALERT_WEBHOOK")]
    alert_webhook: Option<String>,
}

impl TelemetryArgs {
    pub fn config(&self) -> Result<TelemetryConfig> {
        if !(self.telemetry_interval.is_finite()
            && (0.05..=3600.0).contains(&self.telemetry_interval))
        {
            return Err(user(
                "--telemetry-interval must be between 0.05 and 3600 seconds",
            ));
        }
        let rules = match &self.alerts {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| user(format!("--alerts {}: {e}", path.display())))?;
                AlertRules::from_toml(&text)
                    .map_err(|e| user(format!("--alerts {}: {e}", path.display())))?
            }
            None => AlertRules::default(),
        };
        Ok(TelemetryConfig {
            interval: Duration::from_secs_f64(self.telemetry_interval),
            rules,
            ..Default::default()
        })
    }
}

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback needs --token.
    #[arg(long, env = "SONOGRAPH_ADDR", default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// A folder jobs may read from and write to (repeat for several); a job's source and out
    /// must resolve under one, symlinks included.
    #[arg(long = "data-root", env = "SONOGRAPH_DATA_ROOT", value_delimiter = ',')]
    data_roots: Vec<PathBuf>,
    /// Bearer token every endpoint but /health and /ready asks for (16 characters or more).
    #[arg(long, env = "SONOGRAPH_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Where the job queue (SQLite) lives.
    #[arg(long, env = "SONOGRAPH_STATE_DIR", default_value = "./sonograph-state")]
    state_dir: PathBuf,
    /// Device of a job that names none (as extract's --device).
    #[arg(long, env = "SONOGRAPH_DEVICE", default_value = "auto")]
    device: String,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

pub fn serve(args: &ServeArgs) -> Result<u8> {
    let config = ServerConfig {
        addr: args.addr,
        data_roots: args.data_roots.clone(),
        token: args.token.clone().filter(|t| !t.is_empty()),
        state_dir: args.state_dir.clone(),
        device: args.device.clone(),
        telemetry: args.telemetry.config()?,
        alert_webhook: args.telemetry.alert_webhook.clone(),
        disabled_devices: sonograph_gpu::disabled_devices(),
    };
    sonograph_server::serve(config, |addr| {
        // One line on stderr that scripts (and the tests) read for the port.
        eprintln!("sonograph: serving on http://{addr}");
    })
    .map_err(|e| {
        if e.is_usage() {
            user(e.to_string())
        } else {
            anyhow::Error::new(e)
        }
    })?;
    Ok(0)
}

/// `--metrics-addr` and the telemetry settings of every job command.
#[derive(Args)]
pub struct WatchArgs {
    /// Serve /metrics, /health and the dashboard on this address while the job runs.
    #[arg(long, env = "SONOGRAPH_METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

impl WatchArgs {
    /// Runs `job` with its live counters, served on `--metrics-addr` while it runs (named
    /// `kind` there), and returns what it returned.
    pub fn run<T>(
        &self,
        kind: &str,
        out: &Path,
        job: impl FnOnce(&Arc<LiveJob>) -> T,
    ) -> Result<T> {
        let sidecar = self.serve(out)?;
        let live = LiveJob::new();
        if let Some((telemetry, _)) = &sidecar {
            telemetry.attach_job(kind, live.clone());
        }
        let result = job(&live);
        if let Some((telemetry, _)) = &sidecar {
            telemetry.detach_job();
        }
        Ok(result)
    }

    /// The sampler and its read-only server, where `--metrics-addr` asks for them.
    fn serve(&self, out: &Path) -> Result<Option<(Arc<Telemetry>, Sidecar)>> {
        let Some(addr) = self.metrics_addr else {
            return Ok(None);
        };
        let devices = Devices::new(sonograph_gpu::disabled_devices());
        devices.discover().map_err(user)?;
        let telemetry = Telemetry::start(self.telemetry.config()?, devices.probe());
        if let Some(url) = &self.telemetry.alert_webhook {
            telemetry.add_alert_sink(Box::new(
                sonograph_server::webhook::Webhook::new(url).map_err(user)?,
            ));
        }
        let token = std::env::var("SONOGRAPH_TOKEN")
            .ok()
            .filter(|t| !t.is_empty());
        let sidecar = Sidecar::start(addr, token, telemetry.clone(), devices).map_err(|e| {
            if e.is_usage() {
                user(format!("--metrics-addr: {e}"))
            } else {
                anyhow::Error::new(e)
            }
        })?;
        eprintln!(
            "sonograph: metrics and dashboard of {} on http://{}",
            out.display(),
            sidecar.addr()
        );
        Ok(Some((telemetry, sidecar)))
    }
}
