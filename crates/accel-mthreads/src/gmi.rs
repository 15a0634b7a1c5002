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
//!
//! **ECC in `-q`** (spec §6: health is the uncorrected volatile DRAM ECC counter, MTML's
//! `mtmlMemoryGetEccErrorCounter(UNCORRECTED, VOLATILE_ECC, DRAM)`). A counter is read by the
//! words of its label and of the section headings above it (by indentation): `Volatile` or
//! `Aggregate`; `DRAM` or `Device Memory`; `Uncorrectable`/`Uncorrected` or `Double Bit`,
//! `Correctable`/`Corrected` or `Single Bit` — nvidia-smi's `ECC Errors › Volatile › DRAM
//! Uncorrectable` and its older `Volatile › Double Bit › Device Memory` alike. A counter that
//! says neither volatile nor aggregate, or names no DRAM (SRAM, a total, retired pages), is not
//! read; `N/A` is no count; one counter printed twice (per memory stack) adds up. A GPU whose
//! section prints none of them has no ECC reading (`QueryGpu::ecc` is `None`).

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
    /// `ECC Mode` as printed (`On-die, EDC` on the S5000, `N/A` on the S4000), `None` where the
    /// row has no such cell (a trimmed capture).
    pub ecc_mode: Option<String>,
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
        ecc_mode: r.raw("ECC Mode").map(str::to_string),
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
    /// The DRAM ECC counters, `None` when the section prints none.
    pub ecc: Option<GmiEcc>,
}

/// A GPU's DRAM ECC counters in the `-q` report, each `None` when not printed as a count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GmiEcc {
    pub volatile_uncorrected: Option<u64>,
    pub volatile_corrected: Option<u64>,
    pub aggregate_uncorrected: Option<u64>,
    pub aggregate_corrected: Option<u64>,
}

/// Which DRAM ECC counter a label stands for, read from its words and its headings' (all
/// lower case); `None` for anything else.
fn ecc_counter<'a>(ecc: &'a mut GmiEcc, context: &str) -> Option<&'a mut Option<u64>> {
    let dram = context.contains("dram") || context.contains("device memory");
    if !dram {
        return None;
    }
    let uncorrected = context.contains("uncorr") || context.contains("double bit");
    let corrected = !uncorrected && (context.contains("corr") || context.contains("single bit"));
    let volatile = context.contains("volatile");
    let aggregate = context.contains("aggregate");
    match (volatile, aggregate, uncorrected, corrected) {
        (true, false, true, _) => Some(&mut ecc.volatile_uncorrected),
        (true, false, _, true) => Some(&mut ecc.volatile_corrected),
        (false, true, true, _) => Some(&mut ecc.aggregate_uncorrected),
        (false, true, _, true) => Some(&mut ecc.aggregate_corrected),
        _ => None,
    }
}

/// The section headings open above a line, by indentation: a heading is closed by any line
/// indented no deeper than it.
#[derive(Debug, Default)]
struct Headings(Vec<(usize, String)>);

impl Headings {
    fn at(&mut self, indent: usize) {
        self.0.retain(|(at, _)| *at < indent);
    }

    fn open(&mut self, indent: usize, heading: &str) {
        self.0.push((indent, heading.trim().to_ascii_lowercase()));
    }

    /// The headings and `key`, lower case, one string.
    fn context(&self, key: &str) -> String {
        let mut words: Vec<&str> = self.0.iter().map(|(_, h)| h.as_str()).collect();
        let key = key.to_ascii_lowercase();
        words.push(&key);
        words.join(" ")
    }
}

/// Reads one ECC counter line into `gpu`; false when the line is no DRAM ECC counter.
fn ecc_line(gpu: &mut QueryGpu, context: &str, value: Option<&str>) -> bool {
    let mut ecc = gpu.ecc.take().unwrap_or_default();
    let taken = match ecc_counter(&mut ecc, context) {
        Some(slot) => {
            if let Some(n) = value.and_then(text::whole) {
                *slot = Some(slot.unwrap_or(0).saturating_add(n));
            }
            true
        }
        None => false,
    };
    gpu.ecc = (ecc != GmiEcc::default()).then_some(ecc);
    taken
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

/// Reads one identity line into the GPU it belongs to; a second UUID key opens the next GPU
/// where the report has no `GPU …` lines.
fn identity_line(gpus: &mut Vec<QueryGpu>, key: &str, value: Option<&str>) {
    if is_key(key, UUID_KEYS) && gpus.last().is_none_or(|g| g.uuid.is_some()) {
        gpus.push(QueryGpu::default());
    }
    let Some(gpu) = gpus.last_mut() else {
        return;
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

/// Reads the `-q` report: a GPU's section opens at a `GPU <bus id|index>` line, or at a second
/// UUID key where the report has no such lines. `Err` when no line is a `key : value` pair.
pub fn parse_query(text: &str) -> Result<Vec<QueryGpu>, GmiError> {
    let clean = text::clean(text);
    let mut gpus: Vec<QueryGpu> = Vec::new();
    let mut pairs = 0usize;
    let mut headings = Headings::default();
    for line in clean.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        headings.at(indent);
        if let Some((index, bus)) = section_header(line) {
            gpus.push(QueryGpu {
                index,
                bus_id: bus,
                ..QueryGpu::default()
            });
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            headings.open(indent, line);
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() {
            continue;
        }
        pairs += 1;
        // `ECC Errors:` opens a section; a known key left blank is still that key.
        let known = [UUID_KEYS, NAME_KEYS, BUS_KEYS, INDEX_KEYS, CORE_KEYS]
            .iter()
            .any(|keys| is_key(key, keys));
        if value.is_empty() && !known {
            headings.open(indent, key);
            continue;
        }
        let value = text::present(value);
        if let Some(gpu) = gpus.last_mut()
            && ecc_line(gpu, &headings.context(key), value)
        {
            continue;
        }
        identity_line(&mut gpus, key, value);
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

    fn ecc_of(text: &str) -> Vec<Option<GmiEcc>> {
        parse_query(text)
            .unwrap()
            .into_iter()
            .map(|g| g.ecc)
            .collect()
    }

    /// nvidia-smi's layout of the section, which `-q` is assembled in: the volatile DRAM
    /// counters, the aggregate ones apart, SRAM and retired pages not read.
    #[test]
    fn the_dram_ecc_counters_are_read_under_their_headings() {
        let text = "GPU 00000000:4c:00.0\n    GPU UUID : u\n    ECC Mode\n        Current : Enable\n    ECC Errors\n        Volatile\n            SRAM Uncorrectable : 5\n            DRAM Correctable : 3\n            DRAM Uncorrectable : 2\n        Aggregate\n            DRAM Correctable : 30\n            DRAM Uncorrectable : 4\n    Retired Pages\n        Double Bit ECC : 7\n    GPU Cores : 8192\n";
        let gpus = parse_query(text).unwrap();
        assert_eq!(
            gpus[0].ecc,
            Some(GmiEcc {
                volatile_uncorrected: Some(2),
                volatile_corrected: Some(3),
                aggregate_uncorrected: Some(4),
                aggregate_corrected: Some(30),
            })
        );
        assert_eq!(gpus[0].cores, Some(8192), "the section ends at its indent");
        assert_eq!(
            parse_query("GPU 3\n  UUID : u\n").unwrap()[0].index,
            Some(3),
            "a `GPU <index>` heading gives the index"
        );
    }

    #[test]
    fn other_ecc_layouts_and_what_is_no_count() {
        // nvidia-smi's older layout: the kind as a heading, the memory as the label.
        let old = "GPU 0\n  UUID : u\n  ECC Errors\n    Volatile\n      Double Bit\n        Device Memory : 1\n        Total : 9\n      Single Bit\n        Device Memory : 6\n";
        assert_eq!(
            ecc_of(old),
            [Some(GmiEcc {
                volatile_uncorrected: Some(1),
                volatile_corrected: Some(6),
                ..GmiEcc::default()
            })]
        );
        // A flat label with every word, headings ending in a colon, a count per stack added.
        let flat = "GPU 0\nUUID : u\nECC Errors:\nVolatile DRAM Uncorrected : 1\nVolatile DRAM Uncorrected : 2\n";
        assert_eq!(
            ecc_of(flat)[0].as_ref().unwrap().volatile_uncorrected,
            Some(3)
        );
        // Headings ending in a colon are headings all the same.
        let colons = "GPU 0\n UUID : u\n ECC Errors:\n  Volatile:\n   DRAM Uncorrectable : 2\n";
        assert_eq!(
            ecc_of(colons)[0].as_ref().unwrap().volatile_uncorrected,
            Some(2)
        );
        // N/A, a counter of no stated kind, a DRAM count that is neither corrected nor not (a
        // total), or none at all: no reading.
        for text in [
            "GPU 0\n UUID : u\n ECC Errors\n  Volatile\n   DRAM Uncorrectable : N/A\n",
            "GPU 0\n UUID : u\n ECC Errors\n  DRAM Uncorrectable : 2\n",
            "GPU 0\n UUID : u\n ECC Errors\n  Volatile\n   DRAM Total : 9\n",
            "GPU 0\n UUID : u\n",
        ] {
            assert_eq!(ecc_of(text), [None], "{text}");
        }
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
