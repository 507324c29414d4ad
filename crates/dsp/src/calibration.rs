//! How `auto` chooses between the CPU and GPUs once each has been measured on the job's own
//! work, whatever the work is (a feature spec, synthetic IQ): a GPU only where it beats the CPU
//! by a margin, so that a job is never slower for having one. The measurements themselves are
//! the devices' (`sonograph_gpu::calibrate` for features, the synthesis job for IQ).

use serde::{Deserialize, Serialize};

/// A GPU must run this many times as fast as the CPU to be chosen over it.
pub const GPU_MARGIN: f64 = 1.2;

/// What one device measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// `cpu`, `gpu:N`.
    pub id: String,
    /// The device as it names itself (adapter, driver, scalar).
    pub name: String,
    pub audio_seconds_per_second: f64,
    /// From the cache rather than measured now.
    pub cached: bool,
}

/// The device to keep among `measured` (the CPU first): the fastest GPU where it is at least
/// [`GPU_MARGIN`] times the CPU, else the CPU; with the reason, in words.
pub fn choose(measured: &[Measured]) -> (usize, String) {
    let rate = |i: usize| measured[i].audio_seconds_per_second;
    let Some(cpu) = measured.iter().position(|m| m.id == "cpu") else {
        return (0, "the only device".into());
    };
    let best_gpu = (0..measured.len())
        .filter(|&i| i != cpu)
        .max_by(|&a, &b| rate(a).total_cmp(&rate(b)));
    match best_gpu {
        Some(g) if rate(g) >= GPU_MARGIN * rate(cpu) => (
            g,
            format!(
                "{} ran {:.0} s of signal per s, {:.1}x the CPU's {:.0}",
                measured[g].id,
                rate(g),
                rate(g) / rate(cpu),
                rate(cpu)
            ),
        ),
        Some(g) => (
            cpu,
            format!(
                "the CPU ran {:.0} s of signal per s and {} {:.0} ({:.2}x, under the {GPU_MARGIN}x \
                 a GPU must reach)",
                rate(cpu),
                measured[g].id,
                rate(g),
                rate(g) / rate(cpu)
            ),
        ),
        None => (cpu, "no GPU to measure".into()),
    }
}

/// Where a device's measured rate on a piece of work (signal-seconds per second) is kept
/// between runs, by a key naming the device and the work: how `auto` chooses without measuring
/// every time.
pub trait CalibrationStore {
    fn get(&self, key: &str) -> Option<f64>;
    fn put(&mut self, key: String, audio_seconds_per_second: f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, rate: f64) -> Measured {
        Measured {
            id: id.into(),
            name: id.into(),
            audio_seconds_per_second: rate,
            cached: false,
        }
    }

    #[test]
    fn a_gpu_is_chosen_only_where_it_beats_the_cpu_by_the_margin() {
        let (i, why) = choose(&[m("cpu", 1000.0), m("gpu:0", 5000.0), m("gpu:1", 3000.0)]);
        assert_eq!(i, 1, "{why}");
        assert!(why.contains("5.0x the CPU"), "{why}");
        let (i, why) = choose(&[m("cpu", 1000.0), m("gpu:0", 1100.0)]);
        assert_eq!(i, 0, "{why}");
        assert!(why.contains("under the 1.2x"), "{why}");
        let (i, why) = choose(&[m("cpu", 1000.0), m("gpu:0", 400.0)]);
        assert_eq!(i, 0, "{why}");
        assert_eq!(choose(&[m("cpu", 1.0)]).0, 0);
    }
}
