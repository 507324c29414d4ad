//! Finding and loading onnxruntime. The library is loaded at run time (ort's `load-dynamic`),
//! so a build needs nothing and a machine without onnxruntime still runs every command but the
//! model ones. sonograph looks, in order:
//!
//! 1. where the caller says: `--ort-lib PATH` (passed in as `explicit`) or `SONOGRAPH_ORT_LIB`
//!    (a file, or a folder holding it); a library named this way that does not load is an
//!    error, never a reason to look elsewhere;
//! 2. next to the running binary (how a release archive ships it);
//! 3. in the `onnxruntime` package of `python3`, when one is installed (`pip install
//!    onnxruntime==1.31.1`): python3 is asked where the package is, without importing it;
//!
//! and otherwise fails with one line that says how to install it ([`crate::INSTALL_HINT`]).
//! The library is process-wide: the first one loaded stays.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use ort::environment::Environment;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::session::Session;

use crate::error::ModelError;

/// The environment variable naming the library (or its folder).
pub const ORT_LIB_ENV: &str = "SONOGRAPH_ORT_LIB";

/// onnxruntime, loaded.
pub struct Runtime {
    env: Environment,
    library: PathBuf,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("library", &self.library)
            .finish()
    }
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

impl Runtime {
    /// Loads onnxruntime once per process (see the module's lookup order) and returns it.
    pub fn get(explicit: Option<&Path>) -> Result<&'static Runtime, ModelError> {
        let from_env = std::env::var_os(ORT_LIB_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let wanted = explicit.map(Path::to_path_buf).or(from_env);
        // Poisoning only means another thread panicked while loading; the OnceLock says
        // whether it got as far as a runtime.
        let _guard = LOADING.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rt) = RUNTIME.get() {
            if let Some(w) = &wanted {
                let w = library_in(w).unwrap_or_else(|| w.clone());
                if !same_file(&w, &rt.library) {
                    return Err(ModelError::RuntimeLoad {
                        path: w,
                        reason: format!(
                            "onnxruntime is already loaded from {} in this process",
                            rt.library.display()
                        ),
                    });
                }
            }
            return Ok(rt);
        }
        let library = locate(wanted.as_deref())?;
        let load_err = |reason: String| ModelError::RuntimeLoad {
            path: library.clone(),
            reason,
        };
        let env = ort::init_from(&library)
            .map_err(|e| load_err(e.to_string()))?
            .with_name("sonograph")
            .with_telemetry(false)
            .build()
            .map_err(|e| load_err(e.to_string()))?;
        tracing::info!(library = %library.display(), "onnxruntime loaded");
        Ok(RUNTIME.get_or_init(|| Runtime { env, library }))
    }

    /// The library file in use.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// Opens `model` on the CPU with `threads` intra-op threads (0: onnxruntime's default, one
    /// per core) and all graph optimisations.
    pub fn session(&self, model: &Path, threads: usize) -> Result<Session, ModelError> {
        self.session_on(model, threads, ModelDevice::Cpu)
    }

    /// [`session`](Self::session) on `device`. On a GPU the CUDA provider must register (a
    /// build with the `cuda` feature, onnxruntime-gpu loaded): onnxruntime's silent fallback
    /// to the CPU is refused, so a model never runs elsewhere than where it was asked to.
    pub fn session_on(
        &self,
        model: &Path,
        threads: usize,
        device: ModelDevice,
    ) -> Result<Session, ModelError> {
        if !model.is_file() {
            return Err(ModelError::Model {
                path: model.to_path_buf(),
                reason: "no such model file".into(),
            });
        }
        let builder = self.builder(threads).map_err(|e| ModelError::Model {
            path: model.to_path_buf(),
            reason: format!("onnxruntime: {e}"),
        })?;
        on_device(builder, device)?
            .commit_from_file(model)
            .map_err(|e| ModelError::Model {
                path: model.to_path_buf(),
                reason: format!("onnxruntime cannot open the model: {e}"),
            })
    }

    /// [`session`](Self::session) of a model in memory; `name` is for messages.
    pub fn session_from_memory(
        &self,
        bytes: &[u8],
        name: &Path,
        threads: usize,
    ) -> Result<Session, ModelError> {
        self.builder(threads)
            .and_then(|mut b| b.commit_from_memory(bytes))
            .map_err(|e| ModelError::Model {
                path: name.to_path_buf(),
                reason: format!("onnxruntime cannot open the model: {e}"),
            })
    }

    fn builder(&self, threads: usize) -> ort::Result<SessionBuilder> {
        Ok(Session::builder(&self.env)?
            .with_optimization_level(GraphOptimizationLevel::Level3)?
            .with_intra_threads(threads)?
            .with_inter_threads(1)?)
    }
}

/// Where onnxruntime runs a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelDevice {
    #[default]
    Cpu,
    /// A CUDA device, by index (onnxruntime's CUDA execution provider).
    Cuda(u32),
}

impl ModelDevice {
    /// `cpu`, `gpu` (the first GPU) or `gpu:N`.
    pub fn parse(text: &str) -> Result<Self, ModelError> {
        let bad =
            || ModelError::Invalid(format!("model device {text:?}: expected cpu, gpu or gpu:N"));
        match text.trim() {
            "cpu" => Ok(ModelDevice::Cpu),
            "gpu" => Ok(ModelDevice::Cuda(0)),
            other => other
                .strip_prefix("gpu:")
                .and_then(|n| n.parse::<u32>().ok())
                .map(ModelDevice::Cuda)
                .ok_or_else(bad),
        }
    }
}

impl std::fmt::Display for ModelDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelDevice::Cpu => f.write_str("cpu"),
            ModelDevice::Cuda(n) => write!(f, "gpu:{n} (CUDA)"),
        }
    }
}

/// `builder` with `device`'s execution provider registered (none for the CPU).
fn on_device(builder: SessionBuilder, device: ModelDevice) -> Result<SessionBuilder, ModelError> {
    match device {
        ModelDevice::Cpu => Ok(builder),
        ModelDevice::Cuda(index) => cuda(builder, index),
    }
}

#[cfg(feature = "cuda")]
fn cuda(builder: SessionBuilder, index: u32) -> Result<SessionBuilder, ModelError> {
    // TF32 off: with its 10-bit mantissa the CUDA test's outputs on an H100 were 1.6e-3 from
    // the CPU's, over the 1e-3 the test allows (bench/gpu/logs/2026-11-26-model-cuda.txt);
    // users want the outputs the model was validated with.
    let provider = ort::ep::CUDA::default()
        .with_device_id(i32::try_from(index).unwrap_or(i32::MAX))
        .with_tf32(false)
        .build()
        .error_on_failure();
    builder.with_execution_providers([provider]).map_err(|e| {
        ModelError::Invalid(format!(
            "gpu:{index}: onnxruntime's CUDA provider did not start ({e}); load \
                 onnxruntime-gpu (--ort-lib) with CUDA 13 and cuDNN 9, or use --model-device cpu"
        ))
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda(_: SessionBuilder, index: u32) -> Result<SessionBuilder, ModelError> {
    Err(ModelError::Invalid(format!(
        "gpu:{index}: this build runs models on the CPU only (build sonograph with \
         --features cuda, and load onnxruntime-gpu); use --model-device cpu"
    )))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The library file: `wanted` (a file, or the library in a folder), else next to the binary,
/// else in python3's onnxruntime package.
pub fn locate(wanted: Option<&Path>) -> Result<PathBuf, ModelError> {
    if let Some(w) = wanted {
        // Absolute, so that ort does not look for a relative path beside the executable first.
        let absolute = std::path::absolute(w).unwrap_or_else(|_| w.to_path_buf());
        let w = absolute.as_path();
        if w.is_dir() {
            return library_in(w).ok_or_else(|| ModelError::RuntimeLoad {
                path: w.to_path_buf(),
                reason: format!("no {} in this folder", LIB_NAME),
            });
        }
        if !w.exists() {
            return Err(ModelError::RuntimeLoad {
                path: w.to_path_buf(),
                reason: "no such file".into(),
            });
        }
        return Ok(w.to_path_buf());
    }
    let mut looked = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        if let Some(lib) = library_in(&dir) {
            return Ok(lib);
        }
        looked.push(format!("not next to the binary in {}", dir.display()));
    }
    match python_capi_dir() {
        Some(dir) => match library_in(&dir) {
            Some(lib) => return Ok(lib),
            None => looked.push(format!("no library in python3's {}", dir.display())),
        },
        None => looked.push("no onnxruntime package in python3".into()),
    }
    Err(ModelError::RuntimeNotFound {
        looked: looked.join("; "),
    })
}

#[cfg(target_os = "windows")]
const LIB_NAME: &str = "onnxruntime.dll";
#[cfg(target_os = "macos")]
const LIB_NAME: &str = "libonnxruntime.dylib";
#[cfg(not(any(target_os = "windows", target_os = "macos")))]
const LIB_NAME: &str = "libonnxruntime.so";

/// Whether `name` is the library: `libonnxruntime.so` or a versioned `libonnxruntime.so.1.31.1`
/// (what the wheel ships), `libonnxruntime.1.31.1.dylib`, `onnxruntime.dll`; never a provider
/// library beside it.
fn is_library_name(name: &str) -> bool {
    if name == LIB_NAME {
        return true;
    }
    let versioned = if cfg!(target_os = "macos") {
        name.strip_prefix("libonnxruntime.")
            .and_then(|r| r.strip_suffix(".dylib"))
    } else if cfg!(target_os = "windows") {
        None
    } else {
        name.strip_prefix("libonnxruntime.so.")
    };
    versioned.is_some_and(|v| !v.is_empty() && v.split('.').all(|p| p.parse::<u32>().is_ok()))
}

/// The library in `dir`: the plain name if there, else the highest version.
fn library_in(dir: &Path) -> Option<PathBuf> {
    if !dir.is_dir() {
        return None;
    }
    let plain = dir.join(LIB_NAME);
    if plain.is_file() {
        return Some(plain);
    }
    let mut found: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            if !is_library_name(&name) {
                return None;
            }
            let version = name
                .split('.')
                .filter_map(|p| p.parse::<u32>().ok())
                .collect();
            Some((version, e.path()))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
}

/// python3's `onnxruntime/capi` folder, found without importing the package (which would load
/// a second copy of the library into a Python process for nothing).
fn python_capi_dir() -> Option<PathBuf> {
    const ASK: &str = "import importlib.util, os\n\
        s = importlib.util.find_spec('onnxruntime')\n\
        print(os.path.join(os.path.dirname(s.origin), 'capi') if s and s.origin else '')";
    let out = Command::new("python3")
        .args(["-c", ASK])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let dir = text.trim();
    (out.status.success() && !dir.is_empty()).then(|| PathBuf::from(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_devices_parse() {
        assert_eq!(ModelDevice::parse("cpu").unwrap(), ModelDevice::Cpu);
        assert_eq!(ModelDevice::parse("gpu").unwrap(), ModelDevice::Cuda(0));
        assert_eq!(ModelDevice::parse("gpu:3").unwrap(), ModelDevice::Cuda(3));
        for bad in ["", "gpu:", "gpu:-1", "gpu:x", "cuda", "all"] {
            assert!(ModelDevice::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(ModelDevice::Cuda(1).to_string(), "gpu:1 (CUDA)");
    }

    #[test]
    fn library_names_are_the_runtime_and_not_its_providers() {
        if cfg!(target_os = "linux") {
            assert!(is_library_name("libonnxruntime.so"));
            assert!(is_library_name("libonnxruntime.so.1.31.1"));
            assert!(!is_library_name("libonnxruntime_providers_shared.so"));
            assert!(!is_library_name("libonnxruntime.so.1.x"));
            assert!(!is_library_name("libonnxruntime.so."));
        }
    }

    #[test]
    fn the_highest_version_in_a_folder_wins_and_a_named_folder_is_searched() {
        let dir = std::env::temp_dir().join(format!("sonograph-ortlib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for n in [
            "libonnxruntime_providers_shared.so",
            "libonnxruntime.so.1.9.0",
            "libonnxruntime.so.1.31.1",
        ] {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        if cfg!(target_os = "linux") {
            assert_eq!(
                locate(Some(&dir)).unwrap(),
                dir.join("libonnxruntime.so.1.31.1")
            );
        }
        let missing = dir.join("nothing.so");
        let e = locate(Some(&missing)).unwrap_err().to_string();
        assert!(
            e.contains("nothing.so") && e.contains("no such file"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
