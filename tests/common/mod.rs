//! Helpers shared by the integration tests that run the `sonograph` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[cfg(feature = "gpu")]
use crate::shared::skip;

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

/// A mono 16-bit (or float) WAV of `x`.
#[allow(dead_code)] // not every test file writes its own audio
pub fn write_wav(path: &Path, rate: u32, x: &[f32], float: bool) {
    use std::io::Write;
    let (bits, format) = if float { (32u16, 3u16) } else { (16, 1) };
    let bytes = x.len() as u32 * u32::from(bits / 8);
    let mut h = Vec::new();
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&(36 + bytes).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&format.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&rate.to_le_bytes());
    h.extend_from_slice(&(rate * u32::from(bits / 8)).to_le_bytes());
    h.extend_from_slice(&(bits / 8).to_le_bytes());
    h.extend_from_slice(&bits.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&bytes.to_le_bytes());
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&h).unwrap();
    for &v in x {
        if float {
            f.write_all(&v.to_le_bytes()).unwrap();
        } else {
            let s = (v * 32768.0).round().clamp(-32768.0, 32767.0) as i16;
            f.write_all(&s.to_le_bytes()).unwrap();
        }
    }
}

/// Peak RSS of a child process, polled from /proc until it exits (VmHWM is its high-water mark).
#[allow(dead_code)] // used by the flat-memory tests only
pub fn run_with_peak_rss(cmd: &mut Command) -> (Output, f64) {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = PathBuf::from(format!("/proc/{}/status", child.id()));
    let mut peak_kb = 0u64;
    loop {
        if let Ok(s) = std::fs::read_to_string(&status) {
            if let Some(kb) = s
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
            {
                peak_kb = peak_kb.max(kb);
            }
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), peak_kb as f64 / 1024.0)
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

/// A build without the `gpu` feature has no wgpu adapter to offer, so its tests run the CPU
/// path alone.
#[cfg(not(feature = "gpu"))]
#[allow(dead_code)] // only tests/extract.rs asks in a CPU-only build
pub fn has_gpu_adapter() -> bool {
    false
}
