//! Lanes: a small index per thread, and values striped by it.
//!
//! Owns: which lane a thread is in ([`lane`]), [`Striped`], one value per
//! lane on cache lines of its own, and [`LaneSet`], a set of lanes; and
//! apart from lanes, which counting slot a thread holds ([`slot`]),
//! [`Tally`], one value per slot, and [`Count`], a count in a slot.
//! Promise: a thread always gets the same lane; threads get lanes round
//! robin as they first ask, so the first [`LANES`] threads each have one
//! of their own (more share). Nothing may depend on a lane being one
//! thread's: it is where a thread's writes and work go, not a lock. A
//! counting slot below [`SLOTS`] is one running thread's alone (the
//! threads beyond share one more), so its counts are added to without a
//! locked instruction (spec/performance.md §27).
//!
//! Why: a device's counters and clock are written by every thread that
//! sends or receives, and its queues of work are taken by every thread
//! that transmits. One word that two cores write in turn moves between
//! them at every write (about 45 ns each under load on the 2-core machine,
//! against 8 ns for a word of its own: spec/performance.md §23). A striped
//! value is written in the writer's lane only; a reader that wants the
//! whole sums (or takes the largest of) the lanes. The engine keeps a
//! ready queue and a posted list per lane, so a thread works the QPs it
//! posted to (spec/concurrency.md §2).
//!
//! No unsafe, no dependencies: the stripes are plain values behind their
//! own padding; what they hold (atomics) is the holder's choice.

#![forbid(unsafe_code)]

pub mod ab;
pub mod stamp;

use std::cell::Cell;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

/// How many lanes there are.
pub const LANES: usize = 8;

/// The lane the next thread gets.
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's lane, once it asked (`LANES`: not yet).
    static LANE: Cell<usize> = const { Cell::new(LANES) };
}

/// The calling thread's lane (`0..LANES`), the same at every call.
#[inline]
pub fn lane() -> usize {
    LANE.with(|l| {
        let mine = l.get();
        if mine < LANES {
            return mine;
        }
        let mine = next_lane(&NEXT);
        l.set(mine);
        mine
    })
}

/// The next lane of the round robin `next` keeps.
fn next_lane(next: &AtomicUsize) -> usize {
    next.fetch_add(1, Relaxed) % LANES
}

/// A value on cache lines of its own (128 bytes: the adjacent-line
/// prefetcher pairs lines), so that threads writing it do not slow down
/// threads reading its neighbours, and the other way round.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Padded<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// A set of lanes (a bit per lane).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneSet(u8);

const _: () = assert!(LANES <= 8, "a LaneSet holds 8 lanes");

impl LaneSet {
    /// No lane.
    pub const NONE: LaneSet = LaneSet(0);
    /// Every lane.
    pub const ALL: LaneSet = LaneSet(u8::MAX);

    /// Lane `i` alone.
    pub fn of(i: usize) -> LaneSet {
        debug_assert!(i < LANES);
        LaneSet(1 << i)
    }

    /// The calling thread's lane alone.
    pub fn mine() -> LaneSet {
        LaneSet::of(lane())
    }

    /// Whether lane `i` is in the set.
    pub fn contains(self, i: usize) -> bool {
        i < LANES && self.0 & (1 << i) != 0
    }

    /// Whether no lane is.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Both sets' lanes.
    #[must_use]
    pub fn with(self, other: LaneSet) -> LaneSet {
        LaneSet(self.0 | other.0)
    }

    /// The lanes in both sets.
    #[must_use]
    pub fn and(self, other: LaneSet) -> LaneSet {
        LaneSet(self.0 & other.0)
    }

    /// The lanes in the set, from lane `first` on, round (so a thread
    /// visits its own lane first).
    pub fn from(self, first: usize) -> impl Iterator<Item = usize> {
        (0..LANES)
            .map(move |k| (first + k) % LANES)
            .filter(move |&i| self.contains(i))
    }
}

impl FromIterator<usize> for LaneSet {
    /// The set of the lanes given.
    fn from_iter<I: IntoIterator<Item = usize>>(lanes: I) -> Self {
        lanes
            .into_iter()
            .fold(LaneSet::NONE, |s, i| s.with(LaneSet::of(i)))
    }
}

impl Default for LaneSet {
    /// Every lane (what reaches the whole device).
    fn default() -> Self {
        LaneSet::ALL
    }
}

/// One `T` per lane, each on lines of its own.
#[derive(Debug, Default)]
pub struct Striped<T>([Padded<T>; LANES]);

impl<T> Striped<T> {
    /// A stripe per lane, each made by `f`.
    pub fn from_fn(mut f: impl FnMut() -> T) -> Self {
        Striped(std::array::from_fn(|_| Padded(f())))
    }

    /// The calling thread's stripe (what it writes).
    #[inline]
    pub fn mine(&self) -> &T {
        &self.0[lane()]
    }

    /// Lane `i`'s stripe.
    pub fn get(&self, i: usize) -> &T {
        &self.0[i % LANES]
    }

    /// Every stripe (what a reader of the whole goes through).
    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.0.iter().map(|p| &p.0)
    }
}

/// How many threads at a time count in cells of their own ([`slot`]); the
/// threads beyond share one more set of cells.
pub const SLOTS: usize = 16;

/// Which of the [`SLOTS`] a thread holds (`true` while held).
static HELD: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];

/// Not yet asked.
const UNSET: usize = usize::MAX;

thread_local! {
    /// This thread's counting slot, once it asked: one of its own
    /// (`< SLOTS`) or the shared one (`SLOTS`).
    static SLOT: Cell<usize> = const { Cell::new(UNSET) };
    /// Gives a slot of its own back when the thread ends.
    static HOLD: Hold = const { Hold(Cell::new(UNSET)) };
}

/// A thread's hold on its slot; dropped when the thread ends.
struct Hold(Cell<usize>);

impl Drop for Hold {
    fn drop(&mut self) {
        let held = self.0.get();
        if held < SLOTS {
            // Whatever this thread counts from here on (in another thread-
            // local's destructor) goes to the shared cells; the Release
            // store hands the slot's counts to its next holder.
            SLOT.with(|s| s.set(SLOTS));
            HELD[held].store(false, Release);
        }
    }
}

/// The calling thread's counting slot (`0..=SLOTS`): a slot below [`SLOTS`]
/// is this thread's alone for as long as it runs (the first free one when it
/// first asked); when none was free, [`SLOTS`], which it shares.
#[inline]
pub fn slot() -> usize {
    SLOT.with(|s| {
        let mine = s.get();
        if mine != UNSET {
            return mine;
        }
        let mine = claim_slot();
        s.set(mine);
        mine
    })
}

#[cold]
fn claim_slot() -> usize {
    let Some(i) = (0..SLOTS).find(|&i| {
        HELD[i]
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_ok()
    }) else {
        return SLOTS;
    };
    // Without a destructor to give it back (the thread is ending), the slot
    // stays held: its counts stay right, only the slot is lost.
    let _ = HOLD.try_with(|h| h.0.set(i));
    i
}

/// A count, in the cells of one slot ([`Tally`]): added to by the slot's
/// thread alone with a plain load and store, and in the shared slot with a
/// locked add. Which of the two a cell is it carries in its top bit (set
/// for the shared slot's cells), so an add needs nothing but the cell; no
/// count comes near 2⁶³. Reading is relaxed: a count, never a signal.
#[derive(Debug, Default)]
pub struct Count(AtomicU64);

/// The top bit of a [`Count`]: the shared slot's cell.
const SHARED: u64 = 1 << 63;

impl Count {
    /// A count of zero; `shared`: in the shared slot's cells.
    pub const fn new(shared: bool) -> Count {
        Count(AtomicU64::new(if shared { SHARED } else { 0 }))
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        let v = self.0.load(Relaxed);
        if v & SHARED == 0 {
            // Only this slot's thread writes the cell (`slot`).
            self.0.store(v.wrapping_add(n) & !SHARED, Relaxed);
        } else {
            self.0.fetch_add(n, Relaxed);
        }
    }

    /// Adds one.
    #[inline]
    pub fn bump(&self) {
        self.add(1);
    }

    /// The count now.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed) & !SHARED
    }
}

/// One `T` per counting slot ([`slot`]), each on lines of its own: the
/// calling thread's is [`Tally::mine`]; `T`'s [`Count`]s are made knowing
/// whether they are the shared slot's.
#[derive(Debug)]
pub struct Tally<T>([Padded<T>; SLOTS + 1]);

impl<T> Tally<T> {
    /// A stripe per slot, each made by `f(shared)`.
    pub fn from_fn(mut f: impl FnMut(bool) -> T) -> Self {
        Tally(std::array::from_fn(|i| Padded(f(i == SLOTS))))
    }

    /// The calling thread's stripe (what it adds to).
    #[inline]
    pub fn mine(&self) -> &T {
        &self.0[slot()]
    }

    /// Every stripe (what a reader of the whole sums).
    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.0.iter().map(|p| &p.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_lane_and_threads_get_lanes_round_robin() {
        let first = lane();
        assert_eq!(lane(), first, "the same lane at every call");
        let other = std::thread::spawn(|| (lane(), lane())).join().unwrap();
        assert_eq!(other.0, other.1, "another thread's lane is its own too");
        let next = AtomicUsize::new(0);
        let got: Vec<usize> = (0..=LANES).map(|_| next_lane(&next)).collect();
        let want: Vec<usize> = (0..LANES).chain([0]).collect();
        assert_eq!(
            got, want,
            "the first LANES askers each get one; then they share"
        );
    }

    #[test]
    fn a_thread_counts_alone_while_a_slot_is_free_and_gives_it_back() {
        let mine = slot();
        assert_eq!(slot(), mine, "the same slot at every call");
        // Threads that hold slots at once never hold the same one.
        let barrier = std::sync::Barrier::new(SLOTS + 4);
        let held: Vec<usize> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..SLOTS + 4)
                .map(|_| {
                    sc.spawn(|| {
                        let s = slot();
                        barrier.wait();
                        s
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut own: Vec<usize> = held.iter().copied().filter(|&s| s < SLOTS).collect();
        let n = own.len();
        own.sort_unstable();
        own.dedup();
        assert_eq!(own.len(), n, "a slot below SLOTS is one thread's");
        assert!(!own.contains(&mine) || mine == SLOTS);
        assert!(
            held.contains(&SLOTS),
            "more threads than slots share the last"
        );
        // Ended threads gave theirs back: a new thread gets one of its own
        // (unless other tests' threads hold every slot now).
        let again = std::thread::spawn(slot).join().unwrap();
        assert!(again <= SLOTS);
    }

    #[test]
    fn counts_are_exact_alone_and_shared() {
        let t: Tally<Count> = Tally::from_fn(Count::new);
        std::thread::scope(|sc| {
            for _ in 0..SLOTS + 6 {
                sc.spawn(|| {
                    for _ in 0..10_000 {
                        t.mine().bump();
                    }
                    t.mine().add(5);
                });
            }
        });
        let total: u64 = t.all().map(Count::get).sum();
        assert_eq!(total, (SLOTS as u64 + 6) * 10_005);
        let shared = Count::new(true);
        shared.add(3);
        shared.bump();
        assert_eq!(shared.get(), 4, "the shared mark is not counted");
        let alone = Count::new(false);
        alone.add(u64::from(u32::MAX));
        assert_eq!(alone.get(), u64::from(u32::MAX));
    }

    #[test]
    fn a_lane_set_visits_its_lanes_from_the_first_named() {
        let s = LaneSet::of(1).with(LaneSet::of(5)).with(LaneSet::of(6));
        assert!(s.contains(5) && !s.contains(2) && !s.contains(LANES));
        assert_eq!(s.from(5).collect::<Vec<_>>(), vec![5, 6, 1]);
        assert_eq!(s.from(0).collect::<Vec<_>>(), vec![1, 5, 6]);
        assert_eq!(LaneSet::ALL.from(7).count(), LANES);
        assert!(LaneSet::NONE.is_empty() && LaneSet::NONE.from(0).next().is_none());
        assert_eq!(LaneSet::default(), LaneSet::ALL);
        assert!(LaneSet::mine().contains(lane()));
        assert_eq!(s.and(LaneSet::of(5).with(LaneSet::of(2))), LaneSet::of(5));
        assert_eq!([6, 1, 5].into_iter().collect::<LaneSet>(), s);
    }

    #[test]
    fn stripes_sit_on_lines_of_their_own_and_sum_to_the_whole() {
        let s: Striped<AtomicU64> = Striped::default();
        let a = std::ptr::from_ref(&s.0[0]) as usize;
        let b = std::ptr::from_ref(&s.0[1]) as usize;
        assert_eq!(b - a, 128, "one stripe per 128 bytes");
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = &s;
                move || {
                    for _ in 0..1000 {
                        s.mine().fetch_add(1, Relaxed);
                    }
                }
            })
            .collect();
        std::thread::scope(|sc| {
            for t in threads {
                sc.spawn(t);
            }
        });
        s.mine().fetch_add(5, Relaxed);
        let total: u64 = s.all().map(|c| c.load(Relaxed)).sum();
        assert_eq!(total, 4005);
    }
}
