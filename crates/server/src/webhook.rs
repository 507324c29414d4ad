//! `--alert-webhook URL`: every alert fired or resolved is POSTed as JSON
//! (`{"event": "fired"|"resolved", "alert": {...}}`), retried with backoff.
//!
//! The client is `ureq`: the alert sink is called on the sampler's thread, so the sink hands
//! each event to a thread of its own that may block on the network and sleep between retries
//! without touching the server's async runtime; ureq is a small blocking client with timeouts
//! and rustls, where hyper would need a connector and TLS wired by hand for the same POST.

use std::time::Duration;

use crossbeam_channel::{bounded, Sender, TrySendError};
use sonograph_pipeline::alerts::{AlertEvent, AlertSink};

/// Attempts per event, waiting 0.5 s, 1 s, 2 s... between them.
pub const ATTEMPTS: u32 = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Events waiting to be sent; past that, new ones are dropped with a warning (the log and the
/// API still have them).
const QUEUE: usize = 1000;

/// The webhook sink.
pub struct Webhook {
    tx: Sender<AlertEvent>,
}

impl Webhook {
    /// A sink POSTing to `url` (http or https).
    pub fn new(url: &str) -> Result<Self, String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("--alert-webhook {url}: not an http(s) URL"));
        }
        let (tx, rx) = bounded::<AlertEvent>(QUEUE);
        let url = url.to_string();
        std::thread::Builder::new()
            .name("alert-webhook".into())
            .spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .timeout_global(Some(Duration::from_secs(10)))
                    .build()
                    .into();
                for event in rx {
                    post(&agent, &url, &event);
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Webhook { tx })
    }
}

fn post(agent: &ureq::Agent, url: &str, event: &AlertEvent) {
    let body = match serde_json::to_string(event) {
        Ok(b) => b,
        Err(e) => return tracing::error!("alert webhook: {e}"),
    };
    let mut wait = FIRST_BACKOFF;
    for attempt in 1..=ATTEMPTS {
        let sent = agent
            .post(url)
            .content_type("application/json")
            .send(body.as_str());
        match sent {
            Ok(_) => return,
            Err(e) if attempt == ATTEMPTS => {
                tracing::error!(
                    "alert webhook {url}: giving up on alert {} after {ATTEMPTS} attempts: {e}",
                    event.alert().id
                );
            }
            Err(e) => {
                tracing::warn!("alert webhook {url}: attempt {attempt} failed ({e}); retrying");
                std::thread::sleep(wait);
                wait *= 2;
            }
        }
    }
}

impl AlertSink for Webhook {
    fn send(&mut self, event: &AlertEvent) {
        match self.tx.try_send(event.clone()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                tracing::warn!("alert webhook: {QUEUE} alerts waiting; this one is not sent")
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}
