//! `device-manager xids`: the accelerator faults in kernel log text (dmesg in any of its time
//! formats, journalctl, syslog, a saved file, stdin), so an operator can ask "what happened to
//! this GPU" without the daemon: every manufacturer's faults through its backend's classifier
//! (NVIDIA's XIDs, then AMD's amdgpu faults: uncorrectable RAS, GPU reset, ring timeout, page
//! fault), each manufacturer's in log order. One command for both,
//! because it is the one operators know to reach for. JSON is DESIGN.md's contract: a list of
//! `{"xid","busId","pid","process","message","line"}` per XID; an AMD fault, which has no code,
//! has `"xid": null` and adds `"manufacturer": "amd"`, its `"condition"` (`AmdPageFault` …) and
//! `"class"`. In the table an AMD fault's condition stands in the XID column.

use super::Format;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use accel_backend::health::{FaultClass, KernelFault};
use accel_core::{BusId, Manufacturer};
use anyhow::Context;
use serde::Serialize;

/// `GPUSTACK_NVIDIA_XID_APPLICATION`, which `--xid-application` sets.
const XID_APPLICATION_ENV: &str = "GPUSTACK_NVIDIA_XID_APPLICATION";
/// `GPUSTACK_NVIDIA_XID_HARDWARE`, which `--xid-hardware` sets.
const XID_HARDWARE_ENV: &str = "GPUSTACK_NVIDIA_XID_HARDWARE";

/// Arguments of `xids`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
    /// The kernel log text to read (`-` or absent: standard input).
    #[arg(value_name = "FILE|-")]
    pub file: Option<PathBuf>,
    /// XIDs that are the workload's fault, not the GPU's (comma list; default 13,31,43,45,68,109).
    #[arg(long, env = XID_APPLICATION_ENV)]
    pub xid_application: Option<String>,
    /// XIDs that are always the GPU's fault, even when also listed as application XIDs.
    #[arg(long, env = XID_HARDWARE_ENV)]
    pub xid_hardware: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // The flags are the classifiers' settings by another name; the backends read them.
    let mut vars = BTreeMap::new();
    for (name, value) in [
        (XID_APPLICATION_ENV, &args.xid_application),
        (XID_HARDWARE_ENV, &args.xid_hardware),
    ] {
        if let Some(value) = value {
            vars.insert(name.to_string(), value.clone());
        }
    }
    let classifiers = crate::backends::fault_classifiers(&vars).map_err(|e| anyhow::anyhow!(e))?;
    let bytes = match &args.file {
        Some(path) if path.as_os_str() != "-" => {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
        }
        _ => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("reading standard input")?;
            bytes
        }
    };
    // Kernel logs carry whatever a driver printed: invalid UTF-8 is replaced, never an error.
    let text = String::from_utf8_lossy(&bytes);
    let found: Vec<Found> = classifiers
        .iter()
        .flat_map(|classifier| {
            let by_code = classifier.counted_by_code();
            classifier
                .parse_text(&text)
                .into_iter()
                .map(move |fault| Found { fault, by_code })
        })
        .collect();
    match args.output {
        Format::Json => {
            let rows: Vec<Row<'_>> = found.iter().map(Row::of).collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        Format::Table => print!("{}", table(&found)),
    }
    Ok(ExitCode::SUCCESS)
}

/// One fault as its manufacturer's classifier found it.
struct Found {
    fault: KernelFault,
    /// Its classifier counts faults by code (NVIDIA's XIDs): the row is an XID row.
    by_code: bool,
}

/// One fault in the JSON list. A fault counted by code is DESIGN.md's XID entry
/// (`xid`, `busId`, `pid`, `process`, `message`, `line`); another manufacturer's has `xid`
/// null and adds what names it (`manufacturer`, `condition`, `class`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Row<'a> {
    xid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    manufacturer: Option<Manufacturer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    condition: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    class: Option<FaultClass>,
    bus_id: Option<BusId>,
    pid: Option<u32>,
    process: Option<&'a str>,
    message: &'a str,
    line: &'a str,
}

impl<'a> Row<'a> {
    fn of(found: &'a Found) -> Self {
        let fault = &found.fault;
        let named = !found.by_code;
        Row {
            xid: fault.code,
            manufacturer: named.then_some(fault.manufacturer),
            condition: named.then_some(fault.condition.as_str()),
            class: named.then_some(fault.class),
            bus_id: fault.bus_id,
            pid: fault.pid,
            process: fault.process.as_deref(),
            message: &fault.message,
            line: &fault.line,
        }
    }
}

/// The events as a fixed-width table, one a line, with each one's class, manufacturer by
/// manufacturer in the registry's order: an XID's code (`bus` for a GPU fallen off the bus),
/// or another manufacturer's condition, in the XID column.
fn table(found: &[Found]) -> String {
    let dash = || "-".to_string();
    let header = ["XID", "CLASS", "BUS ID", "PID", "PROCESS", "MESSAGE"].map(String::from);
    let rows: Vec<[String; 6]> = found
        .iter()
        .map(|Found { fault: f, by_code }| {
            let code = if *by_code {
                f.code.map_or_else(|| "bus".to_string(), |x| x.to_string())
            } else {
                f.condition.clone()
            };
            [
                code,
                f.class.to_string(),
                f.bus_id.map(|b| b.nvml()).unwrap_or_else(dash),
                f.pid.map(|p| p.to_string()).unwrap_or_else(dash),
                f.process.clone().unwrap_or_else(dash),
                f.message.clone(),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}
