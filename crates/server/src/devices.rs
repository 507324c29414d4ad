//! The server's devices: the gpu crate's registry (discovered and probed once, in the
//! background: `/ready` says when), read for telemetry through NVML at every sample, and the
//! device sets that jobs open.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sonograph_gpu::{DeviceInfo, DeviceRegistry};
use sonograph_pipeline::telemetry::{DeviceProbe, DeviceReading};

use crate::jobs::Planned;

/// How long the startup health probe may take per adapter.
const PROBE_DEADLINE: Duration = Duration::from_secs(5);

/// The registry, shared by the status endpoint and the telemetry probe.
#[derive(Clone)]
pub struct Devices {
    registry: Arc<Mutex<DeviceRegistry>>,
    disabled: Arc<Vec<String>>,
    /// The devices the running job holds, marked `Busy` in the registry.
    busy: Arc<Mutex<Vec<String>>>,
}

impl Devices {
    /// A registry with the CPU only, until [`Self::discover`] has run.
    pub fn new(disabled: Vec<String>) -> Self {
        Devices {
            registry: Arc::new(Mutex::new(DeviceRegistry::from_devices(Vec::new()))),
            disabled: Arc::new(disabled),
            busy: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Discovers and probes every adapter (seconds on some drivers: the caller runs it on a
    /// thread of its own).
    pub fn discover(&self) -> Result<(), String> {
        let mut registry = DeviceRegistry::discover();
        registry
            .disable(&self.disabled)
            .map_err(|e| format!("SONOGRAPH_DISABLE_DEVICES: {e}"))?;
        registry.probe_all(PROBE_DEADLINE, 2);
        *self.lock() = registry;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DeviceRegistry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every device as the registry has it now.
    pub fn list(&self) -> Vec<DeviceInfo> {
        self.lock().devices().to_vec()
    }

    /// Opens the devices of a job's plan (a device named outright that cannot open is the
    /// job's failure, with the reason).
    pub fn open(
        &self,
        job: &mut Planned,
    ) -> Result<Vec<Box<dyn sonograph_dsp::Extractor>>, String> {
        let config = &job.plan.config;
        let sonograph_gpu::OpenedJob {
            executors,
            ids,
            notes,
            calibration,
        } = job
            .devices
            .open(
                &config.spec,
                config.precision,
                &self.disabled,
                &mut sonograph_io::calibration::FileStore::open(),
            )
            .map_err(|e| e.to_string())?;
        for note in notes {
            tracing::warn!("{note}");
        }
        if let Some(c) = &calibration {
            tracing::info!("auto chose {}: {}", c.chose, c.why);
            job.plan.config.device_choice = serde_json::to_value(c).ok();
        }
        let mut registry = self.lock();
        for id in &ids {
            registry.mark_busy(id);
        }
        *self.busy.lock().unwrap_or_else(|e| e.into_inner()) = ids;
        Ok(executors)
    }

    /// The job has ended: its devices are available again (a device that failed meanwhile
    /// stays failed).
    pub fn release(&self) {
        let ids = std::mem::take(&mut *self.busy.lock().unwrap_or_else(|e| e.into_inner()));
        let mut registry = self.lock();
        for id in &ids {
            registry.mark_available(id);
        }
    }

    /// The telemetry probe over this registry.
    pub fn probe(&self) -> Box<dyn DeviceProbe> {
        Box::new(RegistryProbe(self.clone()))
    }
}

struct RegistryProbe(Devices);

impl DeviceProbe for RegistryProbe {
    fn read(&mut self) -> Vec<DeviceReading> {
        let mut registry = self.0.lock();
        registry.refresh_telemetry();
        registry.devices().iter().map(reading).collect()
    }
}

fn reading(d: &DeviceInfo) -> DeviceReading {
    let t = d.telemetry.as_ref();
    let state = serde_json::to_value(d.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    DeviceReading {
        id: d.id.clone(),
        name: d.name.clone(),
        state,
        uuid: t.and_then(|t| t.uuid.clone()),
        nvml_index: t.map(|t| t.nvml_index),
        utilization_percent: t.and_then(|t| t.utilization_gpu_percent).map(f64::from),
        memory_used_bytes: t.and_then(|t| t.memory_used_bytes),
        memory_free_bytes: t.and_then(|t| t.memory_free_bytes),
        memory_total_bytes: t.and_then(|t| t.memory_total_bytes),
        temperature_c: t.and_then(|t| t.temperature_c).map(f64::from),
        power_w: t.and_then(|t| t.power_w),
    }
}
