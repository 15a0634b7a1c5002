//! `device-manager preflight`: will this node serve what it advertises? One YAML document on
//! stdout whether the run passed or not; exit 1 only for an `unavailable` accelerator answer
//! (a failed detection, a lock refusal, a contained panic, a sweep failure, a capability this
//! pass did not establish), 2 for a usage error or a host that cannot be opened. The pass is
//! `crate::preflight`'s.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use accel_backend::Deadlines;
use accel_backend::preflight::ContainerCli;
use accel_core::Manufacturer;
use anyhow::bail;

use crate::node::{Node, class_prefixes};
use crate::preflight::{self, Entry, Options};
use crate::settings::Settings;

/// The container CLIs `--runtime` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeArg {
    Docker,
    Nerdctl,
    Ctr,
}

impl From<RuntimeArg> for ContainerCli {
    fn from(r: RuntimeArg) -> ContainerCli {
        match r {
            RuntimeArg::Docker => ContainerCli::Docker,
            RuntimeArg::Nerdctl => ContainerCli::Nerdctl,
            RuntimeArg::Ctr => ContainerCli::Ctr,
        }
    }
}

/// Arguments of `preflight`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the host's `/` is mounted (or a recorded host folder).
    #[arg(long, env = "HOST_ROOT", default_value = "/host")]
    pub host_root: PathBuf,
    /// The manufacturers to ask about (comma list; default: every one this build detects).
    #[arg(long, value_delimiter = ',')]
    pub manufacturer: Vec<String>,
    /// Print every container step and write nothing to the host.
    #[arg(long)]
    pub dry_run: bool,
    /// The probe image (default per manufacturer: NVIDIA's `nvidia/cuda:<CUDA major>`).
    #[arg(long)]
    pub probe_image: Option<String>,
    /// The host's container CLI (default: resolved from the running kubelet).
    #[arg(long, value_enum)]
    pub runtime: Option<RuntimeArg>,
    /// Detect even when none of a manufacturer's vendor ids is on the PCI bus.
    #[arg(long)]
    pub no_pci_check: bool,
    /// PCI class prefixes the bus scan reads (comma-separated hex, default 02,03,0b,12).
    #[arg(long, env = crate::node::PCI_CLASS_PREFIXES_ENV)]
    pub pci_class_prefixes: Option<String>,
    /// Seconds each vendor query may take.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub nvidia_smi_timeout: u64,
}

pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut manufacturers = Vec::new();
    for name in args
        .manufacturer
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
    {
        match name.parse::<Manufacturer>() {
            Ok(m) if !manufacturers.contains(&m) => manufacturers.push(m),
            Ok(_) => {}
            Err(_) => bail!(
                "--manufacturer {name:?}: not a manufacturer (one of {})",
                all_names()
            ),
        }
    }
    if manufacturers.is_empty() {
        manufacturers = crate::backends::detectable();
    }
    let pci_classes = class_prefixes(args.pci_class_prefixes.as_deref())?;
    let mut node = Node::open_with(&args.host_root, settings.tool_places())?;
    node.table = settings.manufacturers.clone();
    let options = Options {
        manufacturers: manufacturers.clone(),
        dry_run: args.dry_run,
        probe_image: args.probe_image.clone(),
        runtime: args.runtime.map(Into::into),
        pci_gate: !args.no_pci_check,
        deadlines: Deadlines {
            per_query: Duration::from_secs(args.nvidia_smi_timeout),
            snapshot: Duration::from_secs(args.nvidia_smi_timeout * 2),
        },
        pci_classes,
    };
    let entries: Vec<(Manufacturer, Entry)> = manufacturers
        .iter()
        .map(|m| {
            (
                *m,
                Entry {
                    backend: crate::backends::backend(*m).ok(),
                    preflight: crate::backends::preflight(*m),
                },
            )
        })
        .collect();
    let document = preflight::run(&node, settings, &options, &entries);
    print!("{}", serde_yaml::to_string(&document)?);
    Ok(if document.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn all_names() -> String {
    Manufacturer::ALL
        .iter()
        .map(|m| m.name())
        .collect::<Vec<_>>()
        .join(", ")
}
