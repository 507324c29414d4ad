//! NVIDIA telemetry through NVML, loaded at run time.
//!
//! wgpu reports neither free memory, nor utilisation, temperature or power; NVML does, for
//! NVIDIA GPUs. `nvml-wrapper` opens `libnvidia-ml` with `dlopen` when [`Nvml::init`] runs, so
//! the binary has no link-time dependency on the driver: where the library is absent (no
//! NVIDIA GPU, no driver, a container without it) the first query logs once at debug level and
//! every function here answers "nothing known" ([`all_devices`] is empty, telemetry is `None`,
//! the budget is [`DEFAULT_BUDGET`]).
//!
//! An NVML device is tied to a wgpu adapter by PCI bus id ([`match_adapter`]), since neither
//! API shares the other's indices.
//!
//! [`Nvml::init`]: https://docs.rs/nvml-wrapper/0.13/nvml_wrapper/struct.Nvml.html#method.init

use serde::Serialize;

use crate::pool::{Budget, DEFAULT_BUDGET};

/// PCI vendor id of NVIDIA: the device-id fallback of [`match_adapter`] only ever ties an
/// NVIDIA adapter to an NVML device (device ids are per vendor).
pub const NVIDIA_VENDOR_ID: u32 = 0x10de;

/// Share of NVML's free memory that the default budget takes: the rest is headroom for the
/// driver, other processes and what the pool does not account for (pipelines, staging).
pub const FREE_MEMORY_SHARE: f64 = 0.9;

/// One NVIDIA device as NVML sees it at one moment. A query that failed (or that the device
/// does not support, such as power on some boards) is `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GpuTelemetry {
    /// NVML's index (nvidia-smi's numbering, which need not be wgpu's `gpu:N`).
    pub nvml_index: u32,
    /// "GPU-…", stable across reboots and reorderings.
    pub uuid: Option<String>,
    /// As NVML writes it, e.g. "00000000:65:00.0" (see [`normalize_bus_id`]).
    pub pci_bus_id: Option<String>,
    /// The 16-bit PCI device id (the high half of NVML's combined device/vendor id).
    pub pci_device_id: Option<u32>,
    pub memory_total_bytes: Option<u64>,
    pub memory_free_bytes: Option<u64>,
    pub memory_used_bytes: Option<u64>,
    /// Share of the last sample period in which a kernel ran.
    pub utilization_gpu_percent: Option<u32>,
    /// Share of the last sample period in which device memory was read or written.
    pub utilization_memory_percent: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    /// The enforced power limit.
    pub power_limit_w: Option<f64>,
}

/// A PCI bus id in one canonical form, `dddd:bb:dd.f` in lowercase hex, so that wgpu's
/// "0000:65:00.0", NVML's "00000000:65:00.0" and a bare "65:00.0" (domain 0) compare equal.
/// `None` for an empty or malformed id (wgpu leaves it empty where the driver does not say).
pub fn normalize_bus_id(id: &str) -> Option<String> {
    // Parsing as numbers, rather than trimming zeros, makes the domain width irrelevant.
    fn hex(s: &str, max: u32) -> Option<u32> {
        if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(s, 16).ok().filter(|&v| v <= max)
    }
    let id = id.trim();
    let parts: Vec<&str> = id.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [domain, bus, devfn] => (hex(domain, u32::MAX)?, *bus, *devfn),
        [bus, devfn] => (0, *bus, *devfn),
        _ => return None,
    };
    let (device, function) = devfn.split_once('.')?;
    let (bus, device, function) = (hex(bus, 0xff)?, hex(device, 0x1f)?, hex(function, 0x7)?);
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

/// Which of `nvml` (readings from [`all_devices`]) is the adapter with this PCI bus id, vendor
/// and device id (wgpu's `AdapterInfo::{device_pci_bus_id, vendor, device}`).
///
/// By bus id when the adapter has one: an adapter with a bus id that NVML does not list is not
/// an NVIDIA device NVML manages, and gets nothing. Without a bus id, an NVIDIA adapter is
/// matched by PCI device id, but only when exactly one NVML device has that id: two identical
/// boards cannot be told apart that way, and a wrong match would give one the other's budget.
pub fn match_adapter(
    adapter_bus_id: &str,
    adapter_vendor: u32,
    adapter_device: u32,
    nvml: &[GpuTelemetry],
) -> Option<usize> {
    if let Some(want) = normalize_bus_id(adapter_bus_id) {
        return nvml.iter().position(|t| {
            t.pci_bus_id
                .as_deref()
                .and_then(normalize_bus_id)
                .as_deref()
                == Some(want.as_str())
        });
    }
    if adapter_vendor != NVIDIA_VENDOR_ID {
        return None;
    }
    let mut same = nvml
        .iter()
        .enumerate()
        .filter(|(_, t)| t.pci_device_id == Some(adapter_device));
    match (same.next(), same.next()) {
        (Some((i, _)), None) => Some(i),
        _ => None,
    }
}

/// The default memory budget of a device: 90% ([`FREE_MEMORY_SHARE`]) of the free memory NVML
/// reports, else [`DEFAULT_BUDGET`] (no NVML, not an NVIDIA device, or the query failed).
/// Free rather than total memory, since other processes may hold part of the device.
pub fn default_budget(telemetry: Option<&GpuTelemetry>) -> u64 {
    telemetry
        .and_then(|t| t.memory_free_bytes)
        .map_or(DEFAULT_BUDGET, |free| {
            (free as f64 * FREE_MEMORY_SHARE) as u64
        })
}

/// The budget in bytes for a device, given the user's `--gpu-memory` if any:
/// - `None`: [`default_budget`] (90% of NVML's free memory, else [`DEFAULT_BUDGET`]);
/// - `Some(Budget::Bytes(n))`: `n`;
/// - `Some(Budget::Fraction(f))`: `f` of NVML's total memory where known, else `f` of
///   [`DEFAULT_BUDGET`] (see [`Budget::resolve`]).
pub fn resolve_budget(budget: Option<Budget>, telemetry: Option<&GpuTelemetry>) -> u64 {
    match budget {
        None => default_budget(telemetry),
        Some(b) => b.resolve(telemetry.and_then(|t| t.memory_total_bytes)),
    }
}

/// The NVML device that is this wgpu adapter (see [`match_adapter`]).
#[cfg(feature = "gpu")]
pub fn match_wgpu_adapter<'a>(
    info: &wgpu::AdapterInfo,
    nvml: &'a [GpuTelemetry],
) -> Option<&'a GpuTelemetry> {
    match_adapter(&info.device_pci_bus_id, info.vendor, info.device, nvml).map(|i| &nvml[i])
}

/// Current telemetry of this wgpu adapter; `None` without NVML or for a device NVML does not
/// manage.
#[cfg(feature = "gpu")]
pub fn telemetry_for(info: &wgpu::AdapterInfo) -> Option<GpuTelemetry> {
    match_wgpu_adapter(info, &all_devices()).cloned()
}

/// [`resolve_budget`] of a wgpu adapter, read from NVML now: what the GPU backend's pool gets.
#[cfg(feature = "gpu")]
pub fn budget_for(budget: Option<Budget>, info: &wgpu::AdapterInfo) -> u64 {
    // `Bytes` needs nothing from NVML: skip the queries.
    if let Some(Budget::Bytes(b)) = budget {
        return b;
    }
    resolve_budget(budget, telemetry_for(info).as_ref())
}

#[cfg(feature = "gpu")]
mod live {
    use std::sync::OnceLock;

    use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
    use nvml_wrapper::error::NvmlError;
    use nvml_wrapper::Nvml;

    use super::GpuTelemetry;

    /// NVML, initialised on first use and kept: `nvmlInit` can take a second without the
    /// persistence daemon, and a failure is reported once rather than at every refresh.
    static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

    fn nvml() -> Result<&'static Nvml, &'static str> {
        NVML.get_or_init(|| {
            Nvml::init().map_err(|e| {
                tracing::debug!("NVML not available, no NVIDIA telemetry: {e}");
                e.to_string()
            })
        })
        .as_ref()
        .map_err(String::as_str)
    }

    pub fn unavailable_reason() -> Option<String> {
        nvml().err().map(str::to_string)
    }

    /// A failed query is `None`; unsupported ones are routine, so they are logged at trace.
    fn query<T>(index: u32, what: &str, r: Result<T, NvmlError>) -> Option<T> {
        r.map_err(|e| tracing::trace!(nvml_index = index, "NVML {what}: {e}"))
            .ok()
    }

    fn read(nvml: &Nvml, index: u32) -> Option<GpuTelemetry> {
        let device = query(index, "device handle", nvml.device_by_index(index))?;
        let pci = query(index, "PCI info", device.pci_info());
        let memory = query(index, "memory info", device.memory_info());
        let util = query(index, "utilization", device.utilization_rates());
        let milliwatts = |mw: u32| f64::from(mw) / 1e3;
        Some(GpuTelemetry {
            nvml_index: index,
            uuid: query(index, "UUID", device.uuid()),
            pci_bus_id: pci.as_ref().map(|p| p.bus_id.clone()),
            pci_device_id: pci.as_ref().map(|p| p.pci_device_id >> 16),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
            memory_free_bytes: memory.as_ref().map(|m| m.free),
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            utilization_gpu_percent: util.as_ref().map(|u| u.gpu),
            utilization_memory_percent: util.as_ref().map(|u| u.memory),
            temperature_c: query(
                index,
                "temperature",
                device.temperature(TemperatureSensor::Gpu),
            ),
            power_w: query(index, "power usage", device.power_usage()).map(milliwatts),
            power_limit_w: query(index, "power limit", device.enforced_power_limit())
                .map(milliwatts),
        })
    }

    pub fn all_devices() -> Vec<GpuTelemetry> {
        let Ok(nvml) = nvml() else {
            return Vec::new();
        };
        let count = match nvml.device_count() {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("NVML device count: {e}");
                return Vec::new();
            }
        };
        (0..count).filter_map(|i| read(nvml, i)).collect()
    }
}

/// Telemetry of every device NVML manages, read now; empty without NVML (or without the `gpu`
/// feature). A device whose handle cannot be had is left out.
pub fn all_devices() -> Vec<GpuTelemetry> {
    #[cfg(feature = "gpu")]
    {
        live::all_devices()
    }
    #[cfg(not(feature = "gpu"))]
    {
        Vec::new()
    }
}

/// Why there is no NVML here (the library did not load, the driver is not running), or `None`
/// when NVML is up. The first call initialises NVML.
pub fn unavailable_reason() -> Option<String> {
    #[cfg(feature = "gpu")]
    {
        live::unavailable_reason()
    }
    #[cfg(not(feature = "gpu"))]
    {
        Some("built without the `gpu` feature".into())
    }
}

/// True when NVML loaded and initialised.
pub fn available() -> bool {
    unavailable_reason().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nv(index: u32, bus: &str, device_id: u32) -> GpuTelemetry {
        GpuTelemetry {
            nvml_index: index,
            uuid: Some(format!("GPU-{index:08x}-0000-0000-0000-000000000000")),
            pci_bus_id: Some(bus.into()),
            pci_device_id: Some(device_id),
            ..Default::default()
        }
    }

    #[test]
    fn bus_ids_normalise_to_one_form() {
        let canonical = Some("0000:65:00.0".to_string());
        for id in [
            "00000000:65:00.0",
            "0000:65:00.0",
            "65:00.0",
            " 00000000:65:00.0 ",
            "0:65:0.0",
        ] {
            assert_eq!(normalize_bus_id(id), canonical, "{id:?}");
        }
        assert_eq!(
            normalize_bus_id("00000000:B3:00.0"),
            normalize_bus_id("0000:b3:00.0")
        );
        assert_eq!(
            normalize_bus_id("00000000:B3:00.0").as_deref(),
            Some("0000:b3:00.0")
        );
        assert_eq!(
            normalize_bus_id("0001:3b:1f.7").as_deref(),
            Some("0001:3b:1f.7")
        );
        assert_ne!(
            normalize_bus_id("0001:65:00.0"),
            normalize_bus_id("0000:65:00.0")
        );
        for bad in [
            "",
            "   ",
            "65",
            "65:00",
            "0000:65:00",
            "0000:65:00.",
            "0000:g5:00.0",
            "0000:165:00.0",
            "0000:65:20.0",
            "0000:65:00.8",
            "0:0:65:00.0",
            "+0:65:00.0",
            "000000000:65:00.0",
        ] {
            assert_eq!(normalize_bus_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn adapters_match_by_bus_id() {
        let devices = [
            nv(0, "00000000:17:00.0", 0x2330),
            nv(1, "00000000:65:00.0", 0x2330),
        ];
        assert_eq!(
            match_adapter("0000:65:00.0", NVIDIA_VENDOR_ID, 0x2330, &devices),
            Some(1)
        );
        assert_eq!(
            match_adapter("0000:17:00.0", NVIDIA_VENDOR_ID, 0x2330, &devices),
            Some(0)
        );
        // A bus id NVML does not list is another vendor's device (or one NVML cannot see):
        // no fallback to the device id, even for a matching id.
        assert_eq!(
            match_adapter("0000:03:00.0", NVIDIA_VENDOR_ID, 0x2330, &devices),
            None
        );
        assert_eq!(match_adapter("0000:65:00.0", 0x1002, 0x744c, &[]), None);
        // An NVML reading without a bus id never matches by bus.
        let no_bus = [GpuTelemetry {
            pci_bus_id: None,
            ..nv(0, "", 0x2330)
        }];
        assert_eq!(
            match_adapter("0000:65:00.0", NVIDIA_VENDOR_ID, 0x2330, &no_bus),
            None
        );
    }

    #[test]
    fn adapters_without_bus_id_match_by_a_unique_device_id() {
        let one = [
            nv(0, "00000000:17:00.0", 0x2330),
            nv(1, "00000000:65:00.0", 0x2684),
        ];
        assert_eq!(match_adapter("", NVIDIA_VENDOR_ID, 0x2684, &one), Some(1));
        assert_eq!(match_adapter("", NVIDIA_VENDOR_ID, 0x1234, &one), None);
        // Device ids are per vendor: an Intel 0x2684 is not this RTX 4090.
        assert_eq!(match_adapter("", 0x8086, 0x2684, &one), None);
        // lavapipe: Mesa's vendor id, no bus id.
        assert_eq!(match_adapter("", 0x10005, 0, &one), None);
        // Two identical boards cannot be told apart without a bus id.
        let twins = [
            nv(0, "00000000:17:00.0", 0x2330),
            nv(1, "00000000:65:00.0", 0x2330),
        ];
        assert_eq!(match_adapter("", NVIDIA_VENDOR_ID, 0x2330, &twins), None);
        assert_eq!(match_adapter("", NVIDIA_VENDOR_ID, 0x2330, &[]), None);
    }

    #[test]
    fn budget_is_ninety_percent_of_nvml_free_memory_else_the_default() {
        let gib = 1u64 << 30;
        let t = GpuTelemetry {
            memory_total_bytes: Some(80 * gib),
            memory_free_bytes: Some(60 * gib),
            memory_used_bytes: Some(20 * gib),
            ..nv(0, "00000000:65:00.0", 0x2330)
        };
        assert_eq!(default_budget(Some(&t)), 54 * gib);
        assert_eq!(resolve_budget(None, Some(&t)), 54 * gib);
        assert_eq!(default_budget(None), DEFAULT_BUDGET);
        assert_eq!(resolve_budget(None, None), DEFAULT_BUDGET);
        let unknown_free = GpuTelemetry {
            memory_free_bytes: None,
            ..t.clone()
        };
        assert_eq!(default_budget(Some(&unknown_free)), DEFAULT_BUDGET);

        // A share is a share of NVML's total where known, else of the default budget.
        let half = Budget::parse("50%").unwrap();
        assert_eq!(resolve_budget(Some(half), Some(&t)), 40 * gib);
        assert_eq!(resolve_budget(Some(half), None), DEFAULT_BUDGET / 2);
        let unknown_total = GpuTelemetry {
            memory_total_bytes: None,
            ..t.clone()
        };
        assert_eq!(
            resolve_budget(Some(half), Some(&unknown_total)),
            DEFAULT_BUDGET / 2
        );
        // Bytes are bytes, whatever NVML says.
        let six = Budget::parse("6GiB").unwrap();
        assert_eq!(resolve_budget(Some(six), Some(&t)), 6 * gib);
        assert_eq!(resolve_budget(Some(six), None), 6 * gib);
    }

    #[test]
    fn telemetry_serialises_every_field_even_when_unknown() {
        let v = serde_json::to_value(GpuTelemetry::default()).unwrap();
        let obj = v.as_object().unwrap();
        for key in [
            "uuid",
            "pci_bus_id",
            "memory_total_bytes",
            "memory_free_bytes",
            "memory_used_bytes",
            "utilization_gpu_percent",
            "utilization_memory_percent",
            "temperature_c",
            "power_w",
            "power_limit_w",
        ] {
            assert!(obj.get(key).is_some_and(|v| v.is_null()), "{key}");
        }
    }

    /// Without NVML nothing is listed and the reason is known; with it, the readings are of
    /// distinct devices.
    #[test]
    fn all_devices_is_empty_without_nvml() {
        let devices = all_devices();
        match unavailable_reason() {
            Some(why) => {
                assert!(devices.is_empty());
                assert!(!why.is_empty());
                assert!(!available());
            }
            None => {
                eprintln!("NVML present: {} devices", devices.len());
                let mut indices: Vec<u32> = devices.iter().map(|t| t.nvml_index).collect();
                indices.dedup();
                assert_eq!(indices.len(), devices.len());
            }
        }
    }
}
