//! An output in object storage (`--out s3://bucket/prefix`): the job runs on a local work
//! folder — its ledger, job.json, report and each part until it is uploaded — and the bucket
//! receives every part whole, under its final name, before the ledger commits it. An object
//! store has no rename: a part is put in one request, or as a multipart upload completed at
//! the end, and either way is visible only complete. A shard's part names carry its index,
//! so shards writing to one prefix never write the same name.
//!
//! After a crash the same work folder resumes: a part on the local disk is one the ledger
//! holds but the bucket may not (the upload or the local delete was cut short), so it is
//! uploaded again — the same bytes under the same name — and then removed.

use std::path::{Path, PathBuf};

use sonograph_io::remote;

use crate::error::JobError;
use crate::layout::{OutputLayout, META_DIR};

/// The bucket prefix a job writes to.
#[derive(Debug, Clone)]
pub(crate) struct BucketOutput {
    url: PathBuf,
}

/// The largest job.json or report read back from a bucket.
const MAX_META_BYTES: u64 = 16 << 20;
/// Tries to claim an output whose claim is found, then gone when read.
const CLAIM_ATTEMPTS: usize = 5;

impl BucketOutput {
    /// The output `out`, where it is in object storage.
    pub fn of(out: &Path) -> Option<BucketOutput> {
        remote::is_url(out).then(|| BucketOutput {
            url: PathBuf::from(out.to_string_lossy().trim_end_matches('/')),
        })
    }

    fn url_of(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("{}/{name}", self.url.display()))
    }

    /// Where the job stages this output: `given`, or a folder named after the URL under the
    /// user's cache folder (`$XDG_CACHE_HOME`, `~/.cache`), the same on every run.
    pub fn work_dir(&self, given: Option<&Path>) -> PathBuf {
        if let Some(dir) = given {
            return dir.to_path_buf();
        }
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        let url = self.url.to_string_lossy();
        let readable: String = url
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(80)
            .collect();
        let digest = sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(
            url.as_bytes(),
        ));
        let short: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        cache
            .join("sonograph")
            .join("outputs")
            .join(format!("{readable}-{short}"))
    }

    fn io(&self, e: std::io::Error) -> JobError {
        JobError::Io {
            path: self.url.clone(),
            error: e,
        }
    }

    /// Before the shard's ledger opens: a work folder without a ledger, for a shard whose
    /// parts are already in the bucket, would write them again under the same names with
    /// other rows. Refused, naming what to do.
    pub fn check_resumable(
        &self,
        layout: &OutputLayout,
        shard_index: usize,
    ) -> Result<(), JobError> {
        if layout.ledger.exists() {
            return Ok(());
        }
        let start = format!("part-{shard_index:05}-");
        let ours: Vec<String> = remote::list(&self.url)
            .map_err(|e| self.io(e))?
            .into_iter()
            .filter(|o| o.id.starts_with(&start))
            .map(|o| o.id)
            .collect();
        if let Some(first) = ours.first() {
            return Err(JobError::Config(format!(
                "{}: holds parts of shard {shard_index} ({first}, {} in all), and the work \
                 folder {} has no ledger of them: give --work-dir the folder of the run that \
                 wrote them, or write to a new prefix",
                self.url.display(),
                ours.len(),
                layout.out.display()
            )));
        }
        Ok(())
    }

    /// Claims the job's shape in the bucket's `__sonograph/job.json` (shards on other
    /// machines share it), or refuses a run that disagrees with the one there.
    pub fn claim_shape(&self, shape: &serde_json::Value) -> Result<(), JobError> {
        let url = self.url_of(&format!("{META_DIR}/job.json"));
        let mine = format!("{shape}\n").into_bytes();
        // Created only where none is, so that of two shards of different jobs starting at once
        // on one prefix, one claims it and the other reads the claim and is refused. A claim
        // found but gone when read (deleted, or a racing create that failed) is created again,
        // never put over whatever may be there by then.
        for _ in 0..CLAIM_ATTEMPTS {
            match remote::create_bytes(mine.clone(), &url) {
                Ok(remote::Created::Made) => return Ok(()),
                Ok(remote::Created::Found) => {}
                // A store without conditional puts (a web server): read, then put where none
                // is; two jobs starting in the same instant can both pass here.
                Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                    tracing::warn!(url = %url.display(), "the store cannot create an object \
                        only where none is: the job's claim on this output is read, then written");
                    if self.read_claim(&url, shape)? {
                        return Ok(());
                    }
                    return remote::upload_bytes(mine, &url).map_err(|e| self.io(e));
                }
                Err(e) => return Err(self.io(e)),
            }
            if self.read_claim(&url, shape)? {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Err(JobError::Config(format!(
            "{}: the job's claim was there, then gone, {CLAIM_ATTEMPTS} times: another job is \
             creating and removing it; try again when it has stopped",
            url.display()
        )))
    }

    /// The claim at `url` held against `shape`: true where it is this job's, an error where
    /// it is another's, false where there is none.
    fn read_claim(&self, url: &Path, shape: &serde_json::Value) -> Result<bool, JobError> {
        let Some(found) = remote::read_small(url, MAX_META_BYTES).map_err(|e| self.io(e))? else {
            return Ok(false);
        };
        let found: serde_json::Value = serde_json::from_slice(&found)
            .map_err(|e| JobError::Config(format!("{}: unreadable: {e}", url.display())))?;
        if &found != shape {
            return Err(JobError::Config(format!(
                "{}: this output belongs to another job ({found}); this run is {shape}; use \
                 another prefix or the same settings",
                self.url.display()
            )));
        }
        Ok(true)
    }

    /// Uploads the part at `local` under its name.
    pub fn upload_part(&self, local: &Path) -> Result<(), JobError> {
        let name = local.file_name().unwrap_or_default().to_string_lossy();
        remote::upload(local, &self.url_of(&name)).map_err(|e| self.io(e))
    }

    /// Uploads the parts of shard `shard_index` left in the work folder by a run that
    /// stopped between its upload and its local delete (the ledger holds each of them), and
    /// removes them.
    pub fn upload_left_parts(&self, work: &Path, shard_index: usize) -> Result<(), JobError> {
        let start = format!("part-{shard_index:05}-");
        let listing = std::fs::read_dir(work).map_err(|error| JobError::Io {
            path: work.to_path_buf(),
            error,
        })?;
        let mut left: Vec<PathBuf> = listing
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&start))
            })
            .collect();
        left.sort();
        for part in left {
            tracing::info!(part = %part.display(), "uploading a part a stopped run left");
            self.upload_part(&part)?;
            remove_uploaded(&part)?;
        }
        Ok(())
    }

    /// Puts the shard's report and, when it is done, its completion marker in the bucket's
    /// `__sonograph/`.
    pub fn publish_meta(&self, layout: &OutputLayout) -> Result<(), JobError> {
        for file in [&layout.report, &layout.done_marker] {
            if !file.exists() {
                continue;
            }
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            remote::upload(file, &self.url_of(&format!("{META_DIR}/{name}")))
                .map_err(|e| self.io(e))?;
        }
        Ok(())
    }
}

/// Removes a part's local copy once the bucket and the ledger both hold it.
pub(crate) fn remove_uploaded(part: &Path) -> Result<(), JobError> {
    match std::fs::remove_file(part) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(JobError::Io {
            path: part.to_path_buf(),
            error: e,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_output_is_staged_in_a_folder_of_its_own() {
        assert!(BucketOutput::of(Path::new("/data/out")).is_none());
        let a = BucketOutput::of(Path::new("s3://bucket/features/")).unwrap();
        let b = BucketOutput::of(Path::new("s3://bucket/features2")).unwrap();
        assert_eq!(
            a.url_of("part-00000-00000.parquet"),
            PathBuf::from("s3://bucket/features/part-00000-00000.parquet")
        );
        let given = Path::new("/w");
        assert_eq!(a.work_dir(Some(given)), given);
        let (wa, wb) = (a.work_dir(None), b.work_dir(None));
        assert_ne!(wa, wb);
        assert_eq!(wa, a.work_dir(None), "the same folder on every run");
        let name = wa.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("s3___bucket_features-"), "{name}");
    }
}
