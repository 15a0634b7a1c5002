//! `npu-smi`, Huawei's CLI that ships with the Ascend driver: the queries the detector, the
//! container-share flag and preflight run (each argv here), and a pure reader per output shape.
//!
//! - `npu-smi info`: the box table, read by header words through `accel_backend::text` (four
//!   layouts across releases and generations, HAZARDS items 1–10) into [`InfoChip`]s, one per
//!   compute chip or die, with the table's layout ([`Layout`]) and banner version; a driver that
//!   will not initialise prints two error lines instead ([`InfoError::DriverNotInitialised`]).
//! - `npu-smi info -m`: the NPU / chip / logic-id map ([`ChipMap`]), `Mcu` rows skipped; the
//!   950's form (`NPU ID  Slot ID  Chip ID  Chip Phy-ID  Chip Name`, addendum A1) gives the
//!   physical id and the slot, its NPU ID being the logic id.
//! - `npu-smi info -t <type> -i <npu> [-c <chip>]`: `key : value` blocks ([`Blocks`]), read for
//!   the facts that live only there: the die id and the board's ids (`-t board`, [`Board`]),
//!   the physical id (`-t phyid-remap`), AI cores (`-t common`), the container-share flag
//!   (`-t device-share`) and the super-pod membership (`-t spod-info`, [`SpodInfo`]).
//!   `-t health` has its own reader ([`crate::health`]): its texts run over several lines.
//!
//! Parsers take text and never log; nothing here runs a program.

use accel_backend::text::{self, MemoryUnit, Record};

/// `npu-smi info`: the table of every NPU.
pub const INFO_ARGV: &[&str] = &["npu-smi", "info"];
/// `npu-smi info -m`: the chip map.
pub const MAPPING_ARGV: &[&str] = &["npu-smi", "info", "-m"];
/// `npu-smi info -l`: the NPU list the preflight host cross-check counts (`NPU ID` lines).
pub const LIST_ARGV: &[&str] = &["npu-smi", "info", "-l"];

/// `npu-smi info -t <kind> -i <npu> -c <chip>`.
pub fn chip_query_argv(kind: &str, npu: u32, chip: u32) -> Vec<String> {
    [
        "npu-smi".to_string(),
        "info".into(),
        "-t".into(),
        kind.into(),
        "-i".into(),
        npu.to_string(),
        "-c".into(),
        chip.to_string(),
    ]
    .to_vec()
}

/// `npu-smi info -t board -i <npu> -c <chip>`: the chip's die ids and names (the V1 form).
pub fn board_argv(npu: u32, chip: u32) -> Vec<String> {
    chip_query_argv("board", npu, chip)
}

/// `npu-smi info -t <kind> -i <npu> -c <chip>` on a V1 driver, `npu-smi info -t <kind> -i <npu>`
/// on a V2 (950) one, which takes no `-c` (addendum A1: `-i <NPU ID>`, the logic id).
pub fn device_query_argv(kind: &str, npu: u32, chip: Option<u32>) -> Vec<String> {
    npu_or_chip_argv(kind, npu, chip)
}

/// `npu-smi info -t spod-info -i <card> -c <chip>` (A3; without `-c` the V1 tool answers
/// `Must input parameter of chip id.`), or `-i <npu>` on the 950 (addendum A4).
pub fn spod_argv(npu: u32, chip: Option<u32>) -> Vec<String> {
    npu_or_chip_argv("spod-info", npu, chip)
}

/// `npu-smi info -t phyid-remap -i <npu> -c <chip>`: the chip's physical id.
pub fn phyid_argv(npu: u32, chip: u32) -> Vec<String> {
    chip_query_argv("phyid-remap", npu, chip)
}

/// `npu-smi info -t common -i <npu>`: per-chip facts, AI cores among them.
pub fn common_argv(npu: u32) -> Vec<String> {
    ["npu-smi", "info", "-t", "common", "-i"]
        .iter()
        .map(|s| s.to_string())
        .chain([npu.to_string()])
        .collect()
}

/// `npu-smi info -t <kind> -i <npu>`, or with `-c <chip>` where the NPU has several chips (a
/// one-chip NPU's answer is its chip's; a several-chip NPU is asked chip by chip so no answer
/// has to be matched to its chip).
fn npu_or_chip_argv(kind: &str, npu: u32, chip: Option<u32>) -> Vec<String> {
    match chip {
        Some(chip) => chip_query_argv(kind, npu, chip),
        None => ["npu-smi", "info", "-t", kind, "-i"]
            .iter()
            .map(|s| s.to_string())
            .chain([npu.to_string()])
            .collect(),
    }
}

/// `npu-smi info -t ecc -i <npu> [-c <chip>]`: the ECC error counters (spec/ascend.md §7).
pub fn ecc_argv(npu: u32, chip: Option<u32>) -> Vec<String> {
    npu_or_chip_argv("ecc", npu, chip)
}

/// `npu-smi info -t ecc-enable -i <npu> [-c <chip>]`: whether ECC is enabled.
pub fn ecc_enable_argv(npu: u32, chip: Option<u32>) -> Vec<String> {
    npu_or_chip_argv("ecc-enable", npu, chip)
}

/// `npu-smi info -t health`: the chip's health state, its error codes and their texts
/// (spec/ascend.md addendum A5). A V1 driver is asked chip by chip (`-i <npu> -c <chip>`, as the
/// real 910A capture was taken); a V2 (950) one by NPU alone (`-i <npu>`, its manual's form:
/// V2 has no `-c`).
pub fn health_argv(npu: u32, chip: Option<u32>) -> Vec<String> {
    npu_or_chip_argv("health", npu, chip)
}

/// `npu-smi info -t device-share -i <card> -c <chip>`: the container-share flag.
pub fn share_query_argv(card: u32, chip: u32) -> Vec<String> {
    chip_query_argv("device-share", card, chip)
}

/// `npu-smi set -t device-share -i <card> -c <chip> -d 0`: turns the flag back off — sent only
/// by preflight, restoring a flag it found off and asked on (spec/ascend.md §8).
pub fn share_disable_argv(card: u32, chip: u32) -> Vec<String> {
    let mut argv = share_enable_argv(card, chip);
    if let Some(last) = argv.last_mut() {
        *last = "0".into();
    }
    argv
}

/// `npu-smi set -t device-share -i <card> -c <chip> -d 1`: turns the container-share flag on
/// (the command spec/ascend.md §4.2's refusal offers; allocation never sends `-d 0`).
pub fn share_enable_argv(card: u32, chip: u32) -> Vec<String> {
    [
        "npu-smi".to_string(),
        "set".into(),
        "-t".into(),
        "device-share".into(),
        "-i".into(),
        card.to_string(),
        "-c".into(),
        chip.to_string(),
        "-d".into(),
        "1".into(),
    ]
    .to_vec()
}

/// Which of the `npu-smi info` table layouts a capture shows (HAZARDS item 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// 910A/910B: `NPU Name` over `Chip`, one chip per record.
    Chip,
    /// 310/310P: `Chip Device`, the Device column being the chip's physical id.
    ChipDevice,
    /// Atlas A3: `Chip Phy-ID`, one record per die, two dies under one NPU ID.
    ChipPhyId,
    /// Ascend 950 (the V2 generation): an `NPU ID` column of its own, no chip column.
    NpuId,
}

/// One compute chip (or die) as a row pair of `npu-smi info` shows it. Every field is as
/// printed, `None` when the table lacks the column or prints a placeholder.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InfoChip {
    /// The NPU ID (the DCMI card id).
    pub npu: Option<u32>,
    /// The chip index in the card (`Chip`); `None` in the 950 layout, which has none.
    pub chip: Option<u32>,
    /// The `Device` column of the 310-class layout (the chip's physical id).
    pub device: Option<u32>,
    /// The `Phy-ID` column of the A3 layout.
    pub phy_id: Option<u32>,
    pub name: Option<String>,
    pub health: Option<String>,
    /// As printed (upper-case hex; `0000:xx:00.0` when masked, which is `None` here).
    pub bus_id: Option<String>,
    pub power_w: Option<f64>,
    pub temperature_c: Option<f64>,
    /// `HBM-Usage(MB)` total.
    pub hbm_total_mib: Option<u64>,
    /// `Memory-Usage(MB)` total (DDR; the only memory of 310-class cards).
    pub memory_total_mib: Option<u64>,
    /// `HBM-Usage(MB)` used.
    pub hbm_used_mib: Option<u64>,
    /// `Memory-Usage(MB)` used.
    pub memory_used_mib: Option<u64>,
    /// `AICore(%)` (`NPU Util(%)` in the 950 layout): the AI cores' utilisation.
    pub aicore_percent: Option<f64>,
}

/// What `npu-smi info` printed.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InfoTable {
    /// The banner's `Version:` (the tool's own release; HAZARDS item 3).
    pub version: Option<String>,
    pub layout: Layout,
    pub chips: Vec<InfoChip>,
}

/// Why `npu-smi info` gave no table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InfoError {
    /// The tool could not initialise the driver library (`dcmi model initialized failed, …
    /// ret is -8020`): the driver is there but answered nothing (a failed pass, not zero NPUs).
    #[error("npu-smi info: the driver did not initialise: {line}")]
    DriverNotInitialised { line: String },
    /// Text that is not the table at all (quoted: its first line).
    #[error("npu-smi info: no NPU table in its output (it begins {first_line:?})")]
    NotATable { first_line: String },
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .chars()
        .take(120)
        .collect()
}

/// A line where the tool reports its driver library failing (`dcmi … failed … ret is -8020`).
fn init_failure(text: &str) -> Option<String> {
    text.lines().map(str::trim).find_map(|l| {
        let lower = l.to_ascii_lowercase();
        (lower.contains("dcmi") && lower.contains("fail")).then(|| l.chars().take(200).collect())
    })
}

fn number(record: &Record, label: &str) -> Option<u32> {
    record
        .get(label)
        .and_then(text::whole)
        .and_then(|n| u32::try_from(n).ok())
}

/// A `used / total` memory column's two figures, in MiB.
fn memory(record: &Record, label: &str) -> (Option<u64>, Option<u64>) {
    record
        .get(label)
        .map(|raw| text::memory_pair(raw, MemoryUnit::MiB))
        .unwrap_or((None, None))
}

fn layout_of(table: &text::BoxTable) -> Layout {
    if table.has_label("Phy-ID") {
        Layout::ChipPhyId
    } else if table.has_label("Device") {
        Layout::ChipDevice
    } else if table.has_label("NPU ID") && !table.has_label("Chip") {
        Layout::NpuId
    } else {
        Layout::Chip
    }
}

fn chip_of(record: &Record) -> InfoChip {
    let bus_id = record
        .get("Bus-Id")
        .filter(|b| b.parse::<accel_core::busid::BusId>().is_ok())
        .map(str::to_string);
    let (hbm_used_mib, hbm_total_mib) = memory(record, "HBM-Usage(MB)");
    let (memory_used_mib, memory_total_mib) = memory(record, "Memory-Usage(MB)");
    InfoChip {
        npu: number(record, "NPU").or_else(|| number(record, "NPU ID")),
        chip: number(record, "Chip"),
        device: number(record, "Device"),
        phy_id: number(record, "Phy-ID"),
        name: record.get("Name").map(str::to_string),
        health: record.get("Health").map(str::to_string),
        bus_id,
        power_w: record.get("Power(W)").and_then(text::watts),
        temperature_c: record.get("Temp(C)").and_then(text::celsius),
        hbm_total_mib,
        memory_total_mib,
        hbm_used_mib,
        memory_used_mib,
        aicore_percent: record
            .get("AICore(%)")
            .or_else(|| record.get("NPU Util(%)"))
            .and_then(text::percent),
    }
}

/// Reads `npu-smi info`. Empty output is an empty table; the init-failure lines are
/// [`InfoError::DriverNotInitialised`]; other text without the table is
/// [`InfoError::NotATable`]. A record without an NPU ID (an elided capture's stray row) is
/// skipped; the process table that may follow is another table and is not read.
pub fn parse_info(text: &str) -> Result<InfoTable, InfoError> {
    let cleaned = text::clean(text);
    let Some(table) = text::box_table(&cleaned, &["Name", "Health"]) else {
        if let Some(line) = init_failure(&cleaned) {
            return Err(InfoError::DriverNotInitialised { line });
        }
        if cleaned.trim().is_empty() {
            return Ok(InfoTable {
                version: None,
                layout: Layout::Chip,
                chips: Vec::new(),
            });
        }
        return Err(InfoError::NotATable {
            first_line: first_line(&cleaned),
        });
    };
    let layout = layout_of(&table);
    let chips = table
        .records
        .iter()
        .map(chip_of)
        .filter(|c| c.npu.is_some())
        .collect();
    Ok(InfoTable {
        version: text::version_after(&cleaned, "Version").map(str::to_string),
        layout,
        chips,
    })
}

/// One compute chip of `npu-smi info -m`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChipMap {
    pub npu: u32,
    pub chip: u32,
    /// The chip's logic id (the DCMI logic id the runtime numbers devices by): `Chip Logic ID`,
    /// or in the 950's form, which prints none, the NPU ID (addendum A1: on V2 the NPU ID is the
    /// logic id, the X of `/dev/davinciX`).
    pub logic_id: u32,
    /// `Chip Phy-ID` (the 950's form only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical_id: Option<u32>,
    /// `Slot ID` (the 950's form only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// `Chip Name` as printed (`Ascend 910A`, `MiniD`, a redacted `Ascend xxx` is `None`).
    pub name: Option<String>,
}

/// Why `npu-smi info -m` was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("npu-smi info -m: no chip map in its output (it begins {first_line:?})")]
pub struct MappingError {
    pub first_line: String,
}

/// Whether a name is only a redaction after the vendor's word (`Ascend xxx`).
fn redacted_name(name: &str) -> bool {
    name.split_whitespace().all(|w| {
        text::is_redacted(w) || w.eq_ignore_ascii_case("ascend") || w.eq_ignore_ascii_case("huawei")
    })
}

/// Reads `npu-smi info -m`: its compute chips, in printed order. Rows whose logic id is a
/// placeholder (the board's `Mcu`, HAZARDS item 11) are not compute chips and are skipped. The
/// 950's form (HAZARDS item 26) prints `Slot ID` and `Chip Phy-ID` and no `Chip Logic ID`: its
/// NPU ID is the logic id, and a row whose NPU ID is `-1` (an unavailable NPU, its mapping
/// invalid) is skipped.
pub fn parse_mapping(text: &str) -> Result<Vec<ChipMap>, MappingError> {
    let Some(table) = text::column_table(text, &["NPU ID", "Chip ID"]) else {
        if text.trim().is_empty() {
            return Ok(Vec::new());
        }
        return Err(MappingError {
            first_line: first_line(text),
        });
    };
    let has = |label: &str| table.labels.iter().any(|l| l.eq_ignore_ascii_case(label));
    // The 950's form: its NPU ID stands for the logic id it does not print.
    let npu_is_logic = !has("Chip Logic ID") && has("Chip Phy-ID");
    Ok(table
        .rows
        .iter()
        .filter_map(|row| {
            let n = |label: &str| {
                row.get(label)
                    .and_then(text::whole)
                    .and_then(|v| u32::try_from(v).ok())
            };
            let name = row
                .get("Chip Name")
                .filter(|n| !redacted_name(n))
                .map(str::to_string);
            if name
                .as_deref()
                .is_some_and(|n| n.eq_ignore_ascii_case("mcu"))
            {
                return None;
            }
            let npu = n("NPU ID")?;
            let logic_id = if npu_is_logic {
                npu
            } else {
                n("Chip Logic ID")?
            };
            Some(ChipMap {
                npu,
                chip: n("Chip ID")?,
                logic_id,
                physical_id: n("Chip Phy-ID"),
                slot: n("Slot ID"),
                name,
            })
        })
        .collect())
}

/// The `key : value` output of `npu-smi info -t …`, in blank-line-separated blocks (the NPU's
/// own lines, then one block per chip, then the board MCU's; HAZARDS item 12).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Blocks {
    pub blocks: Vec<Vec<(String, String)>>,
}

impl Blocks {
    /// The first value of `key` (compared without case) in any block, [`text::present`].
    pub fn value(&self, key: &str) -> Option<&str> {
        self.blocks.iter().find_map(|b| lookup(b, key))
    }

    /// The block of chip `chip` (the block holding `Chip ID : <chip>`); the MCU block, which
    /// names itself `Chip Name : mcu`, is never one.
    pub fn chip(&self, chip: u32) -> Option<&[(String, String)]> {
        self.blocks
            .iter()
            .find(|b| {
                lookup(b, "Chip ID")
                    .and_then(text::whole)
                    .is_some_and(|id| id == u64::from(chip))
                    && !lookup(b, "Chip Name").is_some_and(|n| n.eq_ignore_ascii_case("mcu"))
            })
            .map(Vec::as_slice)
    }
}

/// The value of `key` in one block.
pub fn lookup<'a>(block: &'a [(String, String)], key: &str) -> Option<&'a str> {
    block
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .and_then(|(_, v)| text::present(v))
}

/// Reads `key : value` lines (indented or not; the key may hold blanks and a unit in
/// parentheses); a blank line closes a block; lines without a colon are skipped.
pub fn parse_blocks(text: &str) -> Blocks {
    let cleaned = text::clean(text);
    let mut out = Blocks::default();
    let mut current: Vec<(String, String)> = Vec::new();
    for line in cleaned.lines() {
        let line = line.trim();
        if line.is_empty() {
            if !current.is_empty() {
                out.blocks.push(std::mem::take(&mut current));
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() {
            continue;
        }
        current.push((key.to_string(), value.trim().to_string()));
    }
    if !current.is_empty() {
        out.blocks.push(current);
    }
    out
}

/// A die id as the driver library renders it (spec/ascend.md §1.4): each 32-bit word in
/// upper-case hex without padding, joined by single blanks. `npu-smi` prints the words padded
/// (`0140C979`); the rendering drops the padding so the identity is the one DCMI readers give
/// (`E281A66C 140C979 …`, gpustack-runtime's capture). A word that is not hex, or an id of
/// zeros only, is no identity.
pub fn die_identity(raw: &str) -> Option<String> {
    let words: Vec<u32> = raw
        .split_whitespace()
        .map(|w| {
            let w = w
                .strip_prefix("0x")
                .or_else(|| w.strip_prefix("0X"))
                .unwrap_or(w);
            (!w.is_empty() && w.len() <= 8)
                .then(|| u32::from_str_radix(w, 16).ok())
                .flatten()
        })
        .collect::<Option<Vec<u32>>>()?;
    if words.is_empty() || words.iter().all(|w| *w == 0) {
        return None;
    }
    Some(
        words
            .iter()
            .map(|w| format!("{w:X}"))
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// What `-t board` says of one chip (or, on the 950, of one NPU).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Board {
    /// The die id ([`die_identity`] of `VDie ID`, else of `Die ID`/`NDie ID`, else of the 950's
    /// `DDie ID`, the only die the V2 board prints).
    pub identity: Option<String>,
    pub chip_name: Option<String>,
    /// `Board ID` (`0x%02x`; `NA` when 0).
    pub board_id: Option<u32>,
    /// `Main Board ID` (910_93 and 950 boards only), without the 950 card's `(<n>P)` suffix
    /// (HAZARDS item 20).
    pub main_board_id: Option<u32>,
    /// That suffix's `n`: the NPUs on a 950 card's board (1, 2 or 4).
    pub main_board_npus: Option<u32>,
    /// `PCI Device ID` (a UB board's `Device ID`, addendum A2): what says which generation the
    /// board ids belong to (HAZARDS item 22).
    pub pci_device_id: Option<u32>,
}

/// Why `npu-smi info -t board` gave no board: text that is not its output at all (quoted: its
/// first line). A board that answers without a die id is a [`Board`] whose `identity` is none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("npu-smi info -t board: no board facts in its output (it begins {first_line:?})")]
pub struct BoardError {
    pub first_line: String,
}

/// A board id as `npu-smi` prints it (`0x1b`, `0x68(1P)`, `0xD806`; HAZARDS item 20): the hex
/// figure, any case, and the number of a `(<n>P)` suffix. `NA` (an id of 0) is none.
pub fn board_hex(raw: &str) -> (Option<u32>, Option<u32>) {
    let raw = raw.trim();
    let (figure, suffix) = match raw.split_once('(') {
        Some((figure, rest)) => (figure, Some(rest)),
        None => (raw, None),
    };
    let id = text::hex(figure)
        .filter(|v| *v != 0)
        .and_then(|v| u32::try_from(v).ok());
    let npus = suffix
        .and_then(|s| s.trim().strip_suffix(')'))
        .and_then(|s| {
            s.trim()
                .strip_suffix('P')
                .or_else(|| s.trim().strip_suffix('p'))
        })
        .and_then(|n| n.trim().parse().ok());
    (id, npus)
}

/// Reads `npu-smi info -t board -i <npu> [-c <chip>]`. Every board the tool prints (card- or
/// chip-level, any generation) names its `NPU ID`; text without one is not a board.
pub fn parse_board(text: &str) -> Result<Board, BoardError> {
    let blocks = parse_blocks(text);
    let names_npu = blocks
        .blocks
        .iter()
        .flatten()
        .any(|(k, _)| k.eq_ignore_ascii_case("NPU ID"));
    if !names_npu {
        return Err(BoardError {
            first_line: first_line(&text::clean(text)),
        });
    }
    let identity = ["VDie ID", "Die ID", "NDie ID", "DDie ID"]
        .iter()
        .find_map(|k| blocks.value(k).and_then(die_identity));
    let hex = |key: &str| blocks.value(key).map(board_hex).unwrap_or((None, None));
    let (main_board_id, main_board_npus) = hex("Main Board ID");
    Ok(Board {
        identity,
        chip_name: blocks
            .value("Chip Name")
            .filter(|n| !redacted_name(n))
            .map(str::to_string),
        board_id: hex("Board ID").0,
        main_board_id,
        main_board_npus,
        pci_device_id: hex("PCI Device ID").0.or(hex("Device ID").0),
    })
}

/// What `npu-smi info -t spod-info` printed (addendum A4): the super-pod facts, or the 950
/// card's refusal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SpodInfo {
    /// `This device does not support querying spod-info.` (the 950 card, HAZARDS item 23).
    NotSupported,
    Read(SpodFacts),
}

/// The `%u` lines of `-t spod-info`, each as printed (`4294967295`, the "not a member" value,
/// included: the reader of the facts decides what it means).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpodFacts {
    /// `SDID` (A3 only): server, chip, die and device packed into one number (HAZARDS item 24).
    pub sdid: Option<u32>,
    /// `Super Pod Size`.
    pub size: Option<u32>,
    /// `Super Pod ID`.
    pub id: Option<u32>,
    /// `Server Index` (A3; a 950 whose mainboard is no POD board).
    pub server_index: Option<u32>,
    /// `Chassis ID` (a 950 on a POD mainboard).
    pub chassis_id: Option<u32>,
    /// `Super Pod Type` (the 950 only): the code of spec §4.4's table.
    pub pod_type: Option<u32>,
}

/// The refusal a 950 card prints for `-t spod-info`.
pub const SPOD_NOT_SUPPORTED: &str = "does not support querying spod-info";

/// Why `npu-smi info -t spod-info` gave no facts: text that is neither its facts nor its
/// refusal (quoted: its first line; `Must input parameter of chip id.` is one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("npu-smi info -t spod-info: no super-pod facts in its output (it begins {first_line:?})")]
pub struct SpodError {
    pub first_line: String,
}

/// Reads `npu-smi info -t spod-info …`: the refusal (in any case, on any line), else the facts,
/// each looked up by label; text holding neither is [`SpodError`].
pub fn parse_spod_info(text: &str) -> Result<SpodInfo, SpodError> {
    let cleaned = text::clean(text);
    if cleaned.to_ascii_lowercase().contains(SPOD_NOT_SUPPORTED) {
        return Ok(SpodInfo::NotSupported);
    }
    let blocks = parse_blocks(&cleaned);
    let number = |key: &str| {
        blocks
            .value(key)
            .and_then(text::whole)
            .and_then(|v| u32::try_from(v).ok())
    };
    let facts = SpodFacts {
        sdid: number("SDID"),
        size: number("Super Pod Size"),
        id: number("Super Pod ID"),
        server_index: number("Server Index"),
        chassis_id: number("Chassis ID"),
        pod_type: number("Super Pod Type"),
    };
    if facts == SpodFacts::default() {
        return Err(SpodError {
            first_line: first_line(&cleaned),
        });
    }
    Ok(SpodInfo::Read(facts))
}

/// An A3 SDID's parts (addendum A4, the DCMI manual's layout): bits 31–22 the server index,
/// 21–18 the chip (card), 17–16 the die, 15–0 the device (chip × 2 + die).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SdidParts {
    pub server: u32,
    pub chip: u32,
    pub die: u32,
    pub device: u32,
}

/// Unpacks an SDID ([`SdidParts`]).
pub fn sdid_parts(sdid: u32) -> SdidParts {
    SdidParts {
        server: sdid >> 22,
        chip: (sdid >> 18) & 0xf,
        die: (sdid >> 16) & 0x3,
        device: sdid & 0xffff,
    }
}

/// Reads `npu-smi info -t phyid-remap -i <npu> -c <chip>`: the chip's physical id.
pub fn parse_phy_id(text: &str) -> Option<u32> {
    let blocks = parse_blocks(text);
    ["Chip Phy-ID", "Phy-ID", "Phy ID", "Physical ID"]
        .iter()
        .find_map(|k| blocks.value(k))
        .and_then(text::whole)
        .and_then(|v| u32::try_from(v).ok())
}

/// Reads `npu-smi info -t common -i <npu>`: the AI-core count of `chip`.
pub fn parse_aicores(text: &str, chip: u32) -> Option<u32> {
    let blocks = parse_blocks(text);
    blocks
        .chip(chip)
        .and_then(|b| lookup(b, "Aicore Count"))
        .and_then(text::whole)
        .and_then(|v| u32::try_from(v).ok())
}

/// Reads `npu-smi info -t device-share …`: whether the flag is on; `None` when the output holds
/// no reading of it.
pub fn parse_share(text: &str) -> Option<bool> {
    let blocks = parse_blocks(text);
    let value = blocks.blocks.iter().flatten().find_map(|(k, v)| {
        k.to_ascii_lowercase()
            .contains("device-share")
            .then_some(v.as_str())
    })?;
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "enable" | "enabled" | "1" | "on" => Some(true),
        "false" | "disable" | "disabled" | "0" | "off" => Some(false),
        _ => None,
    }
}

/// Which memory's ECC a chip is judged by: HBM where it has HBM, DDR on 310-class cards
/// (spec/ascend.md §7, "the memory fallback").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EccMemory {
    Hbm,
    Ddr,
}

impl EccMemory {
    fn prefix(self) -> &'static str {
        match self {
            EccMemory::Hbm => "hbm ",
            EccMemory::Ddr => "ddr ",
        }
    }

    /// The value of `<memory> <name>` (or `<name>` alone, as 310 prints its enable flag), in
    /// any block, keys compared without case.
    fn value<'a>(self, blocks: &'a Blocks, name: &str) -> Option<&'a str> {
        let prefixed = format!("{}{name}", self.prefix());
        let all = || blocks.blocks.iter().flatten();
        all()
            .find(|(k, _)| k.eq_ignore_ascii_case(&prefixed))
            .or_else(|| all().find(|(k, _)| k.eq_ignore_ascii_case(name)))
            .and_then(|(_, v)| text::present(v))
    }
}

/// What `-t ecc` counts for one memory: the current single- and double-bit error counts (not
/// the aggregate totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EccCounts {
    pub single_bit: Option<u64>,
    pub double_bit: Option<u64>,
}

/// Reads `npu-smi info -t ecc …` for `memory`.
pub fn parse_ecc(text: &str, memory: EccMemory) -> EccCounts {
    let blocks = parse_blocks(text);
    let count = |name: &str| memory.value(&blocks, name).and_then(text::whole);
    EccCounts {
        single_bit: count("Single Bit Error Count"),
        double_bit: count("Double Bit Error Count"),
    }
}

/// Reads `npu-smi info -t ecc-enable …` for `memory`: `None` when it says nothing readable.
pub fn parse_ecc_enable(text: &str, memory: EccMemory) -> Option<bool> {
    let blocks = parse_blocks(text);
    let value = memory.value(&blocks, "ECC-Enable Status")?;
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "enable" | "enabled" | "1" | "on" => Some(true),
        "false" | "disable" | "disabled" | "0" | "off" => Some(false),
        _ => None,
    }
}

/// `npu-smi info -l`'s count: the lines holding `NPU ID` (spec/ascend.md §8).
pub fn count_listed(text: &str) -> usize {
    text.lines().filter(|l| l.contains("NPU ID")).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn die_ids_render_as_the_driver_library_does() {
        assert_eq!(
            die_identity("E281A66C 0140C979 2CFBED72 A4500485 104301E3").as_deref(),
            Some("E281A66C 140C979 2CFBED72 A4500485 104301E3")
        );
        assert_eq!(die_identity("00000000 00000000"), None);
        assert_eq!(die_identity("NA"), None);
        assert_eq!(die_identity("E281A66C ZZ"), None);
        assert_eq!(
            die_identity("E281A66C 00140C979"),
            None,
            "a word of more than 8 digits is no 32-bit word, even when its value fits"
        );
        assert_eq!(die_identity(""), None);
    }

    #[test]
    fn the_share_flag_reads_in_its_spellings() {
        assert_eq!(parse_share("Device-share Status : True\n"), Some(true));
        assert_eq!(parse_share("device-share : Disable\n"), Some(false));
        assert_eq!(parse_share("Error: parameter error\n"), None);
    }

    /// The 910B's answer prints DDR and HBM counters in one chip block; the 950's HBM alone.
    #[test]
    fn ecc_counters_and_the_enable_flag_read_per_memory() {
        let text = "\
        NPU ID                                   : 1
        Chip Count                               : 1

        DDR Single Bit Error Count               : 4
        DDR Double Bit Error Count               : 0
        HBM Single Bit Error Count               : 2
        HBM Double Bit Error Count               : 1
        HBM Single Bit Aggregate Total Err Cnt   : 90
        HBM Double Bit Aggregate Total Err Cnt   : 70
        Chip ID                                  : 0
";
        assert_eq!(
            parse_ecc(text, EccMemory::Hbm),
            EccCounts {
                single_bit: Some(2),
                double_bit: Some(1)
            }
        );
        assert_eq!(parse_ecc(text, EccMemory::Ddr).single_bit, Some(4));
        assert_eq!(
            parse_ecc("Error: unsupported\n", EccMemory::Hbm),
            EccCounts::default()
        );
        assert_eq!(
            parse_ecc_enable(
                "        HBM ECC-Enable Status          : True\n",
                EccMemory::Hbm
            ),
            Some(true)
        );
        assert_eq!(
            parse_ecc_enable("ECC-Enable Status : False\n", EccMemory::Ddr),
            Some(false)
        );
        assert_eq!(
            parse_ecc_enable("HBM ECC-Enable Status : NA\n", EccMemory::Hbm),
            None
        );
        assert_eq!(ecc_argv(3, None).join(" "), "npu-smi info -t ecc -i 3");
        assert_eq!(
            ecc_enable_argv(3, Some(1)).join(" "),
            "npu-smi info -t ecc-enable -i 3 -c 1"
        );
    }

    #[test]
    fn argv_of_the_flag_write_is_the_spec_command() {
        assert_eq!(
            share_enable_argv(3, 1).join(" "),
            "npu-smi set -t device-share -i 3 -c 1 -d 1"
        );
        assert_eq!(
            share_disable_argv(3, 1).join(" "),
            "npu-smi set -t device-share -i 3 -c 1 -d 0"
        );
        assert_eq!(
            share_query_argv(3, 1).join(" "),
            "npu-smi info -t device-share -i 3 -c 1"
        );
    }

    #[test]
    fn argv_of_the_chip_queries() {
        assert_eq!(
            board_argv(2, 1).join(" "),
            "npu-smi info -t board -i 2 -c 1"
        );
        assert_eq!(
            phyid_argv(2, 1).join(" "),
            "npu-smi info -t phyid-remap -i 2 -c 1"
        );
    }

    /// `npu-smi info -l` prints one `NPU ID` line per NPU, among its other lines.
    #[test]
    fn the_list_counts_its_npu_id_lines() {
        let text = "        Total Count                    : 2\n\n        NPU ID                         : 0\n        Chip Count                     : 1\n\n        NPU ID                         : 1\n        Chip Count                     : 1\n";
        assert_eq!(count_listed(text), 2);
        assert_eq!(count_listed(""), 0);
    }
}
