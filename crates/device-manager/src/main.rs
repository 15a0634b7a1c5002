//! The device-manager binary: argument parsing, wiring and exit codes. Logic lives in the
//! libraries; each subcommand is a module under `cmd/`.
//!
//! Logs go to stderr, filtered by `RUST_LOG` (default `warn`; `error` for `demo`): plain text, coloured only when
//! stderr is a terminal and `NO_COLOR` is unset, or one JSON object a line with
//! `--log-format json` (`LOG_FORMAT=json`), for log collectors.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

mod admin;
mod backends;
mod cmd;
mod daemon;
mod datadir;
#[cfg(feature = "demo")]
mod demo;
mod dra;
mod holdings;
mod metrics;
mod network;
mod node;
mod preflight;
mod publish;
mod settings;

/// Makes a Kubernetes node's accelerators schedulable, accounted and isolated.
#[derive(Debug, Parser)]
#[command(name = "device-manager", version, about)]
struct Cli {
    /// How logs are written to stderr: plain text, or one JSON object a line.
    #[arg(
        long,
        global = true,
        env = "LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// The log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Human-readable lines; colour codes only on a terminal.
    Text,
    /// One JSON object a line (`timestamp`, `level`, `target`, `fields.message`, …).
    Json,
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
    /// Ask the allocator itself whether this node will serve what it advertises: detected,
    /// sliceable, manageable while sliced (one YAML document; exit 1 on an unavailable answer).
    Preflight(cmd::preflight::Args),
    /// Print the XID events found in kernel log text (dmesg, journalctl, a file, stdin).
    Xids(cmd::xids::Args),
    /// Print each GPU's live usage, one line per GPU (--watch: again every --monitor-period).
    Monitor(cmd::monitor::Args),
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
    /// Remove what the daemons and the worker created at run time (the chart's uninstall hook).
    Cleanup(cmd::cleanup::Args),
    /// Watch the whole system work in one process on recorded hosts: the webhook, the device
    /// plugins against an emulated kubelet, the ledger, health, a restart (no GPU, no cluster).
    Demo(cmd::demo::Args),
}

/// Sends logs to stderr in `format`, filtered by `RUST_LOG`: a level (`info`) or per-module
/// directives (`info,accel_kube=debug`), `default` when unset. A value that does not parse is said
/// once on stderr and `default` is used. (A target filter, not the span- and field-matching one:
/// that one brings a regular-expression engine the daemon would otherwise not load.)
fn init_logging(format: LogFormat, default: Level) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(value) if !value.trim().is_empty() => parse_log_filter(&value).unwrap_or_else(|e| {
            eprintln!("device-manager: RUST_LOG={value:?}: {e}; logging at {default}");
            Targets::new().with_default(default)
        }),
        _ => Targets::new().with_default(default),
    };
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Json => registry.with(layer.json().with_current_span(false)).init(),
        // Colour codes only for a person at a terminal: a file, a pipe or a container log
        // gets plain text.
        LogFormat::Text => registry.with(layer.with_ansi(colour)).init(),
    }
}

/// `RUST_LOG`'s value as a target filter; a bare level is the default for every module.
fn parse_log_filter(value: &str) -> Result<Targets, String> {
    value
        .parse::<Targets>()
        .map_err(|e| format!("not a level or module=level list ({e})"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo's daemons say what a node's would (a recorded host, a missing library); its
    // report says what matters, so only errors are logged unless RUST_LOG asks for more.
    let default_level = match cli.command {
        Command::Demo(_) => Level::ERROR,
        _ => Level::WARN,
    };
    init_logging(cli.log_format, default_level);
    // The settings are read once, here, and handed to every subcommand that reads one.
    let settings = match settings::Settings::from_env() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("device-manager: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Detect(args) => cmd::detect::run(args, &settings),
        Command::Labels(args) => cmd::labels::run(args, &settings),
        Command::Record(args) => cmd::record::run(args, &settings),
        Command::Xids(args) => cmd::xids::run(args),
        Command::Monitor(args) => cmd::monitor::run(args, &settings),
        Command::Doctor(args) => cmd::doctor::run(args, &settings),
        Command::Preflight(args) => cmd::preflight::run(args, &settings),
        Command::Admit(args) => cmd::admit::run(args, &settings),
        Command::Worker(args) => cmd::worker::run(args, &settings),
        Command::CpuKey(args) => cmd::cpu_key::run(args),
        Command::Refresh(args) => cmd::refresh::run(args),
        Command::Reset(args) => cmd::reset::run(args),
        Command::Serve(args) => cmd::serve::run(args, &settings),
        Command::Cleanup(args) => cmd::cleanup::run(args, &settings),
        Command::Demo(args) => cmd::demo::run(args, &settings),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("device-manager: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled(filter: &Targets, target: &'static str, level: Level) -> bool {
        // Targets answers per target and level; the callsite is irrelevant to it.
        filter.would_enable(target, &level)
    }

    #[test]
    fn a_bare_level_is_every_module_s_level() {
        let filter = parse_log_filter("info").unwrap();
        assert!(enabled(&filter, "accel_plugin::service", Level::INFO));
        assert!(!enabled(&filter, "accel_plugin::service", Level::DEBUG));
    }

    #[test]
    fn module_directives_narrow_the_default() {
        let filter = parse_log_filter("info,accel_kube=debug").unwrap();
        assert!(enabled(&filter, "accel_kube::pods", Level::DEBUG));
        assert!(!enabled(&filter, "accel_plugin::service", Level::DEBUG));
        assert!(enabled(&filter, "accel_plugin::service", Level::INFO));
    }

    #[test]
    fn a_value_that_does_not_parse_says_what_it_expected() {
        let e = parse_log_filter("accel_kube=loud").unwrap_err();
        assert!(e.starts_with("not a level or module=level list"), "{e}");
    }
}
