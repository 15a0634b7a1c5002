//! `rocm-smi --showallinfo --json`, the fallback when amd-smi is missing: an object keyed by DRM
//! card (`card0` …) plus an optional `system` object, every value a string. Keys were renamed
//! across ROCm releases (`Card series` → `Card Series`, `GPU ID` → `Device ID`), names come from
//! pci.ids, and `GFX Version` is mis-formatted (`gfx9010` for gfx90a), so the gfx target is
//! taken from KFD, never from here (HAZARDS.md, items 27–31).

use serde_json::Value;

use accel_core::busid::BusId;

use crate::amdsmi::{SmiError, document, text};
use crate::text::unique_id;

/// The argv the detector runs.
pub const ARGV: &[&str] = &["rocm-smi", "--showallinfo", "--json"];

/// One card of the document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RocmSmiCard {
    /// `N` of the `cardN` key.
    pub card: u32,
    pub bus_id: Option<BusId>,
    pub unique_id: Option<u64>,
    /// `Card Series` / `Card series` / `Device Name`: the pci.ids name.
    pub name: Option<String>,
    pub vram_bytes: Option<u64>,
    pub numa_node: Option<u32>,
}

/// What the document says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RocmSmi {
    pub cards: Vec<RocmSmiCard>,
    /// `system` → `Driver version`.
    pub driver_version: Option<String>,
}

fn first(card: &Value, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| text(card.get(*k)))
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
            let n = key.strip_prefix("card")?.parse().ok()?;
            Some(RocmSmiCard {
                card: n,
                bus_id: first(card, &["PCI Bus"]).and_then(|b| b.parse().ok()),
                unique_id: first(card, &["Unique ID"]).and_then(|u| unique_id(&u)),
                name: first(card, &["Card Series", "Card series", "Device Name"]),
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
        driver_version: map
            .get("system")
            .and_then(|s| text(s.get("Driver version"))),
    })
}
