//! A job as the service and Python's `plan` take it: one of the four kinds (`extract`, the
//! default; `rf-features`; `synth-iq`; `transcribe`), named by a `kind` field beside the
//! kind's own options, which are the same as its command's flags.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::JobError;
use crate::options::{JobOptions, Plan};
use crate::rf_options::{RfFeaturesOptions, RfFeaturesPlan, SynthIqOptions, SynthIqPlan};
use crate::transcribe::TranscribeJob;
use crate::transcribe_options::TranscribeOptions;

/// A job of any kind, with its options.
#[derive(Debug, Clone, PartialEq)]
pub enum JobRequest {
    Extract(Box<JobOptions>),
    RfFeatures(Box<RfFeaturesOptions>),
    SynthIq(Box<SynthIqOptions>),
    Transcribe(Box<TranscribeOptions>),
}

/// The kinds, as `kind` names them.
pub const KINDS: [&str; 4] = ["extract", "rf-features", "synth-iq", "transcribe"];

impl JobRequest {
    pub fn kind(&self) -> &'static str {
        match self {
            JobRequest::Extract(_) => KINDS[0],
            JobRequest::RfFeatures(_) => KINDS[1],
            JobRequest::SynthIq(_) => KINDS[2],
            JobRequest::Transcribe(_) => KINDS[3],
        }
    }

    /// The request from its JSON: `kind` (extract where absent) and the kind's options, an
    /// unknown one refused by name.
    pub fn from_value(mut value: serde_json::Value) -> Result<JobRequest, String> {
        let kind = match value.as_object_mut().map(|o| o.remove("kind")) {
            None => return Err("a job is a JSON object of its options".into()),
            Some(None) => "extract".to_string(),
            Some(Some(serde_json::Value::String(k))) => k,
            Some(Some(other)) => return Err(format!("kind: {other} is not a string")),
        };
        fn options<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
            serde_path_to_error::deserialize(value).map_err(|e| match e.path().to_string() {
                p if p == "." => e.inner().to_string(),
                p => format!("{p}: {}", e.inner()),
            })
        }
        Ok(match kind.as_str() {
            "extract" => JobRequest::Extract(options(value)?),
            "rf-features" => JobRequest::RfFeatures(options(value)?),
            "synth-iq" => JobRequest::SynthIq(options(value)?),
            "transcribe" => JobRequest::Transcribe(options(value)?),
            other => {
                return Err(format!(
                    "kind: {other:?} is not a job; the kinds are {}",
                    KINDS.join(", ")
                ))
            }
        })
    }

    /// The request's JSON, `kind` included (what [`JobRequest::from_value`] reads back).
    pub fn to_value(&self) -> serde_json::Value {
        let mut value = match self {
            JobRequest::Extract(o) => serde_json::to_value(o),
            JobRequest::RfFeatures(o) => serde_json::to_value(o),
            JobRequest::SynthIq(o) => serde_json::to_value(o),
            JobRequest::Transcribe(o) => serde_json::to_value(o),
        }
        .expect("options serialise");
        if let Some(o) = value.as_object_mut() {
            o.insert("kind".into(), self.kind().into());
        }
        value
    }

    /// Where the job writes.
    pub fn out(&self) -> &Path {
        match self {
            JobRequest::Extract(o) => &o.out,
            JobRequest::RfFeatures(o) => &o.out,
            JobRequest::SynthIq(o) => &o.out,
            JobRequest::Transcribe(o) => &o.out,
        }
    }

    /// The shard the request names (the service reads no batch system's variables).
    pub fn shard(&self) -> (Option<usize>, Option<usize>) {
        match self {
            JobRequest::Extract(o) => (o.shard_index, o.shard_count),
            JobRequest::RfFeatures(o) => (o.shard_index, o.shard_count),
            JobRequest::SynthIq(o) => (o.shard_index, o.shard_count),
            JobRequest::Transcribe(o) => (o.shard_index, o.shard_count),
        }
    }

    /// The job, every option checked; `env` gives the batch system's shard variables.
    pub fn plan(&self, env: impl Fn(&str) -> Option<String>) -> Result<PlannedJob, JobError> {
        Ok(match self {
            JobRequest::Extract(o) => PlannedJob::Extract(Box::new(o.plan(env)?)),
            JobRequest::RfFeatures(o) => PlannedJob::RfFeatures(Box::new(o.plan(env)?)),
            JobRequest::SynthIq(o) => PlannedJob::SynthIq(Box::new(o.plan(env)?)),
            JobRequest::Transcribe(o) => PlannedJob::Transcribe(Box::new(o.plan(env)?)),
        })
    }
}

impl Serialize for JobRequest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for JobRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        JobRequest::from_value(serde_json::Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// A job of any kind, planned.
#[derive(Debug, Clone)]
pub enum PlannedJob {
    Extract(Box<Plan>),
    RfFeatures(Box<RfFeaturesPlan>),
    SynthIq(Box<SynthIqPlan>),
    Transcribe(Box<TranscribeJob>),
}

impl PlannedJob {
    /// What the job will do, every default filled in and every option resolved: what each
    /// command's `--plan`, `POST /api/v1/plan` and `sonograph.plan` show, the same for the
    /// same options through any door.
    pub fn describe(&self) -> serde_json::Value {
        match self {
            PlannedJob::Extract(p) => p.describe(),
            PlannedJob::RfFeatures(p) => p.describe(),
            PlannedJob::SynthIq(p) => p.describe(),
            PlannedJob::Transcribe(j) => j.describe(),
        }
    }

    /// The devices the job asks for, as given.
    pub fn device(&self) -> &str {
        match self {
            PlannedJob::Extract(p) => &p.device,
            PlannedJob::RfFeatures(p) => &p.device,
            PlannedJob::SynthIq(p) => &p.device,
            PlannedJob::Transcribe(_) => "cpu",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_its_kind_and_reads_back_the_same() {
        let json = serde_json::json!({"kind": "synth-iq", "out": "o", "count": 3, "seed": 7});
        let request = JobRequest::from_value(json).unwrap();
        let JobRequest::SynthIq(o) = &request else {
            panic!("{request:?}")
        };
        assert_eq!((o.count, o.seed), (Some(3), 7));
        assert_eq!(JobRequest::from_value(request.to_value()).unwrap(), request);
        // No kind: an extract job, as every request before kinds were.
        let old = JobRequest::from_value(serde_json::json!({"source": "s", "out": "o"})).unwrap();
        assert_eq!(old.kind(), "extract");
        for (json, says) in [
            (serde_json::json!({"kind": "mine"}), "is not a job"),
            (serde_json::json!({"kind": 3}), "not a string"),
            (
                serde_json::json!({"kind": "rf-features", "source": "s", "out": "o", "nperseg": "x"}),
                "nperseg: invalid type",
            ),
            (
                serde_json::json!({"kind": "synth-iq", "out": "o", "count": 1, "batch-items": 2}),
                "unknown field `batch-items`",
            ),
            (serde_json::json!([1]), "JSON object"),
        ] {
            let e = JobRequest::from_value(json.clone()).unwrap_err();
            assert!(e.contains(says), "{json}: {e}");
        }
    }

    #[test]
    fn each_kind_plans_with_its_defaults_and_refuses_what_it_lacks() {
        let plan = |json: serde_json::Value| {
            JobRequest::from_value(json).and_then(|r| r.plan(|_| None).map_err(|e| e.to_string()))
        };
        let rf = plan(serde_json::json!({"kind": "rf-features", "source": "s", "out": "o"}))
            .unwrap()
            .describe();
        assert_eq!(rf["rows"]["features"]["welch"]["nperseg"], 1024);
        assert_eq!(rf["rows"]["features"]["welch"]["noverlap"], 512);
        assert_eq!(
            (&rf["device"], &rf["rows_per_part"]),
            (&"cpu".into(), &8192.into())
        );
        let synth = plan(
            serde_json::json!({"kind": "synth-iq", "out": "o", "count": 10,
            "duration-ms": 2.0, "modulation": "bpsk,fm", "snr-db": "-5:5"}),
        )
        .unwrap()
        .describe();
        assert_eq!(synth["spec"]["n_samples"], 400);
        assert_eq!(synth["spec"]["snr_db"]["min"], -5.0);
        assert_eq!(synth["format"], "sigmf");
        let t = plan(
            serde_json::json!({"kind": "transcribe", "source": "s", "out": "o.parquet",
            "model": "m"}),
        )
        .unwrap()
        .describe();
        assert_eq!(
            (&t["format"], &t["window_s"]),
            (&"parquet".into(), &30.0.into())
        );
        // Never: JSON's null.
        assert!(t["vad"]["max_speech_duration_s"].is_null(), "{t}");
        for (json, says) in [
            (
                serde_json::json!({"kind": "synth-iq", "out": "o"}),
                "count is required",
            ),
            (
                serde_json::json!({"kind": "synth-iq", "out": "o", "count": 1, "samples": 10,
                    "duration-ms": 1.0}),
                "exclusive",
            ),
            (
                serde_json::json!({"kind": "synth-iq", "out": "o", "count": 1, "format": "parquet",
                    "samples": 100_000_000, "rows-per-part": 1000}),
                "over the 1 GiB",
            ),
            (
                serde_json::json!({"kind": "synth-iq", "out": "o", "count": 1, "modulation": "x"}),
                "modulation:",
            ),
            (
                serde_json::json!({"kind": "transcribe", "source": "s", "out": "o"}),
                "model is required",
            ),
            (
                serde_json::json!({"kind": "rf-features", "source": "s", "out": "o", "psd": true,
                    "nperseg": 1_048_576}),
                "over the 1 GiB",
            ),
            (
                serde_json::json!({"kind": "rf-features", "source": "s", "out": "o",
                    "shard-index": 2, "shard-count": 2}),
                "shard",
            ),
            (
                serde_json::json!({"kind": "transcribe", "source": "s", "out": "o", "model": "m",
                    "batch": 0}),
                "batch 0",
            ),
            (
                serde_json::json!({"kind": "synth-iq", "out": "o", "count": 1, "format": "parquet",
                    "datatype": "ci16"}),
                "datatype is the SigMF data's sample type",
            ),
            (
                serde_json::json!({"kind": "synth-iq", "out": "o", "count": 1, "rows-per-part": 5}),
                "rows-per-part sizes Parquet parts",
            ),
            (
                serde_json::json!({"kind": "synth-iq", "out": "o", "count": 1, "samples": 0}),
                "samples 0 is outside",
            ),
            (
                serde_json::json!({"kind": "synth-iq", "out": "o", "count": 1, "duration-ms": 0.001}),
                "duration-ms 0.001 at 200000 Hz is 0 samples",
            ),
            (
                serde_json::json!({"kind": "rf-features", "source": "s", "out": "o", "nperseg": 1}),
                "nperseg: must be",
            ),
        ] {
            match plan(json.clone()) {
                Ok(_) => panic!("{json} was accepted"),
                Err(e) => assert!(e.contains(says), "{json}: {e}"),
            }
        }
    }
}
