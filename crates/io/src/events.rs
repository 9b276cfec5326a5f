//! Event queues with a pollable fd: completion channels and the async-event queue.
//!
//! An [`EventQueue`] is a bounded FIFO plus an [`EventFd`], kept in step under
//! one lock so that **the fd is readable exactly when the queue is non-empty**:
//! a push onto an empty queue adds to the counter, a pop that empties it takes
//! the count. C code may therefore `poll()` the fd and then call the
//! `ibv_get_cq_event` / `ibv_get_async_event` of our libibverbs, which pops.
//! (The fd must not be `read()` directly: that would break the invariant.)
//! A full queue drops the new event and counts it; it never blocks the
//! progress thread.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use crate::engine::AsyncEvent;
use crate::eventfd::EventFd;

/// Default bound of an event queue (events, not bytes).
pub const DEFAULT_EVENT_CAPACITY: usize = 4096;

/// A bounded FIFO of events whose fd is readable while it is non-empty.
#[derive(Debug)]
pub struct EventQueue<T> {
    fd: EventFd,
    queue: Mutex<VecDeque<T>>,
    capacity: usize,
    dropped: AtomicU64,
}

impl<T> EventQueue<T> {
    /// An empty queue holding at most `capacity` events.
    pub fn new(capacity: usize) -> io::Result<Self> {
        Ok(EventQueue {
            fd: EventFd::new()?,
            queue: Mutex::new(VecDeque::new()),
            capacity,
            dropped: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<T>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `event` and makes the fd readable. Returns `false` (and counts a
    /// drop) if the queue is full.
    pub fn push(&self, event: T) -> bool {
        let mut q = self.lock();
        if q.len() >= self.capacity {
            self.dropped.fetch_add(1, Relaxed);
            return false;
        }
        q.push_back(event);
        if q.len() == 1 {
            if let Err(e) = self.fd.add(1) {
                tracing::warn!(error = %e, "event queue: eventfd write failed");
            }
        }
        true
    }

    /// Removes the oldest event, if any, without waiting.
    pub fn try_pop(&self) -> Option<T> {
        let mut q = self.lock();
        let event = q.pop_front()?;
        if q.is_empty() {
            if let Err(e) = self.fd.take() {
                tracing::warn!(error = %e, "event queue: eventfd read failed");
            }
        }
        Some(event)
    }

    /// Removes the oldest event, waiting up to `timeout` (`None`: forever).
    /// `Ok(None)` means the timeout passed with the queue empty.
    pub fn pop_wait(&self, timeout: Option<Duration>) -> io::Result<Option<T>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(event) = self.try_pop() {
                return Ok(Some(event));
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(None);
            }
            // Another consumer may win the race after a wake-up: loop and retry.
            self.fd.wait_readable(left)?;
        }
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no event waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }
}

impl<T> AsRawFd for EventQueue<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A context's asynchronous events (`ctx->async_fd`).
pub type AsyncEventQueue = EventQueue<AsyncEvent>;

/// Where the driver finds the queues it delivers to, by id, held weakly: a
/// queue its owner dropped is gone from here too (what comes for it
/// afterwards counts as dropped).
#[derive(Debug)]
pub(crate) struct Registry<K, T>(Mutex<HashMap<K, Weak<T>>>);

impl<K, T> Default for Registry<K, T> {
    fn default() -> Self {
        Registry(Mutex::new(HashMap::new()))
    }
}

impl<K: Eq + Hash, T> Registry<K, T> {
    fn lock(&self) -> MutexGuard<'_, HashMap<K, Weak<T>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `value` under `key` (replacing what was there), and
    /// forgets the dropped ones.
    pub(crate) fn insert(&self, key: K, value: &Arc<T>) {
        let mut map = self.lock();
        map.retain(|_, weak| weak.strong_count() > 0);
        map.insert(key, Arc::downgrade(value));
    }

    /// The queue under `key`, if its owner still holds it.
    pub(crate) fn get(&self, key: &K) -> Option<Arc<T>> {
        self.lock().get(key).and_then(Weak::upgrade)
    }
}

/// A completion channel (`ibv_comp_channel`): CQ ids whose notification fired.
/// Created by [`crate::Driver::create_completion_channel`], which gives it an id
/// the engine names in [`crate::Notification::Completion`].
#[derive(Debug)]
pub struct CompletionChannel {
    id: u32,
    events: EventQueue<u64>,
}

impl CompletionChannel {
    /// A channel with the given id.
    pub fn new(id: u32) -> io::Result<Self> {
        Ok(CompletionChannel {
            id,
            events: EventQueue::new(DEFAULT_EVENT_CAPACITY)?,
        })
    }

    /// The id the engine uses for this channel.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Queues an event for `cq` (called by the progress thread). `false` if dropped.
    pub fn notify(&self, cq: u64) -> bool {
        self.events.push(cq)
    }

    /// The CQ of the oldest event, without waiting (`ibv_get_cq_event` on an O_NONBLOCK fd).
    pub fn try_get_event(&self) -> Option<u64> {
        self.events.try_pop()
    }

    /// The CQ of the oldest event, waiting up to `timeout` (`None`: forever).
    pub fn get_event(&self, timeout: Option<Duration>) -> io::Result<Option<u64>> {
        self.events.pop_wait(timeout)
    }

    /// Events waiting.
    pub fn pending(&self) -> usize {
        self.events.len()
    }

    /// Events dropped because the channel was full.
    pub fn dropped(&self) -> u64 {
        self.events.dropped()
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eventfd::wait_readable;

    fn readable(fd: RawFd) -> bool {
        wait_readable(fd, Some(Duration::ZERO)).unwrap()
    }

    #[test]
    fn fd_readable_exactly_while_non_empty() {
        let q = EventQueue::new(8).unwrap();
        assert!(!readable(q.as_raw_fd()));
        q.push(1u64);
        q.push(2);
        assert!(readable(q.as_raw_fd()));
        assert_eq!(q.try_pop(), Some(1));
        assert!(readable(q.as_raw_fd()));
        assert_eq!(q.try_pop(), Some(2));
        assert!(!readable(q.as_raw_fd()));
        assert_eq!(q.try_pop(), None);
    }

    #[test]
    fn full_queue_drops_and_counts() {
        let q = EventQueue::new(2).unwrap();
        assert!(q.push(1u8) && q.push(2));
        assert!(!q.push(3));
        assert_eq!((q.len(), q.dropped()), (2, 1));
    }

    #[test]
    fn pop_wait_times_out_then_gets_a_later_event() {
        let ch = std::sync::Arc::new(CompletionChannel::new(7).unwrap());
        assert_eq!(ch.get_event(Some(Duration::from_millis(1))).unwrap(), None);
        let ch2 = ch.clone();
        let t = std::thread::spawn(move || ch2.get_event(Some(Duration::from_secs(20))));
        ch.notify(42);
        assert_eq!(t.join().unwrap().unwrap(), Some(42));
        assert_eq!((ch.id(), ch.pending()), (7, 0));
    }
}
