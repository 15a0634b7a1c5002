//! `device-manager admit [--pool FILE] [--runtime-class NAME…] [--phase mutate|validate|both]
//! [-o text|json] POD.yaml|-`: the webhooks' verdict on a Pod, offline, exactly as the API server
//! would get it (DESIGN.md's contract). Exit 0 allowed, 1 denied, 2 unreadable input.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::settings::Settings;
use accel_core::admission::{self, Phase, RuntimeClasses};
use accel_core::pool::{Pool, QUEUE_LABEL};
use anyhow::Context as _;
use serde_json::Value;

/// Which half of the webhook to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PhaseArg {
    Mutate,
    Validate,
    Both,
}

/// How to print the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// What the webhook would learn about the queue's pool (JSON: group, manufacturer,
    /// memoryMiB, count, profiles; any field may be absent). Without it the pool is unknown.
    #[arg(long, env = "ADMIT_POOL", value_name = "FILE")]
    pool: Option<PathBuf>,
    /// A RuntimeClass that exists in the cluster (repeatable, or comma-separated): what the
    /// webhook would learn from its watch. The mutating webhook attaches a manufacturer's runtime
    /// name (`GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RUNTIME_NAME`) only when it is one of these;
    /// without any, none is attached.
    #[arg(
        long = "runtime-class",
        env = "ADMIT_RUNTIME_CLASS",
        value_name = "NAME",
        value_delimiter = ','
    )]
    runtime_classes: Vec<String>,
    /// mutate, validate, or both (mutate, then validate the mutated Pod, as the API server does).
    #[arg(long, env = "ADMIT_PHASE", value_enum, default_value_t = PhaseArg::Both)]
    phase: PhaseArg,
    /// text or json ({"allowed","message","patch","pod"}, and "warnings" when there are some).
    #[arg(short = 'o', long = "output", env = "ADMIT_OUTPUT", value_enum, default_value_t = Output::Text)]
    output: Output,
    /// The Pod, YAML or JSON; `-` reads standard input.
    #[arg(env = "ADMIT_POD", value_name = "POD.yaml|-")]
    pod: String,
}

fn read_input(path: &str) -> anyhow::Result<String> {
    if path == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the Pod from standard input")?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read the Pod from {path}"))
    }
}

/// One YAML (or JSON) document as JSON.
fn parse_document(text: &str, what: &str) -> anyhow::Result<Value> {
    let mut documents = serde_yaml::Deserializer::from_str(text);
    let first = documents
        .next()
        .with_context(|| format!("{what} is empty"))?;
    let value = serde::Deserialize::deserialize(first)
        .with_context(|| format!("{what} is not YAML or JSON"))?;
    if documents.next().is_some() {
        anyhow::bail!("{what} holds several YAML documents; give one Pod");
    }
    Ok(value)
}

/// The verdict under the settings' manufacturers table (`GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RESOURCE_NAME`
/// renames the keys the webhook checks, as it renames what the plugins register).
pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let grammar = settings.grammar();
    let pod = parse_document(&read_input(&args.pod)?, &format!("the Pod {}", args.pod))?;
    let pool = match &args.pool {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the pool from {}", path.display()))?;
            let value = parse_document(&text, &format!("the pool {}", path.display()))?;
            serde_json::from_value::<Pool>(value)
                .with_context(|| format!("the pool {} is not a pool", path.display()))?
        }
        None => Pool::unknown("no --pool was given"),
    };
    let phase = match args.phase {
        PhaseArg::Mutate => Phase::Mutate,
        PhaseArg::Validate => Phase::Validate,
        PhaseArg::Both => Phase::Both,
    };
    let runtime_classes: RuntimeClasses = args
        .runtime_classes
        .iter()
        .map(|name| name.trim())
        .filter(|name| !name.is_empty())
        .collect();
    let verdict = admission::admit(&pod, &pool, &runtime_classes, &grammar, phase)
        .with_context(|| format!("cannot read the Pod {}", args.pod))?;
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&verdict)?),
        Output::Text => {
            if !verdict.checked {
                println!("allowed (not checked: the Pod carries no {QUEUE_LABEL} label)");
            } else if verdict.allowed {
                println!("allowed");
            } else {
                println!("denied: {}", verdict.message.as_deref().unwrap_or(""));
            }
            for op in &verdict.patch {
                let value = op.get("value").map(|v| format!(" {v}")).unwrap_or_default();
                println!(
                    "  {} {}{value}",
                    op.get("op").and_then(Value::as_str).unwrap_or(""),
                    op.get("path").and_then(Value::as_str).unwrap_or("")
                );
            }
            // As kubectl shows the API server's warnings: on stderr, the verdict unchanged.
            for warning in &verdict.warnings {
                eprintln!("Warning: {warning}");
            }
        }
    }
    Ok(if verdict.allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
