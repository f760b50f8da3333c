//! The OpenAI-compatible server: `/v1/completions`, `/v1/chat/completions` (streamed or not),
//! `/v1/models`, `/health` and the engine's Prometheus `/metrics`, with speculative decoding
//! configured as in the `eagle` example.
//!
//! Run it with `cargo xtask serve [-- OPTIONS]`; Ctrl-C stops accepting requests, lets the
//! admitted ones finish, and exits.

use std::sync::Arc;

use anyhow::{Context, Result};
use aquila_engine::server::{serve, ServerConfig};
use aquila_engine::{AsyncLlm, Llm, ShutdownMode};
use aquila_examples::serving_options::ServingOptions;
use clap::Parser;

/// Serve a model over an OpenAI-compatible HTTP API.
#[derive(Parser, Debug)]
#[command(name = "serve", about)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The model and its engine.
    #[command(flatten)]
    serving: ServingOptions,
}

#[tokio::main]
async fn main() -> Result<()> {
    aquila_examples::init_tracing_at("info");
    let args = Args::parse();
    let config = args.serving.engine_config()?;
    println!("target: {}", config.model.display());
    let llm = Llm::new(config)?;
    let engine = Arc::new(AsyncLlm::start(llm, args.serving.async_config()));
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("binding {}:{}", args.host, args.port))?;
    let config = ServerConfig {
        served_model_name: args.serving.served_model_name.clone(),
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
