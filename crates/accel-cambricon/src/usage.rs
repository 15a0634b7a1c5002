//! Cambricon's live usage: `cnmon`'s default table prints each card's `Util`, `Temp`,
//! `Pwr:Usage/Cap` and memory used and total; `cnmon info` names each card by UUID
//! (`MLU-<uuid>`, as detection names it), joined by bus id where both print one (5.x), else by
//! the tool's own card ordinal (4.x prints no bus id in its table). An `info` that fails leaves
//! the samples named by bus id or ordinal, never the sample lost.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_backend::usage::{
    AcceleratorUsage, SampleError, UsageSample, UsageSampler, table_and_names,
};
use accel_core::Manufacturer;
use accel_host::Commands;

use crate::cnmon::{self, CnmonCard, CnmonInfo};

/// What a missing cnmon means here.
const MISSING: &str = "no Cambricon tools on this host";

/// cnmon's live usage.
#[derive(Debug, Clone, Copy, Default)]
pub struct CnmonSampler;

impl UsageSampler for CnmonSampler {
    fn sample(
        &self,
        commands: &dyn Commands,
        deadline: Duration,
    ) -> Result<UsageSample, SampleError> {
        let (table, info) = table_and_names(
            commands,
            deadline,
            MISSING,
            (cnmon::TABLE_ARGV, cnmon::parse_table),
            (cnmon::INFO_ARGV, |t| cnmon::parse_info(t).ok()),
        )?;
        Ok(join(&table.cards, &info))
    }
}

/// One moment's table rows, named by `cnmon info`'s UUIDs (pure).
pub fn join(rows: &[CnmonCard], info: &[CnmonInfo]) -> UsageSample {
    let accelerators = rows
        .iter()
        .map(|row| {
            let named = info
                .iter()
                .find(|i| row.bus_id.is_some() && i.bus_id == row.bus_id)
                .or_else(|| {
                    info.iter()
                        .find(|i| row.card.is_some() && i.card == row.card)
                });
            let uuid = named
                .and_then(|i| i.uuid.as_deref())
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(|u| format!("MLU-{u}"))
                .or_else(|| row.bus_id.map(|b| b.to_string()))
                .unwrap_or_else(|| format!("card {}", row.card.unwrap_or_default()));
            AcceleratorUsage {
                uuid,
                index: row.card,
                utilization_percent: row.utilization_percent,
                memory_used_mib: row.memory_used_mib,
                memory_total_mib: row.memory_total_mib,
                temperature_c: row.temperature_c,
                power_draw_w: row.power_draw_w,
                power_limit_w: row.power_limit_w,
                compute_processes: None,
                extra: BTreeMap::new(),
            }
        })
        .collect();
    UsageSample {
        manufacturer: Manufacturer::Cambricon,
        source: serde_json::Value::String(cnmon::TABLE_ARGV.join(" ")),
        accelerators,
    }
}
