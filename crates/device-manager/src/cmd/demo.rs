//! `device-manager demo [--cluster nvidia|mixed] [--host-root DIR] [--mig-host-root DIR]
//! [--pods FILE] [-o table|json]`: the whole system working in one process on recorded hosts
//! (`crate::demo`). Exit 0 when the run completed (denied or refused Pods are outcomes, not
//! failures), 2 when it could not run (a bad `--pods` file, a folder that is not a recorded
//! host or shows no accelerator, a daemon that did not start).
//!
//! The demo is behind the package's `demo` feature (on by default; the release binary the nodes
//! run is built without it, so it carries neither the demo nor the kubelet emulator). A build
//! without it still parses the subcommand and its flags, and answers [`not_built`] (exit 2).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cmd::Format;
use crate::settings::Settings;

/// Which cluster the demo runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Cluster {
    /// Two NVIDIA nodes (one in MIG mode) and the scripted scenario through every family.
    #[default]
    Nvidia,
    /// One node per manufacturer family — NVIDIA, AMD, Ascend, Cambricon — and one Pod on each.
    Mixed,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The cluster: `nvidia` (two NVIDIA nodes, the scripted scenario) or `mixed` (a node per
    /// manufacturer family, one Pod each; with `--pods`, your Pods on those nodes).
    #[arg(long, value_enum, default_value_t = Cluster::Nvidia)]
    pub cluster: Cluster,
    /// The recorded host of the main node (default: testdata/hosts/hgx-h100-8gpu, an 8×H100
    /// node), of any manufacturer: its daemon serves the accelerators the host shows. A folder
    /// made by `device-manager record` works too. It is copied to a temporary directory first:
    /// the demo never writes into it. Without `--pods`, a host of another manufacturer than
    /// NVIDIA gets one Pod of one of its accelerators instead of the NVIDIA script.
    #[arg(long, value_name = "DIR", conflicts_with = "cluster")]
    pub host_root: Option<PathBuf>,
    /// The recorded host of the second node, whose GPUs are in MIG mode, for partitions
    /// (default: testdata/hosts/hgx-h100-8gpu-mig, beside an NVIDIA main node only; without
    /// it the partition step is skipped).
    #[arg(long, value_name = "DIR", conflicts_with = "cluster")]
    pub mig_host_root: Option<PathBuf>,
    /// Submit these Pods instead of the script: one YAML document, a list of Pods.
    #[arg(long, value_name = "FILE")]
    pub pods: Option<PathBuf>,
    /// table (colour on a terminal) or json.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// What a build without the `demo` feature answers to `device-manager demo`: one line, saying
/// how to get a build that has it.
#[cfg_attr(all(feature = "demo", not(test)), allow(dead_code))]
pub fn not_built() -> String {
    "this build has no demo (it was built without the `demo` feature, as the release binary is): \
     run `cargo run -p device-manager -- demo` from the repository, or build with \
     `cargo build -p device-manager --features demo`"
        .to_owned()
}

/// This build has no demo: [`not_built`].
#[cfg(not(feature = "demo"))]
pub fn run(_args: Args, _settings: &Settings) -> anyhow::Result<ExitCode> {
    Err(anyhow::anyhow!(not_built()))
}

#[cfg(feature = "demo")]
pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;

    use anyhow::Context as _;

    use crate::demo::{self, Options, render};

    let pods = match &args.pods {
        Some(path) => Some(demo::podfile::read(path)?),
        None => None,
    };
    let mut options = match args.cluster {
        Cluster::Mixed => Options::mixed()?,
        Cluster::Nvidia => {
            let host_root = match args.host_root {
                Some(dir) => dir,
                None => demo::default_host(demo::DEFAULT_HOST).ok_or_else(|| {
                    anyhow::anyhow!(
                        "the default recorded host testdata/hosts/{} is not here: run the demo from the repository, or pass --host-root DIR",
                        demo::DEFAULT_HOST
                    )
                })?,
            };
            match args.mig_host_root {
                Some(dir) => Options::nvidia(host_root, Some(dir), false),
                None => {
                    Options::nvidia(host_root, demo::default_host(demo::DEFAULT_MIG_HOST), true)
                }
            }
        }
    };
    options.pods = pods;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_without_the_demo_says_so_in_one_line_and_how_to_get_one() {
        let message = not_built();
        assert!(!message.contains('\n'), "{message}");
        assert!(message.starts_with("this build has no demo"), "{message}");
        assert!(message.contains("--features demo"), "{message}");
        assert!(
            message.contains("cargo run -p device-manager -- demo"),
            "{message}"
        );
    }

    /// Without the feature, the subcommand is refused with that line, not a panic.
    #[cfg(not(feature = "demo"))]
    #[test]
    fn without_the_feature_demo_is_refused_with_that_line() {
        let args = Args {
            cluster: Cluster::Nvidia,
            host_root: None,
            mig_host_root: None,
            pods: None,
            output: Format::Table,
        };
        let settings = Settings::default();
        let e = run(args, &settings).unwrap_err();
        assert_eq!(format!("{e:#}"), not_built());
    }
}
