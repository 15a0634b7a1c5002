//! `mthreads-gmi`, Moore Threads' management tool: its default table (the title's tool and
//! driver versions, and three lines a GPU: id, name, bus id, device type, utilisation, memory
//! `used(total)`, temperature) and its `-q` report (`key : value` lines per GPU: the UUID and
//! the core count, which the table does not print). The module owns the exact argv and the
//! formats; it runs nothing.
//!
//! The table is not nvidia-smi's (HAZARDS.md items 1–2: a dashed title, no column joints, two
//! layouts, a `Perf` column from 2.2): it is read by header through
//! `accel_backend::text::box_table`, never by offset, and a trimmed capture (item 5) gives the
//! rows it has. The `-q` report is read by key, case-insensitively, under the spellings nvidia-smi's
//! `-q` uses for the same facts; no capture of it with provenance exists (SOURCES.md), so a
//! key it spells otherwise gives `None`, never a guess.

use accel_backend::text::{self, MemoryUnit, Record};
use accel_core::busid::BusId;

/// The default table.
pub const TABLE_ARGV: &[&str] = &["mthreads-gmi"];
/// The per-GPU report.
pub const QUERY_ARGV: &[&str] = &["mthreads-gmi", "-q"];

/// The header words the GPU table is found by.
const TABLE_ANCHOR: &[&str] = &["ID", "Name", "PCIe"];

/// Text that is not the output asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GmiError {
    #[error("mthreads-gmi printed no GPU table (first line: {first_line:?})")]
    NotTable { first_line: String },
    #[error("mthreads-gmi -q printed no `key : value` report (first line: {first_line:?})")]
    NotReport { first_line: String },
}

fn first_line(text: &str) -> String {
    text::clean(text)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .chars()
        .take(120)
        .collect()
}

/// One GPU of the default table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableGpu {
    /// The tool's index (`ID` column).
    pub index: Option<u32>,
    pub name: Option<String>,
    pub bus_id: Option<BusId>,
    /// `Physical`, or what a virtual instance prints instead.
    pub device_type: Option<String>,
    pub utilization_percent: Option<f64>,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
    pub temperature_c: Option<f64>,
}

impl TableGpu {
    /// A guest's virtual device (the spec's skip rule): a device type that says virtual.
    pub fn is_virtual(&self) -> bool {
        self.device_type
            .as_deref()
            .is_some_and(|t| t.to_ascii_lowercase().contains("virtual"))
    }
}

/// The default table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GmiTable {
    pub tool_version: Option<String>,
    /// The driver's version as printed (`3.3.5-server` keeps its suffix).
    pub driver_version: Option<String>,
    pub gpus: Vec<TableGpu>,
}

fn whole_u32(raw: Option<&str>) -> Option<u32> {
    raw.and_then(text::whole)
        .and_then(|i| u32::try_from(i).ok())
}

fn table_gpu(r: &Record) -> TableGpu {
    let (used, total) = r
        .get("Mem")
        .map_or((None, None), |m| text::memory_pair(m, MemoryUnit::MiB));
    TableGpu {
        index: whole_u32(r.get("ID")),
        name: r.get("Name").map(str::to_string),
        bus_id: r.get("PCIe").and_then(|b| b.parse().ok()),
        device_type: r.get("Device Type").map(str::to_string),
        utilization_percent: r.get("%GPU").and_then(text::percent),
        memory_used_mib: used,
        memory_total_mib: total,
        temperature_c: r.get("Temp").and_then(text::celsius),
    }
}

/// Reads the default table. `Err` when the text holds neither the title nor the table.
pub fn parse_table(text: &str) -> Result<GmiTable, GmiError> {
    let clean = text::clean(text);
    let tool_version = text::version_after(&clean, "mthreads-gmi").map(str::to_string);
    let driver_version = text::version_after(&clean, "Driver Version").map(str::to_string);
    let table = text::box_table(text, TABLE_ANCHOR);
    if table.is_none() && tool_version.is_none() && driver_version.is_none() {
        return Err(GmiError::NotTable {
            first_line: first_line(text),
        });
    }
    let gpus = table
        .map(|t| {
            t.records
                .iter()
                .map(table_gpu)
                .filter(|g| g.index.is_some() || g.bus_id.is_some())
                .collect()
        })
        .unwrap_or_default();
    Ok(GmiTable {
        tool_version,
        driver_version,
        gpus,
    })
}

/// One GPU of the `-q` report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryGpu {
    pub index: Option<u32>,
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub bus_id: Option<BusId>,
    pub cores: Option<u32>,
}

const UUID_KEYS: &[&str] = &["GPU UUID", "UUID"];
const NAME_KEYS: &[&str] = &["Product Name", "Name"];
const BUS_KEYS: &[&str] = &["Bus Id", "PCI Bus Id", "Bus-Id", "PCIe Bus Id"];
const INDEX_KEYS: &[&str] = &["Index", "GPU Index", "ID"];
const CORE_KEYS: &[&str] = &["GPU Cores", "Core Count", "MTT Cores", "Cores"];

fn is_key(key: &str, keys: &[&str]) -> bool {
    keys.iter().any(|k| k.eq_ignore_ascii_case(key))
}

/// A `GPU 00000000:2A:00.0` or `GPU 0` line that opens a GPU's section.
fn section_header(line: &str) -> Option<(Option<u32>, Option<BusId>)> {
    let rest = line.trim().strip_prefix("GPU ")?.trim();
    if let Ok(index) = rest.parse::<u32>() {
        return Some((Some(index), None));
    }
    // Only a bus id spelled with its domain: `GPU Cores`, `GPU 12 C` are no headers.
    (rest.matches(':').count() == 2)
        .then(|| rest.parse::<BusId>().ok())
        .flatten()
        .map(|bus| (None, Some(bus)))
}

/// Reads the `-q` report: a GPU's section opens at a `GPU <bus id|index>` line, or at a second
/// UUID key where the report has no such lines. `Err` when no line is a `key : value` pair.
pub fn parse_query(text: &str) -> Result<Vec<QueryGpu>, GmiError> {
    let clean = text::clean(text);
    let mut gpus: Vec<QueryGpu> = Vec::new();
    let mut pairs = 0usize;
    for line in clean.lines() {
        if let Some((index, bus)) = section_header(line) {
            gpus.push(QueryGpu {
                index,
                bus_id: bus,
                ..QueryGpu::default()
            });
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() {
            continue;
        }
        pairs += 1;
        let value = text::present(value);
        if is_key(key, UUID_KEYS) && gpus.last().is_none_or(|g| g.uuid.is_some()) {
            gpus.push(QueryGpu::default());
        }
        let Some(gpu) = gpus.last_mut() else {
            continue;
        };
        if is_key(key, UUID_KEYS) {
            gpu.uuid = value.map(str::to_string);
        } else if is_key(key, NAME_KEYS) {
            gpu.name = gpu.name.take().or(value.map(str::to_string));
        } else if is_key(key, BUS_KEYS) {
            gpu.bus_id = gpu.bus_id.or(value.and_then(|v| v.parse().ok()));
        } else if is_key(key, INDEX_KEYS) {
            gpu.index = gpu.index.or(whole_u32(value));
        } else if is_key(key, CORE_KEYS) {
            gpu.cores = gpu.cores.or(whole_u32(value));
        }
    }
    if pairs == 0 {
        return Err(GmiError::NotReport {
            first_line: first_line(text),
        });
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_read_by_key_per_gpu_section() {
        let text = "Driver Version : 2.7.0\n\
                    GPU 00000000:0F:00.0\n    Product Name : MTT S4000\n    GPU UUID : 7de4d75b-7522-1fdc-8dc4-db9a169a5e88\n    GPU Cores : 8192\n\
                    GPU 00000000:10:00.0\n    Product Name : MTT S4000\n    GPU UUID : N/A\n";
        let gpus = parse_query(text).unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(
            gpus[0].uuid.as_deref(),
            Some("7de4d75b-7522-1fdc-8dc4-db9a169a5e88")
        );
        assert_eq!(gpus[0].cores, Some(8192));
        assert_eq!(
            gpus[0].bus_id.map(|b| b.sysfs()).as_deref(),
            Some("0000:0f:00.0")
        );
        assert_eq!((gpus[1].uuid.as_deref(), gpus[1].cores), (None, None));
    }

    #[test]
    fn a_report_without_sections_opens_one_per_uuid() {
        let gpus = parse_query("UUID : a\nName : MTT S30\nUUID : b\nName : MTT S30\n").unwrap();
        let ids: Vec<_> = gpus.iter().map(|g| g.uuid.as_deref()).collect();
        assert_eq!(ids, [Some("a"), Some("b")]);
        assert_eq!(
            parse_query("mthreads-gmi did not output anything!\n").map_err(|e| e.to_string()),
            Err("mthreads-gmi -q printed no `key : value` report (first line: \"mthreads-gmi did not output anything!\")".into())
        );
    }

    #[test]
    fn a_virtual_device_type_is_a_guests() {
        let mut gpu = TableGpu {
            device_type: Some("Physical".into()),
            ..TableGpu::default()
        };
        assert!(!gpu.is_virtual());
        gpu.device_type = Some("Virtual".into());
        assert!(gpu.is_virtual());
    }
}
