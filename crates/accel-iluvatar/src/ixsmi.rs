//! `ixsmi`, Iluvatar CoreX's nvidia-smi look-alike: its default table (the banner's IX-ML, driver
//! and CUDA-compatible versions, and one two-line record a GPU: name, bus id, memory, power,
//! temperature, utilisation) and the `--query-gpu … --format=csv` form it shares with
//! nvidia-smi (the UUID and the compute capability, which the table does not print). The module
//! owns the exact argv and the formats; it runs nothing.
//!
//! The table is read by header through `accel_backend::text::box_table` (HAZARDS.md item 1: the
//! columns are not nvidia-smi's, so nothing is read by offset), the CSV by its header through
//! `csv_table`. Placeholders (`N/A` power on every other BI-V150, `CUDA Version: N/A` inside a
//! container) are `None`.

use accel_backend::text::{self, MemoryUnit, Record};
use accel_core::busid::BusId;

/// The default table.
pub const TABLE_ARGV: &[&str] = &["ixsmi"];
/// Each GPU's identity, as nvidia-smi's query names the fields.
pub const QUERY_ARGV: &[&str] = &[
    "ixsmi",
    "--query-gpu=index,uuid,name,pci.bus_id,memory.total",
    "--format=csv",
];
/// Each GPU's compute capability, asked apart: a release that does not know the field refuses
/// the whole query, and the identity must not be lost with it.
pub const COMPUTE_CAP_ARGV: &[&str] = &[
    "ixsmi",
    "--query-gpu=index,pci.bus_id,compute_cap",
    "--format=csv",
];

/// The header words the GPU table is found by (never the banner).
const TABLE_ANCHOR: &[&str] = &["GPU", "Name", "Bus-Id"];

/// Text that is not the output asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IxsmiError {
    #[error("ixsmi printed no GPU table (first line: {first_line:?})")]
    NotTable { first_line: String },
    #[error("ixsmi printed no CSV header with {wanted} (first line: {first_line:?})")]
    NotCsv {
        wanted: &'static str,
        first_line: String,
    },
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

/// The banner: `IX-ML: 4.1.0  Driver Version: 4.1.0  CUDA Version: 10.2`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Banner {
    /// The IX-ML tool's version (it may differ from the driver's, HAZARDS.md item 2).
    pub tool_version: Option<String>,
    pub driver_version: Option<String>,
    /// The CUDA level corex is compatible with (`10.2`); `N/A` inside a container is `None`.
    pub cuda_version: Option<String>,
}

/// One GPU's record of the default table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableGpu {
    /// The tool's index (`GPU` column).
    pub index: Option<u32>,
    pub name: Option<String>,
    pub bus_id: Option<BusId>,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
    pub temperature_c: Option<f64>,
    pub power_draw_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub utilization_percent: Option<f64>,
}

/// The default table: its banner and its GPUs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IxsmiTable {
    pub banner: Banner,
    pub gpus: Vec<TableGpu>,
}

/// The banner's versions, wherever the text holds them.
pub fn parse_banner(text: &str) -> Banner {
    let text = text::clean(text);
    let version = |label| text::version_after(&text, label).map(str::to_string);
    Banner {
        tool_version: version("IX-ML"),
        driver_version: version("Driver Version"),
        cuda_version: version("CUDA Version"),
    }
}

fn bus(raw: Option<&str>) -> Option<BusId> {
    raw.and_then(|b| b.parse().ok())
}

fn table_gpu(record: &Record) -> TableGpu {
    let (used, total) = record
        .get("Memory-Usage")
        .map_or((None, None), |m| text::memory_pair(m, MemoryUnit::MiB));
    let (draw, limit) = record
        .get("Pwr:Usage/Cap")
        .and_then(text::pair)
        .map_or((None, None), |(d, l)| (text::watts(d), text::watts(l)));
    TableGpu {
        index: record
            .get("GPU")
            .and_then(text::whole)
            .and_then(|i| u32::try_from(i).ok()),
        name: record.get("Name").map(str::to_string),
        bus_id: bus(record.get("Bus-Id")),
        memory_used_mib: used,
        memory_total_mib: total,
        temperature_c: record.get("Temp").and_then(text::celsius),
        power_draw_w: draw,
        power_limit_w: limit,
        utilization_percent: record.get("GPU-Util").and_then(text::percent),
    }
}

/// Reads the default table. `Err` when the text holds neither the banner nor the GPU table (an
/// error message, another tool's output); a banner without GPUs is `Ok` with none.
pub fn parse_table(text: &str) -> Result<IxsmiTable, IxsmiError> {
    let banner = parse_banner(text);
    let table = text::box_table(text, TABLE_ANCHOR);
    if table.is_none() && banner.tool_version.is_none() && banner.driver_version.is_none() {
        return Err(IxsmiError::NotTable {
            first_line: first_line(text),
        });
    }
    let gpus = table
        .map(|t| {
            t.records
                .iter()
                .map(table_gpu)
                .filter(|g| g != &TableGpu::default())
                .collect()
        })
        .unwrap_or_default();
    Ok(IxsmiTable { banner, gpus })
}

/// One GPU's row of [`QUERY_ARGV`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryGpu {
    pub index: Option<u32>,
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub bus_id: Option<BusId>,
    pub memory_mib: Option<u64>,
}

fn csv_rows(text: &str, wanted: &'static str) -> Result<Vec<Record>, IxsmiError> {
    text::csv_table(text, &[wanted])
        .map(|t| t.rows)
        .ok_or_else(|| IxsmiError::NotCsv {
            wanted,
            first_line: first_line(text),
        })
}

fn index(record: &Record) -> Option<u32> {
    record
        .get("index")
        .and_then(text::whole)
        .and_then(|i| u32::try_from(i).ok())
}

/// Reads [`QUERY_ARGV`]'s answer. `Err` when there is no header naming `uuid` (ixsmi refused
/// the query: `Field "uuid" is not a valid field to query.`).
pub fn parse_query(text: &str) -> Result<Vec<QueryGpu>, IxsmiError> {
    Ok(csv_rows(text, "uuid")?
        .iter()
        .map(|r| QueryGpu {
            index: index(r),
            uuid: r.get("uuid").map(str::to_string),
            name: r.get("name").map(str::to_string),
            bus_id: bus(r.get("pci.bus_id")),
            memory_mib: r
                .get("memory.total")
                .and_then(|m| text::mebibytes(m, MemoryUnit::MiB)),
        })
        .collect())
}

/// One GPU's compute capability from [`COMPUTE_CAP_ARGV`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComputeCap {
    pub index: Option<u32>,
    pub bus_id: Option<BusId>,
    /// `major.minor` (`7.1`); a major of 0 is none (the spec's rule: no comcap then).
    pub compute_cap: Option<String>,
}

/// `major.minor` with digits on both sides and a major above 0.
fn capability(raw: &str) -> Option<String> {
    let (major, minor) = raw.trim().split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(major) && digits(minor) && !major.trim_start_matches('0').is_empty())
        .then(|| raw.trim().to_string())
}

/// Reads [`COMPUTE_CAP_ARGV`]'s answer; `Err` without a header naming `compute_cap`.
pub fn parse_compute_caps(text: &str) -> Result<Vec<ComputeCap>, IxsmiError> {
    Ok(csv_rows(text, "compute_cap")?
        .iter()
        .map(|r| ComputeCap {
            index: index(r),
            bus_id: bus(r.get("pci.bus_id")),
            compute_cap: r.get("compute_cap").and_then(capability),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_rows_are_read_by_header() {
        let text = "index, uuid, name, pci.bus_id, memory.total [MiB]\n\
                    0, GPU-0f1e, Iluvatar BI-V150, 00000000:13:00.0, 32768 MiB\n\
                    1, [N/A], Iluvatar BI-V150, 00000000:16:00.0, [N/A]\n";
        let gpus = parse_query(text).unwrap();
        assert_eq!(gpus.len(), 2);
        let indices: Vec<_> = gpus.iter().map(|g| g.index).collect();
        assert_eq!(indices, [Some(0), Some(1)]);
        assert_eq!(gpus[0].uuid.as_deref(), Some("GPU-0f1e"));
        assert_eq!(gpus[0].memory_mib, Some(32_768));
        assert_eq!(
            gpus[0].bus_id.map(|b| b.sysfs()).as_deref(),
            Some("0000:13:00.0")
        );
        assert_eq!((gpus[1].uuid.as_deref(), gpus[1].memory_mib), (None, None));
        let refused = "Field \"uuid\" is not a valid field to query.\n";
        assert_eq!(
            parse_query(refused),
            Err(IxsmiError::NotCsv {
                wanted: "uuid",
                first_line: "Field \"uuid\" is not a valid field to query.".into()
            })
        );
    }

    #[test]
    fn a_compute_capability_needs_a_major() {
        let caps = parse_compute_caps(
            "index, pci.bus_id, compute_cap\n0, 00000000:13:00.0, 7.1\n1, 00000000:16:00.0, 0.0\n2, x, N/A\n3, x, 7.x\n4, x, 7.\n",
        )
        .unwrap();
        let got: Vec<Option<&str>> = caps.iter().map(|c| c.compute_cap.as_deref()).collect();
        assert_eq!(
            got,
            [Some("7.1"), None, None, None, None],
            "a minor that is no digits, or none, is no capability"
        );
        let indices: Vec<_> = caps.iter().map(|c| c.index).collect();
        assert_eq!(indices, [Some(0), Some(1), Some(2), Some(3), Some(4)]);
        assert!(parse_compute_caps("").is_err());
    }

    #[test]
    fn text_that_is_no_table_is_refused_naming_its_first_line() {
        let e = parse_table("\nFailed to initialize IXML: Unknown Error\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "ixsmi printed no GPU table (first line: \"Failed to initialize IXML: Unknown Error\")"
        );
    }
}
