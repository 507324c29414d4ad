//! The device registry: every wgpu adapter plus the CPU, scored, with a state each, a health
//! probe and the `--device auto|cpu|gpu|gpu:N` selection.

use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use crate::error::GpuError;
use crate::nvml::GpuTelemetry;

/// Where a device stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceState {
    Available,
    /// Running work; still selectable (a device runs one job's batches in turn).
    Busy,
    /// Works, but needed retries (its probe passed only after a transient failure).
    Degraded,
    /// Lost, or failed its probe: taken out; its work moves on.
    Failed,
    /// Switched off by the user.
    Disabled,
}

/// What kind of device it is, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceType {
    DiscreteGpu,
    IntegratedGpu,
    VirtualGpu,
    OtherGpu,
    /// sonograph's own CPU extractor.
    Cpu,
    /// A software rasteriser posing as a GPU (lavapipe, llvmpipe, WARP): slower than the CPU
    /// extractor, used only when named.
    SoftwareGpu,
}

impl DeviceType {
    /// A real GPU (what `auto` may pick).
    pub fn is_hardware_gpu(self) -> bool {
        matches!(
            self,
            DeviceType::DiscreteGpu | DeviceType::IntegratedGpu | DeviceType::VirtualGpu
        )
    }
}

/// `SONOGRAPH_AUTO_SOFTWARE=1`: `auto` measures software adapters (lavapipe) against the CPU
/// too, as it measures hardware GPUs (it never picks one that is not faster; for testing the
/// calibration where there is no GPU).
pub fn auto_software() -> bool {
    std::env::var("SONOGRAPH_AUTO_SOFTWARE").is_ok_and(|v| v == "1")
}

/// Whether this machine may have a hardware GPU at all, without loading a Vulkan driver. On
/// Linux every hardware GPU driver reaches its device through a node under `/dev` (NVIDIA's
/// `nvidia*`, Mesa's DRM render nodes, AMD's compute node, WSL's `dxg`, the embedded GPUs'
/// own); where none exists,
/// `auto` can only choose the CPU, and loading the drivers to learn it costs a job tens of MB
/// (Mesa's lavapipe and RADV map LLVM: 59 MiB of a 3-hour file's 154 MiB peak). Elsewhere, and
/// with [`auto_software`], the answer is yes.
pub fn hardware_gpu_may_exist() -> bool {
    if auto_software() || !cfg!(target_os = "linux") {
        return true;
    }
    gpu_nodes_in(std::path::Path::new("/dev"))
}

/// Whether `dev` holds a GPU's device node (see [`hardware_gpu_may_exist`]); a `dev` that
/// cannot be read may hide one, so it counts as yes.
fn gpu_nodes_in(dev: &std::path::Path) -> bool {
    // NVIDIA's driver (and Jetson's nvhost/nvgpu), WSL, AMD's compute node, and the embedded
    // GPUs whose drivers are not DRM ones (Mali, Adreno's kgsl, Vivante's galcore).
    let is_node = |name: &str| {
        ["nvidia", "nvhost", "nvgpu", "mali", "kgsl"]
            .iter()
            .any(|p| name.starts_with(p))
            || ["dxg", "kfd", "galcore"].contains(&name)
    };
    let (Ok(top), dri) = (std::fs::read_dir(dev), std::fs::read_dir(dev.join("dri"))) else {
        return true;
    };
    let named = |entries: std::fs::ReadDir, test: &dyn Fn(&str) -> bool| {
        entries
            .flatten()
            .any(|e| e.file_name().to_str().is_some_and(test))
    };
    named(top, &is_node) || dri.is_ok_and(|d| named(d, &|n| n.starts_with("renderD")))
}

/// Score of a device: the type first, then the API (native APIs over GL).
pub fn score(device_type: DeviceType, native_api: bool) -> u32 {
    let base = match device_type {
        DeviceType::DiscreteGpu => 400,
        DeviceType::IntegratedGpu => 300,
        DeviceType::VirtualGpu => 200,
        DeviceType::OtherGpu => 150,
        DeviceType::Cpu => 100,
        DeviceType::SoftwareGpu => 50,
    };
    base + if native_api { 10 } else { 0 }
}

#[cfg(feature = "gpu")]
fn classify(info: &wgpu::AdapterInfo) -> DeviceType {
    match info.device_type {
        wgpu::DeviceType::DiscreteGpu => DeviceType::DiscreteGpu,
        wgpu::DeviceType::IntegratedGpu => DeviceType::IntegratedGpu,
        wgpu::DeviceType::VirtualGpu => DeviceType::VirtualGpu,
        wgpu::DeviceType::Cpu => DeviceType::SoftwareGpu,
        wgpu::DeviceType::Other => DeviceType::OtherGpu,
    }
}

/// Score of a wgpu adapter (see [`score`]).
#[cfg(feature = "gpu")]
pub fn adapter_score(info: &wgpu::AdapterInfo) -> u32 {
    let native = matches!(
        info.backend,
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12
    );
    score(classify(info), native)
}

/// One device as `sonograph devices` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceInfo {
    /// "cpu" or "gpu:N".
    pub id: String,
    /// The adapter index N of "gpu:N"; `None` for the CPU.
    pub index: Option<usize>,
    pub name: String,
    pub backend: String,
    pub device_type: DeviceType,
    pub driver: String,
    pub score: u32,
    pub state: DeviceState,
    /// Why the state is what it is (probe failure, loss), when not plainly available.
    pub reason: Option<String>,
    /// Duration of the last health probe in milliseconds.
    pub probe_ms: Option<f64>,
    /// The spectral core can run in f64 here (the CPU; adapters with f64 in shaders), which
    /// every preset needs for 1e-4 parity; elsewhere the GPU computes in f32.
    pub f64_core: bool,
    /// NVML's view of the device (memory, utilisation, temperature, power) for an NVIDIA GPU
    /// where libnvidia-ml loads; `null` otherwise, so the JSON always has the key. Read at
    /// discovery; [`DeviceRegistry::refresh_telemetry`] reads it again.
    pub telemetry: Option<GpuTelemetry>,
}

impl DeviceInfo {
    fn cpu() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        DeviceInfo {
            id: "cpu".into(),
            index: None,
            name: format!("CPU extractor ({threads} threads)"),
            backend: "cpu".into(),
            device_type: DeviceType::Cpu,
            driver: String::new(),
            score: score(DeviceType::Cpu, true),
            state: DeviceState::Available,
            reason: None,
            probe_ms: None,
            f64_core: true,
            telemetry: None,
        }
    }

    /// Selectable: available, busy or degraded (not failed, not disabled).
    pub fn usable(&self) -> bool {
        matches!(
            self.state,
            DeviceState::Available | DeviceState::Busy | DeviceState::Degraded
        )
    }

    /// A GPU `auto` measures against the CPU: a hardware one, or any with
    /// [`auto_software`].
    pub fn auto_candidate(&self) -> bool {
        self.device_type.is_hardware_gpu()
            || (self.device_type != DeviceType::Cpu && auto_software())
    }
}

/// `--device`: `auto` (the best hardware GPU, else the CPU), `cpu`, `gpu` (the best GPU,
/// software ones included) or `gpu:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSelection {
    Auto,
    Cpu,
    Gpu,
    GpuIndex(usize),
}

impl FromStr for DeviceSelection {
    type Err = GpuError;
    fn from_str(s: &str) -> Result<Self, GpuError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(DeviceSelection::Auto),
            "cpu" => Ok(DeviceSelection::Cpu),
            "gpu" => Ok(DeviceSelection::Gpu),
            other => other
                .strip_prefix("gpu:")
                .and_then(|n| n.parse().ok())
                .map(DeviceSelection::GpuIndex)
                .ok_or_else(|| GpuError::BadSelection(s.to_string())),
        }
    }
}

/// What a selection resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selected {
    Cpu,
    /// The adapter index (`gpu:N`).
    Gpu(usize),
}

/// Every device found on this machine, the CPU last.
pub struct DeviceRegistry {
    devices: Vec<DeviceInfo>,
    #[cfg(feature = "gpu")]
    adapters: Vec<wgpu::Adapter>,
}

impl DeviceRegistry {
    /// Enumerates every adapter of every compiled backend, and the CPU.
    pub fn discover() -> Self {
        #[cfg(feature = "gpu")]
        {
            let adapters = crate::context::adapters();
            let mut devices: Vec<DeviceInfo> = adapters
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let info = a.get_info();
                    let driver = [info.driver.as_str(), info.driver_info.as_str()]
                        .iter()
                        .filter(|s| !s.is_empty())
                        .copied()
                        .collect::<Vec<_>>()
                        .join(" ");
                    DeviceInfo {
                        id: format!("gpu:{i}"),
                        index: Some(i),
                        name: info.name.clone(),
                        backend: format!("{:?}", info.backend),
                        device_type: classify(&info),
                        driver,
                        score: adapter_score(&info),
                        state: DeviceState::Available,
                        reason: None,
                        probe_ms: None,
                        f64_core: a.features().contains(wgpu::Features::SHADER_F64),
                        telemetry: None,
                    }
                })
                .collect();
            devices.push(DeviceInfo::cpu());
            let mut registry = DeviceRegistry { devices, adapters };
            registry.refresh_telemetry();
            registry
        }
        #[cfg(not(feature = "gpu"))]
        {
            Self::from_devices(Vec::new())
        }
    }

    /// A registry of the given GPUs (tests, and machines known in advance) plus the CPU.
    pub fn from_devices(mut gpus: Vec<DeviceInfo>) -> Self {
        gpus.retain(|d| d.device_type != DeviceType::Cpu);
        gpus.push(DeviceInfo::cpu());
        DeviceRegistry {
            devices: gpus,
            #[cfg(feature = "gpu")]
            adapters: Vec::new(),
        }
    }

    pub fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    /// The device `id` ("cpu", "gpu:N").
    pub fn get(&self, id: &str) -> Option<&DeviceInfo> {
        self.devices.iter().find(|d| d.id == id)
    }

    /// Resolves a selection against the devices and their states.
    pub fn select(&self, selection: DeviceSelection) -> Result<Selected, GpuError> {
        let gpus = || {
            self.devices
                .iter()
                .filter(|d| d.device_type != DeviceType::Cpu && d.usable())
        };
        let best = |it: Box<dyn Iterator<Item = &DeviceInfo> + '_>| {
            it.max_by_key(|d| (d.score, std::cmp::Reverse(d.index)))
                .and_then(|d| d.index)
        };
        match selection {
            DeviceSelection::Cpu => Ok(Selected::Cpu),
            DeviceSelection::Auto => Ok(best(Box::new(gpus().filter(|d| d.auto_candidate())))
                .map_or(Selected::Cpu, Selected::Gpu)),
            DeviceSelection::Gpu => best(Box::new(gpus())).map(Selected::Gpu).ok_or_else(|| {
                GpuError::NoSuchDevice(
                    "gpu".into(),
                    "no usable wgpu adapter (on Debian, mesa-vulkan-drivers provides lavapipe)"
                        .into(),
                )
            }),
            DeviceSelection::GpuIndex(n) => {
                let id = format!("gpu:{n}");
                match self.get(&id) {
                    Some(d) if d.usable() => Ok(Selected::Gpu(n)),
                    Some(d) => Err(GpuError::NoSuchDevice(
                        id,
                        format!(
                            "it is {:?}{}",
                            d.state,
                            d.reason
                                .as_ref()
                                .map(|r| format!(": {r}"))
                                .unwrap_or_default()
                        ),
                    )),
                    None => Err(GpuError::NoSuchDevice(
                        id,
                        format!("there are {} adapters", self.devices.len() - 1),
                    )),
                }
            }
        }
    }

    /// Reads NVML again and updates every GPU's telemetry (see [`Self::update_telemetry`]).
    /// Without NVML it leaves every `telemetry` as it is (`None` after discovery).
    pub fn refresh_telemetry(&mut self) {
        if !crate::nvml::available() {
            return;
        }
        let readings = crate::nvml::all_devices();
        self.update_telemetry(&readings);
    }

    /// Gives each GPU the reading in `readings` that is the same device
    /// ([`crate::nvml::match_adapter`]), or `None` when none is. A GPU is identified by its
    /// wgpu adapter's PCI bus id, vendor and device id; one without an adapter (built with
    /// [`Self::from_devices`]) by the bus id of the telemetry it already has, and one with
    /// neither is left alone.
    pub fn update_telemetry(&mut self, readings: &[GpuTelemetry]) {
        for d in &mut self.devices {
            if d.index.is_none() {
                continue;
            }
            #[cfg(feature = "gpu")]
            if let Some(adapter) = d.index.and_then(|i| self.adapters.get(i)) {
                let info = adapter.get_info();
                d.telemetry = crate::nvml::match_wgpu_adapter(&info, readings).cloned();
                continue;
            }
            // Only a well-formed bus id identifies a device here: there is no device id to
            // fall back on.
            let Some(bus_id) = d
                .telemetry
                .as_ref()
                .and_then(|t| t.pci_bus_id.as_deref())
                .and_then(crate::nvml::normalize_bus_id)
            else {
                continue;
            };
            d.telemetry =
                crate::nvml::match_adapter(&bus_id, 0, 0, readings).map(|i| readings[i].clone());
        }
    }

    /// Marks an available device busy, for a job that runs on it; returns whether it did.
    /// Only `Available` becomes `Busy`: a degraded device keeps saying so, and a failed or
    /// disabled one is not handed work.
    pub fn mark_busy(&mut self, id: &str) -> bool {
        self.transition(id, DeviceState::Available, DeviceState::Busy)
    }

    /// Marks a busy device available again once its job is done; returns whether it did.
    /// Only `Busy` becomes `Available`, so that releasing a device never revives one that
    /// failed while it ran.
    pub fn mark_available(&mut self, id: &str) -> bool {
        self.transition(id, DeviceState::Busy, DeviceState::Available)
    }

    fn transition(&mut self, id: &str, from: DeviceState, to: DeviceState) -> bool {
        match self.devices.iter_mut().find(|d| d.id == id) {
            Some(d) if d.state == from => {
                d.state = to;
                true
            }
            _ => false,
        }
    }

    /// Marks the devices `ids` names ("gpu:1") `Disabled`: never selected, left out of `all`,
    /// not probed. The CPU, every device's fallback, cannot be disabled.
    pub fn disable(&mut self, ids: &[String]) -> Result<(), GpuError> {
        for id in ids.iter().map(|id| id.trim()).filter(|id| !id.is_empty()) {
            if id == "cpu" {
                return Err(GpuError::CannotDisable(
                    id.into(),
                    "the CPU is every device's fallback".into(),
                ));
            }
            if self.get(id).is_none() {
                return Err(GpuError::CannotDisable(
                    id.into(),
                    "no such device (see `sonograph devices`)".into(),
                ));
            }
            self.set_state(
                id,
                DeviceState::Disabled,
                Some("disabled by the user".into()),
            );
        }
        Ok(())
    }

    /// Where adapter `index` sits in [`Self::devices`].
    pub fn position(&self, index: usize) -> usize {
        self.devices
            .iter()
            .position(|d| d.index == Some(index))
            .unwrap_or(self.devices.len() - 1)
    }

    /// The wgpu adapter `gpu:index`, when discovered on this machine.
    #[cfg(feature = "gpu")]
    pub fn adapter(&self, index: usize) -> Option<&wgpu::Adapter> {
        self.adapters.get(index)
    }

    /// Sets a device's state (a user disabling it, a supervisor marking a lost one `Failed`).
    pub fn set_state(&mut self, id: &str, state: DeviceState, reason: Option<String>) {
        if let Some(d) = self.devices.iter_mut().find(|d| d.id == id) {
            d.state = state;
            d.reason = reason;
        }
    }

    /// Probes adapter `index` with a tiny kernel, up to `attempts` times with exponential
    /// backoff (100 ms, 200 ms, ...) on failure, each try bounded by `deadline`. A pass on the
    /// first try leaves it Available, a pass after a retry marks it Degraded, no pass marks it
    /// Failed with the reason.
    #[cfg(feature = "gpu")]
    pub fn probe(&mut self, index: usize, deadline: Duration, attempts: u32) -> DeviceState {
        let Some(adapter) = self.adapters.get(index).cloned() else {
            return DeviceState::Failed;
        };
        let id = format!("gpu:{index}");
        let mut last_err = String::new();
        for attempt in 0..attempts.max(1) {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(100 << (attempt - 1).min(6)));
            }
            match crate::context::probe(adapter.clone(), deadline) {
                Ok(took) => {
                    let state = if attempt == 0 {
                        DeviceState::Available
                    } else {
                        DeviceState::Degraded
                    };
                    let reason = (attempt > 0)
                        .then(|| format!("probe passed after {attempt} retries: {last_err}"));
                    self.set_state(&id, state, reason);
                    if let Some(d) = self.devices.iter_mut().find(|d| d.id == id) {
                        d.probe_ms = Some(took.as_secs_f64() * 1e3);
                    }
                    return state;
                }
                Err(e) => last_err = e,
            }
        }
        self.set_state(
            &id,
            DeviceState::Failed,
            Some(format!("health probe failed: {last_err}")),
        );
        DeviceState::Failed
    }

    /// Without the `gpu` feature there is nothing to probe.
    #[cfg(not(feature = "gpu"))]
    pub fn probe(&mut self, _index: usize, _deadline: Duration, _attempts: u32) -> DeviceState {
        DeviceState::Failed
    }

    /// Probes every GPU.
    pub fn probe_all(&mut self, deadline: Duration, attempts: u32) {
        // A disabled device stays disabled, however its probe would go.
        let indices: Vec<usize> = self
            .devices
            .iter()
            .filter(|d| d.state != DeviceState::Disabled)
            .filter_map(|d| d.index)
            .collect();
        for i in indices {
            self.probe(i, deadline, attempts);
        }
    }
}

/// A GPU as discovery would list it, for the registry's and the device set's tests.
#[cfg(test)]
pub(crate) fn test_gpu(index: usize, device_type: DeviceType) -> DeviceInfo {
    DeviceInfo {
        id: format!("gpu:{index}"),
        index: Some(index),
        name: format!("{device_type:?}"),
        backend: "Vulkan".into(),
        device_type,
        driver: String::new(),
        score: score(device_type, true),
        state: DeviceState::Available,
        reason: None,
        probe_ms: None,
        f64_core: true,
        telemetry: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: usize, device_type: DeviceType) -> DeviceInfo {
        test_gpu(index, device_type)
    }

    #[test]
    fn selections_parse() {
        assert_eq!(
            "auto".parse::<DeviceSelection>().unwrap(),
            DeviceSelection::Auto
        );
        assert_eq!(
            "CPU".parse::<DeviceSelection>().unwrap(),
            DeviceSelection::Cpu
        );
        assert_eq!(
            "gpu".parse::<DeviceSelection>().unwrap(),
            DeviceSelection::Gpu
        );
        assert_eq!(
            "gpu:3".parse::<DeviceSelection>().unwrap(),
            DeviceSelection::GpuIndex(3)
        );
        for bad in ["", "gpu:", "gpu:x", "tpu"] {
            assert!(bad.parse::<DeviceSelection>().is_err(), "{bad}");
        }
    }

    #[test]
    fn scores_rank_discrete_integrated_virtual_cpu_software() {
        let order = [
            DeviceType::DiscreteGpu,
            DeviceType::IntegratedGpu,
            DeviceType::VirtualGpu,
            DeviceType::Cpu,
            DeviceType::SoftwareGpu,
        ];
        for w in order.windows(2) {
            assert!(
                score(w[0], true) > score(w[1], true),
                "{:?} vs {:?}",
                w[0],
                w[1]
            );
        }
        assert!(score(DeviceType::DiscreteGpu, true) > score(DeviceType::DiscreteGpu, false));
    }

    #[test]
    fn auto_takes_the_best_hardware_gpu_and_never_a_software_one() {
        let soft_only = DeviceRegistry::from_devices(vec![gpu(0, DeviceType::SoftwareGpu)]);
        assert_eq!(
            soft_only.select(DeviceSelection::Auto).unwrap(),
            Selected::Cpu
        );
        assert_eq!(
            soft_only.select(DeviceSelection::Gpu).unwrap(),
            Selected::Gpu(0)
        );
        assert_eq!(
            soft_only.select(DeviceSelection::GpuIndex(0)).unwrap(),
            Selected::Gpu(0)
        );

        let mut mixed = DeviceRegistry::from_devices(vec![
            gpu(0, DeviceType::SoftwareGpu),
            gpu(1, DeviceType::IntegratedGpu),
            gpu(2, DeviceType::DiscreteGpu),
        ]);
        assert_eq!(
            mixed.select(DeviceSelection::Auto).unwrap(),
            Selected::Gpu(2)
        );
        mixed.set_state("gpu:2", DeviceState::Failed, Some("lost".into()));
        assert_eq!(
            mixed.select(DeviceSelection::Auto).unwrap(),
            Selected::Gpu(1)
        );
        let err = mixed
            .select(DeviceSelection::GpuIndex(2))
            .unwrap_err()
            .to_string();
        assert!(err.contains("Failed: lost"), "{err}");
        assert!(mixed.select(DeviceSelection::GpuIndex(9)).is_err());
        mixed.set_state("gpu:1", DeviceState::Disabled, None);
        mixed.set_state("gpu:0", DeviceState::Disabled, None);
        assert_eq!(mixed.select(DeviceSelection::Auto).unwrap(), Selected::Cpu);
        assert!(mixed.select(DeviceSelection::Gpu).is_err());
        assert_eq!(mixed.devices().last().unwrap().id, "cpu");
    }

    #[test]
    fn busy_and_available_move_only_between_each_other() {
        let mut r = DeviceRegistry::from_devices(vec![
            gpu(0, DeviceType::DiscreteGpu),
            gpu(1, DeviceType::DiscreteGpu),
        ]);
        assert!(r.mark_busy("gpu:0"));
        assert_eq!(r.get("gpu:0").unwrap().state, DeviceState::Busy);
        assert!(!r.mark_busy("gpu:0"), "already busy");
        // Busy devices stay selectable.
        assert_eq!(
            r.select(DeviceSelection::GpuIndex(0)).unwrap(),
            Selected::Gpu(0)
        );
        assert!(r.mark_available("gpu:0"));
        assert_eq!(r.get("gpu:0").unwrap().state, DeviceState::Available);
        assert!(!r.mark_available("gpu:0"), "already available");

        // A device that failed while busy is not revived by its release.
        assert!(r.mark_busy("gpu:1"));
        r.set_state("gpu:1", DeviceState::Failed, Some("lost".into()));
        assert!(!r.mark_available("gpu:1"));
        assert_eq!(r.get("gpu:1").unwrap().state, DeviceState::Failed);
        assert!(!r.mark_busy("gpu:1"));
        r.set_state("gpu:1", DeviceState::Degraded, None);
        assert!(!r.mark_busy("gpu:1"), "degraded stays degraded");
        assert!(!r.mark_busy("gpu:9"));
        assert!(r.mark_busy("cpu"));
    }

    #[test]
    fn telemetry_updates_by_bus_id() {
        let reading = |free: u64| GpuTelemetry {
            uuid: Some("GPU-0".into()),
            pci_bus_id: Some("00000000:65:00.0".into()),
            memory_free_bytes: Some(free),
            ..Default::default()
        };
        let mut nvidia = gpu(0, DeviceType::DiscreteGpu);
        nvidia.telemetry = Some(GpuTelemetry {
            pci_bus_id: Some("0000:65:00.0".into()),
            ..reading(1)
        });
        let mut r = DeviceRegistry::from_devices(vec![nvidia, gpu(1, DeviceType::SoftwareGpu)]);
        r.update_telemetry(&[reading(7)]);
        assert_eq!(r.get("gpu:0").unwrap().telemetry, Some(reading(7)));
        assert_eq!(r.get("gpu:1").unwrap().telemetry, None);
        assert_eq!(r.get("cpu").unwrap().telemetry, None);
        // Gone from NVML: no stale figures.
        r.update_telemetry(&[]);
        assert_eq!(r.get("gpu:0").unwrap().telemetry, None);
    }

    /// `auto`'s look for a GPU without a driver: the device nodes that say one may be there.
    #[test]
    fn gpu_device_nodes_are_found_by_name() {
        // A stand-in for /dev of its own per case, under the system's temporary folder.
        let fake_dev = |case: &str, files: &[&str]| {
            let dev = std::env::temp_dir()
                .join(format!("sonograph-gpu-nodes-{}-{case}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dev);
            std::fs::create_dir_all(dev.join("dri")).unwrap();
            for f in files {
                std::fs::write(dev.join(f), "").unwrap();
            }
            let found = gpu_nodes_in(&dev);
            std::fs::remove_dir_all(&dev).unwrap();
            found
        };
        assert!(!fake_dev("empty", &[]));
        assert!(!fake_dev("display", &["dri/card0", "null", "tty0"]));
        assert!(fake_dev("mesa", &["dri/card0", "dri/renderD128"]));
        for node in [
            "nvidia0",
            "nvidiactl",
            "dxg",
            "kfd",
            "nvhost-ctrl",
            "mali0",
            "kgsl-3d0",
        ] {
            assert!(fake_dev(node, &[node]), "{node}");
        }
        let missing = std::env::temp_dir().join("sonograph-gpu-nodes-missing/dev");
        assert!(
            gpu_nodes_in(&missing),
            "a /dev that cannot be read may hide a GPU"
        );
    }

    /// Discovery works with or without NVML: every device is listed with a `telemetry` key,
    /// `null` for the CPU and, without NVML, for every device.
    #[test]
    fn discovery_lists_devices_with_telemetry_only_from_nvml() {
        #[cfg(feature = "gpu")]
        let nvml = nvml_wrapper::Nvml::init().is_ok();
        #[cfg(not(feature = "gpu"))]
        let nvml = false;
        let registry = DeviceRegistry::discover();
        let devices = registry.devices();
        assert_eq!(devices.last().map(|d| d.id.as_str()), Some("cpu"));
        for d in devices {
            if !nvml || d.index.is_none() {
                assert_eq!(d.telemetry, None, "{}", d.id);
            }
            let json = serde_json::to_value(d).unwrap();
            assert!(json.as_object().unwrap().contains_key("telemetry"));
            assert_eq!(json["telemetry"].is_null(), d.telemetry.is_none(), "{json}");
        }
    }
}
