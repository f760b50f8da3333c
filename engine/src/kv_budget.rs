//! KV cache accounting: which cache slot each running request holds and how many token positions
//! it reserves out of the shared budget.
//!
//! The accounting is exact to the token (vLLM's blocks of size 1): a slot's reservation grows
//! when the scheduler gives its request new tokens, shrinks when speculative rows are rolled back
//! ([`KvBudget::truncate`]) and returns to the pool when the request finishes, is aborted or is
//! preempted ([`KvBudget::free`]).

use std::collections::BTreeSet;

/// Token budget and slot pool of the KV cache.
#[derive(Debug, Clone)]
pub(crate) struct KvBudget {
    /// Token positions all slots together may hold.
    capacity_tokens: usize,
    /// Positions reserved over all slots.
    used_tokens: usize,
    /// Positions reserved per slot (0 for free slots).
    reserved: Vec<usize>,
    /// Free slots; the lowest is handed out first, so allocation is deterministic.
    free_slots: BTreeSet<usize>,
}

impl KvBudget {
    /// A budget of `capacity_tokens` positions shared by `num_slots` slots.
    pub fn new(num_slots: usize, capacity_tokens: usize) -> Self {
        Self {
            capacity_tokens,
            used_tokens: 0,
            reserved: vec![0; num_slots],
            free_slots: (0..num_slots).collect(),
        }
    }

    /// Takes the lowest free slot, with nothing reserved; `None` when all slots are in use.
    pub fn allocate_slot(&mut self) -> Option<usize> {
        self.free_slots.pop_first()
    }

    /// Grows `slot`'s reservation to `total_tokens` positions if the budget allows; returns
    /// whether the slot now holds at least that many. Never shrinks a reservation.
    pub fn try_reserve(&mut self, slot: usize, total_tokens: usize) -> bool {
        let current = self.reserved[slot];
        if total_tokens <= current {
            return true;
        }
        let extra = total_tokens - current;
        if self.used_tokens + extra > self.capacity_tokens {
            return false;
        }
        self.used_tokens += extra;
        self.reserved[slot] = total_tokens;
        true
    }

    /// Shrinks `slot`'s reservation to `total_tokens` positions (a rollback of rejected
    /// speculative rows); a no-op if it holds no more than that.
    pub fn truncate(&mut self, slot: usize, total_tokens: usize) {
        let current = self.reserved[slot];
        if total_tokens < current {
            self.used_tokens -= current - total_tokens;
            self.reserved[slot] = total_tokens;
        }
    }

    /// Releases `slot` and its reservation.
    pub fn free(&mut self, slot: usize) {
        self.truncate(slot, 0);
        let newly_freed = self.free_slots.insert(slot);
        debug_assert!(newly_freed, "slot {slot} freed twice");
    }

    /// Fraction of the budget in use, in [0, 1].
    pub fn usage(&self) -> f64 {
        self.used_tokens as f64 / self.capacity_tokens.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_handed_out_lowest_first_and_reused() {
        let mut kv = KvBudget::new(3, 100);
        assert_eq!(kv.allocate_slot(), Some(0));
        assert_eq!(kv.allocate_slot(), Some(1));
        kv.free(0);
        assert_eq!(kv.allocate_slot(), Some(0));
        assert_eq!(kv.allocate_slot(), Some(2));
        assert_eq!(kv.allocate_slot(), None);
        assert_eq!(kv.free_slots.len(), 0);
    }

    #[test]
    fn reservations_respect_the_capacity() {
        let mut kv = KvBudget::new(2, 10);
        let a = kv.allocate_slot().unwrap();
        let b = kv.allocate_slot().unwrap();
        assert!(kv.try_reserve(a, 6));
        assert!(!kv.try_reserve(b, 5), "6 + 5 > 10");
        assert_eq!(kv.reserved[b], 0, "a failed reservation changes nothing");
        assert!(kv.try_reserve(b, 4));
        assert!(kv.try_reserve(a, 3), "never shrinks");
        assert_eq!(kv.reserved[a], 6);
        assert_eq!(kv.used_tokens, 10);
        assert!((kv.usage() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn truncate_and_free_return_tokens() {
        let mut kv = KvBudget::new(2, 10);
        let a = kv.allocate_slot().unwrap();
        assert!(kv.try_reserve(a, 8));
        kv.truncate(a, 5);
        assert_eq!(kv.used_tokens, 5);
        kv.truncate(a, 7);
        assert_eq!(kv.reserved[a], 5, "truncate never grows");
        kv.free(a);
        assert_eq!(kv.used_tokens, 0);
        assert_eq!(kv.free_slots.len(), 2);
        assert_eq!(kv.capacity_tokens, 10);
    }
}
