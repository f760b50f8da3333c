//! Which draft-cache slot each request holds, and its draft random stream.

use std::collections::{BTreeSet, HashMap};

use super::ProposeError;
use crate::sampling::RequestRng;

/// What the proposer keeps for one request besides its draft KV rows.
#[derive(Debug)]
pub(super) struct RequestState {
    /// The request's slot in the draft KV cache.
    pub slot: usize,
    /// The request's draft stream (sampled drafting only).
    pub rng: Option<RequestRng>,
}

/// Slot assignment of the requests a proposer knows.
#[derive(Debug)]
pub(super) struct SlotTable {
    requests: HashMap<u64, RequestState>,
    free: BTreeSet<usize>,
    capacity: usize,
}

impl SlotTable {
    /// A table of `capacity` free slots.
    pub fn new(capacity: usize) -> Self {
        Self {
            requests: HashMap::new(),
            free: (0..capacity).collect(),
            capacity,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The state of a known request.
    pub fn get(&self, request_id: u64) -> Option<&RequestState> {
        self.requests.get(&request_id)
    }

    /// The state of a known request, mutably.
    pub fn get_mut(&mut self, request_id: u64) -> Option<&mut RequestState> {
        self.requests.get_mut(&request_id)
    }

    /// Number of requests holding a slot.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// The free slots, lowest first (the order new requests get them). Nothing is taken.
    pub fn free_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.free.iter().copied()
    }

    /// Where `request_id` goes in a drafting call, and whether it is new to the table: its own
    /// slot, else the next of `free` (the table's free slots, taken in order over the call's
    /// requests). Nothing is taken.
    pub fn place(
        &self,
        request_id: u64,
        free: &mut impl Iterator<Item = usize>,
    ) -> Result<(usize, bool), ProposeError> {
        match self.get(request_id) {
            Some(state) => Ok((state.slot, false)),
            None => free
                .next()
                .map(|slot| (slot, true))
                .ok_or(ProposeError::NoFreeSlot {
                    request_id,
                    capacity: self.capacity,
                }),
        }
    }

    /// Gives `slot` (free) to a new request.
    pub fn insert(&mut self, request_id: u64, state: RequestState) {
        let taken = self.free.remove(&state.slot);
        debug_assert!(taken, "slot {} is not free", state.slot);
        self.requests.insert(request_id, state);
    }

    /// Forgets a request and returns its slot to the pool.
    pub fn remove(&mut self, request_id: u64) -> Option<usize> {
        let state = self.requests.remove(&request_id)?;
        self.free.insert(state.slot);
        Some(state.slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_handed_out_lowest_first_and_recycled() {
        let mut table = SlotTable::new(3);
        assert_eq!(table.free_slots().collect::<Vec<_>>(), vec![0, 1, 2]);
        table.insert(7, RequestState { slot: 0, rng: None });
        table.insert(9, RequestState { slot: 1, rng: None });
        assert_eq!(table.free_slots().collect::<Vec<_>>(), vec![2]);
        assert_eq!(table.remove(7), Some(0));
        assert_eq!(table.remove(7), None);
        assert_eq!(table.free_slots().collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(table.get(9).map(|s| s.slot), Some(1));
        assert_eq!(table.len(), 1);
        let mut free = table.free_slots();
        assert_eq!(table.place(9, &mut free), Ok((1, false)));
        assert_eq!(table.place(4, &mut free), Ok((0, true)));
        assert_eq!(table.place(5, &mut free), Ok((2, true)));
        assert!(matches!(
            table.place(6, &mut free),
            Err(ProposeError::NoFreeSlot {
                request_id: 6,
                capacity: 3
            })
        ));
    }
}
