//! `device-manager doctor`: one pass over what this node needs, each check `ok`, `warn` or
//! `fail` with a reason and what to do; `--gpus` adds the per-GPU diagnosis. Exit 1 when any
//! check fails, 0 otherwise (warnings included), 2 when the host cannot be opened.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use accel_backend::Backend;
use accel_backend::Deadlines;
use accel_backend::doctor::{Check, Options, Report};
use accel_core::Manufacturer;

use super::Format;
use crate::node::Node;
use crate::settings::Settings;

/// Arguments of `doctor`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's root, or a recorded host folder (one carrying recorded-host.json).
    #[arg(long, env = "HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// The kubelet's directory (its sockets are device-plugins/ and pod-resources/kubelet.sock).
    #[arg(long, env = "KUBELET_DIR", default_value = "/var/lib/kubelet")]
    pub kubelet_dir: String,
    /// The host directory the preload (slicing) libraries are staged in, as `serve` reads it
    /// (default `<GPUSTACK_DATA_DIR>/operator/lib`).
    #[arg(long, env = "LIBRARY_DIR")]
    pub library_dir: Option<String>,
    /// The kernel log, as `serve` reads it (default: `<host-root>/dev/kmsg`).
    #[arg(long, env = "KMSG_PATH")]
    pub kmsg_path: Option<PathBuf>,
    /// Seconds each query of the vendor's tool may take (the whole snapshot gets twice this).
    #[arg(long, alias = "nvidia-smi-timeout", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub query_timeout: u64,
    /// Diagnose these accelerators one by one (UUIDs; none: every one the tool lists).
    #[arg(long, num_args = 0.., value_name = "UUID")]
    pub gpus: Option<Vec<String>>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
    /// The manufacturer whose needs are checked (default: the first of this build's
    /// manufacturers, in the table's order, whose driver or accelerator the host shows; the
    /// first with checks when it shows none).
    #[arg(long, env = "MANUFACTURER")]
    pub manufacturer: Option<Manufacturer>,
}

/// The backend doctor checks when none is named: the first, in registry order, whose driver
/// the host shows or whose vendor id is on the PCI bus; the first with checks otherwise (its
/// checks explain a host with nothing).
fn chosen(node: &Node, backends: Vec<Backend>) -> Option<Backend> {
    let host = node.host.as_ref();
    let bus = accel_host::pci::scan_pci(host, &accel_host::pci::PciClassPrefixes::default())
        .map(|scan| scan.functions)
        .unwrap_or_default();
    let on_bus = |m: Manufacturer| {
        bus.iter().any(|f| {
            node.table
                .get(m)
                .pci_vendor_ids
                .iter()
                .any(|id| id.vendor == f.vendor_id)
        })
    };
    let with_checks: Vec<Backend> = backends
        .into_iter()
        .filter(|b| b.doctor.is_some())
        .collect();
    let shown = with_checks.iter().position(|b| {
        b.doctor.as_ref().is_some_and(|d| d.driver_shown(host)) || on_bus(b.manufacturer)
    });
    with_checks.into_iter().nth(shown.unwrap_or(0))
}

/// `rdma-links`: on a node with RDMA devices, whether any link is usable; a node whose every
/// RDMA link failed is flagged (it is not `rdma.capable` and its RDMA tokens are Unhealthy).
/// No row where no RDMA device is bound or the interfaces cannot be read.
fn rdma_links(host: &dyn accel_host::Host) -> Option<accel_backend::doctor::Check> {
    use accel_backend::doctor::Check;
    use accel_core::interfaces::{all_links_failed, endpoints};
    let list = accel_net::read_interfaces(host).ok()?;
    let judged: Vec<String> = endpoints(&list)
        .iter()
        .filter(|e| e.rdma() || e.link().is_some())
        .map(|e| match e.link() {
            Some(l) if !l.reason.is_empty() => format!("{}: {}", e.rdma_device(), l.reason),
            Some(l) => format!("{}: {}", e.rdma_device(), l.state.as_str()),
            None => format!("{}: no verdict", e.rdma_device()),
        })
        .collect();
    if judged.is_empty() {
        return None;
    }
    Some(if all_links_failed(&list) {
        Check::warn(
            "rdma-links",
            format!(
                "every RDMA link of this node failed ({})",
                judged.join("; ")
            ),
            "check the cabling and the switch ports of the NICs, or the subnet manager on InfiniBand; the node is not rdma.capable and its RDMA tokens are Unhealthy until a port is ACTIVE and LinkUp",
        )
    } else {
        Check::ok("rdma-links", format!("RDMA links: {}", judged.join("; ")))
    })
}

pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut node = Node::open_with(&args.host_root, settings.tool_places())?;
    node.table = settings.manufacturers.clone();
    let backend = match args.manufacturer {
        Some(m) => Some(crate::backends::backend(m)?),
        None => chosen(&node, crate::backends::all()),
    };
    let Some((manufacturer, doctor)) = backend.and_then(|b| Some((b.manufacturer, b.doctor?)))
    else {
        let with: Vec<&str> = crate::backends::all()
            .iter()
            .filter(|b| b.doctor.is_some())
            .map(|b| b.manufacturer.name())
            .collect();
        let named = args
            .manufacturer
            .map_or_else(|| "this host".to_string(), |m| m.to_string());
        anyhow::bail!(
            "doctor: no checks for {named} yet (this build checks {})",
            with.join(", ")
        );
    };
    let options = Options {
        deadlines: Deadlines {
            per_query: Duration::from_secs(args.query_timeout),
            snapshot: Duration::from_secs(args.query_timeout * 2),
        },
        kubelet_dir: args.kubelet_dir.clone(),
        library_dir: args
            .library_dir
            .clone()
            .unwrap_or_else(|| settings.library_dir().display().to_string())
            .trim_start_matches('/')
            .to_string(),
        kmsg: args.kmsg_path.clone(),
        gpus: args.gpus.clone(),
        injection: settings.injection(manufacturer),
        containerd_config_dir: settings.containerd_config_dir.clone(),
        arch: std::env::consts::ARCH.to_string(),
    };
    let mut report = doctor.run(node.host.as_ref(), node.commands.as_ref(), &options);
    if let Some(check) = rdma_links(node.host.as_ref()) {
        report.checks.push(check);
    }
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
