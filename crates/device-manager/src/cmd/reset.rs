//! `device-manager reset GPU…`: asks the running daemon, over its admin socket, to reset GPUs
//! (seed 002, "gpu.reset") and prints what became of each. Exit 0 when every GPU came back
//! healthy, 1 when the daemon refused the command (`gpu-busy`, `unknown GPU`: its one-line
//! error on stderr) or a GPU did not come back healthy, 2 when no daemon answers.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

use crate::admin::{self, Request, client};

/// Arguments of `reset`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GPUs to reset, by UUID (`GPU-…`).
    #[arg(required = true, value_name = "GPU")]
    pub gpus: Vec<String>,
    /// The daemon's data directory (its admin socket is `<DIR>/admin.sock`).
    #[arg(long, env = "DATA_DIR", default_value = admin::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Seconds to wait for the daemon's answer (each GPU's reset may take 30 s).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = admin::socket_path(&args.data_dir);
    let request = Request::Reset {
        gpus: args.gpus.clone(),
    };
    let answer = match client::request(&path, &request, Duration::from_secs(args.timeout)) {
        Ok(answer) => answer,
        Err(client::ClientError::Daemon(error)) => {
            eprintln!("device-manager: {error}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    let mut all_healthy = true;
    for gpu in answer
        .get("gpus")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let text = |key: &str| gpu.get(key).and_then(Value::as_str).unwrap_or("?");
        let line = match text("result") {
            "healthy" => {
                let cleared = gpu
                    .get("faultsCleared")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                format!("reset, healthy ({cleared} faults cleared)")
            }
            "unhealthy" => {
                all_healthy = false;
                let reasons: Vec<&str> = gpu
                    .get("reasons")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                format!("reset, still UNHEALTHY ({})", reasons.join("; "))
            }
            "unconfirmed" => {
                all_healthy = false;
                format!("reset, health unconfirmed: {}", text("reason"))
            }
            "failed" => {
                all_healthy = false;
                format!("NOT reset: {}", text("error"))
            }
            other => {
                all_healthy = false;
                format!("unknown result {other:?}")
            }
        };
        println!("{}: {line}", text("uuid"));
    }
    if let Some(notes) = answer.get("notes").and_then(Value::as_array) {
        for note in notes.iter().filter_map(Value::as_str) {
            eprintln!("device-manager: {note}");
        }
    }
    Ok(if all_healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
