//! Hygon's live usage: the same JSON query the detector asks (`hy-smi`, else the `rocm-smi`
//! fork of older DTK releases, whichever is installed) prints each DCU's `HCU use (%)`, VRAM
//! used and total, power and temperatures, with its unique id — so one call names every sample
//! as the inventory does (`GPU-<unique id hex>`, spec §1.3). A card without a readable unique id
//! is named `card<N>` (the tool's own index), never dropped; a document cut short keeps the cards
//! printed whole before the cut.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_backend::usage::{AcceleratorUsage, SampleError, UsageSample, UsageSampler, run_tool};
use accel_core::Manufacturer;
use accel_host::Commands;

use crate::detector::uuid_of;
use crate::hysmi::{self, SmiCard};

/// What a missing tool means here.
const MISSING: &str = "no Hygon DTK tools (hy-smi or its rocm-smi fork) on this host";

/// hy-smi's (or the rocm-smi fork's) live usage.
#[derive(Debug, Clone, Copy, Default)]
pub struct HySmiSampler;

impl UsageSampler for HySmiSampler {
    fn sample(
        &self,
        commands: &dyn Commands,
        deadline: Duration,
    ) -> Result<UsageSample, SampleError> {
        let argv = hysmi::JSON_QUERIES
            .into_iter()
            .find(|argv| commands.is_installed(argv[0]))
            .unwrap_or(hysmi::HY_SMI_JSON);
        let text = run_tool(commands, argv, deadline, MISSING)?;
        let doc =
            hysmi::parse_json(argv[0], &text).map_err(|e| SampleError::Failed(e.to_string()))?;
        Ok(UsageSample {
            manufacturer: Manufacturer::Hygon,
            source: serde_json::Value::String(argv.join(" ")),
            accelerators: doc.cards.iter().map(usage_of).collect(),
        })
    }
}

/// One card's reading (pure).
pub fn usage_of(card: &SmiCard) -> AcceleratorUsage {
    AcceleratorUsage {
        uuid: card
            .unique_id
            .map_or_else(|| format!("card{}", card.card), uuid_of),
        index: Some(card.card),
        utilization_percent: card.utilisation_percent,
        memory_used_mib: card.vram_used_mib,
        memory_total_mib: card.vram_mib,
        temperature_c: card.temperature_c,
        power_draw_w: card.power_watts,
        power_limit_w: None,
        compute_processes: None,
        extra: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_without_a_unique_id_is_named_by_its_index() {
        let card = SmiCard {
            card: 3,
            vram_mib: Some(65520),
            vram_used_mib: Some(2),
            ..SmiCard::default()
        };
        let usage = usage_of(&card);
        assert_eq!(usage.uuid, "card3");
        assert_eq!(usage.index, Some(3));
        assert_eq!(usage.memory_total_mib, Some(65520));
        let named = usage_of(&SmiCard {
            unique_id: Some(0x7137_d9b2_a08a_4841),
            ..card
        });
        assert_eq!(named.uuid, "GPU-7137d9b2a08a4841");
    }
}
