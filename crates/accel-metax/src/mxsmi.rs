//! `mx-smi`, MetaX's management tool: the default table (a `mx-smi  version:` line and a log
//! banner before it, then a box of two lines per GPU) and `mx-smi -L` (one line per GPU with
//! its UUID).
//!
//! **The table** is read by header label through [`accel_backend::text::box_table`]: the
//! second header row changed between releases (`Temp  Power` with a bare wattage in 2.1.6,
//! `Temp  Pwr:Usage/Cap` in 2.1.12; HAZARDS.md item 2), so a field is looked up by its label
//! and a renamed one is `None`. Memory is `used/total MiB` with no blanks (item 4). The title
//! box carries the kernel driver and MACA versions. Moffett AI ships a tool of the same name
//! (item 6): a text with no MetaX banner and no MACA version is refused, not read.
//!
//! **`mx-smi -L`** is the only output that names a GPU's UUID. Its layout is not among the
//! shared captures, so each line is read for what it plainly holds: a `GPU <n>` / `GPU#<n>`
//! ordinal, a PCI address, and the word after `UUID` (`UUID: GPU-…`). A line without a UUID is
//! skipped; a text that prints something but no line with a UUID is not `-L`'s output
//! ([`MxSmiError::NoUuidLine`]).

use accel_backend::text::{self, MemoryUnit, box_table, present, version_after};
use accel_core::busid::BusId;

/// The default table.
pub const TABLE_ARGV: &[&str] = &["mx-smi"];
/// The list with UUIDs.
pub const LIST_ARGV: &[&str] = &["mx-smi", "-L"];

/// Why a text is not MetaX's mx-smi table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MxSmiError {
    #[error("mx-smi: no GPU table in the output (first line: {first_line:?})")]
    NoTable { first_line: String },
    /// Another vendor's tool of the same name (Moffett AI's).
    #[error(
        "mx-smi: the output is not MetaX's (no MetaX banner, no MACA version; first line: {first_line:?})"
    )]
    NotMetax { first_line: String },
    /// `mx-smi -L` printed text in which no line names a UUID.
    #[error("mx-smi -L: no line names a GPU's UUID (first line: {first_line:?})")]
    NoUuidLine { first_line: String },
}

/// One GPU row of the table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MxSmiGpu {
    /// `GPU`: the tool's ordinal.
    pub gpu: Option<u32>,
    /// `NAME` (`MetaX C500`, `MXC550`).
    pub name: Option<String>,
    pub bus_id: Option<BusId>,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
    /// `GPU-Util`, in percent.
    pub utilization_percent: Option<f64>,
    /// `Temp`, in °C.
    pub temperature_c: Option<f64>,
    /// The draw of `Pwr:Usage/Cap` (2.1.12) or `Power` (2.1.6, which prints no cap), in W.
    pub power_draw_w: Option<f64>,
    /// The cap of `Pwr:Usage/Cap`, in W.
    pub power_limit_w: Option<f64>,
}

/// The table and its title box's versions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MxSmiTable {
    /// `MX-SMI 2.1.12`.
    pub tool_version: Option<String>,
    /// `Kernel Mode Driver Version: 2.12.13`.
    pub driver_version: Option<String>,
    /// `MACA Version: 2.29.0.19`.
    pub maca_version: Option<String>,
    pub gpus: Vec<MxSmiGpu>,
}

fn first_line(text: &str) -> String {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .chars()
        .take(80)
        .collect()
}

/// Reads the default table.
pub fn parse_table(text: &str) -> Result<MxSmiTable, MxSmiError> {
    let cleaned = text::clean(text);
    let maca_version = version_after(&cleaned, "MACA Version").map(str::to_string);
    let banner = cleaned.to_ascii_lowercase().contains("metax");
    let Some(table) = box_table(&cleaned, &["GPU", "Bus-id"]) else {
        return Err(MxSmiError::NoTable {
            first_line: first_line(&cleaned),
        });
    };
    if !banner && maca_version.is_none() {
        return Err(MxSmiError::NotMetax {
            first_line: first_line(&cleaned),
        });
    }
    let mut out = MxSmiTable {
        tool_version: version_after(&cleaned, "MX-SMI").map(str::to_string),
        driver_version: version_after(&cleaned, "Kernel Mode Driver Version").map(str::to_string),
        maca_version,
        gpus: Vec::new(),
    };
    for record in &table.records {
        let power = record.get("Pwr:Usage/Cap").and_then(text::pair);
        let (used, total) = record
            .get("Memory-Usage")
            .map(|m| text::memory_pair(m, MemoryUnit::MiB))
            .unwrap_or((None, None));
        let gpu = MxSmiGpu {
            gpu: record
                .get("GPU")
                .and_then(text::whole)
                .and_then(|n| u32::try_from(n).ok()),
            name: record.get("NAME").map(str::to_string),
            bus_id: record.get("Bus-id").and_then(|b| b.parse().ok()),
            memory_used_mib: used,
            memory_total_mib: total,
            utilization_percent: record.get("GPU-Util").and_then(text::percent),
            temperature_c: record.get("Temp").and_then(text::celsius),
            power_draw_w: power
                .map(|(draw, _)| draw)
                .or_else(|| record.get("Power"))
                .and_then(text::watts),
            power_limit_w: power.and_then(|(_, cap)| text::watts(cap)),
        };
        if gpu.gpu.is_none() && gpu.bus_id.is_none() {
            continue;
        }
        out.gpus.push(gpu);
    }
    Ok(out)
}

/// One line of `mx-smi -L`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MxSmiListed {
    pub gpu: Option<u32>,
    pub bus_id: Option<BusId>,
    pub uuid: String,
}

fn ordinal(line: &str) -> Option<u32> {
    let at = line.find("GPU")?;
    let rest = line[at + 3..].trim_start_matches(['#', ' ', '\t']);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Reads `mx-smi -L`: the lines that name a UUID, in printed order; a blank text is an empty
/// list, a text that prints something but no such line is [`MxSmiError::NoUuidLine`].
pub fn parse_list(text: &str) -> Result<Vec<MxSmiListed>, MxSmiError> {
    let cleaned = text::clean(text);
    let listed: Vec<MxSmiListed> = cleaned
        .lines()
        .filter_map(|line| {
            let lower = line.to_ascii_lowercase();
            let at = lower.find("uuid")?;
            let rest = line.get(at + 4..)?;
            let rest = rest
                .trim_start()
                .trim_start_matches([':', '='])
                .trim_start();
            let uuid = rest
                .split(|c: char| c.is_whitespace() || matches!(c, ')' | ',' | ';'))
                .next()
                .and_then(present)?
                .to_string();
            let bus_id = line
                .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | ','))
                .find_map(|w| {
                    let w = w.trim_end_matches(':');
                    (w.matches(':').count() >= 1 && w.contains('.'))
                        .then(|| w.parse::<BusId>().ok())
                        .flatten()
                });
            Some(MxSmiListed {
                gpu: ordinal(line),
                bus_id,
                uuid,
            })
        })
        .collect();
    if listed.is_empty() && !cleaned.trim().is_empty() {
        return Err(MxSmiError::NoUuidLine {
            first_line: first_line(&cleaned),
        });
    }
    Ok(listed)
}

/// The major.minor of a version (`2.29.0.19` → `2.29`).
pub fn major_minor(version: &str) -> Option<String> {
    let v = text::dotted_version(version)?;
    let mut parts = v.split('.');
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => {
            let minor: String = minor.chars().take_while(char::is_ascii_digit).collect();
            Some(format!("{major}.{minor}"))
        }
        _ => None,
    }
}

/// The product name as MetaX's library names the model (`MXSML`'s `DeviceName`, spec §2.3:
/// `MXC500`), whatever the tool's release prints: `mx-smi` 2.1.6 prints `MXC550`, 2.1.12
/// `MetaX C500` (HAZARDS.md item 3), one model either way. A name printed as `MetaX <model>`
/// becomes `MX<model>` (`MetaX C500` → `MXC500`, `MetaX MXC550` → `MXC550`); any other is kept
/// as printed. The group id and the `.product` label follow from it, so two nodes of one model
/// never split into two pools.
pub fn model_name(printed: &str) -> String {
    let trimmed = printed.trim();
    let Some(model) = trimmed
        .get(..5)
        .filter(|word| word.eq_ignore_ascii_case("metax"))
        .and_then(|_| trimmed.get(5..))
        .filter(|rest| rest.starts_with(char::is_whitespace))
        .map(str::trim)
        .filter(|model| !model.is_empty())
    else {
        return trimmed.to_string();
    };
    if model
        .get(..2)
        .is_some_and(|mx| mx.eq_ignore_ascii_case("mx"))
    {
        model.to_string()
    } else {
        format!("MX{model}")
    }
}

/// MetaX's family for a product name, case-insensitively (`MXC500`, `MetaX C500` → `MXC`;
/// `N…` → `MXN`, `G…` → `MXG`): the described system's patterns are case-sensitive and so
/// never match a real name; this build matches them without case (issue 30).
pub fn family(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    for (letter, family) in [(b'c', "MXC"), (b'n', "MXN"), (b'g', "MXG")] {
        for (i, &b) in bytes.iter().enumerate() {
            if b != letter {
                continue;
            }
            let digits = bytes[i + 1..]
                .iter()
                .take_while(|d| d.is_ascii_digit())
                .count();
            // `c\d{2,4}` unanchored matches wherever two digits follow.
            if digits >= 2 {
                return Some(family);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_are_the_librarys_whatever_the_release() {
        assert_eq!(model_name("MetaX C500"), "MXC500");
        assert_eq!(model_name("MXC500"), "MXC500");
        assert_eq!(model_name("MetaX C550"), "MXC550");
        assert_eq!(model_name("MXC550"), "MXC550");
        assert_eq!(model_name(" MetaX  N260 "), "MXN260");
        assert_eq!(model_name("metax MXC600-A"), "MXC600-A");
        assert_eq!(model_name("MetaX"), "MetaX");
        assert_eq!(model_name("MetaXC500"), "MetaXC500");
        assert_eq!(model_name("Moffett S30"), "Moffett S30");
    }

    #[test]
    fn families_without_case() {
        assert_eq!(family("MXC500"), Some("MXC"));
        assert_eq!(family("MetaX C550"), Some("MXC"));
        assert_eq!(family("MXN260"), Some("MXN"));
        assert_eq!(family("MetaX G100"), Some("MXG"));
        assert_eq!(family("MetaX"), None);
        assert_eq!(family("C5"), None);
    }

    #[test]
    fn list_lines_with_and_without_uuids() {
        let listed = parse_list(
            "GPU#0 MetaX C500 0000:0e:00.0 (UUID: GPU-3fd4ee8f-169c-6d31-f9dc-c2a90a441f1b)\nGPU#1 MetaX C500 0000:0f:00.0\n",
        )
        .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].gpu, Some(0));
        assert_eq!(listed[0].uuid, "GPU-3fd4ee8f-169c-6d31-f9dc-c2a90a441f1b");
        assert_eq!(
            listed[0].bus_id.map(|b| b.sysfs()).as_deref(),
            Some("0000:0e:00.0")
        );
    }

    #[test]
    fn a_list_with_no_uuid_line_is_not_mx_smi_list() {
        assert_eq!(parse_list("\n").unwrap(), Vec::new());
        assert_eq!(
            parse_list("GPU#1 MetaX C500 0000:0f:00.0\n").unwrap_err(),
            MxSmiError::NoUuidLine {
                first_line: "GPU#1 MetaX C500 0000:0f:00.0".into()
            }
        );
    }

    #[test]
    fn versions_cut_to_major_minor() {
        assert_eq!(major_minor("2.29.0.19").as_deref(), Some("2.29"));
        assert_eq!(major_minor("x"), None);
    }
}
