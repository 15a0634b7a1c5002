//! `cnmon`, Cambricon's management tool: the default card table (`cnmon` with no argument) and
//! the per-card detail blocks of `cnmon info`.
//!
//! **The table.** Two header generations (HAZARDS.md items 1–4): 4.x prints `CNMON v4.20.11`
//! alone on the title line, an `Inited  Driver` middle column and no `Bus-Id` at all; 5.x puts
//! `Driver v5.10.x` on the title line and a `Bus-Id` column in the middle. Each card is two
//! lines; both are read by header label through [`accel_backend::text::box_table`], so a
//! renamed third column (`vMemory-Usage`, `SR-IOV Compute-Mode`, `Mode Compute-Mode`) gives
//! `None`, not a shifted value. Redactions (`MLUXXX-XX`, `xxxxx MiB`) are `None`.
//!
//! **`cnmon info`.** `Key : Value` lines, one block per card. It is the only tool output that
//! names a card's UUID; a block starts at a `Card <n>` line (or, where none is printed, at a key
//! seen a second time). Its layout is not in the shared captures: only the keys this module
//! looks up (`UUID`, `Product Name`, `Bus Id`/`PCIe Bus Id`, `Card`) are relied on, compared
//! without case, and anything else is skipped. A text that prints something but no block at all
//! is not `cnmon info`'s output ([`CnmonError::NoCardBlock`]).
//!
//! Parsers are pure: `read_*` belongs to the detector, which runs the argv constants here.

use accel_backend::text::{self, MemoryUnit, box_table, dotted_version, present, version_after};
use accel_core::busid::BusId;

/// The default card table.
pub const TABLE_ARGV: &[&str] = &["cnmon"];
/// The per-card detail blocks (UUID, product name, PCI address).
pub const INFO_ARGV: &[&str] = &["cnmon", "info"];

/// Why a text is not cnmon's card table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CnmonError {
    /// No header with `Card` and `Name` labels.
    #[error("cnmon: no card table in the output (first line: {first_line:?})")]
    NoTable { first_line: String },
    /// `cnmon info` printed text with no card block in it (no `Card <n>` heading with a key
    /// this module reads, no `UUID`, `Product Name` or bus id line).
    #[error("cnmon info: no card block in the output (first line: {first_line:?})")]
    NoCardBlock { first_line: String },
}

/// The first non-blank line of a cleaned text, cut to 80 characters, for an error to quote.
fn first_line(cleaned: &str) -> String {
    cleaned
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .chars()
        .take(80)
        .collect()
}

/// One card row of the default table (two printed lines).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CnmonCard {
    /// `Card`: the tool's ordinal, which names the device nodes (`/dev/cambricon_dev<N>`).
    pub card: Option<u32>,
    /// `Name` (`MLU370-X4`); `None` for a redaction.
    pub name: Option<String>,
    pub firmware: Option<String>,
    /// `Bus-Id` (5.x only).
    pub bus_id: Option<BusId>,
    pub memory_used_mib: Option<u64>,
    /// `Memory-Usage`'s total, in MiB as printed (no conversion: cnDev's own figure).
    pub memory_total_mib: Option<u64>,
    /// The per-card `Driver` column of 4.x (`v4.20.11` → `4.20.11`).
    pub driver_version: Option<String>,
    /// `Mode` (5.10.31: `FULL`), when the layout has it.
    pub mode: Option<String>,
    /// `Util`, in percent.
    pub utilization_percent: Option<f64>,
    /// `Temp`, in °C.
    pub temperature_c: Option<f64>,
    /// `Pwr:Usage/Cap`'s draw and cap, in W.
    pub power_draw_w: Option<f64>,
    pub power_limit_w: Option<f64>,
}

/// The table and its title line's versions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CnmonTable {
    /// `CNMON v5.10.10` → `5.10.10`.
    pub cnmon_version: Option<String>,
    /// The title line's `Driver v5.10.10` (5.x), else the cards' own column (4.x).
    pub driver_version: Option<String>,
    pub cards: Vec<CnmonCard>,
}

fn version_word(raw: &str) -> Option<String> {
    let word = raw.trim().trim_start_matches(['v', 'V']);
    dotted_version(word).map(str::to_string)
}

/// Whether a model name is a redaction (`MLUXXX-XX`: the model's digits and variant replaced
/// by `X`s, HAZARDS.md item 5), which names no product.
pub fn redacted_model(name: &str) -> bool {
    let upper = name.trim().to_ascii_uppercase();
    let rest = upper.strip_prefix("MLU").unwrap_or(&upper);
    rest.contains('X') && rest.bytes().all(|b| b == b'X' || b == b'-')
}

/// Reads the default table.
pub fn parse_table(text: &str) -> Result<CnmonTable, CnmonError> {
    let cleaned = text::clean(text);
    let Some(table) = box_table(&cleaned, &["Card", "Name"]) else {
        return Err(CnmonError::NoTable {
            first_line: first_line(&cleaned),
        });
    };
    let mut out = CnmonTable {
        cnmon_version: version_after(&cleaned, "CNMON").map(str::to_string),
        ..CnmonTable::default()
    };
    // "Driver v5.10.10" sits on the title line in 5.x; 4.x's header has a `Driver` label
    // instead, which version_after skips (no version follows it there).
    let title_driver = cleaned
        .lines()
        .find(|l| l.contains("CNMON"))
        .and_then(|l| l.split("Driver").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(version_word);
    for record in &table.records {
        let power = record.get("Pwr:Usage/Cap").and_then(text::pair);
        let (used, total) = record
            .get("Memory-Usage")
            .map(|m| text::memory_pair(m, MemoryUnit::MiB))
            .unwrap_or((None, None));
        let card = CnmonCard {
            card: record
                .get("Card")
                .and_then(text::whole)
                .and_then(|n| u32::try_from(n).ok()),
            name: record
                .get("Name")
                .filter(|n| !redacted_model(n))
                .map(str::to_string),
            firmware: record.get("Firmware").map(str::to_string),
            bus_id: record.get("Bus-Id").and_then(|b| b.parse().ok()),
            memory_used_mib: used,
            memory_total_mib: total,
            driver_version: record.get("Driver").and_then(version_word),
            mode: record.get("Mode").map(str::to_string),
            utilization_percent: record.get("Util").and_then(text::percent),
            temperature_c: record.get("Temp").and_then(text::celsius),
            power_draw_w: power.and_then(|(draw, _)| text::watts(draw)),
            power_limit_w: power.and_then(|(_, cap)| text::watts(cap)),
        };
        if card.card.is_none() && card.name.is_none() && card.bus_id.is_none() {
            continue;
        }
        out.cards.push(card);
    }
    out.driver_version =
        title_driver.or_else(|| out.cards.iter().find_map(|c| c.driver_version.clone()));
    Ok(out)
}

/// One card's block of `cnmon info`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CnmonInfo {
    pub card: Option<u32>,
    /// The cnDev UUID as printed (without the `MLU-` the inventory gives it).
    pub uuid: Option<String>,
    pub product: Option<String>,
    pub bus_id: Option<BusId>,
}

impl CnmonInfo {
    fn is_empty(&self) -> bool {
        self.uuid.is_none() && self.product.is_none() && self.bus_id.is_none()
    }
}

/// `Card 0`, `Card: 0`, `Card : 0` → 0.
fn card_heading(line: &str) -> Option<u32> {
    let rest = line.trim().strip_prefix("Card")?;
    let rest = rest.trim_start().trim_start_matches(':').trim();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || rest.len() != digits.len() {
        return None;
    }
    digits.parse().ok()
}

/// Reads `cnmon info`'s blocks, in printed order; a blank text is an empty list, a text that
/// prints something but no block is [`CnmonError::NoCardBlock`].
pub fn parse_info(text: &str) -> Result<Vec<CnmonInfo>, CnmonError> {
    let cleaned = text::clean(text);
    let mut out: Vec<CnmonInfo> = Vec::new();
    let mut current = CnmonInfo::default();
    let push = |current: &mut CnmonInfo, out: &mut Vec<CnmonInfo>| {
        if !current.is_empty() {
            out.push(std::mem::take(current));
        } else {
            *current = CnmonInfo {
                card: current.card,
                ..CnmonInfo::default()
            };
        }
    };
    for line in cleaned.lines() {
        if let Some(card) = card_heading(line) {
            push(&mut current, &mut out);
            current.card = Some(card);
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase();
        let value = value.trim();
        match key.as_str() {
            "uuid" => {
                if current.uuid.is_some() {
                    push(&mut current, &mut out);
                }
                current.uuid = present(value).map(str::to_string);
            }
            "product name" => {
                if current.product.is_some() {
                    push(&mut current, &mut out);
                }
                current.product = present(value).map(str::to_string);
            }
            "bus id" | "pcie bus id" | "bus-id" => {
                // The address itself holds colons: keep everything after the key.
                let address = line
                    .split_once(':')
                    .map(|(_, v)| v.trim())
                    .unwrap_or_default();
                if current.bus_id.is_some() {
                    push(&mut current, &mut out);
                }
                current.bus_id = address.parse().ok();
            }
            _ => {}
        }
    }
    push(&mut current, &mut out);
    if out.is_empty() && !cleaned.trim().is_empty() {
        return Err(CnmonError::NoCardBlock {
            first_line: first_line(&cleaned),
        });
    }
    Ok(out)
}

/// The major.minor the driver-version label carries (`5.10.22` → `5.10`, as the described
/// system cuts cnDev's version); `None` for text with no dotted version.
pub fn major_minor(version: &str) -> Option<String> {
    let v = dotted_version(version.trim().trim_start_matches(['v', 'V']))?;
    let mut parts = v.split('.');
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => Some(format!("{major}.{minor}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_headings_and_keys() {
        assert_eq!(card_heading("Card 3"), Some(3));
        assert_eq!(card_heading("Card : 12"), Some(12));
        assert_eq!(card_heading("Card 3 extra"), None);
        let blocks = parse_info(
            "Card 0\n  Product Name : MLU370-X8\n  UUID : 5a3f\n  PCIe Bus Id : 0000:1A:00.0\nCard 1\n  Product Name : MLU370-X8\n  UUID : N/A\n",
        )
        .unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].uuid.as_deref(), Some("5a3f"));
        assert_eq!(
            blocks[0].bus_id.map(|b| b.sysfs()).as_deref(),
            Some("0000:1a:00.0")
        );
        assert_eq!((blocks[1].card, blocks[1].uuid.as_deref()), (Some(1), None));
    }

    #[test]
    fn info_with_no_card_block_is_not_cnmon_info() {
        assert_eq!(parse_info(" \n").unwrap(), Vec::new());
        assert_eq!(
            parse_info("Segmentation fault: core dumped\n").unwrap_err(),
            CnmonError::NoCardBlock {
                first_line: "Segmentation fault: core dumped".into()
            }
        );
    }

    #[test]
    fn redacted_models_name_no_product() {
        assert!(redacted_model("MLUXXX-XX"));
        assert!(redacted_model("xxx"));
        assert!(!redacted_model("MLU370-X4"));
        assert!(!redacted_model("MLU370-X8"));
    }

    #[test]
    fn versions_cut_to_major_minor() {
        assert_eq!(major_minor("5.10.22").as_deref(), Some("5.10"));
        assert_eq!(major_minor("v4.20.11").as_deref(), Some("4.20"));
        assert_eq!(major_minor("five"), None);
    }
}
