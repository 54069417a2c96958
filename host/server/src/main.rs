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
    Serve(Box<ServeConfig>),
    /// Operator commands for pricing components.
    Pricing {
        #[command(subcommand)]
        command: PricingCommand,
    },
    /// Operator commands for the verifiable log.
    Log {
        #[command(subcommand)]
        command: LogCommand,
    },
    /// Check a receipt offline: record hash, leaf, inclusion proof, checkpoint
    /// signature, and (given an earlier checkpoint and a proof) consistency.
    Verify(VerifyArgs),
}

#[derive(Subcommand)]
enum LogCommand {
    /// Create a log signing key; write it to FILE and print the public key.
    Keygen {
        /// The log's origin, for example example.com/anchor-log.
        #[arg(long)]
        origin: String,
        /// Where to write the private key (created, never overwritten).
        file: std::path::PathBuf,
    },
}

#[derive(clap::Args)]
struct VerifyArgs {
    /// A receipt from GET /v1/dd/{dd_id}/receipt, as JSON.
    receipt: std::path::PathBuf,
    /// The log's public key (`<origin>+<id>+<base64>`), or a file holding it.
    #[arg(long)]
    key: String,
    /// An earlier signed checkpoint saved by the verifier.
    #[arg(long, requires = "consistency")]
    previous: Option<std::path::PathBuf>,
    /// The consistency proof from the earlier checkpoint's size to the receipt's
    /// (GET /v1/log/consistency?from=..&to=..), as JSON.
    #[arg(long, requires = "previous")]
    consistency: Option<std::path::PathBuf>,
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
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,sqlx=warn".into()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Serve(config)) => anchor_server::serve(*config).await,
        None => anchor_server::serve(cli.serve).await,
        Some(Command::Pricing { command: PricingCommand::Inspect { file } }) => inspect(file.as_deref()),
        Some(Command::Log { command: LogCommand::Keygen { origin, file } }) => {
            if file.exists() {
                anyhow::bail!("{} exists; refusing to overwrite a signing key", file.display());
            }
            anchor_app::log::LogKey::load_or_create(&file, &origin)?;
            Ok(())
        }
        Some(Command::Verify(args)) => verify(args),
    }
}

fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    let key = match std::fs::read_to_string(&args.key) {
        Ok(text) => text.trim().to_string(),
        Err(_) => args.key.clone(),
    };
    let receipt: anchor_verify::Receipt = serde_json::from_slice(&std::fs::read(&args.receipt)?)?;
    let outcome = anchor_verify::verify_receipt(&receipt, &key).and_then(|verified| {
        if let (Some(previous), Some(proof)) = (&args.previous, &args.consistency) {
            let previous = std::fs::read_to_string(previous).map_err(|e| anchor_verify::Failure::Format(e.to_string()))?;
            let proof: anchor_verify::ConsistencyProof =
                serde_json::from_slice(&std::fs::read(proof).map_err(|e| anchor_verify::Failure::Format(e.to_string()))?)
                    .map_err(|e| anchor_verify::Failure::Format(e.to_string()))?;
            anchor_verify::verify_consistency(&previous, &receipt.checkpoint, &proof, &key)?;
        }
        Ok(verified)
    });
    match outcome {
        Ok(verified) => {
            println!("ok: record {} hashes to {}", receipt.dd_id, receipt.integrity_hash);
            println!("ok: leaf {} is in the tree of {} signed by {}", verified.leaf_index, verified.tree_size, verified.origin);
            if args.previous.is_some() {
                println!("ok: the earlier checkpoint is a prefix of this one");
            }
            Ok(())
        }
        Err(failure) => {
            eprintln!("FAILED ({} check): {failure}", failure.check());
            std::process::exit(1);
        }
    }
}

fn inspect(file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let engine = PluginEngine::new()?;
    let pricing = anchor_server::load_pricing(&engine, file)?;
    let generation = pricing.generation();
    println!("generation {} (sha256 {}, {})", generation.version, generation.sha256, generation.interface);
    for preset in pricing.presets()? {
        let quote = pricing.quote(preset.scope())?;
        println!("{:<12} {:>8} DAC  enabled={}", preset.name, quote.total, preset.enabled);
    }
    Ok(())
}
