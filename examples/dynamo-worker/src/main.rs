//! An Aquila engine worker behind NVIDIA Dynamo: it registers the model with Dynamo's
//! discovery and serves the frontend's token requests on a Dynamo endpoint, streaming the
//! tokens of each engine step back; Dynamo's frontend (OpenAI-compatible HTTP, chat template,
//! detokenization) and router spread requests over as many workers as run.
//!
//! Run it with `cargo xtask dynamo-worker -- --model DIR [OPTIONS]`. With the defaults, no
//! etcd or NATS is needed: discovery goes through files under `DYN_FILE_KV` (the frontend
//! must use the same directory and `--discovery-backend file`), requests over TCP, events over
//! ZMQ. Each worker also serves its own Prometheus `/metrics` (and Aquila's OpenAI API) on
//! `--metrics-host`/`--metrics-port`, its families labelled `engine="<--engine-label>"`.

mod engine;
mod request;

use std::sync::Arc;

use anyhow::{Context, Result};
use aquila_engine::server::{BackgroundServer, ServerConfig};
use aquila_engine::{AsyncLlm, EngineConfig, Llm, ShutdownMode};
use aquila_examples::serving_options::ServingOptions;
use clap::Parser;
use dynamo_llm::local_model::runtime_config::ModelRuntimeConfig;
use dynamo_llm::local_model::LocalModelBuilder;
use dynamo_llm::model_type::{ModelInput, ModelType};
use dynamo_llm::worker_type::WorkerType;
use dynamo_runtime::distributed::DistributedConfig;
use dynamo_runtime::pipeline::network::Ingress;
use dynamo_runtime::{DistributedRuntime, Runtime};

use crate::engine::AquilaEngine;

/// Serve a model as a worker of an NVIDIA Dynamo deployment.
#[derive(Parser, Debug)]
#[command(name = "aquila-dynamo-worker", about)]
struct Args {
    /// Dynamo namespace of the endpoint.
    #[arg(long, default_value = "dynamo")]
    namespace: String,
    /// Dynamo component of the endpoint.
    #[arg(long, default_value = "backend")]
    component: String,
    /// Dynamo endpoint name.
    #[arg(long, default_value = "generate")]
    endpoint: String,
    /// Discovery backend: file, etcd, mem or kubernetes (Dynamo's `DYN_DISCOVERY_BACKEND`).
    #[arg(long, default_value = "file")]
    discovery_backend: String,
    /// Request plane: tcp, http or nats.
    #[arg(long, default_value = "tcp")]
    request_plane: String,
    /// Event plane: zmq or nats.
    #[arg(long, default_value = "zmq")]
    event_plane: String,
    /// Value of the `engine` label on this worker's metrics; default: `worker-<process id>`.
    #[arg(long)]
    engine_label: Option<String>,
    /// Address of this worker's `/metrics` (and OpenAI API).
    #[arg(long, default_value = "127.0.0.1")]
    metrics_host: String,
    /// Port of this worker's `/metrics` (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    metrics_port: u16,
    /// The model and its engine.
    #[command(flatten)]
    serving: ServingOptions,
}

impl Args {
    /// The engine's configuration, its metrics labelled with the served model name and this
    /// worker's `engine` label.
    fn engine_config(&self) -> Result<EngineConfig> {
        let mut config = self.serving.engine_config()?;
        config.metrics.model_name = Some(self.serving.served_model_name());
        config.metrics.engine_label = self
            .engine_label
            .clone()
            .unwrap_or_else(|| format!("worker-{}", std::process::id()));
        Ok(config)
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    aquila_examples::init_tracing_at("info");
    let args = Args::parse();
    let config = args.engine_config()?;
    let engine_label = config.metrics.engine_label.clone();
    let max_num_seqs = config.max_num_seqs;
    let llm = Llm::new(config)?;
    let llm = Arc::new(AsyncLlm::start(llm, args.serving.async_config()));
    let metrics = BackgroundServer::start(
        llm.clone(),
        ServerConfig {
            served_model_name: Some(args.serving.served_model_name()),
            ..ServerConfig::default()
        },
        &format!("{}:{}", args.metrics_host, args.metrics_port),
    )
    .context("starting the metrics server")?;

    let runtime = Runtime::from_current()?;
    let distributed = DistributedConfig::from_settings_with_overrides(
        Some(&args.discovery_backend),
        Some(&args.request_plane),
        Some(&args.event_plane),
    )?;
    let drt = DistributedRuntime::new(runtime, distributed)
        .await
        .context("joining the Dynamo deployment")?;
    let endpoint = drt
        .namespace(&args.namespace)?
        .component(&args.component)?
        .endpoint(&args.endpoint);

    let mut runtime_config = ModelRuntimeConfig::default();
    runtime_config.context_length = Some(llm.max_model_len() as u32);
    runtime_config.max_num_seqs = Some(max_num_seqs as u64);
    let mut model = LocalModelBuilder::default()
        .model_path(args.serving.model_dir())
        .model_name(Some(args.serving.served_model_name()))
        .runtime_config(runtime_config)
        .build()
        .await
        .context("reading the model card")?;
    let ingress = Ingress::for_engine(Arc::new(AquilaEngine::new(llm.clone())))?;
    model
        .attach(
            &endpoint,
            ModelType::Chat | ModelType::Completions,
            ModelInput::Tokens,
            None,
            Some(WorkerType::Aggregated),
            Vec::new(),
        )
        .await
        .context("registering the model")?;
    println!(
        "aquila worker {engine_label} ready: model {}, endpoint {}.{}.{}, metrics {}/metrics",
        args.serving.served_model_name(),
        args.namespace,
        args.component,
        args.endpoint,
        metrics.url()
    );

    let serving = endpoint.endpoint_builder().handler(ingress).start();
    let cancelled = drt.primary_token();
    tokio::select! {
        result = serving => result.context("serving the endpoint")?,
        _ = tokio::signal::ctrl_c() => println!("shutting down"),
        () = cancelled.cancelled() => {}
    }
    drt.shutdown();
    let llm_for_shutdown = llm.clone();
    tokio::task::spawn_blocking(move || llm_for_shutdown.shutdown(ShutdownMode::Abort)).await?;
    metrics.shutdown()?;
    Ok(())
}
