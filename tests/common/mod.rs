//! Helpers shared by the integration tests that run the `sonograph` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[cfg(feature = "gpu")]
#[path = "../shared/skip.rs"]
mod skip;

/// The binary, with none of the environment variables that would change what it does
/// (flags from `SONOGRAPH_*`, shards from Kubernetes or Slurm).
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sonograph"));
    for (k, _) in std::env::vars() {
        if k.starts_with("SONOGRAPH_") || k.starts_with("SLURM_") || k == "JOB_COMPLETION_INDEX" {
            c.env_remove(k);
        }
    }
    c
}

/// A path inside the repository.
pub fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh temporary folder, removed when dropped.
pub struct Tmp(pub PathBuf);

impl Tmp {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("sonograph-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// True when `sonograph devices` lists a wgpu adapter; otherwise records the caller's skip
/// (a failure under `SONOGRAPH_REQUIRE_GPU=1`).
#[cfg(feature = "gpu")]
pub fn has_gpu_adapter() -> bool {
    let devices = bin()
        .args(["devices", "--json", "--no-probe"])
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&devices.stdout).unwrap_or_default();
    let has_gpu = listed["devices"].as_array().is_some_and(|d| {
        d.iter()
            .any(|x| x["id"].as_str().is_some_and(|id| id.starts_with("gpu")))
    });
    if !has_gpu {
        skip::skip("no wgpu adapter (install mesa-vulkan-drivers for lavapipe)");
    }
    has_gpu
}
