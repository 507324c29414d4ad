//! A caching memory pool with size classes and a budget, in the manner of PyTorch's CUDA
//! caching allocator: freed blocks stay reserved and are reused for requests of their size
//! class; when reserving more would cross the release threshold (80% of the budget by
//! default) the cached blocks are handed back first, and an allocation that still does not fit
//! is an out-of-memory error whose message says why.
//!
//! The pool is generic over what a block is ([`BlockAllocator`]), so its bookkeeping is tested
//! without a GPU; the GPU backend plugs in wgpu buffers.

use crate::error::GpuError;

/// Default budget when neither NVML nor `--gpu-memory` says otherwise: wgpu cannot report
/// free device memory, and 2 GiB fits every GPU sonograph is meant for with room to spare.
pub const DEFAULT_BUDGET: u64 = 2 << 30;
/// Share of the budget above which cached blocks are released before reserving more.
pub const DEFAULT_RELEASE_THRESHOLD: f64 = 0.8;

/// Makes and drops the device's blocks.
pub trait BlockAllocator {
    type Block;
    /// Reserves `size` bytes of device memory for use `kind`. `Err` carries the device's own
    /// out-of-memory message.
    fn allocate(&mut self, size: u64, kind: BlockKind) -> Result<Self::Block, String>;
}

/// What a block is for: blocks are reused only for the same kind (wgpu fixes a buffer's usage
/// at creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockKind {
    Storage,
    Uniform,
    Readback,
}

/// A block handed out by the pool; give it back with [`MemoryPool::free`].
#[derive(Debug)]
pub struct PoolBlock<B> {
    pub block: B,
    /// Bytes reserved (the size class).
    pub size: u64,
    /// Bytes asked for.
    pub requested: u64,
    pub kind: BlockKind,
}

/// Pool statistics (defined beside the `Extractor` trait, which reports them).
pub use sonograph_dsp::MemoryStats;

/// Size class of a request: powers of two up to 1 MiB, then multiples of 2 MiB, so that a
/// batch of nearly the same shape reuses the previous batch's blocks.
pub fn size_class(bytes: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    let bytes = bytes.max(256);
    if bytes <= MIB {
        bytes.next_power_of_two()
    } else {
        bytes.div_ceil(2 * MIB) * 2 * MIB
    }
}

/// Formats bytes for messages: "1.50 GiB".
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// A memory budget as given on the command line: bytes, or a share of the device's memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    Bytes(u64),
    Fraction(f64),
}

impl Budget {
    /// "6GiB", "512MiB", "1.5GB", "1000000", "80%".
    pub fn parse(text: &str) -> Result<Self, GpuError> {
        let bad = || GpuError::BadBudget(text.to_string());
        let t = text.trim();
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(v > 0.0 && v <= 100.0) {
                return Err(bad());
            }
            return Ok(Budget::Fraction(v / 100.0));
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let v: f64 = num.parse().map_err(|_| bad())?;
        let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kib" => 1024.0,
            "kb" => 1e3,
            "m" | "mib" => 1024.0 * 1024.0,
            "mb" => 1e6,
            "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
            "gb" => 1e9,
            _ => return Err(bad()),
        };
        let bytes = v * scale;
        if !(bytes.is_finite() && bytes >= 1.0) {
            return Err(bad());
        }
        Ok(Budget::Bytes(bytes as u64))
    }

    /// Bytes, given the device's total memory if known; a share of an unknown total is a
    /// share of [`DEFAULT_BUDGET`]. wgpu does not report memory, so the total comes from NVML
    /// (`GpuTelemetry::memory_total_bytes`); [`crate::nvml::resolve_budget`] passes it, and
    /// also gives the rule when no budget was asked for (90% of NVML's free memory, else
    /// [`DEFAULT_BUDGET`]).
    pub fn resolve(self, device_total: Option<u64>) -> u64 {
        match self {
            Budget::Bytes(b) => b,
            Budget::Fraction(f) => (device_total.unwrap_or(DEFAULT_BUDGET) as f64 * f) as u64,
        }
    }
}

/// The caching pool.
pub struct MemoryPool<A: BlockAllocator> {
    allocator: A,
    budget: u64,
    release_threshold: f64,
    cached: Vec<PoolBlock<A::Block>>,
    stats: MemoryStats,
}

impl<A: BlockAllocator> MemoryPool<A> {
    pub fn new(allocator: A, budget: u64) -> Self {
        MemoryPool {
            allocator,
            budget,
            release_threshold: DEFAULT_RELEASE_THRESHOLD,
            cached: Vec::new(),
            stats: MemoryStats {
                budget_bytes: budget,
                ..Default::default()
            },
        }
    }

    pub fn with_release_threshold(mut self, share: f64) -> Self {
        self.release_threshold = share.clamp(0.0, 1.0);
        self
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    pub fn allocator(&self) -> &A {
        &self.allocator
    }

    /// A block of at least `bytes` for `kind`.
    pub fn alloc(&mut self, bytes: u64, kind: BlockKind) -> Result<PoolBlock<A::Block>, GpuError> {
        let class = size_class(bytes);
        // Fault injection: the pool's own out-of-memory error, counted and worded as a real one.
        fail::fail_point!("gpu::oom", |_| Err(self.oom(
            bytes,
            class,
            "injected by failpoint gpu::oom"
        )));
        // Best fit among cached blocks of this kind, wasting at most a quarter.
        let hit = self
            .cached
            .iter()
            .enumerate()
            .filter(|(_, b)| b.kind == kind && b.size >= class && b.size <= class + class / 4)
            .min_by_key(|(_, b)| b.size)
            .map(|(i, _)| i);
        if let Some(i) = hit {
            let mut block = self.cached.swap_remove(i);
            block.requested = bytes;
            self.stats.num_cache_hits += 1;
            self.hand_out(&block);
            return Ok(block);
        }
        let mut retried = false;
        if (self.stats.reserved_bytes + class) as f64 > self.release_threshold * self.budget as f64
        {
            retried = self.release_cached() > 0;
        }
        if self.stats.reserved_bytes + class > self.budget {
            return Err(self.oom(bytes, class, "it would exceed the budget"));
        }
        let block = match self.allocator.allocate(class, kind) {
            Ok(b) => b,
            Err(device_msg) => {
                // The device is fuller than the budget thinks: release the cache and retry once.
                if self.release_cached() == 0 {
                    return Err(self.oom(
                        bytes,
                        class,
                        &format!("the device refused: {device_msg}"),
                    ));
                }
                retried = true;
                match self.allocator.allocate(class, kind) {
                    Ok(b) => b,
                    Err(device_msg) => {
                        return Err(self.oom(
                            bytes,
                            class,
                            &format!(
                            "the device refused even after the cache was released: {device_msg}"
                        ),
                        ))
                    }
                }
            }
        };
        if retried {
            self.stats.num_alloc_retries += 1;
        }
        self.stats.num_device_allocs += 1;
        self.stats.reserved_bytes += class;
        self.stats.peak_reserved_bytes = self
            .stats
            .peak_reserved_bytes
            .max(self.stats.reserved_bytes);
        let block = PoolBlock {
            block,
            size: class,
            requested: bytes,
            kind,
        };
        self.hand_out(&block);
        Ok(block)
    }

    fn hand_out(&mut self, block: &PoolBlock<A::Block>) {
        self.stats.allocated_bytes += block.size;
        self.stats.requested_bytes += block.requested;
        self.stats.peak_allocated_bytes = self
            .stats
            .peak_allocated_bytes
            .max(self.stats.allocated_bytes);
    }

    /// Returns a block to the cache.
    pub fn free(&mut self, block: PoolBlock<A::Block>) {
        self.stats.allocated_bytes = self.stats.allocated_bytes.saturating_sub(block.size);
        self.stats.requested_bytes = self.stats.requested_bytes.saturating_sub(block.requested);
        self.cached.push(block);
    }

    /// Hands every cached block back to the device; returns the bytes released.
    pub fn release_cached(&mut self) -> u64 {
        let released: u64 = self.cached.iter().map(|b| b.size).sum();
        self.cached.clear();
        self.stats.reserved_bytes = self.stats.reserved_bytes.saturating_sub(released);
        released
    }

    fn oom(&mut self, bytes: u64, class: u64, why: &str) -> GpuError {
        self.stats.num_ooms += 1;
        let s = self.stats();
        GpuError::OutOfMemory(format!(
            "asked for {} ({} size class), {why}: budget {}, reserved {}, allocated {}, \
             fragmentation {:.1}%, largest free block {}",
            human_bytes(bytes),
            human_bytes(class),
            human_bytes(self.budget),
            human_bytes(s.reserved_bytes),
            human_bytes(s.allocated_bytes),
            s.fragmentation * 100.0,
            human_bytes(s.largest_free_block),
        ))
    }

    pub fn stats(&self) -> MemoryStats {
        let mut s = self.stats.clone();
        s.fragmentation = if s.reserved_bytes == 0 {
            0.0
        } else {
            1.0 - s.allocated_bytes as f64 / s.reserved_bytes as f64
        };
        s.largest_free_block = self.cached.iter().map(|b| b.size).max().unwrap_or(0);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake device with `capacity` bytes that counts live blocks.
    struct Fake {
        capacity: u64,
        used: std::rc::Rc<std::cell::Cell<u64>>,
    }
    #[derive(Debug)]
    struct FakeBlock {
        size: u64,
        used: std::rc::Rc<std::cell::Cell<u64>>,
    }
    impl Drop for FakeBlock {
        fn drop(&mut self) {
            self.used.set(self.used.get() - self.size);
        }
    }
    impl BlockAllocator for Fake {
        type Block = FakeBlock;
        fn allocate(&mut self, size: u64, _: BlockKind) -> Result<FakeBlock, String> {
            if self.used.get() + size > self.capacity {
                return Err(format!(
                    "device has {} left",
                    self.capacity - self.used.get()
                ));
            }
            self.used.set(self.used.get() + size);
            Ok(FakeBlock {
                size,
                used: self.used.clone(),
            })
        }
    }

    fn pool(capacity: u64, budget: u64) -> (MemoryPool<Fake>, std::rc::Rc<std::cell::Cell<u64>>) {
        let used = std::rc::Rc::new(std::cell::Cell::new(0));
        (
            MemoryPool::new(
                Fake {
                    capacity,
                    used: used.clone(),
                },
                budget,
            ),
            used,
        )
    }

    #[test]
    fn size_classes_round_up() {
        assert_eq!(size_class(1), 256);
        assert_eq!(size_class(1000), 1024);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), 2 << 20);
        assert_eq!(size_class((5 << 20) + 7), 6 << 20);
    }

    #[test]
    fn freed_blocks_are_reused_and_stats_add_up() {
        let (mut p, used) = pool(u64::MAX, 1 << 30);
        let a = p.alloc(1000, BlockKind::Storage).unwrap();
        let b = p.alloc(3 << 20, BlockKind::Storage).unwrap();
        let s = p.stats();
        assert_eq!(s.allocated_bytes, 1024 + (4 << 20));
        assert_eq!(s.requested_bytes, 1000 + (3 << 20));
        assert_eq!(s.reserved_bytes, s.allocated_bytes);
        assert_eq!(s.fragmentation, 0.0);
        p.free(a);
        let s = p.stats();
        assert_eq!(s.largest_free_block, 1024);
        assert!((s.fragmentation - 1024.0 / (1024.0 + (4 << 20) as f64)).abs() < 1e-12);
        // Same class, other kind: not reused.
        let c = p.alloc(900, BlockKind::Readback).unwrap();
        assert_eq!(p.stats().num_cache_hits, 0);
        let d = p.alloc(1020, BlockKind::Storage).unwrap();
        assert_eq!(p.stats().num_cache_hits, 1);
        assert_eq!(p.stats().num_device_allocs, 3);
        assert_eq!(used.get(), p.stats().reserved_bytes);
        for blk in [b, c, d] {
            p.free(blk);
        }
        assert_eq!(p.stats().allocated_bytes, 0);
        assert_eq!(p.stats().peak_allocated_bytes, 1024 * 2 + (4 << 20));
        p.release_cached();
        assert_eq!(used.get(), 0);
        assert_eq!(p.stats().reserved_bytes, 0);
    }

    #[test]
    fn cache_is_released_before_failing_and_oom_explains_itself() {
        let (mut p, used) = pool(u64::MAX, 10 << 20);
        let a = p.alloc(4 << 20, BlockKind::Storage).unwrap();
        p.free(a);
        // 4 MiB cached + 6 MiB new crosses 80% of 10 MiB: the cache goes first.
        let b = p.alloc(6 << 20, BlockKind::Storage).unwrap();
        assert_eq!(used.get(), 6 << 20);
        assert_eq!(p.stats().num_alloc_retries, 1);
        let err = p
            .alloc(6 << 20, BlockKind::Storage)
            .unwrap_err()
            .to_string();
        assert_eq!(p.stats().num_ooms, 1);
        for part in [
            "asked for 6.00 MiB",
            "budget 10.00 MiB",
            "allocated 6.00 MiB",
            "fragmentation 0.0%",
        ] {
            assert!(err.contains(part), "{err}");
        }
        p.free(b);
    }

    #[test]
    fn device_refusal_releases_cache_and_retries() {
        // The device is smaller than the budget claims.
        let (mut p, _) = pool(8 << 20, 1 << 30);
        let a = p.alloc(6 << 20, BlockKind::Storage).unwrap();
        p.free(a);
        let b = p.alloc(4 << 20, BlockKind::Readback).unwrap();
        assert_eq!(p.stats().num_alloc_retries, 1);
        let err = p.alloc(6 << 20, BlockKind::Storage).unwrap_err();
        assert!(err.to_string().contains("device refused"), "{err}");
        p.free(b);
    }

    #[test]
    fn budgets_parse() {
        assert_eq!(Budget::parse("6GiB").unwrap(), Budget::Bytes(6 << 30));
        assert_eq!(Budget::parse("512 MiB").unwrap(), Budget::Bytes(512 << 20));
        assert_eq!(
            Budget::parse("1.5GB").unwrap(),
            Budget::Bytes(1_500_000_000)
        );
        assert_eq!(Budget::parse("80%").unwrap(), Budget::Fraction(0.8));
        assert_eq!(Budget::parse("80%").unwrap().resolve(Some(1000)), 800);
        for bad in ["", "abc", "0%", "150%", "6 parsecs", "-1"] {
            assert!(Budget::parse(bad).is_err(), "{bad}");
        }
    }
}
