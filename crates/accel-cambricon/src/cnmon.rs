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
//! seen a second time). Its layout is not in the shared captures: only the labels this module
//! looks up are relied on, compared without case, blanks or dashes (`UUID`, `Product Name`,
//! `Bus Id`/`PCIe Bus Id`, `Card`; the health labels of spec addendum C6 below), and anything
//! else is skipped. A text that prints something but no block at all is not `cnmon info`'s
//! output ([`CnmonError::NoCardBlock`]).
//!
//! **Health in `cnmon info`** (addendum C6, read from the 5.10.22 binary; no capture exists, so
//! the layout is a hypothesis read tolerantly). `Health State` is either `N/A`
//! ([`HealthState::NotAvailable`]) or a list whose items name the device state (`Good`, `In
//! Problem`) and the driver state (`Running`, `Booting`, … `Reset Error`, `Unknown`): items are
//! taken by their label (`Device`, `Driver`, with or without `State`) or, under another label,
//! by a word only a state can be; the list ends at the first line that is neither. A one-line
//! `Health State : Good` reads the same. A word under a state's label that is no state this
//! module knows is kept as printed (`Other`), never read as healthy. ECC counters and page
//! retirement are read by their labels wherever they stand in the block (`Uncorrected Err`,
//! `Corrected Err`, `Double Bit Err`, `Single Bit Err`; `is Pending`, `is Failed`; `Correctable
//! Rows`, `Uncorrectable Rows`, `Pending Rows`): a label printed twice in a block (DDR and
//! SRAM) adds up. Whether a state takes a card out of service is [`crate::health`]'s.
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
    /// `Ecc-Error` as printed (`0`, `N/A`; HAZARDS.md item 2), `None` when the layout has no
    /// such column or the cell is blank; [`CnmonCard::ecc_errors`] is the count it gives.
    pub ecc_error: Option<String>,
    /// `Util`, in percent.
    pub utilization_percent: Option<f64>,
    /// `Temp`, in °C.
    pub temperature_c: Option<f64>,
    /// `Pwr:Usage/Cap`'s draw and cap, in W.
    pub power_draw_w: Option<f64>,
    pub power_limit_w: Option<f64>,
}

impl CnmonCard {
    /// The `Ecc-Error` cell's count; `None` for `N/A` (ECC not reported: off or not supported,
    /// addendum C6), a missing column or text that is no whole number.
    pub fn ecc_errors(&self) -> Option<u64> {
        self.ecc_error.as_deref().and_then(text::whole)
    }
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
            ecc_error: record.raw("Ecc-Error").map(str::to_string),
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

/// The device state under `Health State` (addendum C6: cnDev's device health).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceState {
    /// `Good`.
    Good,
    /// `In Problem`.
    InProblem,
    /// A word under the device state's label that is no state this module knows, as printed.
    Other(String),
}

/// The driver state printed with the health (addendum C6: cnDev's driver states 0–8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverState {
    EarlyInited,
    BringUp,
    Booting,
    LateInit,
    Running,
    BootError,
    Reset,
    ResetError,
    /// `Unknown`: the tool's own word for a state past the ones it names (8 and above).
    Unknown,
    /// A word under the driver state's label that is no state this module knows, as printed.
    Other(String),
}

impl DriverState {
    /// The state as cnmon spells it.
    pub fn word(&self) -> &str {
        match self {
            DriverState::EarlyInited => "Early Inited",
            DriverState::BringUp => "Bring Up",
            DriverState::Booting => "Booting",
            DriverState::LateInit => "Late Init",
            DriverState::Running => "Running",
            DriverState::BootError => "Boot error",
            DriverState::Reset => "Reset",
            DriverState::ResetError => "Reset Error",
            DriverState::Unknown => "Unknown",
            DriverState::Other(word) => word,
        }
    }

    /// A state the driver passes through while it brings the card up or resets it.
    pub fn is_transitional(&self) -> bool {
        matches!(
            self,
            DriverState::EarlyInited
                | DriverState::BringUp
                | DriverState::Booting
                | DriverState::LateInit
                | DriverState::Reset
        )
    }
}

/// A card's `Health State` item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthState {
    /// `Health State : N/A`: cnmon could not read the card's health.
    NotAvailable,
    /// What the item printed; either state may be missing.
    Read {
        device: Option<DeviceState>,
        driver: Option<DriverState>,
    },
}

impl HealthState {
    /// The device state, where one was printed.
    pub fn device(&self) -> Option<&DeviceState> {
        match self {
            HealthState::Read { device, .. } => device.as_ref(),
            HealthState::NotAvailable => None,
        }
    }

    /// The driver state, where one was printed.
    pub fn driver(&self) -> Option<&DriverState> {
        match self {
            HealthState::Read { driver, .. } => driver.as_ref(),
            HealthState::NotAvailable => None,
        }
    }
}

/// A card's ECC counters (`DDR ECC Err Count`, `SRAM ECC Err Count`), each `None` when not
/// printed or not a whole number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InfoEcc {
    /// `Uncorrected Err`.
    pub uncorrected: Option<u64>,
    /// `Corrected Err`.
    pub corrected: Option<u64>,
    /// `Double Bit Err`.
    pub double_bit: Option<u64>,
    /// `Single Bit Err`.
    pub single_bit: Option<u64>,
}

/// A card's page retirement and row remapping, each `None` when not printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retirement {
    /// `Retired Pages`' `is Pending`: pages wait for a reset to be retired.
    pub pending: Option<bool>,
    /// `Retired Pages`' `is Failed`: a retirement failed.
    pub failed: Option<bool>,
    /// `Row-Remapping`'s `Correctable Rows`.
    pub correctable_rows: Option<u64>,
    /// `Row-Remapping`'s `Uncorrectable Rows`.
    pub uncorrectable_rows: Option<u64>,
    /// `Row-Remapping`'s `Pending Rows`.
    pub pending_rows: Option<u64>,
}

/// One card's block of `cnmon info`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CnmonInfo {
    pub card: Option<u32>,
    /// The cnDev UUID as printed (without the `MLU-` the inventory gives it).
    pub uuid: Option<String>,
    pub product: Option<String>,
    pub bus_id: Option<BusId>,
    /// The `Health State` item; `None` when the block prints none.
    pub health: Option<HealthState>,
    pub ecc: InfoEcc,
    pub retirement: Retirement,
}

impl CnmonInfo {
    fn is_empty(&self) -> bool {
        self.uuid.is_none()
            && self.product.is_none()
            && self.bus_id.is_none()
            && self.health.is_none()
            && self.ecc == InfoEcc::default()
            && self.retirement == Retirement::default()
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

/// A label compared without case, blanks, dashes or other punctuation: `PCIe Bus Id`,
/// `Bus-Id` → `pciebusid`, `busid`.
fn label(text: &str) -> String {
    text.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The labels a `Health State` item is printed under.
const HEALTH_LABELS: &[&str] = &["healthstate", "healthstatus"];
/// The labels of the device state inside it.
const DEVICE_LABELS: &[&str] = &["device", "devicestate", "devicehealth", "state"];
/// The labels of the driver state inside it.
const DRIVER_LABELS: &[&str] = &["driver", "driverstate"];

fn device_word(word: &str) -> Option<DeviceState> {
    match label(word).as_str() {
        "good" => Some(DeviceState::Good),
        "inproblem" => Some(DeviceState::InProblem),
        _ => None,
    }
}

fn driver_word(word: &str) -> Option<DriverState> {
    Some(match label(word).as_str() {
        "earlyinited" => DriverState::EarlyInited,
        "bringup" => DriverState::BringUp,
        "booting" => DriverState::Booting,
        "lateinit" => DriverState::LateInit,
        "running" => DriverState::Running,
        "booterror" => DriverState::BootError,
        "reset" => DriverState::Reset,
        "reseterror" => DriverState::ResetError,
        "unknown" => DriverState::Unknown,
        _ => return None,
    })
}

/// The states a value names: each part between `,`, `;`, `/` or brackets is a device or a
/// driver state, or neither (`Good (Running)`, `In Problem, Boot error`).
fn state_words(value: &str) -> (Option<DeviceState>, Option<DriverState>) {
    let mut device = None;
    let mut driver = None;
    for part in value.split([',', ';', '/', '(', ')', '[', ']']) {
        device = device.or_else(|| device_word(part));
        driver = driver.or_else(|| driver_word(part));
    }
    (device, driver)
}

/// The `Health State` line's own value: `N/A`, nothing (a list follows) or a state.
fn health_heading(value: &str) -> HealthState {
    if value.trim().is_empty() {
        return HealthState::Read {
            device: None,
            driver: None,
        };
    }
    let Some(value) = present(value) else {
        return HealthState::NotAvailable;
    };
    let (device, driver) = state_words(value);
    let device = match (device, &driver) {
        (None, None) => Some(DeviceState::Other(value.to_string())),
        (device, _) => device,
    };
    HealthState::Read { device, driver }
}

/// Takes one `label : value` line inside a `Health State` list; false when it is no item of
/// the list (the list ends there).
fn health_item(key: &str, value: &str, health: &mut Option<HealthState>) -> bool {
    let Some(HealthState::Read { device, driver }) = health else {
        return false;
    };
    let (said_device, said_driver) = state_words(value);
    let printed = present(value).map(str::to_string);
    if DEVICE_LABELS.contains(&key) {
        *device = said_device.or_else(|| {
            printed
                .filter(|_| said_driver.is_none())
                .map(DeviceState::Other)
        });
        *driver = said_driver.or(driver.take());
        return true;
    }
    if DRIVER_LABELS.contains(&key) {
        *driver = said_driver.or_else(|| {
            printed
                .filter(|_| said_device.is_none())
                .map(DriverState::Other)
        });
        *device = said_device.or(device.take());
        return true;
    }
    if said_device.is_none() && said_driver.is_none() {
        return false;
    }
    *device = said_device.or(device.take());
    *driver = said_driver.or(driver.take());
    true
}

/// `Yes`/`No` (and `True`/`False`, `1`/`0`); anything else is `None`.
fn yes_no(value: &str) -> Option<bool> {
    match label(value).as_str() {
        "yes" | "true" | "1" => Some(true),
        "no" | "false" | "0" => Some(false),
        _ => None,
    }
}

/// Adds a printed count to what the block already holds under that label.
fn add_count(slot: &mut Option<u64>, value: &str) {
    if let Some(n) = present(value).and_then(text::whole) {
        *slot = Some(slot.unwrap_or(0).saturating_add(n));
    }
}

/// Takes an ECC or retirement line of a block; false when the label is none of them.
fn ecc_item(key: &str, value: &str, info: &mut CnmonInfo) -> bool {
    let (ecc, retired) = (&mut info.ecc, &mut info.retirement);
    match key {
        "uncorrectederr" => add_count(&mut ecc.uncorrected, value),
        "correctederr" => add_count(&mut ecc.corrected, value),
        "doublebiterr" => add_count(&mut ecc.double_bit, value),
        "singlebiterr" => add_count(&mut ecc.single_bit, value),
        "ispending" => retired.pending = retired.pending.or(yes_no(value)),
        "isfailed" => retired.failed = retired.failed.or(yes_no(value)),
        "correctablerows" => add_count(&mut retired.correctable_rows, value),
        "uncorrectablerows" => add_count(&mut retired.uncorrectable_rows, value),
        "pendingrows" => add_count(&mut retired.pending_rows, value),
        _ => return false,
    }
    true
}

/// Takes a `UUID`, `Product Name` or bus id line; one the block already holds opens the next
/// block. False when the label is none of them.
fn identity_item(
    key: &str,
    value: &str,
    current: &mut CnmonInfo,
    out: &mut Vec<CnmonInfo>,
) -> bool {
    match key {
        "uuid" => {
            if current.uuid.is_some() {
                close_block(current, out);
            }
            current.uuid = present(value).map(str::to_string);
        }
        "productname" => {
            if current.product.is_some() {
                close_block(current, out);
            }
            current.product = present(value).map(str::to_string);
        }
        // The address itself holds colons: the value is everything after the key.
        "busid" | "pciebusid" => {
            if current.bus_id.is_some() {
                close_block(current, out);
            }
            current.bus_id = value.parse().ok();
        }
        _ => return false,
    }
    true
}

/// Closes the block being read: kept when it holds anything. An empty one holds nothing but
/// its card number (every other field is what `is_empty` looks at), so it is left as it is:
/// the next `Card <n>` heading sets its own number, and at the end it is dropped.
fn close_block(current: &mut CnmonInfo, out: &mut Vec<CnmonInfo>) {
    if !current.is_empty() {
        out.push(std::mem::take(current));
    }
}

/// Reads `cnmon info`'s blocks, in printed order; a blank text is an empty list, a text that
/// prints something but no block is [`CnmonError::NoCardBlock`].
pub fn parse_info(text: &str) -> Result<Vec<CnmonInfo>, CnmonError> {
    let cleaned = text::clean(text);
    let mut out: Vec<CnmonInfo> = Vec::new();
    let mut current = CnmonInfo::default();
    // Inside a `Health State` list: its items follow until a line that is none.
    let mut in_health = false;
    for line in cleaned.lines() {
        if let Some(card) = card_heading(line) {
            close_block(&mut current, &mut out);
            current.card = Some(card);
            in_health = false;
            continue;
        }
        let (key, value) = match line.split_once(':') {
            Some((key, value)) => (label(key), Some(value.trim())),
            None => (label(line), None),
        };
        if key.is_empty() {
            in_health = false;
            continue;
        }
        if HEALTH_LABELS.contains(&key.as_str()) {
            if current.health.is_some() {
                close_block(&mut current, &mut out);
            }
            let health = health_heading(value.unwrap_or_default());
            in_health = health != HealthState::NotAvailable;
            current.health = Some(health);
            continue;
        }
        if in_health {
            if value.is_some_and(|v| health_item(&key, v, &mut current.health)) {
                continue;
            }
            in_health = false;
        }
        if let Some(value) = value
            && !identity_item(&key, value, &mut current, &mut out)
        {
            ecc_item(&key, value, &mut current);
        }
    }
    close_block(&mut current, &mut out);
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

    fn health_of(text: &str) -> Vec<Option<HealthState>> {
        parse_info(text)
            .unwrap()
            .into_iter()
            .map(|b| b.health)
            .collect()
    }

    fn read(device: Option<DeviceState>, driver: Option<DriverState>) -> Option<HealthState> {
        Some(HealthState::Read { device, driver })
    }

    /// Addendum C6's item in the layouts its unmeasured shape allows: a list under a heading,
    /// a one-line value, both states on one line, `N/A`, other cases and spellings.
    #[test]
    fn health_state_is_read_by_label_in_any_layout() {
        let list = "Card 3\n  UUID : a\n  Health State\n    Device : In Problem\n    Driver : Running\n  Driver Version : v5.10.22\n";
        assert_eq!(
            health_of(list),
            [read(
                Some(DeviceState::InProblem),
                Some(DriverState::Running)
            )]
        );
        let spelled =
            "Card 0\nUUID: a\nHEALTH STATE:\n  device state: good\n  driver-state: reset error\n";
        assert_eq!(
            health_of(spelled),
            [read(Some(DeviceState::Good), Some(DriverState::ResetError))]
        );
        assert_eq!(
            health_of("Card 0\nUUID : a\nHealth State : Good (Running)\n"),
            [read(Some(DeviceState::Good), Some(DriverState::Running))]
        );
        assert_eq!(
            health_of("Card 0\nUUID : a\nHealth State : In Problem\n   Boot error\n"),
            [read(Some(DeviceState::InProblem), None)],
            "a bare line is no item: the list ends there"
        );
        // Items under another label are taken by a word only a state can be.
        assert_eq!(
            health_of("Card 0\nHealth State\n  Status : In Problem\n  Mode : Booting\n"),
            [read(
                Some(DeviceState::InProblem),
                Some(DriverState::Booting)
            )]
        );
        assert_eq!(
            health_of("Card 0\nUUID : a\nHealth State : N/A\n  Device : Good\n"),
            [Some(HealthState::NotAvailable)],
            "after N/A no list follows"
        );
        // An unknown word under a state's label is kept as printed, never read as Good.
        assert_eq!(
            health_of("Card 0\nHealth State\n  Device : Degraded\n  Driver : N/A\n"),
            [read(Some(DeviceState::Other("Degraded".into())), None)]
        );
        // A label that is no item ends the list: `Device Id` later is not the device state.
        let blocks = parse_info(
            "Card 0\nHealth State\n  Device : Good\nProduct Name : MLU370-X8\nDevice : In Problem\n",
        )
        .unwrap();
        assert_eq!(blocks[0].health, read(Some(DeviceState::Good), None));
        assert_eq!(blocks[0].product.as_deref(), Some("MLU370-X8"));
        assert_eq!(
            health_of("Card 0\nUUID : a\n"),
            [None],
            "a block without the item has no reading"
        );
    }

    /// Every driver state cnmon names (addendum C6) reads as that state, not as `Other`.
    #[test]
    fn every_driver_state_is_read_by_its_word() {
        let states = [
            DriverState::EarlyInited,
            DriverState::BringUp,
            DriverState::Booting,
            DriverState::LateInit,
            DriverState::Running,
            DriverState::BootError,
            DriverState::Reset,
            DriverState::ResetError,
            DriverState::Unknown,
        ];
        for state in states {
            let text = format!("Card 0\nHealth State\n  Driver : {}\n", state.word());
            assert_eq!(
                health_of(&text),
                [read(None, Some(state.clone()))],
                "{text}"
            );
        }
    }

    #[test]
    fn a_health_state_seen_again_opens_the_next_block() {
        let blocks =
            parse_info("Health State : Good\nUUID : a\nHealth State : In Problem\nUUID : b\n")
                .unwrap();
        let read: Vec<_> = blocks
            .iter()
            .map(|b| {
                (
                    b.uuid.as_deref(),
                    b.health.as_ref().and_then(HealthState::device),
                )
            })
            .collect();
        assert_eq!(
            read,
            [
                (Some("a"), Some(&DeviceState::Good)),
                (Some("b"), Some(&DeviceState::InProblem))
            ]
        );
    }

    #[test]
    fn ecc_counters_and_retirement_are_read_by_label() {
        let text = "Card 0\nUUID : a\nDDR ECC Err Count\n  Corrected Err : 3\n  Single Bit Err : 3\n  Uncorrected Err : 1\n  Double Bit Err : N/A\nSRAM ECC Err Count\n  Uncorrected Err : 2\n  Double Bit Err : 5\nRetired Pages\n  Single Bit ECC : 0\n  Double Bit ECC : 1\n  is Pending : Yes\n  is Failed : No\nRow-Remapping\n  Correctable Rows : 0\n  Uncorrectable Rows : 4\n  Pending Rows : 0\n";
        let block = &parse_info(text).unwrap()[0];
        assert_eq!(
            block.ecc,
            InfoEcc {
                uncorrected: Some(3),
                corrected: Some(3),
                double_bit: Some(5),
                single_bit: Some(3),
            },
            "a label printed twice (DDR, SRAM) adds up; N/A is no count"
        );
        assert_eq!(
            block.retirement,
            Retirement {
                pending: Some(true),
                failed: Some(false),
                correctable_rows: Some(0),
                uncorrectable_rows: Some(4),
                pending_rows: Some(0),
            }
        );
    }

    #[test]
    fn the_ecc_error_cell_is_kept_as_printed() {
        let card = |cell: &str| CnmonCard {
            ecc_error: Some(cell.into()),
            ..CnmonCard::default()
        };
        assert_eq!(card("0").ecc_errors(), Some(0));
        assert_eq!(card("12").ecc_errors(), Some(12));
        assert_eq!(card("N/A").ecc_errors(), None);
        assert_eq!(CnmonCard::default().ecc_errors(), None);
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
