//! `rocm-smi --showallinfo --json`, the fallback when amd-smi is missing: an object keyed by DRM
//! card (`card0` …) plus an optional `system` object, every value a string. Keys were renamed
//! across ROCm releases (`Card series` → `Card Series`, `GPU ID` → `Device ID`) and their case
//! varies, so every key (`cardN`, `system` and the fields) is matched without regard to ASCII
//! case; names come from pci.ids (a bare PCI id or a placeholder is no name), and `GFX Version`
//! is mis-formatted (`gfx9010` for gfx90a), so the gfx target is taken from KFD, never from here
//! (HAZARDS.md, items 27–31).

use serde_json::Value;

use accel_core::busid::BusId;

use crate::amdsmi::{SmiError, document, driver_version, text};
use crate::text::{product_name, unique_id};

/// The argv the detector runs.
pub const ARGV: &[&str] = &["rocm-smi", "--showallinfo", "--json"];

/// One card of the document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RocmSmiCard {
    /// `N` of the `cardN` key.
    pub card: u32,
    pub bus_id: Option<BusId>,
    pub unique_id: Option<u64>,
    /// `Card Series`, else `Device Name`: the pci.ids name.
    pub name: Option<String>,
    pub vram_bytes: Option<u64>,
    pub numa_node: Option<u32>,
}

/// What the document says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RocmSmi {
    pub cards: Vec<RocmSmiCard>,
    /// `system` → `Driver version`, when it is a driver's version
    /// ([`crate::amdsmi::driver_version`]).
    pub driver_version: Option<String>,
}

/// The value of `key` in an object, its case aside (`VRAM Total Memory (B)`, `vram total
/// memory (b)`): the exact spelling first, else the first key equal without regard to ASCII case.
fn field<'a>(object: &'a Value, key: &str) -> Option<&'a Value> {
    let map = object.as_object()?;
    map.get(key).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

fn first(card: &Value, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| text(field(card, k)))
}

/// The `N` of a `cardN` key, in any case.
fn card_number(key: &str) -> Option<u32> {
    let digits = key.get(..4).filter(|p| p.eq_ignore_ascii_case("card"))?;
    key[digits.len()..].parse().ok()
}

/// Reads the document.
pub fn parse(text_out: &str) -> Result<RocmSmi, SmiError> {
    let what = "rocm-smi --json";
    let doc = document(what, text_out)?;
    let Value::Object(map) = &doc else {
        return Err(SmiError::NoGpuList { what: what.into() });
    };
    let mut cards: Vec<RocmSmiCard> = map
        .iter()
        .filter_map(|(key, card)| {
            let n = card_number(key)?;
            Some(RocmSmiCard {
                card: n,
                bus_id: first(card, &["PCI Bus"]).and_then(|b| b.parse().ok()),
                unique_id: first(card, &["Unique ID"]).and_then(|u| unique_id(&u)),
                name: ["Card Series", "Device Name"]
                    .iter()
                    .find_map(|k| text(field(card, k)).and_then(|n| product_name(&n))),
                vram_bytes: first(card, &["VRAM Total Memory (B)"]).and_then(|v| v.parse().ok()),
                numa_node: first(card, &["(Topology) Numa Node"])
                    .and_then(|v| v.parse::<i64>().ok())
                    .and_then(|v| u32::try_from(v).ok()),
            })
        })
        .collect();
    cards.sort_by_key(|c| c.card);
    Ok(RocmSmi {
        cards,
        driver_version: driver_version(
            field(&doc, "system").and_then(|s| text(field(s, "Driver version"))),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_read_whatever_its_case() {
        let doc = r#"{
            "CARD3": {
                "pci bus": "0000:03:00.0",
                "UNIQUE ID": "0x5c88007d760374f3",
                "card series": "Navi 22 [Radeon RX 6700/6700 XT / 6800M]",
                "vram total memory (b)": "12868124672",
                "(topology) numa node": "1"
            },
            "System": {"driver VERSION": "6.3.6"}
        }"#;
        let got = parse(doc).unwrap();
        assert_eq!(
            got,
            RocmSmi {
                cards: vec![RocmSmiCard {
                    card: 3,
                    bus_id: "0000:03:00.0".parse().ok(),
                    unique_id: Some(0x5c88_007d_7603_74f3),
                    name: Some("Navi 22 [Radeon RX 6700/6700 XT / 6800M]".into()),
                    vram_bytes: Some(12_868_124_672),
                    numa_node: Some(1),
                }],
                driver_version: Some("6.3.6".into()),
            }
        );
    }

    #[test]
    fn the_exact_spelling_wins_over_another_case() {
        let doc = r#"{"card0": {"VRAM TOTAL MEMORY (B)": "1", "VRAM Total Memory (B)": "2"}}"#;
        assert_eq!(parse(doc).unwrap().cards[0].vram_bytes, Some(2));
    }

    #[test]
    fn a_placeholder_or_bare_id_name_falls_to_the_device_name_and_a_banner_is_no_driver() {
        let doc = r#"{
            "card0": {"Card Series": "0x73df", "Device Name": "Navi 22"},
            "card1": {"Card Series": "N/A", "Device Name": "-"},
            "cardx": {"Card Series": "not a card"},
            "system": {"Driver version": "Linux version 6.8.0-79-generic (buildd@lcy02)"}
        }"#;
        let got = parse(doc).unwrap();
        let names: Vec<_> = got.cards.iter().map(|c| c.name.as_deref()).collect();
        assert_eq!(names, vec![Some("Navi 22"), None]);
        assert_eq!(got.driver_version, None);
    }
}
