//! Iluvatar's live usage: `ixsmi`'s default table prints memory used and total, utilisation,
//! temperature and power per GPU; the CSV query names each row's GPU by UUID (joined by bus id,
//! the name the inventory uses). A query that fails leaves the samples named by bus id, never
//! the sample lost. Power `N/A / N/A` (every other BI-V150, HAZARDS.md item 3) stays `None`.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_backend::usage::{
    AcceleratorUsage, SampleError, UsageSample, UsageSampler, table_and_names,
};
use accel_backend::vendor_runtime::board;
use accel_core::Manufacturer;
use accel_host::Commands;

use crate::ixsmi::{self, QueryGpu, TableGpu};

/// What a missing ixsmi means here.
const MISSING: &str = "no Iluvatar CoreX tools on this host";

/// ixsmi's live usage.
#[derive(Debug, Clone, Copy, Default)]
pub struct IxsmiSampler;

impl UsageSampler for IxsmiSampler {
    fn sample(
        &self,
        commands: &dyn Commands,
        deadline: Duration,
    ) -> Result<UsageSample, SampleError> {
        let (table, names) = table_and_names(
            commands,
            deadline,
            MISSING,
            (ixsmi::TABLE_ARGV, ixsmi::parse_table),
            (ixsmi::QUERY_ARGV, |t| ixsmi::parse_query(t).ok()),
        )?;
        Ok(join(&table.gpus, &names))
    }
}

/// One moment's table rows, named by the query's UUIDs (pure).
pub fn join(rows: &[TableGpu], names: &[QueryGpu]) -> UsageSample {
    let accelerators = rows
        .iter()
        .map(|row| {
            let bus = row.bus_id.map(board);
            let uuid = names
                .iter()
                .find(|q| bus.is_some() && q.bus_id.map(board) == bus)
                .and_then(|q| q.uuid.clone())
                .or_else(|| bus.map(|b| b.to_string()))
                .unwrap_or_else(|| format!("gpu {}", row.index.unwrap_or_default()));
            AcceleratorUsage {
                uuid,
                index: row.index,
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
        manufacturer: Manufacturer::Iluvatar,
        source: serde_json::Value::String(ixsmi::TABLE_ARGV.join(" ")),
        accelerators,
    }
}
