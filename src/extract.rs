//! `sonograph extract`: a corpus to sharded Parquet.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use sonograph_pipeline::{JobOptions, JobOutcome};

use crate::{job_error, user};

#[derive(Args)]
pub struct ExtractArgs {
    /// The job's options: the same as the jobs API's and Python's `extract`'s, defined once
    /// in the pipeline.
    #[command(flatten)]
    options: JobOptions,
    /// No progress bar even on a terminal.
    #[arg(long, env = "SONOGRAPH_NO_PROGRESS")]
    no_progress: bool,
    /// The onnxruntime library (libonnxruntime.so), where it is not found by itself.
    #[arg(long, env = "SONOGRAPH_ORT_LIB")]
    ort_lib: Option<PathBuf>,
    /// Print the planned job as JSON (its options, with every default filled in, and what
    /// they resolve to) and exit without running it.
    #[arg(long)]
    plan: bool,
    #[command(flatten)]
    watch: crate::serve_cli::WatchArgs,
}

/// Exit codes of `extract`, as documented in the README.
pub const EXIT_SOME_FAILED: u8 = 3;

/// Runs the job; returns the process exit code.
pub fn extract(args: &ExtractArgs) -> Result<u8> {
    let plan = args
        .options
        .plan(|k| std::env::var(k).ok())
        .map_err(|e| user(e.to_string()))?;
    if args.plan {
        println!("{}", serde_json::to_string_pretty(&plan.describe())?);
        return Ok(0);
    }
    let mut config = plan.config;
    config.progress = !args.no_progress && std::io::stderr().is_terminal();
    config.ort_lib = args.ort_lib.clone();
    let spec = config.spec.clone();
    let devices = crate::gpu_cli::open_job(&plan.device, plan.gpu_memory.as_deref(), &mut config)?;
    let out = &config.out;
    let outcome = args.watch.run("extract", out, |live| {
        sonograph_pipeline::run_live(&config, devices, Default::default(), live.clone())
    })?;
    let outcome = outcome.map_err(job_error)?;
    Ok(print_outcome(
        out,
        &outcome,
        if spec.is_complex() { "IQ" } else { "audio" },
    ))
}

/// Says how a job ended (the first failures, the totals; a feature job's model side) and
/// gives the exit code: 0, or [`EXIT_SOME_FAILED`] when items failed.
pub(crate) fn print_outcome(out: &std::path::Path, outcome: &JobOutcome, signal: &str) -> u8 {
    let report = outcome.report();
    match outcome {
        JobOutcome::AlreadyDone(_) => eprintln!(
            "sonograph: shard {}/{} of {} is already complete ({} items ok, {} failed)",
            report.shard_index,
            report.shard_count,
            out.display(),
            report.items_ok,
            report.items_failed
        ),
        JobOutcome::Finished(r) => {
            // The first failures, enough to see what went wrong; all of them are in the
            // report (a corpus of broken files must not flood the terminal).
            const SHOWN: usize = 20;
            for f in r.failures.iter().take(SHOWN) {
                eprintln!("sonograph: failed: {}: {}", f.id, f.reason);
            }
            if r.items_failed > SHOWN as u64 {
                let layout =
                    sonograph_pipeline::OutputLayout::new(out, r.shard_index, r.shard_count);
                // An output in object storage keeps its ledger in its work folder.
                let ledger = if sonograph_io::remote::is_url(out) {
                    "the ledger of its work folder (--work-dir)".to_string()
                } else {
                    layout.ledger.display().to_string()
                };
                eprintln!(
                    "sonograph: … and {} more failures (the first 1,000 in {}, all in {ledger})",
                    r.items_failed - SHOWN as u64,
                    layout.report.display(),
                );
            }
            eprintln!(
                "sonograph: {} items ok, {} failed ({} done earlier); {:.1} s of {} in {:.1} s ({:.0}× real time); {} rows in {} parts; peak RSS {:.0} MiB",
                r.items_ok,
                r.items_failed,
                r.items_resumed,
                r.audio_seconds,
                signal,
                r.wall_seconds,
                r.real_time_factor,
                r.rows,
                r.parts,
                r.peak_rss_mb
            );
            if let Some(m) = &r.model {
                eprintln!(
                    "sonograph: model ({}, {} input) on {}: {} rows in {} batches, busy {:.1} s, waited {:.1} s for the first batch and {:.1} s for rows after",
                    m.kind, m.input_precision, m.device, m.rows, m.batches, m.busy_s, m.warmup_s, m.starved_s
                );
            }
        }
    }
    match outcome {
        JobOutcome::AlreadyDone(_) => 0,
        JobOutcome::Finished(r) if r.items_failed > 0 => EXIT_SOME_FAILED,
        JobOutcome::Finished(_) => 0,
    }
}

#[derive(Args)]
pub struct ManifestArgs {
    /// The folder (walked recursively, in id order; hidden and `_` entries skipped), or a
    /// prefix in object storage (s3://, gs://, az://; listed, each header read by byte range).
    source: PathBuf,
    /// The manifest to write (NeMo JSON lines); paths in it are relative to its folder where
    /// the files are under it.
    #[arg(long)]
    out: PathBuf,
    /// Threads reading headers (default: the cores).
    #[arg(long, env = "SONOGRAPH_WORKERS")]
    workers: Option<usize>,
    #[command(flatten)]
    limits: crate::LimitArgs,
}

/// `sonograph manifest`: exit 0, or 3 when some files could not be read (they are not listed;
/// the first are printed).
pub fn manifest(args: &ManifestArgs) -> Result<u8> {
    let options = sonograph_pipeline::manifest::ManifestOptions {
        source: args.source.clone(),
        out: args.out.clone(),
        workers: args
            .workers
            .unwrap_or_else(sonograph_pipeline::defaults::workers),
        limits: crate::limits(&args.limits)?,
    };
    let r = sonograph_pipeline::manifest::write_manifest(&options).map_err(job_error)?;
    for f in r.failures.iter().take(20) {
        eprintln!("sonograph: not listed: {}: {}", f.id, f.reason);
    }
    eprintln!(
        "sonograph: {} files ({:.1} h of audio) listed in {}, {} could not be read; {:.1} s",
        r.files,
        r.audio_seconds / 3600.0,
        args.out.display(),
        r.failed,
        r.wall_seconds
    );
    Ok(if r.failed > 0 { EXIT_SOME_FAILED } else { 0 })
}
