//! The memory the items between the decoders and the writer may hold at once. Queues bound
//! how many items wait; this bounds their bytes, whatever their lengths: a decoder waits for
//! room before it hands an item on, and the room comes back when the item's unit is dropped,
//! after its features are computed. So a job of 60-second IQ recordings at 1 MS/s (480 MB
//! each) holds as much as the machine allows, not `prefetch × batch-items` of them.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Bytes the items in flight may hold.
pub(crate) struct MemoryBudget {
    limit: u64,
    used: Mutex<u64>,
    freed: Condvar,
}

/// Room taken in a [`MemoryBudget`], given back when dropped.
pub(crate) struct BytesHeld {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl MemoryBudget {
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            used: Mutex::new(0),
            freed: Condvar::new(),
        })
    }

    /// Waits for `bytes` of room; an item larger than the whole budget waits until nothing
    /// else is held, so that it goes through alone instead of never. `None` once `give_up`
    /// says so (asked every 50 ms while waiting: no consumer is left, or the job is canceled).
    pub fn acquire(self: &Arc<Self>, bytes: u64, give_up: impl Fn() -> bool) -> Option<BytesHeld> {
        let mut used = crate::live::lock(&self.used);
        while *used > 0 && used.saturating_add(bytes) > self.limit {
            if give_up() {
                return None;
            }
            used = self
                .freed
                .wait_timeout(used, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *used += bytes;
        Some(BytesHeld {
            budget: self.clone(),
            bytes,
        })
    }

    #[cfg(test)]
    fn used(&self) -> u64 {
        *crate::live::lock(&self.used)
    }
}

impl Drop for BytesHeld {
    fn drop(&mut self) {
        *crate::live::lock(&self.budget.used) -= self.bytes;
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn room_is_waited_for_given_back_and_an_oversized_item_goes_alone() {
        let budget = MemoryBudget::new(100);
        let a = budget.acquire(60, || false).unwrap();
        let b = budget.acquire(40, || false).unwrap();
        assert_eq!(budget.used(), 100);
        // Full: a third waits until room comes back.
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || budget.acquire(50, || false).map(|h| h.bytes))
        };
        std::thread::sleep(Duration::from_millis(120));
        assert!(!waiter.is_finished(), "it waited");
        drop(a);
        assert_eq!(waiter.join().unwrap(), Some(50));
        drop(b);
        assert_eq!(budget.used(), 0);
        // Larger than the budget: through when nothing else is held.
        let big = budget.acquire(1000, || false).unwrap();
        let stop = AtomicBool::new(false);
        let blocked = std::thread::scope(|s| {
            let t = s.spawn(|| budget.acquire(1, || stop.load(Ordering::SeqCst)).is_none());
            std::thread::sleep(Duration::from_millis(120));
            stop.store(true, Ordering::SeqCst);
            t.join().unwrap()
        });
        assert!(blocked, "a waiter gives up when told to");
        drop(big);
        assert_eq!(budget.used(), 0);
    }
}
