//! `device-manager demo [--host-root DIR] [--mig-host-root DIR] [--pods FILE] [-o table|json]`:
//! the whole system working in one process on recorded hosts (`crate::demo`). Exit 0 when the
//! run completed (denied or refused Pods are outcomes, not failures), 2 when it could not run
//! (a bad `--pods` file, a folder that is not a recorded host, a daemon that did not start).

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::cmd::Format;
use crate::demo::{self, Options, render};
use crate::settings::Settings;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recorded host of the main node (default: testdata/hosts/hgx-h100-8gpu, an 8×H100
    /// node); a folder made by `device-manager record` works too. It is copied to a temporary
    /// directory first: the demo never writes into it.
    #[arg(long, value_name = "DIR")]
    pub host_root: Option<PathBuf>,
    /// The recorded host of the second node, whose GPUs are in MIG mode, for partitions
    /// (default: testdata/hosts/hgx-h100-8gpu-mig; without it the partition step is skipped).
    #[arg(long, value_name = "DIR")]
    pub mig_host_root: Option<PathBuf>,
    /// Submit these Pods instead of the script: one YAML document, a list of Pods.
    #[arg(long, value_name = "FILE")]
    pub pods: Option<PathBuf>,
    /// table (colour on a terminal) or json.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let pods = match &args.pods {
        Some(path) => Some(demo::podfile::read(path)?),
        None => None,
    };
    let host_root = match args.host_root {
        Some(dir) => dir,
        None => demo::default_host(demo::DEFAULT_HOST).ok_or_else(|| {
            anyhow::anyhow!(
                "the default recorded host testdata/hosts/{} is not here: run the demo from the repository, or pass --host-root DIR",
                demo::DEFAULT_HOST
            )
        })?,
    };
    let mig_host_root = match args.mig_host_root {
        Some(dir) => Some(dir),
        None => demo::default_host(demo::DEFAULT_MIG_HOST),
    };
    let options = Options {
        host_root,
        mig_host_root,
        pods,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(demo::run(&options, settings))?;
    match args.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Table => {
            let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            print!("{}", render::render(&report, render::Style { colour }));
        }
    }
    Ok(ExitCode::SUCCESS)
}
