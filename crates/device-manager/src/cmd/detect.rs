//! `device-manager detect`: the node's inventory, as a table for people or JSON (DESIGN.md's
//! contract). Exit 0 also when there are no accelerators (the reason on stderr); non-zero only
//! when the host could not be read at all or a driver answered nothing.

use super::Format;
use std::fmt::Write as _;
use std::process::ExitCode;

use accel_core::interfaces::DeviceInterface;
use accel_core::inventory::{Accelerator, Inventory, MigMode};

use crate::node::NodeArgs;
use crate::settings::Settings;

/// Arguments of `detect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub node: NodeArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
}

pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let (inventory, detections) = args.node.detect(settings)?;
    let mut failed = false;
    for detection in &detections {
        match detection {
            Ok(section) => {
                for note in &section.notes {
                    eprintln!("{}: {note}", section.name);
                }
                if section.accelerators.is_empty() {
                    eprintln!("{}: no accelerators on this host", section.name);
                }
            }
            Err(e) => {
                eprintln!("device-manager: {e}");
                failed = true;
            }
        }
    }
    // The node's network interfaces beside the accelerators; a host whose interfaces cannot be
    // enumerated (a recording without `sys/class/net`) shows none, and says why on stderr.
    let interfaces = match crate::node::Node::open(&args.node.host_root) {
        Ok(node) => match accel_net::read_interfaces(node.host.as_ref()) {
            Ok(list) => Some(list),
            Err(e) => {
                eprintln!("network: {e}");
                None
            }
        },
        Err(_) => None,
    };
    match args.output {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&Detected {
                inventory: &inventory,
                interfaces: interfaces.as_deref(),
            })?
        ),
        Format::Table => {
            print!("{}", table(&inventory));
            if let Some(list) = &interfaces {
                print!("{}", interfaces_table(list));
            }
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `detect -o json`: the inventory's keys, and `interfaces` (spec/rdma.md §3's records) when
/// they could be enumerated.
#[derive(serde::Serialize)]
struct Detected<'a> {
    #[serde(flatten)]
    inventory: &'a Inventory,
    #[serde(skip_serializing_if = "Option::is_none")]
    interfaces: Option<&'a [DeviceInterface]>,
}

/// The interfaces as a table, one interface or VF a line.
pub fn interfaces_table(list: &[DeviceInterface]) -> String {
    let mut out = String::from("interfaces\n");
    let _ = writeln!(
        out,
        "  {:<16} {:<8} {:<13} {:<4} {:<5} {:<4} {:<10} LINK",
        "NAME", "BUS", "PCI", "NUMA", "MTU", "UP", "RDMA"
    );
    let dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    let link = |l: &Option<accel_core::interfaces::DeviceInterfaceLink>| match l {
        None => "-".to_string(),
        Some(l) if l.reason.is_empty() => l.state.as_str().to_string(),
        Some(l) => format!("{}: {}", l.state.as_str(), l.reason),
    };
    for i in list {
        let _ = writeln!(
            out,
            "  {:<16} {:<8} {:<13} {:<4} {:<5} {:<4} {:<10} {}",
            i.name,
            dash(&i.bus),
            dash(&i.pci_bus_id),
            dash(&i.numa_affinity),
            i.mtu,
            if i.up { "up" } else { "down" },
            dash(&i.rdma_device),
            link(&i.link)
        );
        for vf in &i.virtual_functions {
            let _ = writeln!(
                out,
                "  {:<16} {:<8} {:<13} {:<4} {:<5} {:<4} {:<10} {}",
                format!(" └ {}", dash(&vf.name)),
                "vf",
                dash(&vf.pci_bus_id),
                dash(&vf.numa_affinity),
                vf.mtu,
                if vf.up { "up" } else { "down" },
                dash(&vf.rdma_device),
                link(&vf.link)
            );
        }
    }
    out
}

/// The inventory as a fixed-width table, one accelerator a line.
pub fn table(inventory: &Inventory) -> String {
    let mut out = String::new();
    for section in &inventory.manufacturers {
        let _ = writeln!(
            out,
            "{}  driver {}  runtime {}",
            section.name.name().to_uppercase(),
            section.driver_version.as_deref().unwrap_or("-"),
            section.runtime_version.as_deref().unwrap_or("-"),
        );
        let header = [
            "INDEX", "UUID", "PRODUCT", "BUS ID", "MEMORY", "NUMA", "ARCH", "CC", "MIG", "FEEDS",
            "HEALTH",
        ];
        let rows: Vec<[String; 11]> = section.accelerators.iter().map(row).collect();
        let mut widths = header.map(str::len);
        for r in &rows {
            for (w, cell) in widths.iter_mut().zip(r.iter()) {
                *w = (*w).max(cell.len());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    s.push_str(cell);
                } else {
                    let _ = write!(s, "{cell:<w$}  ", w = widths[i]);
                }
            }
            s.trim_end().to_string()
        };
        let _ = writeln!(out, "{}", line(&header.map(String::from)));
        for r in &rows {
            let _ = writeln!(out, "{}", line(r));
        }
    }
    out
}

fn row(a: &Accelerator) -> [String; 11] {
    let dash = || "-".to_string();
    [
        a.index.to_string(),
        a.uuid.clone().unwrap_or_else(dash),
        a.product.clone().unwrap_or_else(dash),
        a.bus_id.map(|b| b.nvml()).unwrap_or_else(dash),
        a.memory_mib
            .map(|m| format!("{m} MiB"))
            .unwrap_or_else(dash),
        a.numa_node.map(|n| n.to_string()).unwrap_or_else(dash),
        a.architecture.clone().unwrap_or_else(dash),
        a.compute_capability.clone().unwrap_or_else(dash),
        match a.mig_mode {
            Some(MigMode::Enabled) => "on".into(),
            Some(MigMode::Disabled) => "off".into(),
            None => dash(),
        },
        match a.grantable {
            accel_core::inventory::Grantable::Whole => "whole".into(),
            accel_core::inventory::Grantable::PartitionsOnly => "partitions".into(),
            accel_core::inventory::Grantable::Nothing => {
                format!("none ({:?})", a.source).to_lowercase()
            }
            accel_core::inventory::Grantable::Unidentified => "none (no identity)".into(),
        },
        if a.healthy {
            "ok".into()
        } else {
            format!("UNHEALTHY: {}", a.health_reasons.join("; "))
        },
    ]
}
