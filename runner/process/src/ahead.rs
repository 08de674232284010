//! Things a spawn needs made ahead of it on the blocking pool (per-process cgroups, private temp
//! dirs), so the request path takes a fresh one instead of waiting for the file system.
//!
//! Each item is handed out once: a take pops it, so no two spawns ever share one. What waits here
//! is dropped (its `Drop` cleans it up) when the pool is closed or dropped; a closed pool makes
//! nothing more, and drops what a refill under way still makes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Up to `keep` items made ahead, refilled on the blocking pool after each take.
#[derive(Debug)]
pub struct MadeAhead<T> {
    ready: Mutex<Ready<T>>,
    /// A refill is under way.
    refilling: AtomicBool,
    keep: usize,
}

#[derive(Debug)]
struct Ready<T> {
    items: Vec<T>,
    closed: bool,
}

impl<T: Send + 'static> MadeAhead<T> {
    /// An empty pool that keeps `keep` items made ahead once its first take started a refill.
    pub fn new(keep: usize) -> MadeAhead<T> {
        MadeAhead {
            ready: Mutex::new(Ready {
                items: Vec::with_capacity(keep),
                closed: false,
            }),
            refilling: AtomicBool::new(false),
            keep,
        }
    }

    /// An item made ahead, if one is ready; either way a refill with `make` then starts on the
    /// blocking pool (one at a time; none without a tokio runtime, none once closed, and none
    /// after an error of `make`, until the next take). `None`: the caller makes its own now.
    pub fn take<E, F>(self: &Arc<Self>, make: F) -> Option<T>
    where
        E: std::fmt::Display,
        F: Fn() -> Result<T, E> + Send + 'static,
    {
        let item = self.lock().items.pop();
        self.refill(make);
        item
    }

    /// Items waiting to be taken.
    pub fn ready(&self) -> usize {
        self.lock().items.len()
    }

    /// `f` of the items waiting to be taken (left in place).
    pub fn with_ready<R>(&self, f: impl FnOnce(&[T]) -> R) -> R {
        f(&self.lock().items)
    }

    /// Whether a refill is under way.
    pub fn refilling(&self) -> bool {
        self.refilling.load(Ordering::Acquire)
    }

    /// Test aid: waits (at most 30 s, then panics) until no refill is under way.
    #[cfg(test)]
    pub(crate) fn settle(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.refilling() {
            assert!(
                std::time::Instant::now() < deadline,
                "the refill never ended"
            );
            std::thread::yield_now();
        }
    }

    /// Closes the pool (nothing is made ahead any more) and returns every item waiting, to be
    /// dropped by the caller wherever that may block.
    pub fn close(&self) -> Vec<T> {
        let mut ready = self.lock();
        ready.closed = true;
        std::mem::take(&mut ready.items)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ready<T>> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn short(&self) -> bool {
        let ready = self.lock();
        !ready.closed && ready.items.len() < self.keep
    }

    /// Keeps `item` unless the pool was closed meanwhile (then it is returned, to be dropped).
    fn keep_made(&self, item: T) -> Option<T> {
        let mut ready = self.lock();
        if ready.closed {
            return Some(item);
        }
        ready.items.push(item);
        None
    }

    fn refill<E, F>(self: &Arc<Self>, make: F)
    where
        E: std::fmt::Display,
        F: Fn() -> Result<T, E> + Send + 'static,
    {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.lock().closed || self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        handle.spawn_blocking(move || {
            loop {
                while me.short() {
                    match make() {
                        Ok(item) => drop(me.keep_made(item)),
                        Err(err) => {
                            tracing::debug!(%err, "cannot make an item ahead of its spawn");
                            me.refilling.store(false, Ordering::Release);
                            return;
                        }
                    }
                }
                me.refilling.store(false, Ordering::Release);
                // A take between the last check and the flag's reset found a refill under way:
                // go on for it, unless another refill started meanwhile.
                if !me.short() || me.refilling.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_item_is_handed_out_once_and_the_pool_refills_to_its_size() {
        let pool = Arc::new(MadeAhead::new(3));
        let made = Arc::new(AtomicUsize::new(0));
        let maker = |made: &Arc<AtomicUsize>| {
            let made = Arc::clone(made);
            move || Ok::<_, String>(made.fetch_add(1, Ordering::Relaxed))
        };
        // The first take finds nothing made yet; its refill makes three.
        assert_eq!(pool.take(maker(&made)), None);
        pool.settle();
        assert_eq!(pool.ready(), 3);
        let mut seen = Vec::new();
        for _ in 0..10 {
            let item = pool.take(maker(&made)).expect("an item made ahead");
            assert!(!seen.contains(&item), "{item} was handed out twice");
            seen.push(item);
            pool.settle();
            assert_eq!(pool.ready(), 3);
        }
        assert_eq!(made.load(Ordering::Relaxed), 13);
        assert_eq!(pool.close().len(), 3);
        assert_eq!(pool.ready(), 0);
        // Closed: nothing is made any more.
        assert_eq!(pool.take(maker(&made)), None);
        assert!(!pool.refilling());
        assert_eq!(made.load(Ordering::Relaxed), 13);
    }

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_a_refill_makes_after_the_pool_closed_is_dropped_not_kept() {
        let pool: Arc<MadeAhead<Counted>> = Arc::new(MadeAhead::new(2));
        let drops = Arc::new(AtomicUsize::new(0));
        let (started, go) = (
            Arc::new(std::sync::Barrier::new(2)),
            Arc::new(std::sync::Barrier::new(2)),
        );
        let make = {
            let (drops, started, go) = (Arc::clone(&drops), Arc::clone(&started), Arc::clone(&go));
            move || {
                started.wait();
                go.wait();
                Ok::<_, String>(Counted(Arc::clone(&drops)))
            }
        };
        assert!(pool.take(make).is_none());
        // The refill is inside `make` when the pool closes.
        started.wait();
        assert!(pool.close().is_empty());
        go.wait();
        pool.settle();
        // What it made was dropped (its cleanup ran), not kept, and nothing more was made.
        assert_eq!(pool.ready(), 0);
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_maker_stops_the_refill_and_the_caller_makes_its_own() {
        let pool: Arc<MadeAhead<u32>> = Arc::new(MadeAhead::new(2));
        assert_eq!(pool.take(|| Err::<u32, _>("no room")), None);
        pool.settle();
        assert_eq!(pool.ready(), 0);
        // The next take tries again.
        assert_eq!(pool.take(|| Ok::<u32, String>(7)), None);
        pool.settle();
        assert_eq!(pool.ready(), 2);
    }

    #[test]
    fn without_a_runtime_nothing_is_made_ahead() {
        let pool: Arc<MadeAhead<u32>> = Arc::new(MadeAhead::new(2));
        assert_eq!(pool.take(|| Ok::<u32, String>(1)), None);
        assert!(!pool.refilling());
        assert_eq!(pool.ready(), 0);
    }
}
