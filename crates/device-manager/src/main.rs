//! The device-manager binary: argument parsing, wiring and exit codes. Logic lives in the
//! libraries; each subcommand is a module under `cmd/`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// Makes a Kubernetes node's accelerators schedulable, accounted and isolated.
#[derive(Debug, Parser)]
#[command(name = "device-manager", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Give the admission webhooks' verdict on a Pod offline.
    Admit(cmd::admit::Args),
    /// Run the cluster-level worker: the Pod admission webhooks.
    Worker(cmd::worker::Args),
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
        Command::Admit(args) => cmd::admit::run(args),
        Command::Worker(args) => cmd::worker::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("device-manager: {e:#}");
            ExitCode::from(2)
        }
    }
}
