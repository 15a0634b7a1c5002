//! MetaX's live usage: `mx-smi`'s default table prints each GPU's `GPU-Util`, temperature, power
//! (with its cap on 2.1.12; 2.1.6 prints the draw alone) and memory used and total; `mx-smi -L`
//! names each GPU by UUID, joined by bus id as the detector joins them (then by the tool's
//! ordinal where `-L` prints no bus id). A `-L` that fails leaves the samples named by bus id,
//! never the sample lost. The same output's `Process:` table gives each GPU's compute processes
//! (`procs.rs`; mx-smi lists no graphics processes), joined by the table's GPU ordinal: no call
//! of its own.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_backend::usage::{
    AcceleratorUsage, SampleError, UsageSample, UsageSampler, table_and_names,
};
use accel_core::Manufacturer;
use accel_host::Commands;

use crate::mxsmi::{self, MxSmiError, MxSmiGpu, MxSmiListed, MxSmiTable};
use crate::procs::{self, MxSmiProcess};

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
        let ((table, processes), listed) = table_and_names(
            commands,
            deadline,
            MISSING,
            (mxsmi::TABLE_ARGV, read_table),
            (mxsmi::LIST_ARGV, |t| mxsmi::parse_list(t).ok()),
        )?;
        Ok(join(&table.gpus, &listed, processes.as_deref()))
    }
}

/// The default output's two tables: the GPUs, and the processes under them.
fn read_table(text: &str) -> Result<(MxSmiTable, Option<Vec<MxSmiProcess>>), MxSmiError> {
    Ok((mxsmi::parse_table(text)?, procs::parse_processes(text)))
}

/// The processes on the GPU the table numbers `gpu`. `None` when the output printed no process
/// table, or a row names no GPU it could be counted against (any GPU may hold it).
fn processes_on(processes: Option<&[MxSmiProcess]>, gpu: Option<u32>) -> Option<u32> {
    let processes = processes?;
    let gpu = gpu?;
    if processes.iter().any(|p| p.gpu.is_none()) {
        return None;
    }
    u32::try_from(processes.iter().filter(|p| p.gpu == Some(gpu)).count()).ok()
}

/// One moment's table rows, named by `-L`'s UUIDs, with the processes the same output listed
/// (pure).
pub fn join(
    rows: &[MxSmiGpu],
    listed: &[MxSmiListed],
    processes: Option<&[MxSmiProcess]>,
) -> UsageSample {
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
                compute_processes: processes_on(processes, row.gpu),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_counted_per_gpu_and_an_unplaced_row_leaves_every_count_unknown() {
        let on = |gpu| MxSmiProcess {
            gpu,
            ..MxSmiProcess::default()
        };
        let listed = [on(Some(0)), on(Some(0)), on(Some(2))];
        assert_eq!(processes_on(Some(&listed), Some(0)), Some(2));
        assert_eq!(processes_on(Some(&listed), Some(1)), Some(0), "idle");
        assert_eq!(processes_on(None, Some(0)), None, "no table printed");
        assert_eq!(processes_on(Some(&listed), None), None, "a GPU unnumbered");
        assert_eq!(processes_on(Some(&[on(Some(0)), on(None)]), Some(0)), None);
    }
}
