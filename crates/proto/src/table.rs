//! A small generational slab: the storage behind every object table of a device.
//!
//! A [`Handle`] names one slot at one generation, so a handle kept after its
//! object was destroyed never reaches the slot's next occupant.

use std::fmt;
use std::marker::PhantomData;

/// A typed handle into a [`Table`].
pub struct Handle<T> {
    index: u32,
    generation: u32,
    _kind: PhantomData<fn() -> T>,
}

impl<T> Handle<T> {
    /// The handle as one number (generation in the high half), for the C ABI and logs.
    pub fn raw(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// Rebuilds a handle from [`Handle::raw`]. A stale or made-up value simply names no object.
    pub fn from_raw(raw: u64) -> Self {
        Handle {
            index: raw as u32,
            generation: (raw >> 32) as u32,
            _kind: PhantomData,
        }
    }

    /// The slot index (dense, reused after removal).
    pub fn index(self) -> u32 {
        self.index
    }
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Handle<T> {}
impl<T> PartialEq for Handle<T> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index && self.generation == other.generation
    }
}
impl<T> Eq for Handle<T> {}
impl<T> std::hash::Hash for Handle<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.raw().hash(state)
    }
}
impl<T> fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// A slab of `T` addressed by [`Handle<T>`], holding at most `limit` objects.
pub struct Table<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
    limit: usize,
}

impl<T> Table<T> {
    /// An empty table that holds at most `limit` objects.
    pub fn new(limit: usize) -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            limit,
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
    pub fn insert(&mut self, value: T) -> Option<Handle<T>> {
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
        Some(Handle {
            index,
            generation: slot.generation,
            _kind: PhantomData,
        })
    }

    /// The object `h` names, if it is still live.
    pub fn get(&self, h: Handle<T>) -> Option<&T> {
        let slot = self.slots.get(h.index as usize)?;
        if slot.generation != h.generation {
            return None;
        }
        slot.value.as_ref()
    }

    /// Mutable access to the object `h` names, if it is still live.
    pub fn get_mut(&mut self, h: Handle<T>) -> Option<&mut T> {
        let slot = self.slots.get_mut(h.index as usize)?;
        if slot.generation != h.generation {
            return None;
        }
        slot.value.as_mut()
    }

    /// Removes and returns the object `h` names.
    pub fn remove(&mut self, h: Handle<T>) -> Option<T> {
        let slot = self.slots.get_mut(h.index as usize)?;
        if slot.generation != h.generation {
            return None;
        }
        let value = slot.value.take()?;
        self.free.push(h.index);
        self.len -= 1;
        Some(value)
    }

    /// The live object in slot `index`, whatever its generation (for lookups by a
    /// key that embeds the slot index, such as an lkey or rkey).
    pub fn get_by_index(&self, index: u32) -> Option<(Handle<T>, &T)> {
        let s = self.slots.get(index as usize)?;
        let h = Handle {
            index,
            generation: s.generation,
            _kind: PhantomData,
        };
        s.value.as_ref().map(|v| (h, v))
    }

    /// Every live object with its handle.
    pub fn iter(&self) -> impl Iterator<Item = (Handle<T>, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let h = Handle {
                index: i as u32,
                generation: s.generation,
                _kind: PhantomData,
            };
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
