//! `hy-smi` and the `rocm-smi` fork of older DTK releases (HAZARDS.md items 1–5): the same code
//! under two names, so one reader serves both.
//!
//! - The JSON query (`--showid --showmeminfo vram … --showuniqueid --json`): one object keyed
//!   `card0 …`, every value a string, Hygon's keys (`HCU use (%)`, `vram Total Memory (MiB)` in
//!   MiB, `Unique ID` without `0x`), the vendor string unstable (`Chengdu Haiguang …` or
//!   `Chengdu C-3000 …`). It carries **no bus id**, so the detector joins it by unique id. Keys
//!   are matched without regard to ASCII case. A document cut short (an excerpt, a tool killed
//!   mid-write) yields the cards printed whole before the cut, marked [`SmiDocument::truncated`].
//! - The plain table (`hy-smi` without arguments): found by its header words, whichever of
//!   `DCU`, `HCU` or `GPU` heads the index column, read by label (columns differ by release:
//!   `Fan`, `Mode`, `Dec%`).
//!
//! A name is never taken from a field that is an id (`0x6210`) or a placeholder.

use serde_json::{Map, Value};

use accel_backend::text::{self, ColumnTable};

/// `hy-smi`'s JSON query (what the described system's users run, spec "Test data").
pub const HY_SMI_JSON: &[&str] = &[
    "hy-smi",
    "--showid",
    "--showmeminfo",
    "vram",
    "--showpower",
    "--showserial",
    "--showuse",
    "--showtemp",
    "--showproductname",
    "--showuniqueid",
    "--json",
];
/// The same query through the `rocm-smi` fork.
pub const ROCM_SMI_JSON: &[&str] = &[
    "rocm-smi",
    "--showid",
    "--showmeminfo",
    "vram",
    "--showpower",
    "--showserial",
    "--showuse",
    "--showtemp",
    "--showproductname",
    "--showuniqueid",
    "--json",
];
/// The plain table.
pub const HY_SMI_TABLE: &[&str] = &["hy-smi"];
/// The health check, one line per card (spec/hygon.md addendum H5; read by [`crate::health`]).
pub const HEALTHCHECK: &[&str] = &["hy-smi", "--healthcheck"];
/// The JSON queries, in the order they are asked.
pub const JSON_QUERIES: [&[&str]; 2] = [HY_SMI_JSON, ROCM_SMI_JSON];

/// Why a text is not the tool's output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmiError {
    /// Neither a JSON object nor a cut one holding a whole card.
    #[error("{what}: not a JSON document (first line {first:?})")]
    NotJson { what: String, first: String },
    /// JSON, but not an object of cards.
    #[error("{what}: no card object in the document")]
    NoCards { what: String },
    /// No table header holds the index and temperature columns.
    #[error("{what}: no DCU table (first line {first:?})")]
    NoTable { what: String, first: String },
}

/// One card of the JSON document.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SmiCard {
    /// `N` of the `cardN` key (the tool's index).
    pub card: u32,
    pub device_id: Option<u16>,
    /// `Card Series` when it is a name (not an id or a placeholder).
    pub name: Option<String>,
    pub vendor: Option<String>,
    pub serial: Option<String>,
    pub unique_id: Option<u64>,
    pub vram_mib: Option<u64>,
    pub vram_used_mib: Option<u64>,
    /// `HCU use (%)` (or `DCU use (%)`, `GPU use (%)`).
    pub utilisation_percent: Option<f64>,
    pub power_watts: Option<f64>,
    /// The edge sensor's temperature (the first sensor, as ROCm-SMI's sensor 0), else the
    /// junction's, core's or memory's, in °C.
    pub temperature_c: Option<f64>,
}

/// What the JSON query said.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SmiDocument {
    pub cards: Vec<SmiCard>,
    /// The document was cut short: only the cards before the cut are here.
    pub truncated: bool,
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .chars()
        .take(80)
        .collect()
}

/// The value of `key` in `object`, its case aside, as present text.
fn field(object: &Map<String, Value>, key: &str) -> Option<String> {
    let value = object.get(key).or_else(|| {
        object
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })?;
    let raw = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    text::present(&text::clean(&raw)).map(str::to_string)
}

fn first_field(object: &Map<String, Value>, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| field(object, k))
}

/// A product name: present, and not an id (`0x6210`, a bare hex figure).
pub fn product_name(raw: &str) -> Option<String> {
    let name = text::present(raw)?;
    let hexlike = name
        .strip_prefix("0x")
        .or_else(|| name.strip_prefix("0X"))
        .unwrap_or(name);
    if !hexlike.is_empty() && hexlike.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(name.to_string())
}

/// The `N` of a `cardN` key, in any case.
fn card_number(key: &str) -> Option<u32> {
    let prefix = key.get(..4).filter(|p| p.eq_ignore_ascii_case("card"))?;
    key[prefix.len()..].parse().ok()
}

fn card(n: u32, object: &Map<String, Value>) -> SmiCard {
    let vram_mib = field(object, "vram Total Memory (MiB)")
        .and_then(|v| text::whole(&v))
        .or_else(|| {
            field(object, "VRAM Total Memory (B)")
                .and_then(|v| v.parse::<u64>().ok())
                .map(|b| b >> 20)
        });
    SmiCard {
        card: n,
        device_id: field(object, "Device ID")
            .and_then(|d| text::hex(&d))
            .and_then(|d| u16::try_from(d).ok()),
        name: field(object, "Card Series").and_then(|n| product_name(&n)),
        vendor: field(object, "Card Vendor"),
        serial: field(object, "Serial Number"),
        unique_id: field(object, "Unique ID").and_then(|u| text::unique_id(&u)),
        vram_mib,
        vram_used_mib: field(object, "vram Total Used Memory (MiB)").and_then(|v| text::whole(&v)),
        utilisation_percent: first_field(object, &["HCU use (%)", "DCU use (%)", "GPU use (%)"])
            .and_then(|v| text::percent(&v)),
        power_watts: field(object, "Average Graphics Package Power (W)")
            .and_then(|v| text::watts(&v)),
        temperature_c: first_field(
            object,
            &[
                "Temperature (Sensor edge) (C)",
                "Temperature (Sensor junction) (C)",
                "Temperature (Sensor core) (C)",
                "Temperature (Sensor mem) (C)",
            ],
        )
        .and_then(|v| text::celsius(&v)),
    }
}

fn cards_of(what: &str, doc: &Value) -> Result<Vec<SmiCard>, SmiError> {
    let Value::Object(map) = doc else {
        return Err(SmiError::NoCards { what: what.into() });
    };
    let mut cards: Vec<SmiCard> = map
        .iter()
        .filter_map(|(key, value)| Some(card(card_number(key)?, value.as_object()?)))
        .collect();
    cards.sort_by_key(|c| c.card);
    if cards.is_empty() && !map.is_empty() {
        return Err(SmiError::NoCards { what: what.into() });
    }
    Ok(cards)
}

/// How many cut points a cut document is tried at (from the end), so a long garbled text
/// costs a bounded number of parses.
const CUT_ATTEMPTS: usize = 32;

/// The document cut short: the longest prefix ending just before a `, "card…` key that parses
/// once closed with `}`.
fn salvage(text: &str) -> Option<Value> {
    let mut end = text.len();
    for _ in 0..CUT_ATTEMPTS {
        let at = text[..end]
            .rfind(", \"card")
            .or_else(|| text[..end].rfind(",\"card"))?;
        let candidate = format!("{}}}", &text[..at]);
        if let Ok(value) = serde_json::from_str::<Value>(&candidate) {
            return Some(value);
        }
        end = at;
    }
    None
}

/// Reads the JSON document; `what` names the program (`hy-smi`, `rocm-smi`).
pub fn parse_json(what: &str, raw: &str) -> Result<SmiDocument, SmiError> {
    let cleaned = text::clean(raw);
    let body = cleaned.trim();
    let start = body.find('{').unwrap_or(0);
    let body = &body[start..];
    if let Ok(doc) = serde_json::from_str::<Value>(body) {
        return Ok(SmiDocument {
            cards: cards_of(what, &doc)?,
            truncated: false,
        });
    }
    let not_json = || SmiError::NotJson {
        what: what.into(),
        first: first_line(raw),
    };
    let doc = salvage(body).ok_or_else(not_json)?;
    let cards = cards_of(what, &doc)?;
    if cards.is_empty() {
        return Err(not_json());
    }
    Ok(SmiDocument {
        cards,
        truncated: true,
    })
}

/// One row of the plain table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SmiRow {
    /// The index column (`DCU`, `HCU` or `GPU`).
    pub index: Option<u32>,
    pub temperature_c: Option<f64>,
    pub power_watts: Option<f64>,
    pub power_cap_watts: Option<f64>,
    pub vram_percent: Option<f64>,
    /// `DCU%` / `HCU%` / `GPU%`.
    pub utilisation_percent: Option<f64>,
    /// `Mode` (`Normal`) where the release prints it.
    pub mode: Option<String>,
}

fn table(text_out: &str) -> Option<(ColumnTable, &'static str)> {
    ["DCU", "HCU", "GPU"]
        .into_iter()
        .find_map(|index| text::column_table(text_out, &[index, "Temp"]).map(|t| (t, index)))
}

/// Reads the plain table.
pub fn parse_table(raw: &str) -> Result<Vec<SmiRow>, SmiError> {
    let Some((table, index)) = table(raw) else {
        return Err(SmiError::NoTable {
            what: "hy-smi".into(),
            first: first_line(raw),
        });
    };
    let busy = format!("{index}%");
    Ok(table
        .rows
        .iter()
        .map(|r| SmiRow {
            index: r.get(index).and_then(|i| i.parse().ok()),
            temperature_c: r.get("Temp").and_then(text::celsius),
            power_watts: r.get("AvgPwr").and_then(text::watts),
            power_cap_watts: r.get("PwrCap").and_then(text::watts),
            vram_percent: r.get("VRAM%").and_then(text::percent),
            utilisation_percent: r.get(&busy).and_then(text::percent),
            mode: r.get("Mode").map(str::to_string),
        })
        .filter(|r| r.index.is_some())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_is_the_query_the_users_run() {
        assert_eq!(
            HY_SMI_JSON.join(" "),
            "hy-smi --showid --showmeminfo vram --showpower --showserial --showuse --showtemp --showproductname --showuniqueid --json"
        );
        assert_eq!(ROCM_SMI_JSON[0], "rocm-smi");
        assert_eq!(ROCM_SMI_JSON[1..], HY_SMI_JSON[1..]);
    }

    #[test]
    fn an_id_or_placeholder_is_no_name() {
        assert_eq!(product_name("K100_AI").as_deref(), Some("K100_AI"));
        assert_eq!(product_name("BW150").as_deref(), Some("BW150"));
        assert_eq!(product_name("0x6210"), None);
        assert_eq!(product_name("6210"), None);
        assert_eq!(product_name("N/A"), None);
    }

    #[test]
    fn keys_are_read_whatever_their_case_and_bytes_fall_back_to_mib() {
        let doc = r#"{"CARD1": {"card series": "Z100", "unique id": "0x5c88007d760374f3",
            "VRAM Total Memory (B)": "34342961152", "DCU use (%)": "12.5"},
            "system": {"Driver version": "x"}}"#;
        let got = parse_json("rocm-smi", doc).unwrap();
        assert!(!got.truncated);
        assert_eq!(got.cards.len(), 1);
        let c = &got.cards[0];
        assert_eq!(c.card, 1);
        assert_eq!(c.name.as_deref(), Some("Z100"));
        assert_eq!(c.unique_id, Some(0x5c88_007d_7603_74f3));
        assert_eq!(c.vram_mib, Some(32752));
        assert_eq!(c.utilisation_percent, Some(12.5));
    }

    #[test]
    fn an_object_without_cards_is_refused_unless_it_is_empty() {
        assert_eq!(parse_json("hy-smi", "{}"), Ok(SmiDocument::default()));
        assert_eq!(
            parse_json("hy-smi", r#"{"system": {"Driver version": "6.3.8"}}"#),
            Err(SmiError::NoCards {
                what: "hy-smi".into()
            })
        );
    }

    #[test]
    fn a_cut_document_keeps_its_whole_cards() {
        let doc = r#"{"card0": {"Unique ID": "7137d9b2a08a4841"}, "card1": {"Unique ID": "71"#;
        let got = parse_json("hy-smi", doc).unwrap();
        assert!(got.truncated);
        assert_eq!(got.cards.len(), 1);
        let e = parse_json("hy-smi", "hy-smi: command failed\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "hy-smi: not a JSON document (first line \"hy-smi: command failed\")"
        );
        assert!(matches!(
            parse_json("hy-smi", "[1, 2]"),
            Err(SmiError::NoCards { .. })
        ));
    }

    #[test]
    fn the_table_is_read_by_label_whichever_index_heads_it() {
        let hcu = "HCU  Temp   AvgPwr  Perf  PwrCap  VRAM%  HCU%  Dec%\n\
                   0    41.0C  90.0W   auto  1000.0W  3%    7%    0%\n";
        let rows = parse_table(hcu).unwrap();
        assert_eq!(rows[0].index, Some(0));
        assert_eq!(rows[0].utilisation_percent, Some(7.0));
        assert_eq!(rows[0].power_cap_watts, Some(1000.0));
        assert_eq!(rows[0].mode, None);
        assert!(parse_table("nothing here").is_err());
    }
}
