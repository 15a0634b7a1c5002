//! `device-manager detect`: the node's inventory, as a table for people or JSON (DESIGN.md's
//! contract). Exit 0 also when there are no accelerators (the reason on stderr); non-zero only
//! when the host could not be read at all or a driver answered nothing.

use super::Format;
use std::fmt::Write as _;
use std::process::ExitCode;

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
    let (inventory, detections) = args.node.detect(&settings.manufacturers)?;
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
    match args.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&inventory)?),
        Format::Table => print!("{}", table(&inventory)),
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
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
        },
        if a.healthy {
            "ok".into()
        } else {
            format!("UNHEALTHY: {}", a.health_reasons.join("; "))
        },
    ]
}
