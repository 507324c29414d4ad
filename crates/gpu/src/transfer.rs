//! Moving batches to the device and their rows back: a ring of persistent staging buffers, so
//! that no batch allocates staging memory or copies its samples twice. Each slot holds an
//! upload buffer (MAP_WRITE | COPY_SRC) that the host fills while it is mapped, straight from
//! the decoded items and on several threads, and a readback buffer (MAP_READ | COPY_DST) that
//! the rows are read out of while it is mapped. A batch goes through in chunks, one slot each:
//! while the device runs chunks k − 2 and k − 1, the host fills chunk k into a slot and, on
//! other threads at the same time, reads chunk k − 3's rows out of it (`queue.write_buffer`
//! made a fresh staging allocation and a second copy of every batch).
//! A slot's buffers are made once and grown only when a chunk needs more than they hold;
//! [`TransferStats`] counts what was made, so that a test can see them reused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sonograph_dsp::TransferStats;

use crate::context::GpuDevice;

/// Slots in the ring: the chunk the host fills (while it reads back the slot's last chunk),
/// and two the device runs.
pub(crate) const RING_DEPTH: usize = 3;

/// A map request's answer (a channel that may be shared: the ring is, while one thread fills
/// a slot and another reads one).
type Mapped = crossbeam_channel::Receiver<Result<(), wgpu::BufferAsyncError>>;

/// A chunk on its way through the device.
pub(crate) struct InFlight {
    pub submission: wgpu::SubmissionIndex,
    /// Bytes of rows to read back.
    pub result_bytes: u64,
    readback_mapped: Mapped,
    upload_mapped: Mapped,
    /// Raised once the device has finished the chunk (seen at the next poll).
    pub done: Arc<AtomicBool>,
}

/// One slot: an upload and a readback buffer, and the chunk that uses them.
#[derive(Default)]
pub(crate) struct Slot {
    /// Mapped for writing whenever no chunk is in flight in this slot.
    upload: Option<wgpu::Buffer>,
    readback: Option<wgpu::Buffer>,
    pub in_flight: Option<InFlight>,
}

/// The staging ring of one backend (one device, one thread).
pub(crate) struct StagingRing {
    slots: Vec<Slot>,
    pub stats: TransferStats,
}

impl StagingRing {
    pub fn new() -> Self {
        StagingRing {
            slots: (0..RING_DEPTH).map(|_| Slot::default()).collect(),
            stats: TransferStats::default(),
        }
    }

    pub fn slot(&mut self, chunk: usize) -> &mut Slot {
        &mut self.slots[chunk % RING_DEPTH]
    }

    /// Drops every buffer: after an error a slot may be in any state (mapped, in flight); the
    /// next batch makes new ones.
    pub fn reset(&mut self) {
        for slot in &mut self.slots {
            *slot = Slot::default();
        }
        self.stats.staging_bytes = 0;
    }

    /// Makes sure chunk `chunk`'s slot has an upload buffer of at least `bytes` bytes, mapped
    /// for writing. The slot's previous chunk must have been waited for.
    pub fn ready_upload(
        &mut self,
        gpu: &GpuDevice,
        chunk: usize,
        bytes: u64,
    ) -> Result<(), String> {
        let slot = &mut self.slots[chunk % RING_DEPTH];
        debug_assert!(slot.in_flight.is_none(), "wait for the slot's chunk first");
        let usage = wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC;
        let what = "sonograph staging upload";
        grow(
            &mut self.stats,
            gpu,
            &mut slot.upload,
            bytes,
            usage,
            true,
            what,
        )
    }

    /// Makes sure chunk `chunk`'s slot has a readback buffer of at least `bytes` bytes. The
    /// rows of the slot's previous chunk must have been read (a smaller buffer is dropped).
    pub fn ready_readback(
        &mut self,
        gpu: &GpuDevice,
        chunk: usize,
        bytes: u64,
    ) -> Result<(), String> {
        let slot = &mut self.slots[chunk % RING_DEPTH];
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let what = "sonograph staging readback";
        grow(
            &mut self.stats,
            gpu,
            &mut slot.readback,
            bytes,
            usage,
            false,
            what,
        )
    }

    pub fn upload(&self, chunk: usize) -> &wgpu::Buffer {
        self.slots[chunk % RING_DEPTH]
            .upload
            .as_ref()
            .expect("ready() made it")
    }

    pub fn readback(&self, chunk: usize) -> &wgpu::Buffer {
        self.slots[chunk % RING_DEPTH]
            .readback
            .as_ref()
            .expect("ready() made it")
    }

    /// Chunk `chunk` was submitted (its upload buffer unmapped and copied from): asks for its
    /// rows to be mapped and its upload buffer to be mapped again for the chunk after next,
    /// both answered once the device has run it.
    pub fn submitted(
        &mut self,
        gpu: &GpuDevice,
        chunk: usize,
        submission: wgpu::SubmissionIndex,
        result_bytes: u64,
    ) {
        let done = Arc::new(AtomicBool::new(false));
        {
            let done = done.clone();
            gpu.queue
                .on_submitted_work_done(move || done.store(true, Ordering::SeqCst));
        }
        let map = |buffer: &wgpu::Buffer, mode, len: Option<u64>| {
            let (tx, rx) = crossbeam_channel::bounded(1);
            let callback = move |r| {
                let _ = tx.send(r);
            };
            match len {
                Some(len) => buffer.slice(..len).map_async(mode, callback),
                None => buffer.slice(..).map_async(mode, callback),
            }
            rx
        };
        let readback_mapped = map(
            self.readback(chunk),
            wgpu::MapMode::Read,
            Some(result_bytes.max(4)),
        );
        let upload_mapped = map(self.upload(chunk), wgpu::MapMode::Write, None);
        self.stats.chunks += 1;
        self.slot(chunk).in_flight = Some(InFlight {
            submission,
            result_bytes,
            readback_mapped,
            upload_mapped,
            done,
        });
    }

    /// Whether the device is still running chunk `chunk` (false once it has finished, or when
    /// it was never sent). Polls the device without waiting, which is what raises the flag.
    pub fn busy(&self, gpu: &GpuDevice, chunk: usize) -> bool {
        let Some(in_flight) = &self.slots[chunk % RING_DEPTH].in_flight else {
            return false;
        };
        let _ = gpu.device.poll(wgpu::PollType::Poll);
        !in_flight.done.load(Ordering::SeqCst)
    }

    /// Waits (up to `deadline`) for chunk `chunk` to be run and its rows mapped; its upload
    /// buffer is mapped for writing again, so the slot can take the chunk after next while
    /// these rows are read. Returns the bytes of rows to read, `None` when the slot held no
    /// chunk.
    pub fn wait(
        &mut self,
        gpu: &GpuDevice,
        chunk: usize,
        deadline: Duration,
    ) -> Result<Option<u64>, String> {
        let index = chunk % RING_DEPTH;
        let Some(in_flight) = self.slots[index].in_flight.take() else {
            return Ok(None);
        };
        let waiting = std::time::Instant::now();
        crate::context::wait_for(gpu, in_flight.submission.clone(), deadline)?;
        for (what, rx) in [
            ("readback", &in_flight.readback_mapped),
            ("upload", &in_flight.upload_mapped),
        ] {
            match rx.recv_timeout(deadline) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(format!("cannot map the {what} buffer: {e}")),
                Err(_) => return Err(format!("the {what} buffer was never mapped")),
            }
        }
        self.stats.wait_seconds += waiting.elapsed().as_secs_f64();
        Ok(Some(in_flight.result_bytes))
    }

    /// Hands chunk `chunk`'s mapped rows (`result_bytes` of them, as [`Self::wait`] said) to
    /// `read`, then unmaps them. Takes the ring shared, so that another thread may fill the
    /// slot's upload buffer meanwhile.
    pub fn read_rows<T>(
        &self,
        chunk: usize,
        result_bytes: u64,
        read: impl FnOnce(&[u8]) -> T,
    ) -> Result<T, String> {
        let readback = self.readback(chunk);
        let out = match readback.slice(..result_bytes.max(4)).get_mapped_range() {
            Ok(view) => read(&view[..result_bytes as usize]),
            Err(e) => return Err(format!("cannot read the mapped rows: {e}")),
        };
        readback.unmap();
        Ok(out)
    }
}

/// Replaces `buffer` with a new staging buffer where it holds fewer than `size` bytes (or is
/// not there), counting what is made and dropped in `stats`.
fn grow(
    stats: &mut TransferStats,
    gpu: &GpuDevice,
    buffer: &mut Option<wgpu::Buffer>,
    size: u64,
    usage: wgpu::BufferUsages,
    mapped: bool,
    what: &str,
) -> Result<(), String> {
    if buffer.as_ref().is_some_and(|b| b.size() >= size) {
        return Ok(());
    }
    // Grown by half again over what is asked, so that a batch a little larger than the last
    // does not make new buffers each time.
    let size = (size + size / 2).next_multiple_of(256);
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let new = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(what),
        size,
        usage,
        mapped_at_creation: mapped,
    });
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(format!("{what} of {size} bytes: {e}"));
    }
    if let Some(old) = buffer.take() {
        stats.staging_bytes -= old.size();
        old.destroy();
    }
    stats.staging_allocations += 1;
    stats.staging_bytes += new.size();
    *buffer = Some(new);
    Ok(())
}
