//! The engine's unfinished requests, one [`Request`] record per id, and the batch of one step:
//! each scheduled work item paired with its request.

use std::collections::HashMap;

use crate::output::RequestId;
use crate::request::Request;
use crate::scheduler::ScheduledRequest;

/// Every unfinished request, by id.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    by_id: HashMap<RequestId, Request>,
}

/// One scheduled request of a step: its work and its record.
#[derive(Debug)]
pub(crate) struct BatchEntry<'a> {
    /// What the step does for the request.
    pub work: &'a ScheduledRequest,
    /// The request.
    pub request: &'a mut Request,
}

impl Requests {
    /// Adds a request.
    pub fn insert(&mut self, request: Request) {
        self.by_id.insert(request.id, request);
    }

    /// The request with `id`, if unfinished.
    #[cfg(test)]
    pub fn get(&self, id: RequestId) -> Option<&Request> {
        self.by_id.get(&id)
    }

    /// The request with `id`, if unfinished.
    pub fn get_mut(&mut self, id: RequestId) -> Option<&mut Request> {
        self.by_id.get_mut(&id)
    }

    /// Removes the request with `id` (it finished); `None` if unknown.
    pub fn remove(&mut self, id: RequestId) -> Option<Request> {
        self.by_id.remove(&id)
    }

    /// Number of unfinished requests.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no request is unfinished.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Number of requests holding a KV slot.
    pub fn num_running(&self) -> usize {
        self.by_id.values().filter(|r| r.is_running()).count()
    }

    /// Number of queued requests (new or preempted).
    pub fn num_waiting(&self) -> usize {
        self.len() - self.num_running()
    }

    /// Every request, in no particular order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Request> {
        self.by_id.values_mut()
    }

    /// The scheduled work items paired with their requests, in scheduled order.
    pub fn batch<'a>(&'a mut self, scheduled: &'a [ScheduledRequest]) -> Vec<BatchEntry<'a>> {
        let order: HashMap<RequestId, usize> = scheduled
            .iter()
            .enumerate()
            .map(|(index, work)| (work.request_id, index))
            .collect();
        let mut batch: Vec<(usize, &mut Request)> = self
            .by_id
            .values_mut()
            .filter_map(|request| order.get(&request.id).map(|&index| (index, request)))
            .collect();
        batch.sort_unstable_by_key(|(index, _)| *index);
        batch
            .into_iter()
            .map(|(index, request)| BatchEntry {
                work: &scheduled[index],
                request,
            })
            .collect()
    }
}
