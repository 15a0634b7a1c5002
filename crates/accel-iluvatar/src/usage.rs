//! Iluvatar's live usage: `ixsmi`'s default table prints memory used and total, utilisation,
//! temperature and power per GPU; the CSV query names each row's GPU by UUID (joined by bus id,
//! the name the inventory uses). A query that fails leaves the samples named by bus id, never
//! the sample lost. Power `N/A / N/A` (every other BI-V150, HAZARDS.md item 3) stays `None`.
//! The same output's `Processes:` table gives each GPU's compute processes (`procs.rs`; ixsmi
//! lists no graphics processes), joined by the table's GPU index: no call of its own.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_backend::usage::{
    AcceleratorUsage, SampleError, UsageSample, UsageSampler, table_and_names,
};
use accel_backend::vendor_runtime::board;
use accel_core::Manufacturer;
use accel_host::Commands;

use crate::ixsmi::{self, IxsmiTable, QueryGpu, TableGpu};
use crate::procs::{self, IxsmiProcess};

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
        let ((table, processes), names) = table_and_names(
            commands,
            deadline,
            MISSING,
            (ixsmi::TABLE_ARGV, read_table),
            (ixsmi::QUERY_ARGV, |t| ixsmi::parse_query(t).ok()),
        )?;
        Ok(join(&table.gpus, &names, processes.as_deref()))
    }
}

/// The default output's two tables: the GPUs, and the processes under them.
fn read_table(text: &str) -> Result<(IxsmiTable, Option<Vec<IxsmiProcess>>), ixsmi::IxsmiError> {
    Ok((ixsmi::parse_table(text)?, procs::parse_processes(text)))
}

/// The processes on the GPU the table numbers `index`. `None` when the output printed no
/// process table, or a row names no GPU it could be counted against (any GPU may hold it).
fn processes_on(processes: Option<&[IxsmiProcess]>, index: Option<u32>) -> Option<u32> {
    let processes = processes?;
    let index = index?;
    if processes.iter().any(|p| p.gpu.is_none()) {
        return None;
    }
    u32::try_from(processes.iter().filter(|p| p.gpu == Some(index)).count()).ok()
}

/// One moment's table rows, named by the query's UUIDs, with the processes the same output
/// listed (pure).
pub fn join(
    rows: &[TableGpu],
    names: &[QueryGpu],
    processes: Option<&[IxsmiProcess]>,
) -> UsageSample {
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
                compute_processes: processes_on(processes, row.index),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_counted_per_gpu_and_an_unplaced_row_leaves_every_count_unknown() {
        let on = |gpu| IxsmiProcess {
            gpu,
            ..IxsmiProcess::default()
        };
        let listed = [on(Some(0)), on(Some(0)), on(Some(2))];
        assert_eq!(processes_on(Some(&listed), Some(0)), Some(2));
        assert_eq!(processes_on(Some(&listed), Some(1)), Some(0), "idle");
        assert_eq!(processes_on(Some(&[]), Some(1)), Some(0));
        assert_eq!(processes_on(None, Some(0)), None, "no table printed");
        assert_eq!(processes_on(Some(&listed), None), None, "a GPU unnumbered");
        assert_eq!(processes_on(Some(&[on(Some(0)), on(None)]), Some(0)), None);
    }
}
