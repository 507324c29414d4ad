//! The output folder: where a shard keeps its parts and its files, the job's shape that every
//! run on the folder must share, and files written whole or not at all.

use std::path::{Path, PathBuf};

use sonograph_io::ledger::Ledger;

use crate::config::JobConfig;
use crate::error::JobError;
use crate::report::Report;

/// Where a shard keeps its files. Parts sit in `out/`; everything else under
/// `out/__sonograph/`, which dataset readers skip (pyarrow skips names starting with `_`,
/// Hugging Face datasets those starting with `__`).
#[derive(Debug, Clone)]
pub struct OutputLayout {
    pub out: PathBuf,
    pub meta_dir: PathBuf,
    pub ledger: PathBuf,
    pub report: PathBuf,
    pub done_marker: PathBuf,
    /// The job's shape (spec, shard count), shared by all shards of the folder.
    pub job: PathBuf,
}

impl OutputLayout {
    /// A single-shard job uses `ledger.sqlite` and `report.json`; shard `I` of `N` adds
    /// `-IIIII` so that shards can share one output folder.
    pub fn new(out: &Path, shard_index: usize, shard_count: usize) -> Self {
        let meta_dir = out.join(META_DIR);
        let suffix = if shard_count == 1 {
            String::new()
        } else {
            format!("-{shard_index:05}")
        };
        OutputLayout {
            out: out.to_path_buf(),
            ledger: meta_dir.join(format!("ledger{suffix}.sqlite")),
            report: meta_dir.join(format!("report{suffix}.json")),
            done_marker: meta_dir.join(format!("shard-{shard_index:05}-of-{shard_count:05}.done")),
            job: meta_dir.join("job.json"),
            meta_dir,
        }
    }
}

impl OutputLayout {
    /// Where a confined job (the service's) writes: the output folder beneath the roots
    /// now, and none of the files and folders it writes by name a symlink, which would carry
    /// the write wherever it points. Parts and other files are created under fresh temporary
    /// names that no symlink can stand in for (see `sonograph_io::publish`).
    pub(crate) fn confine(&self, roots: &sonograph_io::Roots) -> Result<(), JobError> {
        if !roots.is_confined() {
            return Ok(());
        }
        roots
            .check(&self.out)
            .map_err(|e| JobError::Config(format!("out: {e}")))?;
        for path in [
            &self.out,
            &self.meta_dir,
            &self.ledger,
            &self.report,
            &self.done_marker,
            &self.job,
        ] {
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(JobError::Config(format!(
                    "{}: a symlink, where the job writes; a job of the service writes real \
                     files beneath its data roots only",
                    path.display()
                )));
            }
        }
        Ok(())
    }
}

/// Name of the folder inside the output that holds everything but the parts.
pub const META_DIR: &str = "__sonograph";

/// The shape of a feature job: everything that changes which rows exist or how they are
/// stored, which every run on the folder must share (a resume with other values would mix
/// pieces of different lengths or parts of different types).
pub(crate) fn feature_job_shape(
    config: &JobConfig,
    spec_id: &str,
) -> Result<serde_json::Value, JobError> {
    let mut shape = serde_json::json!({
        "spec_id": spec_id,
        "shard_count": config.shard_count,
        "max_seconds": config.max_seconds,
        "chunk_seconds": config.chunk_seconds,
        "dtype": format!("{:?}", config.dtype),
        // The spec does not fix the spectral core's precision: rows of both must not mix.
        "precision": config.precision.name(),
        "mix": format!("{:?}", config.mix),
        // The features column's layout: a list of frames of the bins (folders written before
        // 2026-11-27 held a flat list, and parts of both would not read as one dataset).
        "features": "frames",
    });
    // A model adds columns to every part (absent without one, as folders made before models
    // could run recorded it).
    if let Some(m) = &config.model {
        // The same file however it is named (`./m.onnx`, `m.onnx`, an absolute path).
        let path = std::fs::canonicalize(&m.path).unwrap_or_else(|_| m.path.clone());
        shape["model"] = path.display().to_string().into();
    }
    // Augmented rows are other rows (absent without, as folders made before recorded it).
    if let Some(a) = &config.augment {
        shape["augment"] = serde_json::json!({"options": a.options, "seed": a.seed});
    }
    // Segments instead of pieces: other rows. Which rows exist follows from floating-point
    // probabilities, so the onnxruntime that computes them is part of the job too: a resume
    // with another one could cut an item differently from the rows already written.
    if let Some(vad) = &config.vad {
        shape["vad"] = serde_json::to_value(vad).map_err(|e| JobError::Internal(e.to_string()))?;
        let rt = sonograph_model::Runtime::get(config.ort_lib.as_deref())
            .map_err(|e| JobError::Config(format!("--vad: {e}")))?;
        let library = rt.library().file_name().unwrap_or_default();
        shape["onnxruntime"] = library.to_string_lossy().into_owned().into();
    }
    Ok(shape)
}

/// An output folder opened for a run of one shard.
pub(crate) enum Opened {
    /// The shard's completion marker and report are there: nothing to do.
    Done(Box<Report>),
    /// The shard's ledger, and the lock that keeps a second process (a requeued task, a
    /// duplicate pod, which would write the same part numbers) off the shard while it runs.
    Run { ledger: Ledger, lock: std::fs::File },
}

/// Opens `layout` for a run of shard `shard_index` of `shard_count` of a job of `shape`
/// whose rows are `spec_id`: creates the folder (beneath `roots`), claims the shape in
/// job.json (or refuses a run that disagrees with it), locks the shard and opens its ledger.
pub(crate) fn open_output(
    layout: &OutputLayout,
    roots: &sonograph_io::Roots,
    shape: &serde_json::Value,
    spec_id: &str,
    shard_index: usize,
    shard_count: usize,
) -> Result<Opened, JobError> {
    refuse_bucket(&layout.out)?;
    layout.confine(roots)?;
    std::fs::create_dir_all(&layout.meta_dir).map_err(io_err(&layout.meta_dir))?;
    layout.confine(roots)?;
    claim_job_shape(layout, shape)?;
    let lock_path = layout.meta_dir.join(format!("shard-{shard_index:05}.lock"));
    let lock = std::fs::File::create(&lock_path).map_err(io_err(&lock_path))?;
    if lock.try_lock().is_err() {
        return Err(JobError::Config(format!(
            "{}: another process is running shard {shard_index} of this folder",
            lock_path.display(),
        )));
    }
    let shard = format!("{shard_index}/{shard_count}");
    let ledger = Ledger::open(&layout.ledger, &layout.out, spec_id, &shard)?;
    if layout.done_marker.exists() {
        if let Some(report) = read_report(&layout.report) {
            return Ok(Opened::Done(Box::new(report)));
        }
    }
    Ok(Opened::Run { ledger, lock })
}

/// Refuses an output in object storage to the jobs that write their folder directly (an
/// extract job stages its bucket output in a local folder: see `bucket`).
pub(crate) fn refuse_bucket(out: &Path) -> Result<(), JobError> {
    if sonograph_io::remote::is_url(out) {
        return Err(JobError::Config(format!(
            "{}: only extract writes to object storage; write this job to a folder",
            out.display()
        )));
    }
    Ok(())
}

/// Records the job's shape in `job.json` the first time, and refuses a run that disagrees:
/// shards of different counts would write parts of the same names.
fn claim_job_shape(layout: &OutputLayout, shape: &serde_json::Value) -> Result<(), JobError> {
    let text = format!("{shape}\n");
    // Linked into place only where no job.json is: `job.json` either does not exist or is
    // complete and on the disk, whatever instant a process dies at, and two shards racing to
    // write it see one.
    if std::fs::metadata(&layout.job).is_ok_and(|m| m.len() == 0) {
        // Only a torn write of an older version left an empty one: it recorded nothing.
        std::fs::remove_file(&layout.job).map_err(io_err(&layout.job))?;
    }
    let publish = || -> std::io::Result<bool> {
        use std::io::Write;
        let (draft, mut file) = sonograph_io::publish::Draft::create(&layout.job)?;
        file.write_all(text.as_bytes())?;
        draft.sync(file)?.publish_new()
    };
    if publish().map_err(io_err(&layout.job))? {
        return Ok(());
    }
    let found = std::fs::read_to_string(&layout.job).map_err(io_err(&layout.job))?;
    let found: serde_json::Value = serde_json::from_str(&found)
        .map_err(|e| JobError::Config(format!("{}: unreadable: {e}", layout.job.display())))?;
    if &found == shape {
        return Ok(());
    }
    Err(JobError::Config(format!(
        "{}: this output folder belongs to another job ({found}); this run is {shape}; use another folder or the same settings",
        layout.out.display()
    )))
}

/// Ends a shard's run: writes its report, and marks the shard done unless items were left
/// undone (then the same command runs them again; none is lost).
pub(crate) fn finish_output(
    layout: &OutputLayout,
    report: &Report,
    canceled: bool,
) -> Result<(), JobError> {
    write_json_atomically(&layout.report, report)?;
    let undone =
        report.items_total - (report.items_ok + report.items_failed).min(report.items_total);
    if undone > 0 && canceled {
        return Err(JobError::Canceled { undone });
    }
    if undone > 0 {
        return Err(JobError::Internal(format!(
            "{undone} items were left undone (see the log); run the same command again to finish them"
        )));
    }
    sonograph_io::publish::publish_bytes(
        &layout.done_marker,
        format!("{}\n", report.spec_id).as_bytes(),
    )
    .map_err(io_err(&layout.done_marker))
}

pub(crate) fn io_err(path: &Path) -> impl Fn(std::io::Error) -> JobError + '_ {
    move |error| JobError::Io {
        path: path.to_path_buf(),
        error,
    }
}

fn read_report(path: &Path) -> Option<Report> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn write_json_atomically(path: &Path, report: &Report) -> Result<(), JobError> {
    let text =
        serde_json::to_string_pretty(report).map_err(|e| JobError::Internal(e.to_string()))?;
    sonograph_io::publish::publish_bytes(path, text.as_bytes()).map_err(io_err(path))
}
