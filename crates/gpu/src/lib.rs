//! sonograph-gpu: the wgpu runtime of sonograph. A device registry (discovery, scoring,
//! states, health probe, `--device` selection), a caching memory pool with a budget and
//! PyTorch-named statistics, WGSL kernels (`kernels/*.wgsl`) and the GPU extractor. The
//! adaptive batcher that recovers from its out-of-memory errors lives in sonograph-pipeline.
//!
//! Without the `gpu` feature the crate still builds: the registry lists only the CPU and
//! [`GpuBackend::new`] returns [`DeviceError::Unavailable`](sonograph_dsp::DeviceError).

pub mod calibrate;
pub mod device;
pub mod error;
pub mod nvml;
pub mod plan;
pub mod pool;
pub mod set;

#[cfg(feature = "gpu")]
pub mod context;
#[cfg(feature = "gpu")]
mod extractor;
#[cfg(feature = "gpu")]
mod fft_wgsl;
#[cfg(all(test, feature = "gpu"))]
mod mirror;
#[cfg(feature = "gpu")]
pub mod rf;
#[cfg(feature = "gpu")]
mod transfer;
#[cfg(not(feature = "gpu"))]
pub mod rf {
    //! Stand-in for builds without the `gpu` feature: [`RfGpu::new`] says so, and nothing
    //! else can be reached.
    use sonograph_dsp::{DeviceError, Precision};
    use sonograph_rf::features::{Psd, WelchConfig};
    use sonograph_rf::{Complex32, NoiseJob};

    /// Cannot be constructed in this build.
    pub struct RfGpu {
        never: std::convert::Infallible,
    }

    impl RfGpu {
        pub fn new(_adapter: Option<usize>) -> Result<Self, DeviceError> {
            Err(DeviceError::Unavailable(
                "this sonograph was built without the `gpu` feature; rebuild with `--features gpu`"
                    .into(),
            ))
        }

        pub fn device(&self) -> &str {
            match self.never {}
        }

        pub fn precision(&self) -> Precision {
            match self.never {}
        }

        pub fn add_noise(
            &mut self,
            _items: &mut [Vec<Complex32>],
            _jobs: &[NoiseJob],
        ) -> Result<(), DeviceError> {
            match self.never {}
        }

        pub fn welch(
            &mut self,
            _recordings: &[&[Complex32]],
            _rates: &[f64],
            _cfg: &WelchConfig,
        ) -> Result<Vec<Psd>, DeviceError> {
            match self.never {}
        }
    }
}

/// `rf-features` jobs compute their windows' PSDs here, through rf's device trait (in both
/// builds: the stand-in cannot be constructed).
impl sonograph_rf::rows::PsdDevice for rf::RfGpu {
    fn name(&self) -> String {
        self.device().to_string()
    }

    fn welch(
        &mut self,
        windows: &[&[sonograph_rf::Complex32]],
        rates: &[f64],
        cfg: &sonograph_rf::WelchConfig,
    ) -> Result<Vec<sonograph_rf::Psd>, String> {
        rf::RfGpu::welch(self, windows, rates, cfg).map_err(|e| e.to_string())
    }
}

/// The one device of an RF job (`rf-features`, `synth-iq`), as its `device` option names it:
/// `None` for the CPU, else the GPU opened; with the warnings of the devices' probe. `auto`
/// gives the best hardware GPU where there is one (`synth-iq` then measures it against the
/// CPU). A list or `all` is refused: an RF job runs on one device.
pub fn open_rf_device(device: &str) -> Result<(Option<rf::RfGpu>, Vec<String>), String> {
    let request: DeviceRequest = device.parse().map_err(|e| format!("device: {e}"))?;
    let set =
        DeviceSet::resolve(&request, &disabled_devices(), ProbePolicy::default()).map_err(|e| {
            match e {
                GpuError::CannotDisable(..) => format!("SONOGRAPH_DISABLE_DEVICES: {e}"),
                e => format!("device {device}: {e}"),
            }
        })?;
    let notes = set.notes().to_vec();
    let [choice] = set.chosen() else {
        return Err(format!(
            "device {device}: RF jobs run on one device: cpu, auto, gpu or gpu:N"
        ));
    };
    match choice.device {
        Selected::Cpu => Ok((None, notes)),
        Selected::Gpu(i) => rf::RfGpu::new(Some(i))
            .map(|g| (Some(g), notes))
            .map_err(|e| format!("device {device}: {e}")),
    }
}

/// `synth-iq` jobs run their noise stage here, through rf's device trait.
impl sonograph_rf::NoiseDevice for rf::RfGpu {
    fn name(&self) -> String {
        self.device().to_string()
    }

    fn add_noise(
        &mut self,
        items: &mut [Vec<sonograph_rf::Complex32>],
        jobs: &[sonograph_rf::NoiseJob],
    ) -> Result<(), String> {
        rf::RfGpu::add_noise(self, items, jobs).map_err(|e| e.to_string())
    }
}

pub use device::{DeviceInfo, DeviceRegistry, DeviceSelection, DeviceState, DeviceType, Selected};
pub use error::GpuError;
#[cfg(feature = "gpu")]
pub use extractor::GpuBackend;
pub use nvml::GpuTelemetry;
pub use pool::{Budget, MemoryPool, MemoryStats};
pub use set::{
    disabled_devices, Choice, DeviceRequest, DeviceSet, JobDevices, OpenError, OpenOptions, Opened,
    OpenedJob, ProbePolicy,
};

/// How to open the GPU backend.
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    /// Adapter index (`gpu:N`); `None` = the best-scoring adapter, software ones included.
    pub adapter: Option<usize>,
    /// Memory budget; `None` = 90% of the free memory NVML reports for the adapter, else
    /// [`pool::DEFAULT_BUDGET`] (see `nvml::budget_for`).
    pub budget: Option<Budget>,
    /// Use the three-pass path with the direct DFT even where the fused FFT kernel could run
    /// (for tests of that path; O(n_fft) per bin instead of O(log n_fft)).
    pub force_dft: bool,
    /// The spectral core's scalar. f64 (the default, as on the CPU) needs an adapter with f64
    /// in shaders (NVIDIA and AMD on Vulkan, lavapipe); elsewhere the backend computes in f32
    /// and logs a warning ([`GpuBackend::precision`] says which it got).
    pub precision: sonograph_dsp::Precision,
    /// Apply the whole-row steps (dynamic-range clamp, affine, NeMo's per-feature
    /// normalisation) on the host even where the
    /// device can (`plan::device_item_steps`): for tests and benchmarks that compare the two.
    pub item_steps_on_host: bool,
}

/// Whether the GPU backend computes `spec`, checked before any adapter is opened. It has no
/// kernels for complex (IQ) input and says so, rather than run the audio kernels on
/// interleaved I/Q values.
pub fn check_spec(spec: &sonograph_dsp::FeatureSpec) -> Result<(), sonograph_dsp::DeviceError> {
    if spec.is_complex() {
        return Err(sonograph_dsp::DeviceError::Unsupported(
            "the GPU backend has no kernels for complex (IQ) input; it runs on the CPU \
             (--device cpu or auto)"
                .into(),
        ));
    }
    Ok(())
}

/// True when this build has the wgpu backend.
pub const GPU_BUILT: bool = cfg!(feature = "gpu");

#[cfg(not(feature = "gpu"))]
mod standin {
    use sonograph_dsp::{AudioBatch, DeviceError, Extractor, FeatureBatch, FeatureSpec};

    use crate::GpuOptions;

    /// Stand-in for builds without the `gpu` feature: it cannot be constructed.
    pub struct GpuBackend {
        spec: FeatureSpec,
    }

    impl GpuBackend {
        pub fn new(spec: &FeatureSpec, _options: &GpuOptions) -> Result<Self, DeviceError> {
            crate::check_spec(spec)?;
            Err(DeviceError::Unavailable(
                "this sonograph was built without the `gpu` feature; rebuild with `--features gpu`"
                    .into(),
            ))
        }

        pub fn spectrum_kernel(&self) -> &'static str {
            "none"
        }

        pub fn precision(&self) -> sonograph_dsp::Precision {
            sonograph_dsp::Precision::F32
        }
    }

    impl Extractor for GpuBackend {
        fn spec(&self) -> &FeatureSpec {
            &self.spec
        }
        fn device(&self) -> String {
            "gpu (not built)".into()
        }
        fn extract_batch(
            &mut self,
            _: &AudioBatch,
            _: &mut FeatureBatch,
        ) -> Result<(), DeviceError> {
            Err(DeviceError::Unavailable(
                "built without the `gpu` feature".into(),
            ))
        }
    }
}
#[cfg(not(feature = "gpu"))]
pub use standin::GpuBackend;
