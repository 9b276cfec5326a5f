//! The locks that let several threads run the data path of one device at
//! once (spec/concurrency.md §2): one per thing two QPs share, none around
//! the device.
//!
//! - [`Lock`]: a mutex whose poisoning is ignored (a panic in another thread
//!   leaves the data consistent enough to go on: every writer of the data
//!   path finishes its step before it can panic, and none panics on input),
//!   reached without locking through `&mut` (the control verbs, which hold
//!   the whole engine);
//! - [`ReadMostly`]: the same for a reader-writer lock;
//! - [`Queue`]: a FIFO behind a lock whose emptiness is read without it.
//!
//! Ground floor: imports nothing of the crate.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Release};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A mutex the data path takes and the control path reaches through `&mut`.
#[derive(Default)]
pub struct Lock<T>(Mutex<T>);

impl<T> Lock<T> {
    /// A lock around `value`.
    pub fn new(value: T) -> Self {
        Lock(Mutex::new(value))
    }

    /// Waits for the lock.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lock if no one holds it now.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The value, without locking: `&mut` proves no one else holds it.
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value.
    pub fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Lock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.try_lock() {
            Ok(v) => v.fmt(f),
            Err(_) => f.write_str("<locked>"),
        }
    }
}

/// A reader-writer lock the data path takes and the control path reaches
/// through `&mut`.
#[derive(Default)]
pub struct ReadMostly<T>(RwLock<T>);

impl<T> ReadMostly<T> {
    /// A lock around `value`.
    pub fn new(value: T) -> Self {
        ReadMostly(RwLock::new(value))
    }

    /// Shared access.
    #[inline]
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Exclusive access.
    #[inline]
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value, without locking.
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ReadMostly<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.try_read() {
            Ok(v) => v.fmt(f),
            Err(_) => f.write_str("<locked>"),
        }
    }
}

pub use lanes::Padded;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_gives_its_value() {
        let l = std::sync::Arc::new(Lock::new(5));
        let l2 = l.clone();
        let r = std::thread::spawn(move || {
            let _g = l2.lock();
            panic!("poison it");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(*l.lock(), 5);
    }
}

/// A FIFO behind a lock, with a flag beside it that says whether it holds
/// anything: the many callers that only ask ("any work?", every transmit
/// and poll) read the flag and take no lock, and an empty queue's line is
/// not written by them.
#[derive(Debug)]
pub struct Queue<T> {
    q: Lock<VecDeque<T>>,
    any: AtomicBool,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue {
            q: Lock::new(VecDeque::new()),
            any: AtomicBool::new(false),
        }
    }
}

impl<T> Queue<T> {
    /// Appends `v`.
    pub fn push(&self, v: T) {
        let mut q = self.q.lock();
        q.push_back(v);
        // Under the lock: a pop that empties the queue clears it under the
        // lock too, so the flag never says empty while something is in.
        self.any.store(true, Release);
    }

    /// Takes the oldest; no lock when the flag says empty.
    pub fn pop(&self) -> Option<T> {
        if !self.any.load(Acquire) {
            return None;
        }
        let mut q = self.q.lock();
        let v = q.pop_front();
        if q.is_empty() {
            self.any.store(false, Release);
        }
        v
    }

    /// Whether it holds nothing (as of a moment ago: a push or pop of
    /// another thread may come at any time).
    pub fn is_empty(&self) -> bool {
        !self.any.load(Acquire)
    }
}
