//! Engines timed against each other on a noisy machine: every engine gets the same workload,
//! and the engines take engine steps in turn, each timed over its own steps. A shared CPU's
//! speed swings by tens of percent within seconds, so engines run one after the other see
//! different machines; engines whose steps alternate every few tens of milliseconds see the
//! same one.

use anyhow::Result;
use aquila_engine::{Llm, Prompt, RequestId, RequestOutput, SamplingParams};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One engine's part of an interleaved run.
#[derive(Debug)]
pub struct InterleavedRun {
    /// Its outputs, in prompt order.
    pub outputs: Vec<RequestOutput>,
    /// The time its own steps took.
    pub busy: Duration,
}

/// Runs `prompts`, all with `params`, on each engine of `engines`, the engines taking steps in
/// turn in the order given (an engine whose requests have all finished is passed over); returns
/// each engine's run, in the same order.
pub fn run_interleaved(
    engines: &mut [&mut Llm],
    prompts: &[Prompt],
    params: &SamplingParams,
) -> Result<Vec<InterleavedRun>> {
    let mut runs = engines
        .iter_mut()
        .map(|llm| EngineRun::start(llm, prompts, params))
        .collect::<Result<Vec<_>>>()?;
    while runs.iter().any(|run| !run.is_done()) {
        for (llm, run) in engines.iter_mut().zip(&mut runs) {
            run.step(llm)?;
        }
    }
    Ok(runs.into_iter().map(EngineRun::finish).collect())
}

/// One engine's requests, their outputs so far and the time of its steps.
struct EngineRun {
    ids: Vec<RequestId>,
    outputs: HashMap<RequestId, RequestOutput>,
    busy: Duration,
}

impl EngineRun {
    /// Queues `prompts` on `llm`, all with `params`.
    fn start(llm: &mut Llm, prompts: &[Prompt], params: &SamplingParams) -> Result<Self> {
        let ids = prompts
            .iter()
            .map(|prompt| llm.add_request(prompt.clone(), params.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            outputs: HashMap::with_capacity(ids.len()),
            ids,
            busy: Duration::ZERO,
        })
    }

    /// Whether every request has finished.
    fn is_done(&self) -> bool {
        self.outputs.len() == self.ids.len()
    }

    /// Runs one timed step of `llm`, unless its requests have all finished.
    fn step(&mut self, llm: &mut Llm) -> Result<()> {
        if self.is_done() {
            return Ok(());
        }
        let start = Instant::now();
        let output = llm.step()?;
        self.busy += start.elapsed();
        for finished in output.finished {
            self.outputs.insert(finished.request_id, finished);
        }
        Ok(())
    }

    /// The outputs in prompt order and the time of the steps.
    fn finish(mut self) -> InterleavedRun {
        let outputs = self
            .ids
            .iter()
            .filter_map(|id| self.outputs.remove(id))
            .collect();
        InterleavedRun {
            outputs,
            busy: self.busy,
        }
    }
}
