//! sonograph-pipeline: a dataset job.
//!
//! ```text
//! sorted items ─shard─▶ work queue ─▶ decode workers ──short items, pieces of long ones──▶ prefetch queue ─▶ executor per device ─┐
//!                                         └──long items, when every executor is a CPU: streamed and cut here──────────────────────┤
//!                                                                                                                                 ▼
//!                                                                    ledger (SQLite) ◀── writer (Parquet parts, .tmp → rename) ◀──┘
//! ```
//!
//! Every queue is bounded, so a slow stage slows the others instead of growing memory. One
//! bad item is a failure in the report, never a failed job.

pub mod alerts;
pub mod augment;
pub mod batcher;
pub mod bench;
mod bucket;
mod budget;
mod config;
mod decode;
mod error;
mod executor;
pub mod host;
mod job;
mod layout;
pub mod listing;
pub mod live;
pub mod manifest;
pub mod model;
pub mod one_file;
pub mod options;
mod part_format;
mod report;
pub mod request;
pub mod rf_features;
pub mod rf_options;
mod sample;
pub mod sampler;
pub mod segment;
mod source;
pub mod stage;
pub mod synth_iq;
pub mod telemetry;
#[cfg(test)]
mod testing;
pub mod transcribe;
pub mod transcribe_options;
pub mod vad;
mod writer;

pub use batcher::{
    AdaptiveBatcher, BatchDevice, BatchError, BatchInput, BatchOutput, BatchStats, BatcherConfig,
};
pub use config::{bounds, defaults, AugmentConfig, IqOptions, JobConfig, ModelConfig, PartFormat};
pub use error::{panic_text, JobError};
pub use executor::Unit;
pub use job::{run, run_live, run_with, JobOutcome};
pub use layout::{OutputLayout, META_DIR};
pub use live::LiveJob;
pub use model::{FeatureRows, ModelStage, NoFallback};
pub use options::{
    DtypeChoice, IqFormat, JobOptions, LimitOptions, Plan, PrecisionChoice, SpecChoice, SpecSource,
};
pub use report::{
    named_error, DepthSample, DeviceReport, Failure, ModelReport, Report, StageTimes,
};
pub use stage::{RowOut, RowStage, Stages, UnitStage};
pub use writer::RowMsg;

/// Resolves the shard from the flags, or from the environment of the batch system: Kubernetes
/// Indexed Jobs (`JOB_COMPLETION_INDEX`, with the count from `--shard-count`) or Slurm arrays
/// (`SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN` of `SLURM_ARRAY_TASK_COUNT`).
pub fn resolve_shard(
    index: Option<usize>,
    count: Option<usize>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(usize, usize), String> {
    let num = |name: &str| -> Result<Option<usize>, String> {
        env(name)
            .map(|v| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("{name}={v:?} is not a whole number"))
            })
            .transpose()
    };
    let (index, count) = match (index, count) {
        (Some(i), Some(n)) => (i, n),
        (Some(_), None) => return Err("--shard-index needs --shard-count".into()),
        (None, count) => {
            if let Some(i) = num("JOB_COMPLETION_INDEX")? {
                let n = count.ok_or(
                    "JOB_COMPLETION_INDEX is set: give --shard-count (the Job's completions)",
                )?;
                (i, n)
            } else if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
                let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
                let n = match count {
                    Some(n) => n,
                    None => num("SLURM_ARRAY_TASK_COUNT")?
                        .ok_or("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not")?,
                };
                let i = id
                    .checked_sub(min)
                    .ok_or("SLURM_ARRAY_TASK_ID is below SLURM_ARRAY_TASK_MIN")?;
                (i, n)
            } else {
                (0, count.unwrap_or(1))
            }
        }
    };
    if count == 0 || index >= count {
        return Err(format!(
            "shard index {index} must be below the shard count {count}"
        ));
    }
    Ok((index, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn shards_come_from_flags_kubernetes_or_slurm() {
        assert_eq!(resolve_shard(Some(2), Some(4), env_of(&[])), Ok((2, 4)));
        assert_eq!(resolve_shard(None, None, env_of(&[])), Ok((0, 1)));
        assert_eq!(
            resolve_shard(None, Some(8), env_of(&[("JOB_COMPLETION_INDEX", "5")])),
            Ok((5, 8))
        );
        assert!(resolve_shard(None, None, env_of(&[("JOB_COMPLETION_INDEX", "5")])).is_err());
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "12"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(resolve_shard(None, None, env_of(&slurm)), Ok((2, 4)));
        assert!(resolve_shard(Some(4), Some(4), env_of(&[])).is_err());
        assert!(resolve_shard(None, None, env_of(&[("SLURM_ARRAY_TASK_ID", "x")])).is_err());
    }
}
