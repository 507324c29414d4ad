//! `sonograph synth-iq` (synthetic IQ datasets as SigMF recordings or Parquet rows) and
//! `sonograph rf-features` (RF features of SigMF or raw IQ recordings to Parquet).

use anyhow::{Context, Result};
use clap::Args;
use sonograph_pipeline::rf_features::run_rf_features_live;
use sonograph_pipeline::rf_options::{RfFeaturesOptions, SynthIqOptions};
use sonograph_pipeline::synth_iq::{choose_noise_device, run_synth_iq_live};
use sonograph_rf::{NoiseDevice, Synth};

use crate::{job_error, user};

#[derive(Args)]
pub struct SynthArgs {
    /// The job's options: the same as the jobs API's (kind synth-iq) and Python's
    /// `synth_iq`'s, defined once in the pipeline.
    #[command(flatten)]
    options: SynthIqOptions,
    /// Print the resolved spec as JSON and exit.
    #[arg(long)]
    print_spec: bool,
    /// Print the planned job as JSON and exit without running it.
    #[arg(long)]
    plan: bool,
    #[command(flatten)]
    watch: crate::serve_cli::WatchArgs,
}

/// The process's environment, where a job finds its shard (Kubernetes', Slurm's variables).
pub(crate) fn env(key: &str) -> Option<String> {
    std::env::var(key).ok()
}

fn pool(workers: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .context("cannot start the thread pool")
}

/// `--device`: None for the CPU, or the opened GPU.
fn rf_gpu(device: &str) -> Result<Option<sonograph_gpu::rf::RfGpu>> {
    let (gpu, notes) = sonograph_gpu::open_rf_device(device).map_err(user)?;
    for note in notes {
        eprintln!("sonograph: warning: {note}");
    }
    Ok(gpu)
}

pub fn synth_iq(args: &SynthArgs) -> Result<u8> {
    if args.print_spec {
        let spec = args.options.synth_spec().map_err(job_error)?;
        println!("{}", spec.to_json());
        return Ok(0);
    }
    let plan = args.options.plan(env).map_err(job_error)?;
    if args.plan {
        println!("{}", serde_json::to_string_pretty(&plan.describe())?);
        return Ok(0);
    }
    let job = plan.job;
    let (shard_index, shard_count) = (job.shard_index, job.shard_count);
    let pool = pool(plan.workers)?;
    let mut noise = rf_gpu(&plan.device)?.map(|g| Box::new(g) as Box<dyn NoiseDevice>);
    if plan.device == "auto" {
        if let Some(gpu) = noise.take() {
            let synth = Synth::new(&job.spec).map_err(|e| user(e.to_string()))?;
            let mut store = sonograph_io::calibration::FileStore::open();
            let (chosen, why) =
                choose_noise_device(&synth, job.seed, gpu, &pool, &mut store).map_err(job_error)?;
            eprintln!(
                "sonograph: auto chose {} for the noise stage: {why}",
                chosen.as_ref().map_or_else(|| "cpu".into(), |g| g.name())
            );
            noise = chosen;
        }
    }
    let on_gpu = noise.is_some();
    let report = args
        .watch
        .run("synth-iq", &job.out, |live| {
            run_synth_iq_live(&job, noise, &pool, live)
        })?
        .map_err(crate::job_error)?;
    eprintln!(
        "sonograph: shard {shard_index}/{shard_count}: {} recordings written, {} already there, in {:.1} s{}",
        report.written,
        report.already_there,
        report.wall_seconds,
        if on_gpu {
            format!(" (noise on {})", report.noise_device)
        } else {
            String::new()
        }
    );
    Ok(0)
}

#[derive(Args)]
pub struct FeaturesArgs {
    /// The job's options: the same as the jobs API's (kind rf-features) and Python's
    /// `rf_features`', defined once in the pipeline.
    #[command(flatten)]
    options: RfFeaturesOptions,
    /// No progress bar even on a terminal.
    #[arg(long, env = "SONOGRAPH_NO_PROGRESS")]
    no_progress: bool,
    /// Print the planned job as JSON and exit without running it.
    #[arg(long)]
    plan: bool,
    #[command(flatten)]
    watch: crate::serve_cli::WatchArgs,
}

/// `sonograph rf-features`: exit 0, 3 when recordings failed (listed in the report), 2 on
/// bad options.
pub fn rf_features(args: &FeaturesArgs) -> Result<u8> {
    use std::io::IsTerminal;
    let plan = args.options.plan(env).map_err(job_error)?;
    if args.plan {
        println!("{}", serde_json::to_string_pretty(&plan.describe())?);
        return Ok(0);
    }
    let mut job = plan.job;
    job.progress = !args.no_progress && std::io::stderr().is_terminal();
    let device =
        rf_gpu(&plan.device)?.map(|g| Box::new(g) as Box<dyn sonograph_rf::rows::PsdDevice>);
    let out = job.out.clone();
    let outcome = args.watch.run("rf-features", &out, |live| {
        run_rf_features_live(&job, device, live)
    })?;
    let outcome = outcome.map_err(job_error)?;
    Ok(crate::extract::print_outcome(&out, &outcome, "IQ"))
}
