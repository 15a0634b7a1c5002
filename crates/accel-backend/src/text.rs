//! What vendor tools print, read once for every vendor: the text rules each CLI shares, written
//! here so a vendor crate's parser only knows its own format.
//!
//! - Cleaning: [`clean`] strips ANSI escapes (Hygon's `rocminfo` colours its banner), NULs
//!   (sysfs padding) and carriage returns.
//! - Absence: [`present`] reads the placeholders and redactions the captures show as `None`:
//!   `N/A`, `NA`, `-`, `--`, `[N/A]`, `Not Supported`, `[Not Supported]`, and a redaction made of
//!   `x`s only (`xxxxx MiB` in a published cnmon table, the name `xxx` in an npu-smi sample).
//! - Figures: [`figure`] splits `81559 MiB`, `45C`, `12 %`, `30.0c` into a number and its unit;
//!   [`mebibytes`], [`celsius`], [`watts`] and [`percent`] accept only their units (or none);
//!   [`pair`] and [`memory_pair`] read `used / total` in every spelling (`1024MiB / 32768MiB`,
//!   `826/65536 MiB`, `0 MiB/ 23308 MiB`, mthreads-gmi's `66641MiB(81920MiB)`).
//! - Identities: [`hex`] (`0x1d94`, `1D94`) and [`unique_id`] (zero and all-ones → `None`).
//! - Versions: [`dotted_version`] ("a driver version is a dotted figure": `6.3.8`, `23.0.rc3`,
//!   `25.7.rc1.6`, `3.3.5-server`, `v5.10.10`) and [`version_after`] for a banner's
//!   `Driver Version: 4.1.0` / `Driver Version:3.1.0` / `Driver v5.10.10`.
//! - Tables, read by header and never by offset: [`box_table`] for nvidia-smi-style box tables
//!   (npu-smi, ppu-smi, ixsmi, mthreads-gmi, cnmon, mx-smi) and [`column_table`] for blank-
//!   separated columns under a header line (hy-smi, `npu-smi info -m`, `-t topo`), and
//!   [`csv_table`] for the `--query-gpu … --format=csv` form ixsmi shares with nvidia-smi.
//!
//! Every function here is pure and total: any bytes in, a value or `None` out, never a panic
//! (property-tested on random text and on every capture in `../shared/fixtures`, and fuzzed).
//! This module knows no vendor's fields: which label holds the bus id, and what a value means,
//! is the vendor crate's.

use std::borrow::Cow;

// ---------------------------------------------------------------------------------------------
// Cleaning

/// The text without ANSI escape sequences, NULs and carriage returns. CSI sequences
/// (`ESC [ … final`), OSC sequences (`ESC ] … BEL` or `ESC \`) and two-byte escapes are removed
/// whole; an escape cut off at the end of the text is dropped.
pub fn clean(text: &str) -> Cow<'_, str> {
    if !text.contains(['\u{1b}', '\0', '\r']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\0' | '\r' => {}
            '\u{1b}' => match chars.next() {
                Some('[') => {
                    // Parameters and intermediates, then one final byte in @..~.
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                _ => {}
            },
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

// ---------------------------------------------------------------------------------------------
// Absence

/// The spellings the captures show for "no value" (compared without case): nvidia-smi's
/// `N/A`, `[N/A]`, `Not Supported`, `[Not Supported]`; npu-smi's `NA` (310P power) and `-`
/// (the second die's power on A3, an Mcu row's logic id); `--` of some column tools.
pub const PLACEHOLDERS: &[&str] = &[
    "n/a",
    "[n/a]",
    "na",
    "-",
    "--",
    "not supported",
    "[not supported]",
];

/// Whether `word` is a redaction: three or more `x`s and nothing else (`xxx`, `xxxxx`), as
/// published captures hide names and sizes.
pub fn is_redacted(word: &str) -> bool {
    word.len() >= 3 && word.bytes().all(|b| b == b'x' || b == b'X')
}

/// The trimmed text when it is a value; `None` when it is empty, a [`PLACEHOLDERS`] spelling,
/// or a redaction (with or without a unit after it: `xxxxx MiB`).
pub fn present(raw: &str) -> Option<&str> {
    let text = raw.trim();
    if text.is_empty() {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    if PLACEHOLDERS.contains(&lower.as_str()) {
        return None;
    }
    let first = text.split_whitespace().next().unwrap_or(text);
    let words = text.split_whitespace().count();
    if is_redacted(first) && words <= 2 {
        return None;
    }
    Some(text)
}

// ---------------------------------------------------------------------------------------------
// Figures

/// A number and the unit printed after it: `81559 MiB` → (81559, `MiB`), `45C` → (45, `C`),
/// `12 %` → (12, `%`), `-5 C`, `42` → (42, ``). A placeholder, a word, a second number
/// (`12 34`) or a non-finite value is `None`.
pub fn figure(raw: &str) -> Option<(f64, &str)> {
    let text = present(raw)?;
    let bytes = text.as_bytes();
    let mut end = usize::from(matches!(bytes.first(), Some(b'-' | b'+')));
    let digits_from = end;
    let mut dot = false;
    while let Some(&b) = bytes.get(end) {
        match b {
            b'0'..=b'9' => end += 1,
            b'.' if !dot => {
                dot = true;
                end += 1;
            }
            _ => break,
        }
    }
    let number = text.get(..end)?;
    if !number
        .get(digits_from..)?
        .bytes()
        .any(|b| b.is_ascii_digit())
    {
        return None;
    }
    let unit = text.get(end..)?.trim();
    if unit.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    value.is_finite().then_some((value, unit))
}

/// A figure whose unit is one of `units` (compared without case) or absent.
fn figure_in(raw: &str, units: &[&str]) -> Option<f64> {
    let (value, unit) = figure(raw)?;
    (unit.is_empty() || units.iter().any(|u| u.eq_ignore_ascii_case(unit))).then_some(value)
}

/// The unit a memory figure is taken in when it has none of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryUnit {
    Bytes,
    KiB,
    MiB,
    GiB,
}

impl MemoryUnit {
    /// The unit a printed suffix names. The tools print binary sizes under decimal names
    /// (npu-smi's HBM `65536` MB is 64 GiB, mx-smi's `65536 MiB` the same part), so `MB` is
    /// MiB and `GB` GiB.
    pub fn of(suffix: &str) -> Option<MemoryUnit> {
        Some(match suffix.to_ascii_lowercase().as_str() {
            "b" => MemoryUnit::Bytes,
            "k" | "kb" | "kib" => MemoryUnit::KiB,
            "m" | "mb" | "mib" => MemoryUnit::MiB,
            "g" | "gb" | "gib" => MemoryUnit::GiB,
            _ => return None,
        })
    }

    fn mebibytes(self, value: f64) -> f64 {
        match self {
            MemoryUnit::Bytes => value / (1024.0 * 1024.0),
            MemoryUnit::KiB => value / 1024.0,
            MemoryUnit::MiB => value,
            MemoryUnit::GiB => value * 1024.0,
        }
    }
}

/// A memory size in MiB, rounded: `81559 MiB`, `32 GB`, `1.5 GiB`, `1024 KiB`; a bare number
/// is taken in `bare` (the unit a column's header names, `Memory-Usage(MB)`). Negative sizes
/// and unknown units are `None`.
pub fn mebibytes(raw: &str, bare: MemoryUnit) -> Option<u64> {
    let (value, unit) = figure(raw)?;
    let unit = if unit.is_empty() {
        bare
    } else {
        MemoryUnit::of(unit)?
    };
    let mib = unit.mebibytes(value);
    (mib >= 0.0 && mib <= u64::MAX as f64).then(|| mib.round() as u64)
}

/// A temperature in °C: `45C`, `45 C`, `30.0c`, `45`.
pub fn celsius(raw: &str) -> Option<f64> {
    figure_in(raw, &["C", "°C"])
}

/// A power in W: `300 W`, `118.0W`, `300`.
pub fn watts(raw: &str) -> Option<f64> {
    figure_in(raw, &["W"])
}

/// A percentage: `12 %`, `0%`, `12`.
pub fn percent(raw: &str) -> Option<f64> {
    figure_in(raw, &["%"])
}

/// A non-negative whole number (`42`, `42 %`); fractions and negatives are `None`.
pub fn whole(raw: &str) -> Option<u64> {
    let (value, _) = figure(raw)?;
    (value >= 0.0 && value.fract() == 0.0 && value <= u64::MAX as f64).then_some(value as u64)
}

/// The two sides of a `used / total` pair (or `current(max)`), trimmed: `1024MiB / 32768MiB`,
/// `N/A / N/A`, `826/65536 MiB`, `0 MiB/ 23308 MiB`, `66641MiB(81920MiB)`, `16x(16x)`. Text that
/// is not one pair is `None`.
pub fn pair(raw: &str) -> Option<(&str, &str)> {
    // A placeholder is not a pair, though `N/A` holds a slash.
    let text = present(raw)?;
    let (used, total) = if let Some(sides) = text.split_once(" / ") {
        sides
    } else if let Some(inner) = text.strip_suffix(')') {
        let (used, total) = inner.split_once('(')?;
        (!used.trim().is_empty()).then_some((used, total))?
    } else if text.matches('/').count() == 1 {
        text.split_once('/')?
    } else {
        return None;
    };
    Some((used.trim(), total.trim()))
}

/// Memory in use and in all, in MiB, from a [`pair`]: a side without a unit takes the other
/// side's (`826/65536 MiB`), else `bare`. A placeholder or redacted side is `None` on its own.
pub fn memory_pair(raw: &str, bare: MemoryUnit) -> (Option<u64>, Option<u64>) {
    let Some((used, total)) = pair(raw) else {
        return (None, None);
    };
    let unit_of = |side: &str| {
        figure(side)
            .and_then(|(_, unit)| MemoryUnit::of(unit))
            .or_else(|| {
                // A redacted figure still names its unit (`xxxxx MiB`).
                side.split_whitespace().nth(1).and_then(MemoryUnit::of)
            })
    };
    let used_unit = unit_of(used);
    let total_unit = unit_of(total);
    let used_mib = mebibytes(used, used_unit.or(total_unit).unwrap_or(bare));
    let total_mib = mebibytes(total, total_unit.or(used_unit).unwrap_or(bare));
    (used_mib, total_mib)
}

// ---------------------------------------------------------------------------------------------
// Identities

/// A hex figure with or without `0x` (`0x1d94`, `1D94`), at most 16 digits.
pub fn hex(raw: &str) -> Option<u64> {
    let text = present(raw)?;
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// A unique id (a serial in hex): zero and all ones (the "unsupported" sentinel, at any width:
/// `ffffffff`, `0xFFFFFFFFFFFFFFFF`) are `None`.
pub fn unique_id(raw: &str) -> Option<u64> {
    let value = hex(raw)?;
    let all_ones =
        value != 0 && (value.wrapping_add(1) & value) == 0 && value.count_ones() % 4 == 0;
    (value != 0 && !all_ones).then_some(value)
}

// ---------------------------------------------------------------------------------------------
// Versions

/// `raw` when it is a dotted figure, the shape every driver and tool version takes: digits, a
/// dot, digits, then more dot-, dash- or plus-separated parts of letters and digits (`6.3.8`,
/// `23.0.rc3`, `24.1.RC2`, `25.7.rc1.6`, `21.0.4.B030`, `3.3.5-server`, `2.1.0-ra1f23041713`).
/// A leading `v` is dropped (`v5.10.10`). Anything else (`N/A`, a squashed `/proc/version`,
/// `1`) is `None`.
pub fn dotted_version(raw: &str) -> Option<&str> {
    let text = raw.trim();
    let text = text
        .strip_prefix('v')
        .or_else(|| text.strip_prefix('V'))
        .unwrap_or(text);
    let mut parts = text.splitn(3, '.');
    let major = parts.next()?;
    let minor_and_rest = parts.next()?;
    let minor: String = minor_and_rest
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'_');
    (digits(major)
        && !minor.is_empty()
        && text.bytes().all(allowed)
        && !text.ends_with(['.', '-', '+']))
    .then_some(text)
}

/// The version printed after `label` on the first line holding it: `Driver Version: 4.1.0`,
/// `Driver Version:3.1.0`, `Driver v5.10.10`, `mthreads-gmi:2.0.0`. The label is matched without
/// case; the value must be a [`dotted_version`] (`HGGC Version: N/A` is `None`).
pub fn version_after<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    if label.is_empty() {
        return None;
    }
    let lower_label = label.to_ascii_lowercase();
    text.lines().find_map(|line| {
        let at = line.to_ascii_lowercase().find(&lower_label)?;
        let rest = line.get(at + label.len()..)?;
        let rest = rest
            .trim_start()
            .strip_prefix(':')
            .unwrap_or(rest)
            .trim_start();
        let word = rest.split_whitespace().next()?;
        dotted_version(word.trim_end_matches([',', ';', ')', '|']))
    })
}

// ---------------------------------------------------------------------------------------------
// Tables

/// One record of a table: its values by header label, in printed order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// (label, value) pairs; a label printed twice keeps both, [`Record::raw`] finds the first.
    pub fields: Vec<(String, String)>,
    /// A column table row's own name when the header has no label above it (the first cell of
    /// a matrix row, `npu-smi info -t topo`'s `NPU0`); always `None` in a box table.
    pub name: Option<String>,
    /// The physical lines the record took.
    pub lines: usize,
}

impl Record {
    /// The value under `label` (compared without case) as printed, trimmed; `None` when the
    /// table has no such column or the cell is blank.
    pub fn raw(&self, label: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(l, _)| l.eq_ignore_ascii_case(label))
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// The value under `label`, [`present`]: placeholders and redactions are `None`.
    pub fn get(&self, label: &str) -> Option<&str> {
        self.raw(label).and_then(present)
    }

    /// The value under `label` as a whole number that fits a `u32` (an index, an ordinal, a
    /// PID): [`get`](Record::get) then [`whole`]; `None` otherwise.
    pub fn number(&self, label: &str) -> Option<u32> {
        self.get(label)
            .and_then(whole)
            .and_then(|n| u32::try_from(n).ok())
    }
}

/// A box table: the labels of each header line, and the records under it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BoxTable {
    /// Each header line's labels, left to right (a caller tells layouts apart by them).
    pub header: Vec<Vec<String>>,
    pub records: Vec<Record>,
}

impl BoxTable {
    /// Whether any header line has `label` (compared without case).
    pub fn has_label(&self, label: &str) -> bool {
        self.header
            .iter()
            .flatten()
            .any(|l| l.eq_ignore_ascii_case(label))
    }
}

/// A column table: the header's labels and the rows under it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnTable {
    pub labels: Vec<String>,
    pub rows: Vec<Record>,
}

/// What a line of a box is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// `+-----+`, `|-----|`, a dashed banner rule.
    Rule,
    /// `+=====+`, `|=====|`: the rule under a header.
    HeaderRule,
    /// Nothing but blanks.
    Blank,
    /// `...` where a capture was shortened.
    Elision,
    /// A line with at least one `|`.
    Cells,
    /// Anything else (a log line, a title, a timestamp).
    Other,
}

fn kind(line: &str) -> Line {
    let t = line.trim();
    if t.is_empty() {
        return Line::Blank;
    }
    if t == "..." || t == "…" {
        return Line::Elision;
    }
    let rule_chars = t
        .bytes()
        .all(|b| matches!(b, b'+' | b'-' | b'=' | b'|' | b' '));
    let strokes = t.bytes().filter(|b| matches!(b, b'-' | b'=')).count();
    if rule_chars && strokes >= 3 {
        return if t.contains('=') {
            Line::HeaderRule
        } else {
            Line::Rule
        };
    }
    if t.contains('|') {
        Line::Cells
    } else {
        Line::Other
    }
}

fn is_rule(line: Line) -> bool {
    matches!(line, Line::Rule | Line::HeaderRule)
}

/// Splits on runs of two or more blanks (or a tab): `Fan  Temp  Perf` → three; `Chip Name` is
/// one.
pub fn split_blanks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    let mut blanks = 0usize;
    let mut blank_from = 0usize;
    for (i, c) in text.char_indices() {
        if c == ' ' || c == '\t' {
            if blanks == 0 {
                blank_from = i;
            }
            blanks += if c == '\t' { 2 } else { 1 };
            continue;
        }
        if blanks >= 2
            && let Some(s) = start.take()
        {
            out.push(&text[s..blank_from]);
        }
        blanks = 0;
        if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        let end = if blanks > 0 { blank_from } else { text.len() };
        out.push(&text[s..end]);
    }
    out
}

/// A header cell's labels: split on runs of blanks, and after a unit in parentheses followed by
/// a blank (npu-smi 25.7 prints `NPU Util(%) Memory-Usage(MB)` with one blank between).
fn labels(cell: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in split_blanks(cell) {
        let mut rest = word;
        while let Some(at) = rest.find(") ") {
            out.push(rest[..=at].trim().to_string());
            rest = rest[at + 1..].trim_start();
        }
        if !rest.trim().is_empty() {
            out.push(rest.trim().to_string());
        }
    }
    out
}

/// A value cell's values: split on runs of blanks, then a `used / total` pair printed with wide
/// blanks (`0    / 0`) joined back into one value. A lone `/` stays a value of its own (cnmon's
/// VF column).
fn values(cell: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut join_next = false;
    for word in split_blanks(cell) {
        let joins_previous = word.len() > 1 && word.starts_with('/');
        match out.last_mut() {
            Some(last) if joins_previous || join_next => {
                last.push(' ');
                last.push_str(word);
            }
            _ => out.push(word.to_string()),
        }
        join_next = word.len() > 1 && word.ends_with('/');
    }
    out
}

/// A line's cells between `|`s, without the outer ones.
fn cells(line: &str) -> Vec<&str> {
    let t = line.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    t.split('|').collect()
}

/// How far a line is indented.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The column of each cell of `line` in a table `width` cells wide whose header starts at
/// `margin`. A line indented past the margin has left its first cells out (mthreads-gmi's third
/// line, `      |  ECC Mode`), so its cells count from the right edge; any other line's from the
/// left (a process table's one-cell `| No running processes found |`).
fn columns_of(line: &str, width: usize, margin: usize) -> Vec<(usize, &str)> {
    let cells = cells(line);
    // `<` or `<=` alike (an equivalent mutant, excluded in .cargo/mutants.toml): a line of
    // `width` cells would skip `width - width`, none.
    let skipped = if cells.len() < width && indent(line) > margin {
        width - cells.len()
    } else {
        0
    };
    cells
        .into_iter()
        .enumerate()
        .map(|(i, c)| (skipped + i, c))
        .collect()
}

/// Pairs a record line with its header line, cell by cell, then value by label.
fn pair_line(
    header: &str,
    record: &str,
    (width, margin): (usize, usize),
    out: &mut Vec<(String, String)>,
) {
    let record_cells = columns_of(record, width, margin);
    for (at, header_cell) in columns_of(header, width, margin) {
        let Some((_, record_cell)) = record_cells.iter().find(|(c, _)| *c == at) else {
            continue;
        };
        for (label, value) in labels(header_cell).into_iter().zip(values(record_cell)) {
            out.push((label, value));
        }
    }
}

fn line_labels(line: &str) -> Vec<String> {
    cells(line).into_iter().flat_map(labels).collect()
}

/// Whether `line` holds every anchor word as text at all (compared without case): the cheap
/// test before a line is split into labels. Every caller asks [`has_all`] of the line's labels
/// next, and a label is a piece of the line, so `true` here changes no answer, only the cost
/// (an equivalent mutant, excluded in .cargo/mutants.toml).
fn mentions_all(line: &str, anchor: &[&str]) -> bool {
    let line = line.as_bytes();
    anchor.iter().all(|word| {
        let word = word.as_bytes();
        !word.is_empty()
            && line
                .windows(word.len())
                .any(|w| w.eq_ignore_ascii_case(word))
    })
}

fn has_all(found: &[String], anchor: &[&str]) -> bool {
    !anchor.is_empty()
        && anchor
            .iter()
            .all(|a| found.iter().any(|l| l.eq_ignore_ascii_case(a)))
}

/// The rows of a tool's process table (`Processes:` under nvidia-smi's, ixsmi's, mx-smi's,
/// cnmon's card table): the box whose header line holds every label of `header` (`GPU`, `PID`,
/// `Process name`), read from that line alone — the title above it (`| Processes: GPU Memory |`)
/// and a unit line under it (`| Usage(MiB) |`) are `|` lines too, which [`box_table`] would take
/// for more header lines and pair every row with — through the `===` rule under it. The one row
/// a table without processes prints (`No running processes found`, `no process found`) is no
/// process. `None` when the text has no such table (a capture cut before it).
pub fn process_rows(text: &str, header: &[&str]) -> Option<Vec<Record>> {
    let text = clean(text);
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| labels_every(l, header))?;
    let rule = at
        + 1
        + lines
            .get(at + 1..)?
            .iter()
            .position(|l| is_header_rule(l))?;
    let mut section = vec![lines[at]];
    section.extend_from_slice(&lines[rule..]);
    let table = box_table(&section.join("\n"), header)?;
    Some(
        table
            .records
            .into_iter()
            .filter(|r| !says_no_process(r))
            .collect(),
    )
}

/// Whether a `|` line's cells, split on runs of blanks, hold every label of `header`.
fn labels_every(line: &str, header: &[&str]) -> bool {
    if !line.contains('|') {
        return false;
    }
    let labels: Vec<&str> = line.split('|').flat_map(split_blanks).collect();
    header
        .iter()
        .all(|h| labels.iter().any(|l| l.eq_ignore_ascii_case(h)))
}

/// `|=====|` or `+=====+`: the rule under a header.
fn is_header_rule(line: &str) -> bool {
    let t = line.trim();
    t.contains("===") && t.chars().all(|c| matches!(c, '=' | '+' | '|' | '-' | ' '))
}

/// `No running processes found`: the one line of a table without rows.
fn says_no_process(record: &Record) -> bool {
    record.fields.first().is_some_and(|(_, value)| {
        let value = value.to_ascii_lowercase();
        value.starts_with("no ") && value.contains("process")
    })
}

/// Reads the box table whose header holds every label of `anchor` (compared without case; pick
/// words of the header, never the banner, which differs by vendor: `PPU`, `DCU`, `NPU`).
///
/// The header is the run of `|` lines around the anchor's line, up to the rules above and below
/// it (`+-----+` or `+=====+`); a header that no rule closes (a trimmed capture) is the lines up
/// to the anchor's. Each record runs to the next rule, or ends after as many lines as the header
/// has, and its line k pairs with header line k; each cell is split on runs of two or more blanks
/// and its values are looked up by the labels above them, so a column a release adds, renames or
/// drops gives `None`, never a shifted value. Reading ends at a blank line, a line without `|`,
/// or two rules in a row (what follows — the process table — is another table); `...` elisions
/// are skipped. `None` when no header holds the anchor.
pub fn box_table(text: &str, anchor: &[&str]) -> Option<BoxTable> {
    let text = clean(text);
    let lines: Vec<&str> = text.lines().collect();
    let kinds: Vec<Line> = lines.iter().map(|l| kind(l)).collect();
    let at = (0..lines.len()).find(|&i| {
        kinds[i] == Line::Cells
            && mentions_all(lines[i], anchor)
            && has_all(&line_labels(lines[i]), anchor)
    })?;
    let mut first = at;
    while first > 0 && kinds[first - 1] == Line::Cells {
        first -= 1;
    }
    let mut last = at;
    while last + 1 < lines.len() && kinds[last + 1] == Line::Cells {
        last += 1;
    }
    let closed = lines
        .get(last + 1)
        .is_some_and(|_| is_rule(kinds[last + 1]));
    let (header_lines, records_from) = if closed {
        (&lines[first..=last], last + 2)
    } else {
        (&lines[first..=at], at + 1)
    };
    let width = header_lines
        .iter()
        .map(|l| cells(l).len())
        .max()
        .unwrap_or(0);
    let margin = header_lines.iter().map(|l| indent(l)).min().unwrap_or(0);
    let mut table = BoxTable {
        header: header_lines.iter().map(|l| line_labels(l)).collect(),
        records: Vec::new(),
    };
    let mut current: Vec<&str> = Vec::new();
    let flush = |current: &mut Vec<&str>, table: &mut BoxTable| {
        if current.is_empty() {
            return;
        }
        let mut record = Record {
            lines: current.len(),
            ..Record::default()
        };
        for (header, line) in header_lines.iter().zip(current.iter()) {
            pair_line(header, line, (width, margin), &mut record.fields);
        }
        table.records.push(record);
        current.clear();
    };
    let mut after_rule = true;
    for i in records_from..lines.len() {
        match kinds[i] {
            Line::Rule | Line::HeaderRule => {
                if after_rule && i > records_from {
                    break;
                }
                flush(&mut current, &mut table);
                after_rule = true;
            }
            Line::Elision => after_rule = false,
            Line::Blank | Line::Other => break,
            Line::Cells => {
                current.push(lines[i]);
                after_rule = false;
                if current.len() >= header_lines.len() {
                    flush(&mut current, &mut table);
                }
            }
        }
    }
    flush(&mut current, &mut table);
    Some(table)
}

/// Reads the column table under the first line holding every label of `anchor`: labels and
/// values split on runs of two or more blanks, paired left to right. A row with more values than
/// the header has labels gives the extra leading ones as the row's [`Record::name`] (a matrix);
/// one with fewer leaves the last labels out. Rows run to a blank line, a rule (`=====`,
/// `-----`) or the end. `None` when no line holds the anchor.
pub fn column_table(text: &str, anchor: &[&str]) -> Option<ColumnTable> {
    let text = clean(text);
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|line| {
        if !mentions_all(line, anchor) {
            return false;
        }
        let found: Vec<String> = split_blanks(line.trim())
            .into_iter()
            .map(str::to_string)
            .collect();
        has_all(&found, anchor)
    })?;
    let labels: Vec<String> = split_blanks(lines[at].trim())
        .into_iter()
        .map(str::to_string)
        .collect();
    let mut table = ColumnTable {
        labels,
        rows: Vec::new(),
    };
    for line in &lines[at + 1..] {
        if matches!(kind(line), Line::Blank | Line::Rule | Line::HeaderRule) {
            break;
        }
        let values = split_blanks(line.trim());
        let extra = values.len().saturating_sub(table.labels.len());
        let name = (extra > 0).then(|| values[..extra].join(" "));
        let fields = table
            .labels
            .iter()
            .cloned()
            .zip(values[extra..].iter().map(|v| v.to_string()))
            .collect();
        table.rows.push(Record {
            fields,
            name,
            lines: 1,
        });
    }
    Some(table)
}

/// Reads an nvidia-smi-style CSV query (`--query-gpu=… --format=csv`, which ixsmi shares): the
/// first line holding every label of `anchor` is the header, fields are split on `,` and
/// trimmed, and a header's unit in brackets is dropped from its label (`memory.total [MiB]` →
/// `memory.total`, the unit staying on the values unless `nounits` was asked). Nothing is quoted
/// in this CSV, so a row with more fields than the header (a name holding a comma) cannot be
/// paired without guessing which field grew: it is kept with no fields. Rows run to a blank
/// line or the end. `None` when no line holds the anchor.
pub fn csv_table(text: &str, anchor: &[&str]) -> Option<ColumnTable> {
    let text = clean(text);
    let split =
        |line: &str| -> Vec<String> { line.split(',').map(|f| f.trim().to_string()).collect() };
    let label = |field: &str| -> String {
        match field.split_once(" [") {
            Some((name, unit)) if unit.ends_with(']') => name.trim().to_string(),
            _ => field.trim().to_string(),
        }
    };
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|line| {
        mentions_all(line, anchor)
            && has_all(
                &split(line).iter().map(|f| label(f)).collect::<Vec<_>>(),
                anchor,
            )
    })?;
    let labels: Vec<String> = split(lines[at]).iter().map(|f| label(f)).collect();
    let mut table = ColumnTable {
        labels,
        rows: Vec::new(),
    };
    for line in &lines[at + 1..] {
        if line.trim().is_empty() {
            break;
        }
        let values = split(line);
        let values = if values.len() > table.labels.len() {
            Vec::new()
        } else {
            values
        };
        table.rows.push(Record {
            fields: table.labels.iter().cloned().zip(values).collect(),
            name: None,
            lines: 1,
        });
    }
    Some(table)
}

#[cfg(test)]
mod tests;
