//! The OpenAI-compatible server: `/v1/completions`, `/v1/chat/completions` (streamed or not),
//! `/v1/models`, `/health` and the engine's Prometheus `/metrics`, with speculative decoding
//! configured as in the `eagle` example.
//!
//! Run it with `cargo xtask serve [-- OPTIONS]`; Ctrl-C stops accepting requests, lets the
//! admitted ones finish, and exits.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use aquila_engine::server::{serve, ServerConfig};
use aquila_engine::{AsyncLlm, AsyncLlmConfig, EngineConfig, Llm, ShutdownMode};
use aquila_examples::paths::default_model_dir;
use aquila_examples::speculative_options::SpeculativeOptions;
use clap::Parser;

/// Serve a model over an OpenAI-compatible HTTP API.
#[derive(Parser, Debug)]
#[command(name = "serve", about)]
struct Args {
    /// Target model directory (Hugging Face layout).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The model name clients pass in `model`; default: the model directory's name.
    #[arg(long)]
    served_model_name: Option<String>,
    /// Requests decoded together.
    #[arg(long)]
    max_num_seqs: Option<usize>,
    /// Requests admitted at once (running and waiting); more get a 503.
    #[arg(long, default_value_t = AsyncLlmConfig::default().max_pending_requests)]
    max_pending_requests: usize,
    /// Longest sequence (prompt plus output) of a request; default: the model's.
    #[arg(long)]
    max_model_len: Option<usize>,
    /// Engine seed (requests without a seed derive theirs from it).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Speculative decoding.
    #[command(flatten)]
    speculative: SpeculativeOptions,
}

fn engine_config(args: &Args) -> Result<EngineConfig> {
    let model = args.model.clone().unwrap_or_else(default_model_dir);
    if !model.join("config.json").exists() {
        bail!(
            "no model at {}: run `cargo xtask import-model` first",
            model.display()
        );
    }
    println!("target: {}", model.display());
    let mut config = EngineConfig::new(model);
    config.speculative = args.speculative.speculative_config()?;
    config.seed = args.seed;
    config.max_model_len = args.max_model_len;
    if let Some(max_num_seqs) = args.max_num_seqs {
        config.max_num_seqs = max_num_seqs;
    }
    Ok(config)
}

#[tokio::main]
async fn main() -> Result<()> {
    aquila_examples::init_tracing_at("info");
    let args = Args::parse();
    let llm = Llm::new(engine_config(&args)?)?;
    let engine = Arc::new(AsyncLlm::start(
        llm,
        AsyncLlmConfig {
            max_pending_requests: args.max_pending_requests,
        },
    ));
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("binding {}:{}", args.host, args.port))?;
    let config = ServerConfig {
        served_model_name: args.served_model_name.clone(),
        ..ServerConfig::default()
    };
    println!("serving on http://{}", listener.local_addr()?);
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
        println!("shutting down: finishing the admitted requests");
    };
    serve(listener, engine, config, ctrl_c, ShutdownMode::Drain).await?;
    Ok(())
}
