//! `device-manager doctor`: one pass over what this node needs, each check `ok`, `warn` or
//! `fail` with a reason and what to do; `--gpus` adds the per-GPU diagnosis. Exit 1 when any
//! check fails, 0 otherwise (warnings included), 2 when the host cannot be opened.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use accel_nvidia::detector::Deadlines;
use accel_nvidia::doctor::{self, Check, Options, Report};

use crate::node::Node;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// Arguments of `doctor`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's root, or a recorded host folder (DIR/root + DIR/commands).
    #[arg(long, env = "HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// The kubelet's directory (its sockets are device-plugins/ and pod-resources/kubelet.sock).
    #[arg(long, env = "KUBELET_DIR", default_value = "/var/lib/kubelet")]
    pub kubelet_dir: String,
    /// Seconds each nvidia-smi query may take (the whole snapshot gets twice this).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub nvidia_smi_timeout: u64,
    /// Diagnose these GPUs one by one (UUIDs; none: every GPU nvidia-smi lists).
    #[arg(long, num_args = 0.., value_name = "UUID")]
    pub gpus: Option<Vec<String>>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let node = Node::open(&args.host_root)?;
    let options = Options {
        deadlines: Deadlines {
            per_query: Duration::from_secs(args.nvidia_smi_timeout),
            snapshot: Duration::from_secs(args.nvidia_smi_timeout * 2),
        },
        kubelet_dir: args.kubelet_dir.clone(),
        gpus: args.gpus.clone(),
        ..Options::default()
    };
    let report = doctor::run(node.host.as_ref(), node.commands.as_ref(), &options);
    match args.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Table => print!("{}", table(&report)),
    }
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn table(report: &Report) -> String {
    let mut out = String::new();
    let width = report
        .checks
        .iter()
        .chain(report.gpus.iter().flat_map(|g| &g.checks))
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0);
    let line = |out: &mut String, indent: &str, check: &Check| {
        let _ = writeln!(
            out,
            "{indent}{:<4}  {:<width$}  {}",
            check.status.to_string(),
            check.name,
            check.reason
        );
        if let Some(action) = &check.action {
            let _ = writeln!(out, "{indent}{:<4}  {:<width$}  → {action}", "", "");
        }
    };
    for check in &report.checks {
        line(&mut out, "", check);
    }
    for gpu in &report.gpus {
        let index = gpu.index.map_or_else(|| "?".to_string(), |i| i.to_string());
        let verdict = if gpu.passed { "passed" } else { "FAILED" };
        let _ = writeln!(out, "\nGPU {index} {}: {verdict}", gpu.uuid);
        for check in &gpu.checks {
            line(&mut out, "  ", check);
        }
    }
    let _ = writeln!(
        out,
        "\n{}",
        if report.passed {
            "doctor: no check failed"
        } else {
            "doctor: some checks failed"
        }
    );
    out
}
