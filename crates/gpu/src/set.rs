//! `DeviceSet`: what `--device` asks for, parsed once, resolved once against the devices of
//! this machine (disabled ones left out, candidates health-probed before anything is chosen),
//! and opened as executors. Every command that computes features (`features`, `extract`,
//! `bench`) goes through it, so that `auto`, `gpu`, `gpu:N`, lists and `all` mean the same
//! thing everywhere.

use std::str::FromStr;
use std::time::Duration;

use sonograph_dsp::{CpuBackend, DeviceError, Extractor, FeatureSpec, Precision};

use crate::device::{DeviceRegistry, DeviceSelection, DeviceState, DeviceType, Selected};
use crate::error::GpuError;
use crate::pool::Budget;

/// What `--device` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRequest {
    /// Every usable adapter (software ones included) and the CPU.
    All,
    /// One device, or a comma-separated list (`gpu:0,gpu:1,cpu`), in order.
    List(Vec<DeviceSelection>),
}

impl DeviceRequest {
    /// The single device of a one-device command (`features`); `None` for `all` or a list.
    pub fn single(&self) -> Option<DeviceSelection> {
        match self {
            DeviceRequest::List(list) if list.len() == 1 => Some(list[0]),
            _ => None,
        }
    }

    /// True when no GPU can be chosen: nothing needs to be discovered or probed.
    pub fn cpu_only(&self) -> bool {
        matches!(self, DeviceRequest::List(l) if l.iter().all(|s| *s == DeviceSelection::Cpu))
    }

    /// Only `auto` and `cpu`: a GPU could be chosen only if it is a hardware one.
    pub fn auto_or_cpu(&self) -> bool {
        matches!(self, DeviceRequest::List(l)
            if l.iter().all(|s| matches!(s, DeviceSelection::Cpu | DeviceSelection::Auto)))
    }
}

impl FromStr for DeviceRequest {
    type Err = GpuError;
    fn from_str(s: &str) -> Result<Self, GpuError> {
        if s.trim().eq_ignore_ascii_case("all") {
            return Ok(DeviceRequest::All);
        }
        let list = s
            .split(',')
            .map(|one| one.parse())
            .collect::<Result<Vec<DeviceSelection>, _>>()
            .map_err(|_| GpuError::BadSelection(s.to_string()))?;
        Ok(DeviceRequest::List(list))
    }
}

/// How candidates are health-probed before they are chosen.
#[derive(Debug, Clone, Copy)]
pub struct ProbePolicy {
    /// Each try's deadline (a hung driver cannot hang the run).
    pub deadline: Duration,
    /// Tries per adapter, with backoff; a pass after a retry marks the device `Degraded`.
    pub attempts: u32,
}

impl Default for ProbePolicy {
    fn default() -> Self {
        ProbePolicy {
            deadline: Duration::from_secs(5),
            attempts: 2,
        }
    }
}

/// One device the request chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub device: Selected,
    /// Named outright (`gpu`, `gpu:N`): failing to open it is an error. Chosen by `auto` or
    /// `all`: failing to open it leaves it out, with a note (and `auto` falls back to the CPU).
    pub named: bool,
}

/// How to open the chosen devices.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    pub precision: Precision,
    /// Per-GPU memory budget; `None` = from NVML, else the default (see `nvml::budget_for`).
    pub budget: Option<Budget>,
    /// CPU worker threads; `None` = the global rayon pool (all cores).
    pub cpu_threads: Option<usize>,
}

/// The devices a run uses, with what the run should say about the others.
pub struct DeviceSet {
    registry: DeviceRegistry,
    chosen: Vec<Choice>,
    notes: Vec<String>,
    /// `auto` asked for: a GPU it chose is measured against the CPU when opened.
    auto: bool,
}

impl DeviceSet {
    /// Resolves `request` on this machine: adapters are discovered only when a GPU could be
    /// chosen, `disabled` ids are marked `Disabled`, and every candidate is probed first, so a
    /// device that fails its probe is never chosen (and a note says so).
    pub fn resolve(
        request: &DeviceRequest,
        disabled: &[String],
        probe: ProbePolicy,
    ) -> Result<Self, GpuError> {
        // `auto` picks hardware GPUs only: without one on the machine, no driver is loaded.
        let no_gpu_to_find = request.auto_or_cpu() && !crate::device::hardware_gpu_may_exist();
        let registry = if request.cpu_only() || no_gpu_to_find {
            DeviceRegistry::from_devices(Vec::new())
        } else {
            DeviceRegistry::discover()
        };
        Self::resolve_in(registry, request, disabled, |registry, index| {
            registry.probe(index, probe.deadline, probe.attempts)
        })
    }

    /// [`Self::resolve`] over a given registry and probe (tests use stand-ins for both).
    pub fn resolve_in(
        mut registry: DeviceRegistry,
        request: &DeviceRequest,
        disabled: &[String],
        mut probe: impl FnMut(&mut DeviceRegistry, usize) -> DeviceState,
    ) -> Result<Self, GpuError> {
        let names_gpu = match request {
            DeviceRequest::All => false,
            DeviceRequest::List(l) => l
                .iter()
                .any(|s| matches!(s, DeviceSelection::Gpu | DeviceSelection::GpuIndex(_))),
        };
        if names_gpu && !crate::GPU_BUILT {
            return Err(GpuError::NotBuilt);
        }
        registry.disable(disabled)?;
        let mut notes = Vec::new();
        for index in candidates(&registry, request) {
            let state = probe(&mut registry, index);
            let info = &registry.devices()[registry.position(index)];
            let why = info.reason.clone().unwrap_or_default();
            match state {
                DeviceState::Failed => notes.push(format!(
                    "{} ({}) failed its health probe and is not used: {why}",
                    info.id, info.name
                )),
                DeviceState::Degraded => {
                    notes.push(format!("{} ({}) is degraded: {why}", info.id, info.name))
                }
                _ => {}
            }
        }
        let mut chosen: Vec<Choice> = Vec::new();
        let mut push = |choice: Choice| {
            if !chosen.iter().any(|c| c.device == choice.device) {
                chosen.push(choice);
            }
        };
        match request {
            DeviceRequest::All => {
                for d in registry.devices().iter().filter(|d| d.usable()) {
                    push(Choice {
                        device: d.index.map_or(Selected::Cpu, Selected::Gpu),
                        named: false,
                    });
                }
            }
            DeviceRequest::List(list) => {
                for &selection in list {
                    let device = registry.select(selection).map_err(|e| match e {
                        // Say why the device is not usable when its probe is the reason.
                        GpuError::NoSuchDevice(name, why) if !notes.is_empty() => {
                            GpuError::NoSuchDevice(name, format!("{why}; {}", notes.join("; ")))
                        }
                        e => e,
                    })?;
                    let named = matches!(
                        selection,
                        DeviceSelection::Gpu | DeviceSelection::GpuIndex(_)
                    );
                    push(Choice { device, named });
                }
            }
        }
        let auto = matches!(request, DeviceRequest::List(l) if l == &[DeviceSelection::Auto]);
        Ok(DeviceSet {
            registry,
            chosen,
            notes,
            auto,
        })
    }

    pub fn chosen(&self) -> &[Choice] {
        &self.chosen
    }

    /// What the run should tell its user: devices that failed their probe, degraded ones.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    pub fn registry(&self) -> &DeviceRegistry {
        &self.registry
    }

    /// Opens an executor per chosen device for `spec`. A GPU that `auto` or `all` chose and
    /// that cannot open (or cannot take the spec) is left out with a note, and `auto` puts the
    /// CPU in its place; one named outright is an error. A kernel that does not compile is an
    /// error everywhere: it is a bug, not a missing device.
    pub fn open(&self, spec: &FeatureSpec, options: &OpenOptions) -> Result<Opened, OpenError> {
        self.open_with(spec, options, &mut crate::calibrate::MemoryStore::default())
    }

    /// [`Self::open`]; where `auto` chose a GPU, the GPU and the CPU are measured on `spec`
    /// (`store` keeps what was measured) and the faster kept, a GPU only at
    /// [`crate::calibrate::GPU_MARGIN`] times the CPU ([`Opened::calibration`] says what was
    /// measured and why).
    pub fn open_with(
        &self,
        spec: &FeatureSpec,
        options: &OpenOptions,
        store: &mut dyn crate::calibrate::CalibrationStore,
    ) -> Result<Opened, OpenError> {
        let mut opened = self.open_chosen(spec, options)?;
        let gpu_by_auto = self.auto
            && opened.executors.len() == 1
            && !opened.executors[0].is_cpu()
            && self
                .chosen
                .first()
                .is_some_and(|c| c.device != Selected::Cpu);
        if !gpu_by_auto {
            return Ok(opened);
        }
        use crate::calibrate::{choose, rate_of, Calibration};
        let mut cpu = cpu_backend(spec, options)?;
        let gpu_id = match self.chosen[0].device {
            Selected::Gpu(i) => format!("gpu:{i}"),
            Selected::Cpu => unreachable!("checked above"),
        };
        let p = options.precision;
        let measured = rate_of("cpu", &mut cpu, spec, p, store).and_then(|c| {
            rate_of(&gpu_id, opened.executors[0].as_mut(), spec, p, store).map(|g| vec![c, g])
        });
        let measured = match measured {
            Ok(m) => m,
            Err(e) => {
                opened.notes.push(format!(
                    "{gpu_id} failed its calibration and is not used: {e}"
                ));
                opened.executors = vec![Box::new(cpu)];
                return Ok(opened);
            }
        };
        let (index, why) = choose(&measured);
        let chose = measured[index].id.clone();
        if chose == "cpu" {
            opened.executors = vec![Box::new(cpu)];
        }
        tracing::info!("auto chose {chose}: {why}");
        opened.calibration = Some(Calibration {
            measured,
            chose,
            why,
        });
        Ok(opened)
    }

    /// Opens an executor per chosen device, as chosen.
    fn open_chosen(&self, spec: &FeatureSpec, options: &OpenOptions) -> Result<Opened, OpenError> {
        let mut executors: Vec<Box<dyn Extractor>> = Vec::new();
        let mut notes = Vec::new();
        let mut has_cpu = false;
        let mut cpu = |executors: &mut Vec<Box<dyn Extractor>>| -> Result<(), OpenError> {
            if !has_cpu {
                executors.push(Box::new(cpu_backend(spec, options)?));
                has_cpu = true;
            }
            Ok(())
        };
        for choice in &self.chosen {
            let index = match choice.device {
                Selected::Cpu => {
                    cpu(&mut executors)?;
                    continue;
                }
                Selected::Gpu(index) => index,
            };
            // A spec the backend does not take is refused before the adapter is opened.
            let opened = crate::check_spec(spec).and_then(|()| self.open_gpu(index, spec, options));
            match opened {
                Ok(gpu) => executors.push(gpu),
                Err(DeviceError::Kernel(e)) => return Err(OpenError::Kernel(e)),
                Err(DeviceError::InvalidSpec(e)) => return Err(OpenError::Spec(e)),
                Err(e) if choice.named => {
                    return Err(OpenError::Device(format!("gpu:{index}: {e}")))
                }
                Err(e) => {
                    notes.push(format!("gpu:{index} left out: {e}"));
                    // `auto` chose a GPU in place of the CPU: the CPU takes its place back.
                    if self.chosen.len() == 1 {
                        cpu(&mut executors)?;
                    }
                }
            }
        }
        Ok(Opened {
            executors,
            notes,
            calibration: None,
        })
    }

    #[cfg(feature = "gpu")]
    fn open_gpu(
        &self,
        index: usize,
        spec: &FeatureSpec,
        options: &OpenOptions,
    ) -> Result<Box<dyn Extractor>, DeviceError> {
        let gpu_options = crate::GpuOptions {
            adapter: Some(index),
            budget: options.budget,
            precision: options.precision,
            ..Default::default()
        };
        let backend = match self.registry.adapter(index) {
            Some(adapter) => {
                let device =
                    crate::context::GpuDevice::open(adapter).map_err(DeviceError::Unavailable)?;
                crate::GpuBackend::on_device(spec, device, index, &gpu_options)?
            }
            None => crate::GpuBackend::new(spec, &gpu_options)?,
        };
        Ok(Box::new(backend))
    }

    #[cfg(not(feature = "gpu"))]
    fn open_gpu(
        &self,
        _index: usize,
        _spec: &FeatureSpec,
        _options: &OpenOptions,
    ) -> Result<Box<dyn Extractor>, DeviceError> {
        Err(DeviceError::Unavailable(GpuError::NotBuilt.to_string()))
    }
}

/// The CPU backend `options` ask for.
fn cpu_backend(spec: &FeatureSpec, options: &OpenOptions) -> Result<CpuBackend, OpenError> {
    match options.cpu_threads {
        Some(n) => CpuBackend::with_threads(spec, options.precision, n),
        None => CpuBackend::new(spec, options.precision),
    }
    .map_err(|e| OpenError::Spec(e.to_string()))
}

/// The executors of a [`DeviceSet`], and what the run should say about devices left out.
pub struct Opened {
    pub executors: Vec<Box<dyn Extractor>>,
    pub notes: Vec<String>,
    /// What `auto` measured and chose, where it measured.
    pub calibration: Option<crate::calibrate::Calibration>,
}

/// The adapters a request could choose, to be probed before choosing.
fn candidates(registry: &DeviceRegistry, request: &DeviceRequest) -> Vec<usize> {
    let gpus = registry
        .devices()
        .iter()
        .filter(|d| d.state != DeviceState::Disabled && d.device_type != DeviceType::Cpu);
    let mut out: Vec<usize> = match request {
        DeviceRequest::All => gpus.filter_map(|d| d.index).collect(),
        DeviceRequest::List(list) => list
            .iter()
            .flat_map(|s| -> Vec<usize> {
                match s {
                    DeviceSelection::Cpu => Vec::new(),
                    DeviceSelection::Auto => gpus
                        .clone()
                        .filter(|d| d.auto_candidate())
                        .filter_map(|d| d.index)
                        .collect(),
                    DeviceSelection::Gpu => gpus.clone().filter_map(|d| d.index).collect(),
                    DeviceSelection::GpuIndex(n) => gpus
                        .clone()
                        .filter(|d| d.index == Some(*n))
                        .filter_map(|d| d.index)
                        .collect(),
                }
            })
            .collect(),
    };
    out.sort_unstable();
    out.dedup();
    out
}

/// Why the chosen devices could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// A device named outright cannot open or cannot take the spec.
    #[error("{0}")]
    Device(String),
    /// The spec cannot run anywhere.
    #[error("invalid spec: {0}")]
    Spec(String),
    /// A GPU kernel does not compile: a bug in sonograph.
    #[error("GPU kernel error (a bug in sonograph, please report it): {0}")]
    Kernel(String),
}

/// The ids `SONOGRAPH_DISABLE_DEVICES` names (comma-separated, such as "gpu:1"): never
/// selected, left out of `all`, not probed. Read where devices are chosen: the CLI, the
/// server and the Python package.
pub fn disabled_devices() -> Vec<String> {
    std::env::var("SONOGRAPH_DISABLE_DEVICES")
        .map(|list| list.split(',').map(|id| id.trim().to_string()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: usize, device_type: DeviceType) -> crate::device::DeviceInfo {
        crate::device::test_gpu(index, device_type)
    }

    fn machine() -> DeviceRegistry {
        DeviceRegistry::from_devices(vec![
            gpu(0, DeviceType::SoftwareGpu),
            gpu(1, DeviceType::DiscreteGpu),
            gpu(2, DeviceType::DiscreteGpu),
        ])
    }

    /// A probe that fails the adapters in `failing` and records what it probed.
    fn probe_failing<'a>(
        failing: &'a [usize],
        probed: &'a mut Vec<usize>,
    ) -> impl FnMut(&mut DeviceRegistry, usize) -> DeviceState + 'a {
        move |registry, index| {
            probed.push(index);
            let id = format!("gpu:{index}");
            if failing.contains(&index) {
                registry.set_state(&id, DeviceState::Failed, Some("injected".into()));
                DeviceState::Failed
            } else {
                DeviceState::Available
            }
        }
    }

    fn resolve(
        request: &str,
        disabled: &[&str],
        failing: &[usize],
    ) -> (Result<DeviceSet, GpuError>, Vec<usize>) {
        let mut probed = Vec::new();
        let disabled: Vec<String> = disabled.iter().map(|s| s.to_string()).collect();
        let set = DeviceSet::resolve_in(
            machine(),
            &request.parse().unwrap(),
            &disabled,
            probe_failing(failing, &mut probed),
        );
        (set, probed)
    }

    fn chosen(set: &DeviceSet) -> Vec<Selected> {
        set.chosen().iter().map(|c| c.device).collect()
    }

    #[test]
    fn requests_parse_once_for_every_command() {
        assert_eq!("all".parse::<DeviceRequest>().unwrap(), DeviceRequest::All);
        assert_eq!(
            "gpu:0, cpu".parse::<DeviceRequest>().unwrap(),
            DeviceRequest::List(vec![DeviceSelection::GpuIndex(0), DeviceSelection::Cpu])
        );
        assert!("cpu".parse::<DeviceRequest>().unwrap().cpu_only());
        assert!(!"auto".parse::<DeviceRequest>().unwrap().cpu_only());
        for bad in ["", "gpu:", "cpu,", "tpu"] {
            assert!(bad.parse::<DeviceRequest>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn candidates_are_probed_before_choosing_and_failures_are_not_chosen() {
        // auto: the best hardware GPU; gpu:1 fails its probe, so gpu:2 is chosen and the run
        // says why gpu:1 is not used. The software adapter is not even probed.
        let (set, probed) = resolve("auto", &[], &[1]);
        let set = set.unwrap();
        assert_eq!(probed, [1, 2]);
        assert_eq!(chosen(&set), [Selected::Gpu(2)]);
        assert!(set.notes()[0].contains("gpu:1"), "{:?}", set.notes());
        // Every hardware GPU failing: auto is the CPU.
        let (set, _) = resolve("auto", &[], &[1, 2]);
        assert_eq!(chosen(&set.unwrap()), [Selected::Cpu]);
        // Named outright: an error that says why.
        let (set, _) = resolve("gpu:1", &[], &[1]);
        let err = set.err().unwrap().to_string();
        assert!(err.contains("gpu:1") && err.contains("injected"), "{err}");
        // all: the usable GPUs and the CPU, the failed one left out.
        let (set, probed) = resolve("all", &["gpu:2"], &[0]);
        assert_eq!(probed, [0, 1], "a disabled device is not probed");
        assert_eq!(chosen(&set.unwrap()), [Selected::Gpu(1), Selected::Cpu]);
        // cpu probes nothing.
        let (set, probed) = resolve("cpu", &[], &[]);
        assert!(probed.is_empty());
        assert_eq!(chosen(&set.unwrap()), [Selected::Cpu]);
        // A list keeps its order and drops repeats.
        let (set, _) = resolve("gpu:2,cpu,gpu:2", &[], &[]);
        assert_eq!(chosen(&set.unwrap()), [Selected::Gpu(2), Selected::Cpu]);
    }

    /// The GPU backend does not take complex (IQ) specs: `auto` (which chose a hardware GPU
    /// here) computes them on the CPU and says why; a GPU named outright is refused with the
    /// reason; `all` keeps its CPU. No adapter is opened to find this out.
    #[test]
    fn complex_specs_go_to_the_cpu_under_auto_and_are_refused_on_a_named_gpu() {
        let spec = FeatureSpec::preset("iq-spectrogram").unwrap();
        let options = OpenOptions::default();
        let (set, _) = resolve("auto", &[], &[]);
        let set = set.unwrap();
        assert_eq!(chosen(&set), [Selected::Gpu(1)]);
        let opened = set.open(&spec, &options).unwrap();
        let devices: Vec<String> = opened.executors.iter().map(|e| e.device()).collect();
        assert_eq!(devices, ["cpu"]);
        assert!(
            opened.notes[0].contains("gpu:1") && opened.notes[0].contains("complex"),
            "{:?}",
            opened.notes
        );
        let (set, _) = resolve("gpu:2", &[], &[]);
        match set.unwrap().open(&spec, &options) {
            Err(OpenError::Device(e)) => {
                assert!(e.contains("gpu:2") && e.contains("complex (IQ)"), "{e}")
            }
            other => panic!("{:?}", other.map(|o| o.notes)),
        }
        let (set, _) = resolve("all", &[], &[]);
        let opened = set.unwrap().open(&spec, &options).unwrap();
        let devices: Vec<String> = opened.executors.iter().map(|e| e.device()).collect();
        assert_eq!(devices, ["cpu"]);
        assert_eq!(opened.notes.len(), 3, "{:?}", opened.notes);
    }

    #[test]
    fn disabling_an_unknown_device_or_the_cpu_is_refused() {
        let (set, _) = resolve("auto", &["gpu:9"], &[]);
        assert!(set.err().unwrap().to_string().contains("gpu:9"));
        let (set, _) = resolve("auto", &["cpu"], &[]);
        assert!(set.err().unwrap().to_string().contains("CPU"));
    }
}

/// A job's devices as its options give them (`device`, `gpu-memory`), parsed: what every door
/// checks before it accepts a job, and opens when it runs it.
#[derive(Debug, Clone)]
pub struct JobDevices {
    text: String,
    request: DeviceRequest,
    budget: Option<Budget>,
}

/// A job's devices, opened: an executor per device, their ids (`cpu`, `gpu:N`), and what the
/// selection has to say (a device that failed its probe, a fallback).
pub struct OpenedJob {
    pub executors: Vec<Box<dyn Extractor>>,
    pub ids: Vec<String>,
    pub notes: Vec<String>,
    /// What `auto` measured and chose, where it measured.
    pub calibration: Option<crate::calibrate::Calibration>,
}

impl JobDevices {
    /// `device` and `gpu-memory`, parsed; the error names the option.
    pub fn parse(device: &str, gpu_memory: Option<&str>) -> Result<Self, String> {
        let request = device.parse().map_err(|e| format!("device: {e}"))?;
        let budget = gpu_memory
            .map(Budget::parse)
            .transpose()
            .map_err(|e| format!("gpu-memory: {e}"))?;
        Ok(JobDevices {
            text: device.to_string(),
            request,
            budget,
        })
    }

    /// Opens the devices for `spec`, leaving out `disabled` ones. A device named outright that
    /// cannot open is the job's failure ([`OpenError::Device`], with what the probe found); a
    /// kernel that does not compile is a bug ([`OpenError::Kernel`]).
    pub fn open(
        &self,
        spec: &FeatureSpec,
        precision: Precision,
        disabled: &[String],
        store: &mut dyn crate::calibrate::CalibrationStore,
    ) -> Result<OpenedJob, OpenError> {
        let device = &self.text;
        let set = DeviceSet::resolve(&self.request, disabled, ProbePolicy::default())
            .map_err(|e| OpenError::Device(format!("device {device}: {e}")))?;
        let options = OpenOptions {
            precision,
            budget: self.budget,
            cpu_threads: None,
        };
        let opened = set.open_with(spec, &options, store).map_err(|e| match e {
            OpenError::Device(why) => {
                // What the selection found (a device that failed its probe) explains it.
                let mut why = format!("device {device}: {why}");
                for note in set.notes() {
                    why.push_str(&format!(" ({note})"));
                }
                OpenError::Device(why)
            }
            e => e,
        })?;
        let ids = set
            .chosen()
            .iter()
            .map(|c| match c.device {
                Selected::Cpu => "cpu".to_string(),
                Selected::Gpu(i) => format!("gpu:{i}"),
            })
            .collect();
        let notes = set
            .notes()
            .iter()
            .chain(&opened.notes)
            .map(|n| n.to_string())
            .collect();
        let ids = match &opened.calibration {
            // `auto` kept the CPU over the GPU it chose.
            Some(c) if c.chose == "cpu" => vec!["cpu".to_string()],
            _ => ids,
        };
        Ok(OpenedJob {
            executors: opened.executors,
            ids,
            notes,
            calibration: opened.calibration,
        })
    }
}
