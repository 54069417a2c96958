//! `anchor`: the service binary. `anchor serve` (the default) runs the API;
//! `anchor pricing inspect FILE` checks a pricing component before deployment.

use clap::{Parser, Subcommand};

use anchor_plugins::PluginEngine;
use anchor_server::config::ServeConfig;

#[derive(Parser)]
#[command(name = "anchor", version, about = "An accountability anchoring service for software agents")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no subcommand, `anchor` serves with these options.
    #[command(flatten)]
    serve: ServeConfig,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve(ServeConfig),
    /// Operator commands for pricing components.
    Pricing {
        #[command(subcommand)]
        command: PricingCommand,
    },
}

#[derive(Subcommand)]
enum PricingCommand {
    /// Load a pricing component (or the bundled one) and print its generation, presets and their prices.
    Inspect {
        /// A .wasm component; omit for the bundled v1.3.0.
        file: Option<std::path::PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Serve(config)) => anchor_server::serve(config).await,
        None => anchor_server::serve(cli.serve).await,
        Some(Command::Pricing { command: PricingCommand::Inspect { file } }) => inspect(file.as_deref()),
    }
}

fn inspect(file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let engine = PluginEngine::new()?;
    let pricing = anchor_server::load_pricing(&engine, file)?;
    let generation = pricing.generation();
    println!("generation {} (sha256 {})", generation.version, generation.sha256);
    for preset in pricing.presets()? {
        let quote = pricing.quote(preset.scope())?;
        println!("{:<12} {:>8} DAC  enabled={}", preset.name, quote.total, preset.enabled);
    }
    Ok(())
}
