//! MetaX's live usage: `mx-smi`'s default table prints each GPU's `GPU-Util`, temperature, power
//! (with its cap on 2.1.12; 2.1.6 prints the draw alone) and memory used and total; `mx-smi -L`
//! names each GPU by UUID, joined by bus id as the detector joins them (then by the tool's
//! ordinal where `-L` prints no bus id). A `-L` that fails leaves the samples named by bus id,
//! never the sample lost.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_backend::usage::{
    AcceleratorUsage, SampleError, UsageSample, UsageSampler, table_and_names,
};
use accel_core::Manufacturer;
use accel_host::Commands;

use crate::mxsmi::{self, MxSmiGpu, MxSmiListed};

/// What a missing mx-smi means here.
const MISSING: &str = "no MetaX tools on this host";

/// mx-smi's live usage.
#[derive(Debug, Clone, Copy, Default)]
pub struct MxSmiSampler;

impl UsageSampler for MxSmiSampler {
    fn sample(
        &self,
        commands: &dyn Commands,
        deadline: Duration,
    ) -> Result<UsageSample, SampleError> {
        let (table, listed) = table_and_names(
            commands,
            deadline,
            MISSING,
            (mxsmi::TABLE_ARGV, mxsmi::parse_table),
            (mxsmi::LIST_ARGV, |t| mxsmi::parse_list(t).ok()),
        )?;
        Ok(join(&table.gpus, &listed))
    }
}

/// One moment's table rows, named by `-L`'s UUIDs (pure).
pub fn join(rows: &[MxSmiGpu], listed: &[MxSmiListed]) -> UsageSample {
    let accelerators = rows
        .iter()
        .map(|row| {
            let named = listed
                .iter()
                .find(|l| row.bus_id.is_some() && l.bus_id == row.bus_id)
                .or_else(|| {
                    listed
                        .iter()
                        .find(|l| l.bus_id.is_none() && row.gpu.is_some() && l.gpu == row.gpu)
                });
            let uuid = named
                .map(|l| l.uuid.clone())
                .or_else(|| row.bus_id.map(|b| b.to_string()))
                .unwrap_or_else(|| format!("gpu {}", row.gpu.unwrap_or_default()));
            AcceleratorUsage {
                uuid,
                index: row.gpu,
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
        manufacturer: Manufacturer::Metax,
        source: serde_json::Value::String(mxsmi::TABLE_ARGV.join(" ")),
        accelerators,
    }
}
