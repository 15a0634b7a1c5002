//! Live usage from `ppu-smi`'s device table (utilisation, memory used and total, temperature,
//! power draw and cap), named by `ppu-smi -L`'s UUID for the same tool index: what `monitor`
//! prints and the `device_manager_gpu_*` gauges export. A card `-L` names no UUID for is left
//! out (the inventory could not name it either).

use std::time::Duration;

use accel_backend::text;
use accel_backend::usage::{AcceleratorUsage, SampleError, UsageSample, UsageSampler, run_tool};
use accel_core::Manufacturer;
use accel_host::Commands;

/// What a missing ppu-smi means here.
const MISSING: &str = "no T-Head PPU SDK on this host";

use crate::smi;

/// The T-Head sampler: the bare table, then `-L`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PpuSmiSampler;

/// The power cap of a `Pwr:Usage/Cap` cell (`57W / 400W` → 400).
fn power_cap(cell: Option<&str>) -> Option<f64> {
    cell.and_then(text::pair)
        .and_then(|(_, cap)| text::watts(cap))
}

impl UsageSampler for PpuSmiSampler {
    fn sample(
        &self,
        commands: &dyn Commands,
        deadline: Duration,
    ) -> Result<UsageSample, SampleError> {
        let table_text = run_tool(commands, smi::TABLE_ARGV, deadline, MISSING)?;
        let table =
            smi::parse_table(&table_text).map_err(|e| SampleError::Failed(e.to_string()))?;
        let list = run_tool(commands, smi::LIST_ARGV, deadline, MISSING)
            .and_then(|t| smi::parse_list(&t).map_err(|e| SampleError::Failed(e.to_string())))?;
        let caps = text::box_table(&text::clean(&table_text), &["PPU", "Name"])
            .map(|t| {
                t.records
                    .iter()
                    .map(|r| power_cap(r.get("Pwr:Usage/Cap")))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let accelerators = table
            .cards
            .iter()
            .enumerate()
            .filter_map(|(row, card)| {
                let index = card.index?;
                let uuid = list.iter().find(|l| l.index == index)?.uuid.clone()?;
                Some(AcceleratorUsage {
                    uuid,
                    index: Some(index),
                    utilization_percent: card.utilization_percent,
                    memory_used_mib: card.memory_used_mib,
                    memory_total_mib: card.memory_total_mib,
                    temperature_c: card.temperature_c,
                    power_draw_w: card.power_w,
                    power_limit_w: caps.get(row).copied().flatten(),
                    compute_processes: None,
                    extra: Default::default(),
                })
            })
            .collect();
        Ok(UsageSample {
            manufacturer: Manufacturer::Thead,
            source: serde_json::Value::String("ppu-smi".into()),
            accelerators,
        })
    }
}
