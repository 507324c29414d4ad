//! SigMF metadata (the `.sigmf-meta` JSON of the Signal Metadata Format, version 1.2): the
//! `global`, `captures` and `annotations` objects with the core fields sonograph reads and
//! writes, keeping every other key as it was. Reading and writing files is sonograph-io's.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::RfError;

/// The SigMF version sonograph writes.
pub const SIGMF_VERSION: &str = "1.2.0";
/// The namespace of sonograph's own annotation keys (`sonograph:snr_db`, ...).
pub const EXTENSION: &str = "sonograph";

/// Sample formats (`core:datatype`) sonograph reads; it writes `cf32_le` and `ci16_le`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    Cf32Le,
    Cf64Le,
    Ci16Le,
    Ci8,
    Cu8,
}

impl DataType {
    pub fn parse(s: &str) -> Result<Self, RfError> {
        Ok(match s {
            "cf32_le" => DataType::Cf32Le,
            "cf64_le" => DataType::Cf64Le,
            "ci16_le" => DataType::Ci16Le,
            "ci8" => DataType::Ci8,
            "cu8" => DataType::Cu8,
            other => {
                return Err(RfError::Sigmf(format!(
                    "core:datatype {other:?} is not supported (cf32_le, cf64_le, ci16_le, ci8, cu8)"
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DataType::Cf32Le => "cf32_le",
            DataType::Cf64Le => "cf64_le",
            DataType::Ci16Le => "ci16_le",
            DataType::Ci8 => "ci8",
            DataType::Cu8 => "cu8",
        }
    }

    /// Bytes of one complex sample.
    pub fn sample_bytes(self) -> usize {
        match self {
            DataType::Cf32Le => 8,
            DataType::Cf64Le => 16,
            DataType::Ci16Le => 4,
            DataType::Ci8 | DataType::Cu8 => 2,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extension {
    pub name: String,
    pub version: String,
    pub optional: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Global {
    #[serde(rename = "core:datatype")]
    pub datatype: String,
    #[serde(rename = "core:version")]
    pub version: String,
    #[serde(
        rename = "core:sample_rate",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub sample_rate: Option<f64>,
    #[serde(
        rename = "core:num_channels",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub num_channels: Option<u64>,
    #[serde(
        rename = "core:sha512",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub sha512: Option<String>,
    #[serde(
        rename = "core:recorder",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub recorder: Option<String>,
    #[serde(
        rename = "core:description",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub description: Option<String>,
    #[serde(
        rename = "core:extensions",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub extensions: Option<Vec<Extension>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capture {
    #[serde(rename = "core:sample_start")]
    pub sample_start: u64,
    #[serde(
        rename = "core:frequency",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub frequency: Option<f64>,
    #[serde(
        rename = "core:datetime",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub datetime: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Annotation {
    #[serde(rename = "core:sample_start")]
    pub sample_start: u64,
    #[serde(
        rename = "core:sample_count",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub sample_count: Option<u64>,
    #[serde(
        rename = "core:label",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub label: Option<String>,
    #[serde(
        rename = "core:freq_lower_edge",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub freq_lower_edge: Option<f64>,
    #[serde(
        rename = "core:freq_upper_edge",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub freq_upper_edge: Option<f64>,
    #[serde(
        rename = "core:comment",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub comment: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SigmfMeta {
    pub global: Global,
    #[serde(default)]
    pub captures: Vec<Capture>,
    #[serde(default)]
    pub annotations: Vec<Annotation>,
}

impl SigmfMeta {
    /// Metadata of a single-channel recording with one capture at sample 0.
    pub fn new(datatype: DataType, sample_rate: f64) -> Self {
        SigmfMeta {
            global: Global {
                datatype: datatype.name().into(),
                version: SIGMF_VERSION.into(),
                sample_rate: Some(sample_rate),
                num_channels: Some(1),
                sha512: None,
                recorder: Some(format!("sonograph {}", env!("CARGO_PKG_VERSION"))),
                description: None,
                extensions: None,
                extra: Map::new(),
            },
            captures: vec![Capture {
                sample_start: 0,
                frequency: None,
                datetime: None,
                extra: Map::new(),
            }],
            annotations: Vec::new(),
        }
    }

    /// Parses and checks what sonograph relies on: the datatype, one channel, a positive
    /// sample rate if present, captures and annotations in order.
    pub fn from_json(text: &str) -> Result<Self, RfError> {
        let meta: SigmfMeta =
            serde_json::from_str(text).map_err(|e| RfError::Sigmf(e.to_string()))?;
        meta.datatype()?;
        if let Some(c) = meta.global.num_channels {
            if c != 1 {
                return Err(RfError::Sigmf(format!(
                    "core:num_channels is {c}; only single-channel recordings are supported"
                )));
            }
        }
        if let Some(fs) = meta.global.sample_rate {
            if !(fs.is_finite() && fs > 0.0) {
                return Err(RfError::Sigmf(format!(
                    "core:sample_rate {fs} is not positive"
                )));
            }
        }
        if meta
            .captures
            .windows(2)
            .any(|w| w[1].sample_start < w[0].sample_start)
        {
            return Err(RfError::Sigmf(
                "captures are not sorted by core:sample_start".into(),
            ));
        }
        Ok(meta)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("metadata serialises")
    }

    pub fn datatype(&self) -> Result<DataType, RfError> {
        let dt = &self.global.datatype;
        DataType::parse(dt)
    }

    /// Declares sonograph's extension namespace (its keys are optional to readers).
    pub fn declare_extension(&mut self) {
        let ext = Extension {
            name: EXTENSION.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            optional: true,
        };
        match &mut self.global.extensions {
            Some(list) if list.iter().any(|e| e.name == EXTENSION) => {}
            Some(list) => list.push(ext),
            None => self.global.extensions = Some(vec![ext]),
        }
    }

    /// The last sample any annotation or capture refers to (exclusive), to check against the
    /// data's length without trusting it for an allocation.
    pub fn claimed_end(&self) -> u64 {
        let a = self
            .annotations
            .iter()
            .map(|a| a.sample_start.saturating_add(a.sample_count.unwrap_or(0)))
            .max()
            .unwrap_or(0);
        let c = self
            .captures
            .iter()
            .map(|c| c.sample_start)
            .max()
            .unwrap_or(0);
        a.max(c)
    }
}

/// The truth of a synthetic recording as `sonograph:` annotation keys.
pub fn truth_annotation(truth: &crate::synth::Truth) -> Annotation {
    let mut extra = Map::new();
    if let Value::Object(fields) = serde_json::to_value(truth).expect("truth serialises") {
        for (k, v) in fields {
            if k != "label" && k != "n_samples" {
                extra.insert(format!("{EXTENSION}:{k}"), v);
            }
        }
    }
    Annotation {
        sample_start: 0,
        sample_count: Some(truth.n_samples as u64),
        label: Some(truth.label.clone()),
        freq_lower_edge: None,
        freq_upper_edge: None,
        comment: None,
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_and_keeps_unknown_keys() {
        let text = r#"{"global": {"core:datatype": "ci16_le", "core:version": "1.2.0",
            "core:sample_rate": 1e6, "acme:gain": 12},
            "captures": [{"core:sample_start": 0, "core:frequency": 915e6}],
            "annotations": [{"core:sample_start": 10, "core:sample_count": 5, "acme:x": [1]}]}"#;
        let meta = SigmfMeta::from_json(text).unwrap();
        assert_eq!(meta.datatype().unwrap(), DataType::Ci16Le);
        assert_eq!(meta.global.extra["acme:gain"], 12);
        assert_eq!(meta.claimed_end(), 15);
        let back = SigmfMeta::from_json(&meta.to_json()).unwrap();
        assert_eq!(back, meta);
    }

    #[test]
    fn bad_metadata_says_why() {
        let err = |t: &str| SigmfMeta::from_json(t).unwrap_err().to_string();
        assert!(err("{}").contains("missing field `global`"));
        assert!(err(r#"{"global": {"core:version": "1.2.0"}}"#).contains("core:datatype"));
        assert!(
            err(r#"{"global": {"core:datatype": "rf64_le", "core:version": "1"}}"#)
                .contains("not supported")
        );
        assert!(err(r#"{"global": {"core:datatype": "cf32_le", "core:version": "1", "core:num_channels": 4}}"#)
            .contains("single-channel"));
        assert!(err(r#"{"global": {"core:datatype": "cf32_le", "core:version": "1", "core:sample_rate": -1}}"#)
            .contains("not positive"));
    }
}
