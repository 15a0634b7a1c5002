//! Cambricon's live usage: `cnmon`'s default table prints each card's `Util`, `Temp`,
//! `Pwr:Usage/Cap` and memory used and total; `cnmon info` names each card by UUID
//! (`MLU-<uuid>`, as detection names it), joined by bus id where both print one (5.x), else by
//! the tool's own card ordinal (4.x prints no bus id in its table). An `info` that fails leaves
//! the samples named by bus id or ordinal, never the sample lost. The same output's
//! `Processes:` table gives each card's compute processes (`procs.rs`; cnmon lists no graphics
//! processes), joined by the table's card ordinal: no call of its own.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_backend::usage::{
    AcceleratorUsage, SampleError, UsageSample, UsageSampler, table_and_names,
};
use accel_core::Manufacturer;
use accel_host::Commands;

use crate::cnmon::{self, CnmonCard, CnmonError, CnmonInfo, CnmonTable};
use crate::procs::{self, CnmonProcess};

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
        let ((table, processes), info) = table_and_names(
            commands,
            deadline,
            MISSING,
            (cnmon::TABLE_ARGV, read_table),
            (cnmon::INFO_ARGV, |t| cnmon::parse_info(t).ok()),
        )?;
        Ok(join(&table.cards, &info, processes.as_deref()))
    }
}

/// The default output's two tables: the cards, and the processes under them.
fn read_table(text: &str) -> Result<(CnmonTable, Option<Vec<CnmonProcess>>), CnmonError> {
    Ok((cnmon::parse_table(text)?, procs::parse_processes(text)))
}

/// The processes on the card the table numbers `card`, an MLU instance's with its card's.
/// `None` when the output printed no process table, or a row names no card it could be counted
/// against (any card may hold it).
fn processes_on(processes: Option<&[CnmonProcess]>, card: Option<u32>) -> Option<u32> {
    let processes = processes?;
    let card = card?;
    if processes.iter().any(|p| p.card.is_none()) {
        return None;
    }
    u32::try_from(processes.iter().filter(|p| p.card == Some(card)).count()).ok()
}

/// One moment's table rows, named by `cnmon info`'s UUIDs, with the processes the same output
/// listed (pure).
pub fn join(
    rows: &[CnmonCard],
    info: &[CnmonInfo],
    processes: Option<&[CnmonProcess]>,
) -> UsageSample {
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
                compute_processes: processes_on(processes, row.card),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_counted_per_card_and_an_unplaced_row_leaves_every_count_unknown() {
        let on = |card, instance| CnmonProcess {
            card,
            instance,
            ..CnmonProcess::default()
        };
        let listed = [on(Some(0), None), on(Some(0), Some(1)), on(Some(2), None)];
        assert_eq!(processes_on(Some(&listed), Some(0)), Some(2), "an MI's too");
        assert_eq!(processes_on(Some(&listed), Some(1)), Some(0), "idle");
        assert_eq!(processes_on(None, Some(0)), None, "no table printed");
        assert_eq!(processes_on(Some(&listed), None), None, "a card unnumbered");
        assert_eq!(processes_on(Some(&[on(None, None)]), Some(0)), None);
    }
}
