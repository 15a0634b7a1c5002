//! The device-manager binary: argument parsing, wiring and exit codes. Logic lives in the
//! libraries; each subcommand is a module under `cmd/`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod node;

/// Makes a Kubernetes node's accelerators schedulable, accounted and isolated.
#[derive(Debug, Parser)]
#[command(name = "device-manager", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the node's accelerator inventory.
    Detect(cmd::detect::Args),
    /// Print the labels the node's NodeFeature would carry (JSON).
    Labels(cmd::labels::Args),
    /// Capture this node into a recorded-host folder, so a misbehaving host becomes a test.
    Record(cmd::record::Args),
    /// Run the node daemon: the kubelet device plugins on one ledger.
    Serve(cmd::serve::Args),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Detect(args) => cmd::detect::run(args),
        Command::Labels(args) => cmd::labels::run(args),
        Command::Record(args) => cmd::record::run(args),
        Command::Serve(args) => cmd::serve::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("device-manager: {e:#}");
            ExitCode::from(2)
        }
    }
}
