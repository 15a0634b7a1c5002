//! The device-manager binary: argument parsing, wiring and exit codes. Logic lives in the
//! libraries; each subcommand is a module under `cmd/`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod admin;
mod cmd;
mod daemon;
mod metrics;
mod node;
mod publish;

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
    /// Check what this node needs (driver, bus, kernel log, kubelet, CDI, preload library).
    Doctor(cmd::doctor::Args),
    /// Print the XID events found in kernel log text (dmesg, journalctl, a file, stdin).
    Xids(cmd::xids::Args),
    /// Give the admission webhooks' verdict on a Pod offline.
    Admit(cmd::admit::Args),
    /// Run the cluster-level worker: the Pod admission webhooks and, on the elected replica, the
    /// cluster-level controllers.
    Worker(cmd::worker::Args),
    /// Print the general (CPU) node key the worker computes for a Node object (JSON or YAML).
    CpuKey(cmd::cpu_key::Args),
    /// Ask the running daemon to collect the inventory now (root only).
    Refresh(cmd::refresh::Args),
    /// Ask the running daemon to reset GPUs, refused when any is busy or unknown (root only).
    Reset(cmd::reset::Args),
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
        Command::Xids(args) => cmd::xids::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Admit(args) => cmd::admit::run(args),
        Command::Worker(args) => cmd::worker::run(args),
        Command::CpuKey(args) => cmd::cpu_key::run(args),
        Command::Refresh(args) => cmd::refresh::run(args),
        Command::Reset(args) => cmd::reset::run(args),
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
