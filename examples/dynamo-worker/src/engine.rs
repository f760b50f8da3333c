//! [`AquilaEngine`]: Aquila's async engine front as the engine behind a Dynamo endpoint.
//!
//! The frontend tokenizes, applies the chat template, detokenizes and matches stop strings;
//! the worker takes token ids and streams back the token ids of each engine step, then one
//! last output saying why the request finished.

use std::sync::Arc;

use aquila_engine::{AsyncLlm, Prompt, RequestEvent};
use dynamo_llm::protocols::common::llm_backend::LLMEngineOutput;
use dynamo_llm::protocols::common::preprocessor::PreprocessedRequest;
use dynamo_llm::protocols::Annotated;
use dynamo_runtime::pipeline::{
    async_trait, AsyncEngine, AsyncEngineContextProvider, Error, ManyOut, ResponseStream, SingleIn,
};

use crate::request::{
    cancelled_output, error_output, finish_output, sampling_params, tokens_output,
};

/// Serves Dynamo's preprocessed requests with an [`AsyncLlm`].
pub struct AquilaEngine {
    llm: Arc<AsyncLlm>,
}

impl AquilaEngine {
    /// An engine in front of `llm`.
    pub fn new(llm: Arc<AsyncLlm>) -> Self {
        Self { llm }
    }
}

#[async_trait]
impl AsyncEngine<SingleIn<PreprocessedRequest>, ManyOut<Annotated<LLMEngineOutput>>, Error>
    for AquilaEngine
{
    async fn generate(
        &self,
        input: SingleIn<PreprocessedRequest>,
    ) -> Result<ManyOut<Annotated<LLMEngineOutput>>, Error> {
        let context = input.context();
        let (request, _) = input.into_parts();
        let params = sampling_params(&request, self.llm.max_model_len())
            .map_err(|message| anyhow::anyhow!("invalid request: {message}"))?;
        let prompt = Prompt::TokenIds(request.token_ids.to_vec());
        let mut events = self.llm.add_request(prompt, params).await?;
        let stopped = context.clone();
        let outputs = async_stream::stream! {
            loop {
                let event = tokio::select! {
                    event = events.next() => event,
                    // The client went away or the frontend cancelled: dropping the events
                    // aborts the request and frees its KV cache.
                    () = stopped.stopped() => {
                        yield Annotated::from_data(cancelled_output());
                        break;
                    }
                };
                match event {
                    Some(RequestEvent::Delta(delta)) if !delta.new_token_ids.is_empty() => {
                        yield Annotated::from_data(tokens_output(delta.new_token_ids));
                    }
                    Some(RequestEvent::Delta(_)) => {}
                    Some(RequestEvent::Finished(output)) => {
                        yield Annotated::from_data(finish_output(&output));
                        break;
                    }
                    Some(RequestEvent::Failed(message)) => {
                        yield Annotated::from_data(error_output(message));
                        break;
                    }
                    None => {
                        yield Annotated::from_data(error_output("the engine stopped".into()));
                        break;
                    }
                }
            }
        };
        Ok(ResponseStream::new(Box::pin(outputs), context))
    }
}
