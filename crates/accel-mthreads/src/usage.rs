//! Moore Threads' live usage: `mthreads-gmi`'s table prints utilisation, memory used and total,
//! and (in its three-line layout) temperature per GPU; the `-q` report names each row's GPU by
//! UUID (joined by bus id). No power column exists in the table, so power stays `None`.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_backend::usage::{
    AcceleratorUsage, SampleError, UsageSample, UsageSampler, table_and_names,
};
use accel_backend::vendor_runtime::board;
use accel_core::Manufacturer;
use accel_host::Commands;

use crate::gmi::{self, QueryGpu, TableGpu};

/// What a missing mthreads-gmi means here.
const MISSING: &str =
    "no Moore Threads tools here; the daemon gets them only under the mthreads RuntimeClass";

/// mthreads-gmi's live usage.
#[derive(Debug, Clone, Copy, Default)]
pub struct GmiSampler;

impl UsageSampler for GmiSampler {
    fn sample(
        &self,
        commands: &dyn Commands,
        deadline: Duration,
    ) -> Result<UsageSample, SampleError> {
        let (table, names) = table_and_names(
            commands,
            deadline,
            MISSING,
            (gmi::TABLE_ARGV, gmi::parse_table),
            (gmi::QUERY_ARGV, |t| gmi::parse_query(t).ok()),
        )?;
        Ok(join(&table.gpus, &names))
    }
}

/// One moment's table rows (a guest's virtual devices left out), named by UUID (pure).
pub fn join(rows: &[TableGpu], names: &[QueryGpu]) -> UsageSample {
    let accelerators = rows
        .iter()
        .filter(|row| !row.is_virtual())
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
                power_draw_w: None,
                power_limit_w: None,
                compute_processes: None,
                extra: BTreeMap::new(),
            }
        })
        .collect();
    UsageSample {
        manufacturer: Manufacturer::Mthreads,
        source: serde_json::Value::String(gmi::TABLE_ARGV.join(" ")),
        accelerators,
    }
}
