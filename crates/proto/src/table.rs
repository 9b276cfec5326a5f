//! A small generational slab: the storage behind every object table of a
//! device; and the map from QP numbers to handles ([`QpnMap`]).
//!
//! A [`Handle`] names one slot at one generation, so a handle kept after its
//! object was destroyed never reaches the slot's next occupant. A table of `T`
//! is addressed by handles of kind `K` (by default `T` itself; the engine uses
//! the marker kinds of [`crate::handle::kind`]). Sits on [`crate::handle`] only.

pub use crate::handle::Handle;

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// A slab of `T` addressed by [`Handle<K>`], holding at most `limit` objects.
pub struct Table<T, K = T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
    limit: usize,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<T, K> Table<T, K> {
    /// An empty table that holds at most `limit` objects.
    pub fn new(limit: usize) -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            limit,
            _kind: std::marker::PhantomData,
        }
    }

    /// Number of live objects.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if no object is live.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Stores `value`; `None` when the table is at its limit.
    pub fn insert(&mut self, value: T) -> Option<Handle<K>> {
        if self.len >= self.limit {
            return None;
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.value = Some(value);
        self.len += 1;
        Some(Handle::new(index, slot.generation))
    }

    /// The object `h` names, if it is still live.
    pub fn get(&self, h: Handle<K>) -> Option<&T> {
        let slot = self.slots.get(h.index() as usize)?;
        if slot.generation != h.generation() {
            return None;
        }
        slot.value.as_ref()
    }

    /// Mutable access to the object `h` names, if it is still live.
    pub fn get_mut(&mut self, h: Handle<K>) -> Option<&mut T> {
        let slot = self.slots.get_mut(h.index() as usize)?;
        if slot.generation != h.generation() {
            return None;
        }
        slot.value.as_mut()
    }

    /// Removes and returns the object `h` names.
    pub fn remove(&mut self, h: Handle<K>) -> Option<T> {
        let slot = self.slots.get_mut(h.index() as usize)?;
        if slot.generation != h.generation() {
            return None;
        }
        let value = slot.value.take()?;
        self.free.push(h.index());
        self.len -= 1;
        Some(value)
    }

    /// The live object in slot `index`, whatever its generation (for lookups by a
    /// key that embeds the slot index, such as an lkey or rkey).
    pub fn get_by_index(&self, index: u32) -> Option<(Handle<K>, &T)> {
        let s = self.slots.get(index as usize)?;
        let h = Handle::new(index, s.generation);
        s.value.as_ref().map(|v| (h, v))
    }

    /// Every live object with its handle, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Handle<K>, &mut T)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, s)| {
            let h = Handle::new(i as u32, s.generation);
            s.value.as_mut().map(|v| (h, v))
        })
    }

    /// Removes every object `keep` refuses.
    pub fn retain_by(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            if s.value.as_ref().is_some_and(|v| !keep(v)) {
                s.value = None;
                self.free.push(i as u32);
                self.len -= 1;
            }
        }
    }

    /// Every live object with its handle.
    pub fn iter(&self) -> impl Iterator<Item = (Handle<K>, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let h = Handle::new(i as u32, s.generation);
            s.value.as_ref().map(|v| (h, v))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_handles_miss_and_limit_holds() {
        let mut t: Table<&str> = Table::new(2);
        let a = t.insert("a").unwrap();
        let b = t.insert("b").unwrap();
        assert!(t.insert("c").is_none());
        assert_eq!(t.remove(a), Some("a"));
        let c = t.insert("c").unwrap();
        assert_eq!(c.index(), a.index());
        assert_eq!(
            t.get(a),
            None,
            "stale handle must not reach the new occupant"
        );
        assert_eq!(t.get(c), Some(&"c"));
        assert_eq!(t.get(Handle::from_raw(b.raw())), Some(&"b"));
        assert_eq!(t.len(), 2);
    }
}

/// QP numbers to handles: looked up for every datagram received, so hashed by
/// one multiplication instead of SipHash. The keys are QPNs this engine
/// chose; a datagram's QPN only ever looks one up.
pub(crate) type QpnMap = std::collections::HashMap<
    u32,
    crate::handle::QpHandle,
    std::hash::BuildHasherDefault<QpnHasher>,
>;

/// Fibonacci hashing of a 32-bit QPN (the map asks for nothing else).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct QpnHasher(u64);

impl std::hash::Hasher for QpnHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
