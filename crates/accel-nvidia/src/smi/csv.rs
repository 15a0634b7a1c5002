//! Readers of nvidia-smi's `--format=csv` queries, and the exact argv of the ones we run.
//!
//! nvidia-smi's CSV is not RFC 4180: fields are separated by `", "`, nothing is quoted, units sit
//! in the header in brackets (`memory.used [MiB]`) and, without `nounits`, in the values too,
//! and missing values are bracketed words (`[N/A]`, `[Not Supported]`). A Windows process path can
//! hold `", "` itself, so surplus fields are folded back into the free-text column. The module
//! also owns the live-sample query of seed 002 ("Live samples") and when it must give way to the
//! full `-q -x` snapshot. It must not run nvidia-smi.

use std::collections::BTreeMap;

use serde::Serialize;

use super::value::{float, mebibytes, present, whole_u32};
use super::xml::is_compute_type;

/// The fields of a live sample, in the order [`SAMPLE_ARGV`] asks for them.
pub const SAMPLE_FIELDS: &[&str] = &[
    "uuid",
    "memory.total",
    "memory.used",
    "memory.reserved",
    "memory.free",
    "utilization.gpu",
    "utilization.memory",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.mem",
    "pstate",
    "mig.mode.current",
];

/// The live-sample query, exactly as seed 002 runs it.
pub const SAMPLE_ARGV: &[&str] = &[
    "nvidia-smi",
    "--query-gpu=uuid,memory.total,memory.used,memory.reserved,memory.free,utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,pstate,mig.mode.current",
    "--format=csv,noheader,nounits",
];

/// The compute processes of every GPU, one line per process (seed 002, "Live samples").
pub const COMPUTE_APPS_ARGV: &[&str] = &[
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid",
    "--format=csv,noheader",
];

/// Each GPU's CUDA compute capability (`9.0`), which `-q -x` does not carry.
pub const COMPUTE_CAP_ARGV: &[&str] = &[
    "nvidia-smi",
    "--query-gpu=uuid,compute_cap",
    "--format=csv,noheader",
];

/// The field separator nvidia-smi prints.
const SEPARATOR: &str = ", ";

/// Columns whose values are free text and may contain the separator; surplus fields are folded
/// into the first of these a table has, else into its last column.
const FREE_TEXT: &[&str] = &["process_name", "name", "gpu_name"];

/// Why a text is not nvidia-smi CSV of the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsvError {
    /// A row has fewer fields than the header names.
    #[error("nvidia-smi csv line {line} has {found} fields, the header names {expected}")]
    ColumnCount {
        line: usize,
        expected: usize,
        found: usize,
    },
    /// The first line is not a header of field names.
    #[error("nvidia-smi csv output has no header line: first line {0:?}")]
    NoHeader(String),
}

/// A `--format=csv` table with its header.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CsvTable {
    /// Field names in header order, without their units (`memory.used`).
    pub fields: Vec<String>,
    /// Units from the header's brackets, by field (`memory.used` → `MiB`).
    pub units: BTreeMap<String, String>,
    /// One map per row, field name → value text; a placeholder value is left out of the map.
    pub rows: Vec<BTreeMap<String, String>>,
}

/// Reads `--format=csv` output with its header line.
pub fn parse_table(text: &str) -> Result<CsvTable, CsvError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Ok(CsvTable::default());
    };
    let mut table = CsvTable::default();
    for column in header.split(',') {
        let column = column.trim();
        let (name, unit) = match column.split_once('[') {
            Some((name, unit)) => (name.trim(), Some(unit.trim_end_matches(']').trim())),
            None => (column, None),
        };
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(CsvError::NoHeader(header.chars().take(120).collect()));
        }
        if let Some(unit) = unit.filter(|u| !u.is_empty()) {
            table.units.insert(name.to_string(), unit.to_string());
        }
        table.fields.push(name.to_string());
    }
    let fold_into = FREE_TEXT
        .iter()
        .find_map(|f| table.fields.iter().position(|c| c == f))
        .unwrap_or(table.fields.len().saturating_sub(1));
    for (number, line) in lines.enumerate() {
        let cells =
            split_row(line, table.fields.len(), fold_into).ok_or(CsvError::ColumnCount {
                line: number + 2,
                expected: table.fields.len(),
                found: line.split(SEPARATOR).count(),
            })?;
        let row = table
            .fields
            .iter()
            .zip(cells)
            .filter_map(|(field, cell)| present(&cell).map(|v| (field.clone(), v.to_string())))
            .collect();
        table.rows.push(row);
    }
    Ok(table)
}

/// Splits a row into exactly `columns` cells, folding surplus fields back into the column at
/// `fold_into` (a value that itself held the separator). `None` when there are too few.
fn split_row(line: &str, columns: usize, fold_into: usize) -> Option<Vec<String>> {
    let line = line.trim_end_matches(['\r', '\n']);
    let parts: Vec<&str> = line.split(SEPARATOR).collect();
    if parts.len() < columns || columns == 0 {
        return None;
    }
    let surplus = parts.len() - columns;
    let mut cells = Vec::with_capacity(columns);
    let mut i = 0;
    while i < parts.len() {
        if cells.len() == fold_into {
            let end = i + surplus + 1;
            cells.push(parts.get(i..end)?.join(SEPARATOR).trim().to_string());
            i = end;
        } else {
            cells.push(parts.get(i)?.trim().to_string());
            i += 1;
        }
    }
    Some(cells)
}

/// One GPU's live sample (seed 002's query). Absent readings are `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuSample {
    pub uuid: String,
    pub memory_total_mib: Option<u64>,
    pub memory_used_mib: Option<u64>,
    pub memory_reserved_mib: Option<u64>,
    pub memory_free_mib: Option<u64>,
    pub utilization_gpu_percent: Option<f64>,
    pub utilization_memory_percent: Option<f64>,
    pub temperature_c: Option<f64>,
    pub power_draw_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub clock_sm_mhz: Option<u32>,
    pub clock_mem_mhz: Option<u32>,
    pub pstate: Option<String>,
}

/// Why the CSV sample cannot stand in for the full snapshot (seed 002: "Samples falls back to
/// the full snapshot when …").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FallbackReason {
    /// The driver predates a field (`memory.reserved` before R510) and refused the query.
    #[error("the driver refused the sample field {field:?}")]
    FieldRefused { field: String },
    /// A line does not have one value per field.
    #[error("sample line {line} has {found} fields, expected {expected}")]
    ColumnCount {
        line: usize,
        expected: usize,
        found: usize,
    },
    /// A GPU is in MIG mode: a MIG device's memory is only in `-q -x`.
    #[error("GPU {uuid} is in MIG mode")]
    MigEnabled { uuid: String },
    /// A line has no GPU UUID to key the sample by.
    #[error("sample line {line} has no GPU UUID")]
    NoUuid { line: usize },
}

/// The field the driver refused, from output such as
/// `Field "memory.reserved" is not a valid field to query.`
pub fn refused_field(output: &str) -> Option<String> {
    output.lines().find_map(|line| {
        let line = line.trim();
        if !line.contains("is not a valid field to query") {
            return None;
        }
        let start = line.find('"')? + 1;
        let len = line.get(start..)?.find('"')?;
        Some(line.get(start..start + len)?.to_string())
    })
}

/// Reads the live-sample query's output ([`SAMPLE_ARGV`]), or says why the caller must take
/// the full snapshot instead. `stderr` is searched for a refused field as well as `stdout`.
pub fn parse_samples(stdout: &str, stderr: &str) -> Result<Vec<GpuSample>, FallbackReason> {
    if let Some(field) = refused_field(stderr).or_else(|| refused_field(stdout)) {
        return Err(FallbackReason::FieldRefused { field });
    }
    let mut samples = Vec::new();
    for (number, line) in stdout.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let line_number = number + 1;
        let cells: Vec<&str> = line
            .trim_end_matches('\r')
            .split(',')
            .map(str::trim)
            .collect();
        let [
            uuid,
            total,
            used,
            reserved,
            free,
            util_gpu,
            util_mem,
            temp,
            draw,
            limit,
            sm,
            mem,
            pstate,
            mig,
        ] = cells.as_slice()
        else {
            return Err(FallbackReason::ColumnCount {
                line: line_number,
                expected: SAMPLE_FIELDS.len(),
                found: cells.len(),
            });
        };
        let Some(uuid) = present(uuid) else {
            return Err(FallbackReason::NoUuid { line: line_number });
        };
        if present(mig).is_some_and(|m| m.eq_ignore_ascii_case("enabled")) {
            return Err(FallbackReason::MigEnabled {
                uuid: uuid.to_string(),
            });
        }
        samples.push(GpuSample {
            uuid: uuid.to_string(),
            memory_total_mib: mebibytes(total),
            memory_used_mib: mebibytes(used),
            memory_reserved_mib: mebibytes(reserved),
            memory_free_mib: mebibytes(free),
            utilization_gpu_percent: float(util_gpu),
            utilization_memory_percent: float(util_mem),
            temperature_c: float(temp),
            power_draw_w: float(draw),
            power_limit_w: float(limit),
            clock_sm_mhz: whole_u32(sm),
            clock_mem_mhz: whole_u32(mem),
            pstate: present(pstate).map(str::to_string),
        });
    }
    Ok(samples)
}

/// Compute processes per GPU UUID from [`COMPUTE_APPS_ARGV`]'s output: one line per process.
/// GPUs with none are absent (the caller knows its GPUs and reads absence as zero).
pub fn parse_compute_app_counts(stdout: &str) -> BTreeMap<String, u32> {
    let mut counts = BTreeMap::new();
    for line in stdout.lines() {
        // With a header or more fields than asked for, the UUID is still the first field.
        let Some(uuid) = line.split(',').next().and_then(present) else {
            continue;
        };
        if !(uuid.starts_with("GPU-") || uuid.starts_with("MIG-")) {
            continue;
        }
        *counts.entry(uuid.to_string()).or_insert(0u32) += 1;
    }
    counts
}

/// Compute processes per GPU UUID from a headed `--query-compute-apps` table that has a
/// `gpu_uuid` column and, optionally, a process type column (`type`) to filter on.
pub fn compute_app_counts_from_table(table: &CsvTable) -> BTreeMap<String, u32> {
    let mut counts = BTreeMap::new();
    for row in &table.rows {
        if row.get("type").is_some_and(|t| !is_compute_type(t)) {
            continue;
        }
        if let Some(uuid) = row.get("gpu_uuid") {
            *counts.entry(uuid.clone()).or_insert(0u32) += 1;
        }
    }
    counts
}

/// UUID → compute capability (`9.0`) from [`COMPUTE_CAP_ARGV`]'s output. GPUs whose capability
/// is a placeholder are left out.
pub fn parse_compute_caps(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|line| {
            let (uuid, cap) = line.split_once(',')?;
            let uuid = present(uuid)?;
            let cap = present(cap)?;
            let valid = uuid.starts_with("GPU-")
                && cap.split_once('.').is_some_and(|(a, b)| {
                    !a.is_empty()
                        && !b.is_empty()
                        && a.bytes().all(|c| c.is_ascii_digit())
                        && b.bytes().all(|c| c.is_ascii_digit())
                });
            valid.then(|| (uuid.to_string(), cap.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_units_placeholders_and_values_with_units() {
        let text = "name, uuid, memory.used [MiB], fan.speed [%], pstate\nTesla T4, GPU-1, 575 MiB, [N/A], P8\n";
        let table = parse_table(text).unwrap();
        assert_eq!(
            table.fields,
            ["name", "uuid", "memory.used", "fan.speed", "pstate"]
        );
        assert_eq!(
            table.units.get("memory.used").map(String::as_str),
            Some("MiB")
        );
        let row = &table.rows[0];
        assert_eq!(row.get("memory.used").map(String::as_str), Some("575 MiB"));
        assert_eq!(row.get("fan.speed"), None, "placeholders are absent");
        assert_eq!(row.get("name").map(String::as_str), Some("Tesla T4"));
    }

    #[test]
    fn windows_path_with_separator_folds_into_process_name() {
        let text = "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\r\nGPU-1, 42, C:\\Program Files\\A, B\\x.exe, [N/A]\r\n";
        let table = parse_table(text).unwrap();
        let row = &table.rows[0];
        assert_eq!(
            row.get("process_name").map(String::as_str),
            Some("C:\\Program Files\\A, B\\x.exe")
        );
        assert_eq!(row.get("pid").map(String::as_str), Some("42"));
        assert_eq!(row.get("used_gpu_memory"), None);
        let last = parse_table("uuid, comment\nGPU-1, a, b\n").unwrap();
        assert_eq!(
            last.rows[0].get("comment").map(String::as_str),
            Some("a, b")
        );
    }

    #[test]
    fn short_rows_and_headerless_text_are_errors() {
        assert_eq!(
            parse_table("a, b, c\n1, 2\n"),
            Err(CsvError::ColumnCount {
                line: 2,
                expected: 3,
                found: 2
            })
        );
        assert!(matches!(
            parse_table("Failed to initialize NVML: Unknown Error\n"),
            Err(CsvError::NoHeader(_))
        ));
        assert_eq!(parse_table(""), Ok(CsvTable::default()));
    }

    const LINE: &str =
        "GPU-aaa, 81559, 10, 531, 81017, 0, 0, 31, 69.85, 700.00, 1980, 2619, P0, Disabled";

    #[test]
    fn samples() {
        let samples = parse_samples(&format!("{LINE}\n"), "").unwrap();
        let s = &samples[0];
        assert_eq!(s.uuid, "GPU-aaa");
        assert_eq!(s.memory_total_mib, Some(81559));
        assert_eq!(s.memory_reserved_mib, Some(531));
        assert_eq!(s.power_draw_w, Some(69.85));
        assert_eq!(s.clock_mem_mhz, Some(2619));
        assert_eq!(s.pstate.as_deref(), Some("P0"));
        let na = parse_samples(
            "GPU-b, 15360, 0, [N/A], 15000, [N/A], 0, 40, [N/A], 70.00, 300, 5000, P8, [N/A]\n",
            "",
        )
        .unwrap();
        assert_eq!(na[0].memory_reserved_mib, None);
        assert_eq!(na[0].utilization_gpu_percent, None);
        assert_eq!(na[0].power_draw_w, None);
    }

    #[test]
    fn sample_fallbacks() {
        let refused = "Field \"memory.reserved\" is not a valid field to query.\n";
        assert_eq!(
            parse_samples("", refused),
            Err(FallbackReason::FieldRefused {
                field: "memory.reserved".into()
            })
        );
        assert!(matches!(
            parse_samples(refused, ""),
            Err(FallbackReason::FieldRefused { .. })
        ));
        assert_eq!(
            parse_samples("GPU-a, 1, 2\n", ""),
            Err(FallbackReason::ColumnCount {
                line: 1,
                expected: 14,
                found: 3
            })
        );
        let mig = LINE.replace("Disabled", "Enabled");
        assert_eq!(
            parse_samples(&mig, ""),
            Err(FallbackReason::MigEnabled {
                uuid: "GPU-aaa".into()
            })
        );
        let no_uuid = LINE.replace("GPU-aaa", "[N/A]");
        assert_eq!(
            parse_samples(&no_uuid, ""),
            Err(FallbackReason::NoUuid { line: 1 })
        );
        assert_eq!(parse_samples("", ""), Ok(vec![]));
    }

    #[test]
    fn argv_matches_fields() {
        let query = SAMPLE_ARGV[1].strip_prefix("--query-gpu=").unwrap();
        assert_eq!(query.split(',').collect::<Vec<_>>(), SAMPLE_FIELDS);
    }

    #[test]
    fn compute_counts_and_caps() {
        let counts =
            parse_compute_app_counts("GPU-a\nGPU-b\nGPU-a\n\nNo running processes found\n");
        assert_eq!(counts.get("GPU-a"), Some(&2));
        assert_eq!(counts.get("GPU-b"), Some(&1));
        assert_eq!(counts.len(), 2);
        let caps = parse_compute_caps("GPU-a, 9.0\r\nGPU-b, [N/A]\nGPU-c, 12.0\n");
        assert_eq!(caps.get("GPU-a").map(String::as_str), Some("9.0"));
        assert_eq!(caps.get("GPU-b"), None);
        assert_eq!(caps.get("GPU-c").map(String::as_str), Some("12.0"));
    }

    #[test]
    fn table_counts_skip_graphics() {
        let table =
            parse_table("gpu_uuid, pid, type\nGPU-a, 1, C\nGPU-a, 2, G\nGPU-a, 3, M+C\n").unwrap();
        assert_eq!(compute_app_counts_from_table(&table).get("GPU-a"), Some(&2));
    }
}
