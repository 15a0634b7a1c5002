//! `device-manager xids`: the accelerator faults in kernel log text (dmesg in any of its time
//! formats, journalctl, syslog, a saved file, stdin), so an operator can ask "what happened to
//! this GPU" without the daemon: NVIDIA's XIDs, then AMD's amdgpu faults (uncorrectable RAS,
//! GPU reset, ring timeout, page fault), each manufacturer's in log order. One command for both,
//! because it is the one operators know to reach for. JSON is DESIGN.md's contract: a list of
//! `{"xid","busId","pid","process","message","line"}` per XID; an AMD fault, which has no code,
//! has `"xid": null` and adds `"manufacturer": "amd"`, its `"condition"` (`AmdPageFault` …) and
//! `"class"`. In the table an AMD fault's condition stands in the XID column.

use super::Format;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use accel_amd::kmsg::AmdFaults;
use accel_backend::health::{FaultClass, FaultClassifier, KernelFault};
use accel_core::{BusId, Manufacturer};
use accel_nvidia::xid::{self, XID_APPLICATION_ENV, XID_HARDWARE_ENV, XidClasses, XidEvent};
use anyhow::Context;
use serde::Serialize;

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
    let classes = XidClasses::from_settings(
        args.xid_application.as_deref(),
        args.xid_hardware.as_deref(),
    )?;
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
    let events = xid::parse_text(&text);
    let amd = AmdFaults.parse_text(&text);
    match args.output {
        Format::Json => {
            let mut rows: Vec<serde_json::Value> = Vec::with_capacity(events.len() + amd.len());
            for event in &events {
                rows.push(serde_json::to_value(event)?);
            }
            for fault in &amd {
                rows.push(serde_json::to_value(AmdRow::of(fault))?);
            }
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        Format::Table => print!("{}", table(&events, &classes, &amd)),
    }
    Ok(ExitCode::SUCCESS)
}

/// An AMD fault in the JSON list: the XID entry's keys (`xid` null) and what names it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AmdRow<'a> {
    xid: Option<u32>,
    manufacturer: Manufacturer,
    condition: &'a str,
    class: FaultClass,
    bus_id: Option<BusId>,
    pid: Option<u32>,
    process: Option<&'a str>,
    message: &'a str,
    line: &'a str,
}

impl<'a> AmdRow<'a> {
    fn of(fault: &'a KernelFault) -> Self {
        AmdRow {
            xid: None,
            manufacturer: fault.manufacturer,
            condition: &fault.condition,
            class: fault.class,
            bus_id: fault.bus_id,
            pid: fault.pid,
            process: fault.process.as_deref(),
            message: &fault.message,
            line: &fault.line,
        }
    }
}

/// The events as a fixed-width table, one a line, with each one's class: the XIDs, then the
/// AMD faults (their condition in the XID column).
fn table(events: &[XidEvent], classes: &XidClasses, amd: &[KernelFault]) -> String {
    let dash = || "-".to_string();
    let header = ["XID", "CLASS", "BUS ID", "PID", "PROCESS", "MESSAGE"].map(String::from);
    let nvidia = events.iter().map(|e| {
        [
            e.xid
                .map(|x| x.to_string())
                .unwrap_or_else(|| "bus".to_string()),
            classes.classify(e).to_string(),
            e.bus_id.nvml(),
            e.pid.map(|p| p.to_string()).unwrap_or_else(dash),
            e.process.clone().unwrap_or_else(dash),
            e.message.clone(),
        ]
    });
    let amd = amd.iter().map(|f| {
        [
            f.condition.clone(),
            f.class.to_string(),
            f.bus_id.map(|b| b.nvml()).unwrap_or_else(dash),
            f.pid.map(|p| p.to_string()).unwrap_or_else(dash),
            f.process.clone().unwrap_or_else(dash),
            f.message.clone(),
        ]
    });
    let rows: Vec<[String; 6]> = nvidia.chain(amd).collect();
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
