//! Giving freed heap memory back to the kernel while the server runs. glibc keeps freed chunks
//! in the middle of its heaps resident, so the churn of requests (a `read` allocates its window,
//! its JSON and its reply, tens of KiB, and frees them on other threads) makes a long-running
//! server's RSS creep up far past what it holds live. The runtime's workers call
//! [`release_free_heap_if_due`] as they park; at most once per [`TRIM_INTERVAL`] it returns the
//! allocator's free pages.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shortest time between two trims.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// When the last trim was, for callers on any thread.
#[derive(Debug)]
struct Schedule {
    start: Instant,
    interval_ms: u64,
    /// Milliseconds after `start` of the last trim.
    last_ms: AtomicU64,
}

impl Schedule {
    fn new(start: Instant, interval: Duration) -> Schedule {
        Schedule {
            start,
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            last_ms: AtomicU64::new(0),
        }
    }

    /// True (once) when a trim is due: the caller does it. Others see the new time.
    fn claim(&self) -> bool {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.last_ms.load(Ordering::Relaxed);
        now.saturating_sub(last) >= self.interval_ms
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

static SCHEDULE: LazyLock<Schedule> =
    LazyLock::new(|| Schedule::new(Instant::now(), TRIM_INTERVAL));

/// Trims the heap unless that was done less than [`TRIM_INTERVAL`] ago (cheap to call often: an
/// atomic load and a clock read when not due). Meant for the runtime's `on_thread_park`.
pub fn release_free_heap_if_due() {
    if SCHEDULE.claim() {
        codespace_runner_sandbox::release_free_heap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_is_claimed_at_most_once_per_interval() {
        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(3600))
            .unwrap_or_else(Instant::now);
        let s = Schedule::new(long_ago, Duration::from_secs(600));
        assert!(s.claim(), "due: the last trim was an hour ago");
        assert!(!s.claim(), "just claimed");
        assert!(!s.claim());
        // A fresh schedule is not due before its first interval has passed.
        let fresh = Schedule::new(Instant::now(), Duration::from_secs(600));
        assert!(!fresh.claim());
        release_free_heap_if_due();
    }
}
