//! `device-manager refresh`: asks the running daemon, over its admin socket, to collect the
//! inventory now, and prints each accelerator's health. Exit 0 when it did, 1 when the daemon
//! refused (its one-line error on stderr), 2 when no daemon answers.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::admin::{self, Refreshed, Request, client};

/// Arguments of `refresh`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The daemon's data directory (its admin socket is `<DIR>/admin.sock`).
    #[arg(long, env = "DATA_DIR", default_value = admin::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Seconds to wait for the daemon's answer.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = admin::socket_path(&args.data_dir);
    let answer = match client::request(&path, &Request::Refresh, Duration::from_secs(args.timeout))
    {
        Ok(answer) => answer,
        Err(client::ClientError::Daemon(error)) => {
            eprintln!("device-manager: {error}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    let refreshed: Refreshed = serde_json::from_value(answer)?;
    for gpu in &refreshed.gpus {
        let uuid = gpu.uuid.as_deref().unwrap_or("(no UUID)");
        if gpu.healthy {
            println!("{} {uuid}: healthy", gpu.index);
        } else {
            println!(
                "{} {uuid}: UNHEALTHY ({})",
                gpu.index,
                gpu.health_reasons.join("; ")
            );
        }
    }
    for note in &refreshed.notes {
        eprintln!("device-manager: {note}");
    }
    Ok(ExitCode::SUCCESS)
}
