//! Fault injection on the GPU backend (`--features failpoints`): with out-of-memory errors
//! injected at random and the device lost mid-run, the adaptive batcher still computes every
//! item exactly once, in order, equal to the CPU. Needs a wgpu adapter (lavapipe counts);
//! without one it skips (a failure under `SONOGRAPH_REQUIRE_GPU=1`).
#![cfg(feature = "failpoints")]

use std::collections::HashMap;

use sonograph_dsp::{
    AudioBatch, CpuBackend, DeviceError, Extractor, FeatureBatch, FeatureSpec, Precision,
};
use sonograph_gpu::{GpuBackend, GpuOptions};
use sonograph_pipeline::{AdaptiveBatcher, BatcherConfig};

#[path = "../../../tests/shared/skip.rs"]
mod skip;

/// Counts how many times each item (told apart by length) came out of a successful batch.
struct Counting {
    inner: GpuBackend,
    computed: HashMap<usize, usize>,
}

impl Extractor for Counting {
    fn spec(&self) -> &FeatureSpec {
        self.inner.spec()
    }
    fn device(&self) -> String {
        self.inner.device()
    }
    fn extract_batch(&mut self, b: &AudioBatch, out: &mut FeatureBatch) -> Result<(), DeviceError> {
        self.inner.extract_batch(b, out)?;
        for i in b.items() {
            *self.computed.entry(i.len()).or_default() += 1;
        }
        Ok(())
    }
    fn recover(&mut self) -> bool {
        self.inner.recover()
    }
}

fn clips(n: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|k| {
            (0..3000 + 161 * k)
                .map(|i| ((i * (k + 2)) as f32 * 0.0007).sin() * 0.4)
                .collect()
        })
        .collect()
}

fn close(a: &FeatureBatch, b: &FeatureBatch) {
    assert_eq!(a.len(), b.len());
    for i in 0..a.len() {
        let (fa, ra) = a.item(i).unwrap();
        let (fb, rb) = b.item(i).unwrap();
        assert_eq!(fa, fb, "item {i}");
        let worst = ra
            .iter()
            .zip(rb)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(worst <= 1e-4, "item {i}: {worst}");
    }
}

/// The GPU backend for Whisper behind a counter, a batch of `n` clips, the CPU fallback and
/// the CPU's result; `None` (after saying why) without an adapter.
fn setup(n: usize) -> Option<(Counting, AudioBatch, CpuBackend, FeatureBatch)> {
    let spec = FeatureSpec::whisper(80);
    let gpu = match GpuBackend::new(&spec, &GpuOptions::default()) {
        Ok(g) => g,
        Err(DeviceError::Unavailable(e)) => {
            skip::skip(&format!(
                "no wgpu adapter (install mesa-vulkan-drivers): {e}"
            ));
            return None;
        }
        Err(e) => panic!("the GPU backend failed to start: {e}"),
    };
    let clips = clips(n);
    let batch = AudioBatch::from_items(clips.iter().map(|c| c.as_slice()));
    let mut cpu = CpuBackend::new(&spec, Precision::F64).unwrap();
    let mut expect = FeatureBatch::new(spec.n_bins());
    cpu.extract_batch(&batch, &mut expect).unwrap();
    let primary = Counting {
        inner: gpu,
        computed: HashMap::new(),
    };
    Some((primary, batch, cpu, expect))
}

#[test]
fn injected_ooms_and_a_lost_device_lose_and_duplicate_nothing() {
    let scenario = fail::FailScenario::setup();
    let Some((mut primary, batch, mut cpu, expect)) = setup(24) else {
        return;
    };
    let bins = expect.bins();

    // 1. The pool refuses its 2nd and its 13th allocations (a batch allocates eight blocks:
    // mid-way through the first batch and through a later one): each time the backend hands
    // back what it took and reports the OOM, and the batcher splits.
    fail::cfg("gpu::oom", "1*off->1*return->10*off->1*return->off").unwrap();
    let mut batcher = AdaptiveBatcher::new(BatcherConfig {
        initial: 8,
        max: 16,
        grow_after: 2,
    });
    let mut out = FeatureBatch::new(bins);
    batcher.run(&batch, &mut primary, &mut cpu, &mut out);
    close(&out, &expect);
    let on_gpu: usize = primary.computed.values().sum();
    assert!(
        primary.computed.values().all(|&c| c == 1),
        "{:?}",
        primary.computed
    );
    assert_eq!(
        on_gpu as u64 + batcher.stats().items_on_fallback,
        batch.len() as u64
    );
    eprintln!("injected OOMs: {:?}", batcher.stats());
    assert_eq!(batcher.stats().ooms, 2, "{:?}", batcher.stats());
    let pool = primary.inner.memory_stats().unwrap();
    assert_eq!(pool.num_ooms, batcher.stats().ooms, "{pool:?}");
    assert_eq!(
        pool.allocated_bytes, 0,
        "every block is back in the pool: {pool:?}"
    );

    // 2. The device is lost after two more batches.
    fail::cfg("gpu::oom", "off").unwrap();
    fail::cfg("gpu::device_lost", "2*off->return").unwrap();
    primary.computed.clear();
    let mut out = FeatureBatch::new(bins);
    let mut batcher = AdaptiveBatcher::new(BatcherConfig {
        initial: 5,
        max: 5,
        grow_after: 100,
    });
    batcher.run(&batch, &mut primary, &mut cpu, &mut out);
    close(&out, &expect);
    assert_eq!(primary.computed.len(), 10);
    assert!(primary.computed.values().all(|&c| c == 1));
    assert_eq!(batcher.stats().items_after_loss, 14);
    assert_eq!(batcher.stats().devices_lost, 1);
    scenario.teardown();
}

/// A batch lost once on the real backend: the device passes its health probe, the batch is
/// retried on it, and every item is computed there exactly once. When the probe fails too,
/// the device is taken out and the CPU finishes.
#[test]
fn a_transient_loss_is_retried_on_the_gpu_after_its_probe() {
    let scenario = fail::FailScenario::setup();
    let Some((mut primary, batch, mut cpu, expect)) = setup(12) else {
        return;
    };
    let bins = expect.bins();
    let config = BatcherConfig {
        initial: 4,
        max: 4,
        grow_after: 100,
    };
    // The second batch is lost once.
    fail::cfg("gpu::device_lost", "1*off->1*return->off").unwrap();
    let mut batcher = AdaptiveBatcher::new(config);
    let mut out = FeatureBatch::new(bins);
    batcher.run(&batch, &mut primary, &mut cpu, &mut out);
    close(&out, &expect);
    assert_eq!(primary.computed.len(), 12, "{:?}", batcher.stats());
    assert!(primary.computed.values().all(|&c| c == 1));
    let s = batcher.stats();
    assert_eq!((s.recovered, s.devices_lost), (1, 0), "{s:?}");
    // Lost again, and the probe fails: out, and the CPU computes the rest.
    fail::cfg("gpu::device_lost", "1*off->return").unwrap();
    fail::cfg("gpu::recover_fails", "return").unwrap();
    primary.computed.clear();
    let mut batcher = AdaptiveBatcher::new(config);
    let mut out = FeatureBatch::new(bins);
    batcher.run(&batch, &mut primary, &mut cpu, &mut out);
    close(&out, &expect);
    assert_eq!(primary.computed.len(), 4);
    let s = batcher.stats();
    assert_eq!((s.recovered, s.devices_lost, s.items_after_loss), (0, 1, 8));
    fail::cfg("gpu::device_lost", "off").unwrap();
    fail::cfg("gpu::recover_fails", "off").unwrap();
    scenario.teardown();
}

#[test]
fn a_hung_probe_fails_the_device_within_its_deadline() {
    let scenario = fail::FailScenario::setup();
    let mut registry = sonograph_gpu::DeviceRegistry::discover();
    let Some(index) = registry.devices().iter().find_map(|d| d.index) else {
        skip::skip("no wgpu adapter (install mesa-vulkan-drivers)");
        return;
    };
    fail::cfg("gpu::probe_hang", "return").unwrap();
    let started = std::time::Instant::now();
    let state = registry.probe(index, std::time::Duration::from_millis(300), 2);
    assert_eq!(state, sonograph_gpu::DeviceState::Failed);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let reason = registry.devices()[index].reason.clone().unwrap_or_default();
    assert!(reason.contains("did not finish"), "{reason}");
    fail::cfg("gpu::probe_hang", "off").unwrap();
    let state = registry.probe(index, std::time::Duration::from_secs(20), 1);
    assert_eq!(state, sonograph_gpu::DeviceState::Available);
    scenario.teardown();
}

/// The device itself refusing an allocation (wgpu's out-of-memory error), on the backend's
/// real allocation path: with blocks cached, the pool releases them and retries once; with
/// none, the batch fails with an OOM that the batcher splits. Nothing is lost either way.
#[test]
fn a_device_that_refuses_allocations_is_retried_then_split() {
    let scenario = fail::FailScenario::setup();
    let Some((mut primary, batch, mut cpu, expect)) = setup(8) else {
        return;
    };
    let bins = expect.bins();
    let run = |primary: &mut Counting, cpu: &mut CpuBackend, initial: usize| {
        let mut batcher = AdaptiveBatcher::new(BatcherConfig {
            initial,
            max: initial,
            grow_after: 100,
        });
        let mut out = FeatureBatch::new(bins);
        batcher.run(&batch, primary, cpu, &mut out);
        close(&out, &expect);
        batcher.stats().clone()
    };
    // Nothing cached yet: the first allocation is refused and cannot be retried.
    fail::cfg("gpu::device_alloc", "1*return->off").unwrap();
    let stats = run(&mut primary, &mut cpu, 8);
    let pool = primary.inner.memory_stats().unwrap();
    assert_eq!((stats.ooms, stats.splits), (1, 1), "{stats:?}");
    assert_eq!((pool.num_ooms, pool.num_alloc_retries), (1, 0), "{pool:?}");
    assert!(
        pool.reserved_bytes > 0 && pool.largest_free_block > 0,
        "{pool:?}"
    );
    // Blocks of the 4-item batches are cached; a batch of 8 needs bigger ones, the device
    // refuses the first, the pool releases its cache and the retry succeeds.
    fail::cfg("gpu::device_alloc", "1*return->off").unwrap();
    let stats = run(&mut primary, &mut cpu, 8);
    let pool = primary.inner.memory_stats().unwrap();
    assert_eq!(stats.ooms, 0, "{stats:?}");
    assert_eq!((pool.num_ooms, pool.num_alloc_retries), (1, 1), "{pool:?}");
    assert!(
        primary.computed.values().all(|&c| c == 2),
        "{:?}",
        primary.computed
    );
    fail::cfg("gpu::device_alloc", "off").unwrap();
    scenario.teardown();
}

/// A kernel that does not compile is an error of its own kind, never "no adapter": a test
/// (or `--device auto`) can never mistake a broken shader for a machine without a GPU.
#[test]
fn a_kernel_that_does_not_compile_is_a_kernel_error() {
    let scenario = fail::FailScenario::setup();
    if setup(1).is_none() {
        return;
    }
    fail::cfg("gpu::broken_kernel", "return").unwrap();
    for force_dft in [false, true] {
        let options = GpuOptions {
            force_dft,
            ..Default::default()
        };
        match GpuBackend::new(&FeatureSpec::whisper(80), &options) {
            Err(DeviceError::Kernel(msg)) => assert!(msg.contains("broken"), "{msg}"),
            Err(e) => panic!("a broken kernel read as {e:?}"),
            Ok(_) => panic!("a broken kernel compiled"),
        }
    }
    fail::cfg("gpu::broken_kernel", "off").unwrap();
    scenario.teardown();
}

/// With a device slower than its host (a spinning kernel before each chunk's own), the host
/// fills chunk k + 1 while the device still runs chunk k: the transfers and the kernels overlap
/// (and the rows are those of the device at its own speed).
#[test]
fn a_slow_device_runs_one_chunk_while_the_host_fills_the_next() {
    // Held for the whole test: failpoints are global, and the other tests set their own.
    let scenario = fail::FailScenario::setup();
    let Some((mut fast, batch, _, expect)) = setup(12) else {
        return;
    };
    let mut out = FeatureBatch::new(expect.bins());
    fast.extract_batch(&batch, &mut out).unwrap();
    close(&out, &expect);
    let spec = FeatureSpec::whisper(80);
    let mut slow = GpuBackend::new(&spec, &GpuOptions::default()).unwrap();
    // A chunk of one or two clips.
    slow.set_chunk_bytes(4 * 5000);
    fail::cfg("gpu::slow_kernel", "return(3000000)").unwrap();
    let mut slowed = FeatureBatch::new(expect.bins());
    slow.extract_batch(&batch, &mut slowed).unwrap();
    fail::cfg("gpu::slow_kernel", "off").unwrap();
    scenario.teardown();
    close(&slowed, &expect);
    let stats = slow.transfer_stats().unwrap();
    assert!(stats.chunks >= 5, "{stats:?}");
    assert!(
        stats.chunks_filled_while_busy >= stats.chunks / 2,
        "the host waited for the device instead of filling the next chunk: {stats:?}"
    );
}
