//! `ppu-smi`'s outputs: the nvidia-smi-shaped device table (`ppu-smi`), the device list
//! (`ppu-smi -L`, MIG children indented under their card), the full query (`ppu-smi -q`) and the
//! `MIG devices:` table. Each parser returns the output's own shape with `Option` fields; the
//! detector joins them. Tables are read by header words through `accel_backend::text`, never by
//! offset or banner (HAZARDS.md items 1–5: `PPU` where nvidia-smi says `GPU`, a commit-suffixed
//! driver version, `HGGC Version: N/A`, UUIDs outside the 8-4-4-4-12 shape, a `CU` column).
//! Parsers don't log.

use accel_backend::text::{self, MemoryUnit};
use accel_core::busid::BusId;
use accel_core::inventory::MigMode;

/// The device table: `ppu-smi` with no argument.
pub const TABLE_ARGV: &[&str] = &["ppu-smi"];
/// The device list with MIG children.
pub const LIST_ARGV: &[&str] = &["ppu-smi", "-L"];
/// The full query (minor numbers, MIG mode current and pending).
pub const QUERY_ARGV: &[&str] = &["ppu-smi", "-q"];
/// Every MIG-mode card's GPU instance profiles (the nvidia-smi MIG dialect).
pub const MIG_PROFILES_ARGV: &[&str] = &["ppu-smi", "mig", "-lgip"];
/// Their possible placements.
pub const MIG_PLACEMENTS_ARGV: &[&str] = &["ppu-smi", "mig", "-lgipp"];

/// The words `ppu-smi` prints when the `alixpu` module is not loaded (HAZARDS.md item 5).
pub const DRIVER_NOT_LOADED: &str = "driver is not loaded";

/// Why an output could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmiError {
    /// `ppu-smi` answered that the `alixpu` driver is not loaded (`init HGML error: …`).
    #[error("ppu-smi: the alixpu driver is not loaded ({line})")]
    DriverNotLoaded { line: String },
    /// The text is not the output asked for; the first line is quoted.
    #[error("ppu-smi{args}: not its output (first line {first:?})")]
    NotOutput { args: &'static str, first: String },
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output")
        .chars()
        .take(120)
        .collect()
}

/// The driver-not-loaded answer, when `text` is one.
pub fn driver_not_loaded(text: &str) -> Option<SmiError> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.to_ascii_lowercase().contains(DRIVER_NOT_LOADED))?;
    Some(SmiError::DriverNotLoaded {
        line: line.chars().take(120).collect(),
    })
}

fn nothing_or_error(text: &str, args: &'static str) -> SmiError {
    driver_not_loaded(text).unwrap_or_else(|| SmiError::NotOutput {
        args,
        first: first_line(text),
    })
}

/// One card's record of the device table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableCard {
    /// The tool's index (`PPU` column).
    pub index: Option<u32>,
    pub name: Option<String>,
    pub bus_id: Option<BusId>,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
    /// `Volatile Uncorr. ECC`.
    pub ecc_uncorrected: Option<u64>,
    /// `MIG M.`: `Enabled` / `Disabled`; other words (`N/A`) are `None`.
    pub mig_mode: Option<MigMode>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
    pub utilization_percent: Option<f64>,
}

/// The device table and its banner.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SmiTable {
    /// `PPU-SMI 1.17`.
    pub smi_version: Option<String>,
    /// `Driver Version: 2.1.1-rbd225`.
    pub driver_version: Option<String>,
    /// `HGGC Version: …` (`N/A` without a runtime: `None`).
    pub hggc_version: Option<String>,
    pub cards: Vec<TableCard>,
}

/// A `MIG M.` cell.
pub fn mig_mode(raw: &str) -> Option<MigMode> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "enabled" => Some(MigMode::Enabled),
        "disabled" => Some(MigMode::Disabled),
        _ => None,
    }
}

/// Reads `ppu-smi`'s device table (found by its `PPU`/`Name` header, HAZARDS.md item 1).
/// A table with no card row is `Ok` with no cards; text that is no table at all is `Err`
/// (the driver-not-loaded answer named as such).
pub fn parse_table(text: &str) -> Result<SmiTable, SmiError> {
    let text = text::clean(text);
    let table = text::box_table(&text, &["PPU", "Name"])
        .filter(|t| t.has_label("Bus-Id") || t.has_label("Memory-Usage"))
        .ok_or_else(|| nothing_or_error(&text, ""))?;
    let cards = table
        .records
        .iter()
        .map(|r| {
            let (used, total) = r
                .get("Memory-Usage")
                .map(|m| text::memory_pair(m, MemoryUnit::MiB))
                .unwrap_or((None, None));
            TableCard {
                index: r.get("PPU").and_then(|v| v.parse().ok()),
                name: r.get("Name").map(str::to_string),
                bus_id: r.get("Bus-Id").and_then(|b| b.parse().ok()),
                memory_used_mib: used,
                memory_total_mib: total,
                ecc_uncorrected: r.get("Volatile Uncorr. ECC").and_then(text::whole),
                mig_mode: r.get("MIG M.").and_then(mig_mode),
                temperature_c: r.get("Temp").and_then(text::celsius),
                power_w: r
                    .get("Pwr:Usage/Cap")
                    .and_then(text::pair)
                    .and_then(|(used, _)| text::watts(used)),
                utilization_percent: r.get("PPU-Util").and_then(text::percent),
            }
        })
        .filter(|c| c.index.is_some() || c.bus_id.is_some())
        .collect();
    Ok(SmiTable {
        smi_version: text::version_after(&text, "PPU-SMI").map(str::to_string),
        driver_version: text::version_after(&text, "Driver Version").map(str::to_string),
        hggc_version: text::version_after(&text, "HGGC Version").map(str::to_string),
        cards,
    })
}

/// A MIG device `ppu-smi -L` lists under its card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedMig {
    /// The profile word as printed (`g1.c1.i1`, HAZARDS.md item 3).
    pub profile: Option<String>,
    /// `Device <n>`.
    pub device: Option<u32>,
    pub uuid: Option<String>,
}

/// One card of `ppu-smi -L`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedCard {
    pub index: u32,
    /// The name as printed (every card reads just `PPU`, HAZARDS.md item 3).
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub mig: Vec<ListedMig>,
}

/// The `(UUID: …)` of a line, kept verbatim whatever its shape (never the 8-4-4-4-12 test).
fn uuid_of(line: &str) -> Option<String> {
    let start = line.find("(UUID:")? + "(UUID:".len();
    let rest = &line[start..];
    let end = rest.find(')').unwrap_or(rest.len());
    text::present(rest[..end].trim()).map(str::to_string)
}

/// Reads `ppu-smi -L`: `PPU <n>: <name> (UUID: GPU-…)` lines, each followed by its indented
/// `MIG <profile>, Device <n> (UUID: MIG-…)` children. A line of neither shape is skipped;
/// output with no card line at all is `Err` (the driver-not-loaded answer named as such).
pub fn parse_list(text: &str) -> Result<Vec<ListedCard>, SmiError> {
    let text = text::clean(text);
    let mut cards: Vec<ListedCard> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("MIG ") {
            let Some(card) = cards.last_mut() else {
                continue;
            };
            let head = rest.split(" (UUID:").next().unwrap_or(rest);
            let (profile, device) = match head.split_once(',') {
                Some((p, d)) => (p.trim(), d.trim()),
                None => (head.trim(), ""),
            };
            card.mig.push(ListedMig {
                profile: text::present(profile).map(str::to_string),
                device: device
                    .strip_prefix("Device")
                    .and_then(|n| n.trim().parse().ok()),
                uuid: uuid_of(trimmed),
            });
            continue;
        }
        let Some(rest) = trimmed
            .strip_prefix("PPU ")
            .or_else(|| trimmed.strip_prefix("GPU "))
        else {
            continue;
        };
        let Some((index, after)) = rest.split_once(':') else {
            continue;
        };
        let Ok(index) = index.trim().parse::<u32>() else {
            continue;
        };
        let name = after.split(" (UUID:").next().map(str::trim);
        cards.push(ListedCard {
            index,
            name: name.and_then(text::present).map(str::to_string),
            uuid: uuid_of(after),
            mig: Vec::new(),
        });
    }
    if cards.is_empty() && text.lines().any(|l| !l.trim().is_empty()) {
        return Err(nothing_or_error(&text, " -L"));
    }
    Ok(cards)
}

/// One card's section of `ppu-smi -q`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueriedCard {
    /// The section's heading address (`PPU 00000000:A8:00.0`).
    pub bus_id: Option<BusId>,
    pub product: Option<String>,
    pub uuid: Option<String>,
    /// `Minor Number`: the kernel minor of the card's `/dev/alixpu_ppu<N>`.
    pub minor: Option<u32>,
    /// `MIG Mode` → `Current`.
    pub mig_current: Option<MigMode>,
    /// `MIG Mode` → `Pending` (takes effect after a device-manager restart, never before).
    pub mig_pending: Option<MigMode>,
}

/// The full query's banner and card sections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pub driver_version: Option<String>,
    pub hggc_version: Option<String>,
    pub cards: Vec<QueriedCard>,
}

/// A `key : value` line, trimmed (`None` for a heading or another line).
fn key_value(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(':')?;
    let key = key.trim();
    (!key.is_empty()).then_some((key, value.trim()))
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Reads `ppu-smi -q`: a card section starts at an unindented `PPU <bus id>` (or `GPU …`)
/// heading; inside it `key : value` lines are looked up by key (compared without case), and
/// a heading's children (`MIG Mode` → `Current`, `Pending`) by the heading they sit under. A
/// key the release lacks gives `None`. No card section and no banner key is `Err`.
pub fn parse_query(text: &str) -> Result<Query, SmiError> {
    let text = text::clean(text);
    let mut query = Query::default();
    let mut card: Option<QueriedCard> = None;
    // The heading the current lines sit under, with its indentation.
    let mut heading: Option<(String, usize)> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let depth = indent(line);
        let trimmed = line.trim();
        if depth == 0 {
            let address = trimmed
                .strip_prefix("PPU ")
                .or_else(|| trimmed.strip_prefix("GPU "));
            if let Some(Ok(bus)) = address.map(|a| a.trim().parse::<BusId>()) {
                query.cards.extend(card.take());
                card = Some(QueriedCard {
                    bus_id: Some(bus),
                    ..QueriedCard::default()
                });
                heading = None;
                continue;
            }
        }
        if heading.as_ref().is_some_and(|(_, d)| depth <= *d) {
            heading = None;
        }
        let Some((key, value)) = key_value(trimmed) else {
            heading = Some((trimmed.to_ascii_lowercase(), depth));
            continue;
        };
        if value.is_empty() {
            heading = Some((key.to_ascii_lowercase(), depth));
            continue;
        }
        let key = key.to_ascii_lowercase();
        let under = heading.as_ref().map(|(h, _)| h.as_str());
        let value = text::present(value);
        match card.as_mut() {
            None => match key.as_str() {
                "driver version" => {
                    query.driver_version = value.and_then(text::dotted_version).map(String::from)
                }
                "hggc version" => {
                    query.hggc_version = value.and_then(text::dotted_version).map(String::from)
                }
                _ => {}
            },
            Some(card) => match (under, key.as_str()) {
                (None, "product name") => card.product = value.map(String::from),
                (None, "ppu uuid" | "gpu uuid" | "uuid") => card.uuid = value.map(String::from),
                (None, "minor number") => card.minor = value.and_then(|v| v.parse().ok()),
                (Some("mig mode"), "current") => card.mig_current = value.and_then(mig_mode),
                (Some("mig mode"), "pending") => card.mig_pending = value.and_then(mig_mode),
                _ => {}
            },
        }
    }
    query.cards.extend(card);
    if query.cards.is_empty() && query.driver_version.is_none() {
        return Err(nothing_or_error(&text, " -q"));
    }
    Ok(query)
}

/// One row of the `MIG devices:` table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigRow {
    /// The card's tool index.
    pub card: Option<u32>,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    /// `MIG DEV`.
    pub device: Option<u32>,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
}

/// Reads the `MIG devices:` table `ppu-smi` appends with MIG on (found by its `GI`/`CI`
/// header). No such table is an empty list. Each record is one line, so it pairs with the
/// header's first line only: the `CU` count (where nvidia-smi prints `SM`, HAZARDS.md item 4)
/// sits under the second header line beside `Unc`, and is not read rather than guessed.
pub fn parse_mig_table(text: &str) -> Vec<MigRow> {
    let text = text::clean(text);
    let Some(table) = text::box_table(&text, &["PPU", "GI", "CI"]) else {
        return Vec::new();
    };
    let number = |r: &text::Record, label: &str| r.get(label).and_then(|v| v.parse::<u32>().ok());
    table
        .records
        .iter()
        .map(|r| {
            let (used, total) = r
                .get("Memory-Usage")
                .map(|m| text::memory_pair(m, MemoryUnit::MiB))
                .unwrap_or((None, None));
            MigRow {
                card: number(r, "PPU"),
                gpu_instance: number(r, "GI"),
                compute_instance: number(r, "CI"),
                device: number(r, "MIG"),
                memory_used_mib: used,
                memory_total_mib: total,
            }
        })
        .filter(|r| r.card.is_some())
        .collect()
}

/// One row of the `Processes:` table `ppu-smi` prints under its device table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessRow {
    /// The card's tool index.
    pub card: Option<u32>,
    /// `GI ID`: `N/A` (none) on a card not in MIG mode.
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub pid: Option<u32>,
    /// `C` for a compute process.
    pub kind: Option<String>,
}

impl ProcessRow {
    /// A compute process (`Type` `C`, or `C+G`).
    pub fn is_compute(&self) -> bool {
        self.kind.as_deref().is_some_and(|k| k.contains('C'))
    }
}

/// Reads the `Processes:` table (`PPU GI CI PID Type Process name PPU Memory`; manual §2.2):
/// each row by its leading words, since the process name may hold blanks. `No running
/// processes found`, or no such table, is an empty list.
pub fn parse_processes(text: &str) -> Vec<ProcessRow> {
    let text = text::clean(text);
    let mut lines = text.lines().map(str::trim);
    if lines.by_ref().find(|l| l.contains("Processes:")).is_none() {
        return Vec::new();
    }
    if lines
        .by_ref()
        .find(|l| l.starts_with("+=") || l.starts_with("|="))
        .is_none()
    {
        return Vec::new();
    }
    let number = |w: Option<&&str>| {
        w.and_then(|w| text::present(w))
            .and_then(|w| w.parse().ok())
    };
    lines
        .filter_map(|l| l.strip_prefix('|'))
        .map(|l| {
            l.trim_end_matches('|')
                .split_whitespace()
                .collect::<Vec<_>>()
        })
        .filter(|w| w.first().is_some_and(|c| c.parse::<u32>().is_ok()))
        .map(|w| ProcessRow {
            card: number(w.first()),
            gpu_instance: number(w.get(1)),
            compute_instance: number(w.get(2)),
            pid: number(w.get(3)),
            kind: w.get(4).map(|k| k.to_string()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_reads_minor_and_mig_mode_by_heading() {
        let text = "==============PPU-SMI LOG==============\n\nDriver Version : 2.1.0-ra1f23041713\nHGGC Version : N/A\nAttached PPUs : 2\nPPU 00000000:A8:00.0\n    Product Name : PPU-ZW810E\n    MIG Mode\n        Current : Enabled\n        Pending : Disabled\n    PPU UUID : GPU-1\n    Minor Number : 1\nPPU 00000000:A7:00.0\n    Minor Number : N/A\n";
        let q = parse_query(text).unwrap();
        assert_eq!(q.driver_version.as_deref(), Some("2.1.0-ra1f23041713"));
        assert_eq!(q.hggc_version, None);
        assert_eq!(q.cards.len(), 2);
        let a = &q.cards[0];
        assert_eq!(a.bus_id.unwrap().sysfs(), "0000:a8:00.0");
        assert_eq!(
            (a.mig_current, a.mig_pending),
            (Some(MigMode::Enabled), Some(MigMode::Disabled))
        );
        assert_eq!((a.minor, a.uuid.as_deref()), (Some(1), Some("GPU-1")));
        assert_eq!(a.product.as_deref(), Some("PPU-ZW810E"));
        assert_eq!(q.cards[1].minor, None);
        assert!(parse_query("hello\n").is_err());
        // The banner alone (no card attached) is the query's answer, its versions read.
        let banner =
            parse_query("Driver Version : 2.1.0\nHGGC Version : 1.4.2\nAttached PPUs : 0\n")
                .unwrap();
        assert_eq!(
            (
                banner.driver_version.as_deref(),
                banner.hggc_version.as_deref(),
                banner.cards.len()
            ),
            (Some("2.1.0"), Some("1.4.2"), 0)
        );
    }

    #[test]
    fn the_list_reads_cards_and_indented_mig_children() {
        let cards = parse_list(
            "PPU 0: PPU (UUID: GPU-a)\n    MIG g1.c1.i1, Device 0 (UUID: MIG-b)\nnoise\n",
        )
        .unwrap();
        assert_eq!(cards.len(), 1);
        assert_eq!(cards[0].uuid.as_deref(), Some("GPU-a"));
        assert_eq!(cards[0].mig[0].profile.as_deref(), Some("g1.c1.i1"));
        assert_eq!(cards[0].mig[0].device, Some(0));
        assert_eq!(parse_list("").unwrap(), Vec::new());
        assert!(matches!(
            parse_list("init HGML error: driver is not loaded\n"),
            Err(SmiError::DriverNotLoaded { .. })
        ));
    }

    #[test]
    fn the_process_table_reads_instances_and_n_a() {
        let text = "| Processes:                                                  |\n| PPU    GI   CI   PID      Type  Process name       PPU Memory |\n|        ID   ID                                      Usage      |\n+==============================================================+\n| 0      N/A  N/A  525179   C     hggc test one           48MiB |\n| 3      1    0    7001     C     python3                 48MiB |\n+--------------------------------------------------------------+\n";
        let rows = parse_processes(text);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].card, rows[0].gpu_instance, rows[0].pid),
            (Some(0), None, Some(525179))
        );
        assert!(rows[0].is_compute());
        let graphics = ProcessRow {
            kind: Some("G".into()),
            ..ProcessRow::default()
        };
        assert!(
            !graphics.is_compute(),
            "a graphics process is no compute one"
        );
        assert!(!ProcessRow::default().is_compute());
        assert_eq!(
            (rows[1].card, rows[1].gpu_instance, rows[1].compute_instance),
            (Some(3), Some(1), Some(0))
        );
        let none = "| Processes: |\n| PPU GI CI PID Type |\n+=====+\n| No running processes found |\n+---+\n";
        assert!(parse_processes(none).is_empty());
        assert!(parse_processes("").is_empty());
    }
}
