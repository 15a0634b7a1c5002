//! Ascend's live usage: `npu-smi info`'s table prints each chip's `AICore(%)` (`NPU Util(%)` on
//! the 950), temperature, power and HBM (DDR on 310-class cards) used and total. The table
//! names no chip the way detection does — an NPU is its die id, which only `npu-smi info -t
//! board` prints — so each chip is named once through that query and the name kept for the
//! life of the sampler, keyed by (NPU, chip, bus id): a chip in another slot, or another card
//! behind the same NPU id, is asked again. A board query that fails leaves the chip named by
//! its bus id (else `NPU <n> chip <c>`), never the sample lost. The process section the same
//! output may print under the table gives each chip's compute processes (`procs.rs`), joined by
//! (NPU, chip) as the table prints them: no call of its own.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use accel_backend::usage::{AcceleratorUsage, SampleError, UsageSample, UsageSampler, run_tool};
use accel_core::Manufacturer;
use accel_host::Commands;

use crate::npusmi::{self, InfoChip};
use crate::procs::{self, InfoProcess};

/// What a missing npu-smi means here.
const MISSING: &str = "no Ascend driver tools on this host";

/// The key a chip's name is kept under.
type ChipKey = (u32, u32, Option<String>);

/// npu-smi's live usage, with the die ids it has already read.
#[derive(Debug, Default)]
pub struct NpuSmiSampler {
    names: Mutex<BTreeMap<ChipKey, String>>,
}

fn key(chip: &InfoChip) -> Option<ChipKey> {
    Some((chip.npu?, chip.chip.unwrap_or(0), chip.bus_id.clone()))
}

impl NpuSmiSampler {
    /// The die id of `chip`, from the kept names or one bounded `-t board` query.
    fn name(&self, commands: &dyn Commands, deadline: Duration, chip: &InfoChip) -> Option<String> {
        let key = key(chip)?;
        if let Some(name) = self.names.lock().ok().and_then(|n| n.get(&key).cloned()) {
            return Some(name);
        }
        let argv = npusmi::board_argv(key.0, key.1);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let identity = run_tool(commands, &argv, deadline, MISSING)
            .ok()
            .and_then(|text| npusmi::parse_board(&text).ok()?.identity)?;
        if let Ok(mut names) = self.names.lock() {
            names.insert(key, identity.clone());
        }
        Some(identity)
    }
}

impl UsageSampler for NpuSmiSampler {
    fn sample(
        &self,
        commands: &dyn Commands,
        deadline: Duration,
    ) -> Result<UsageSample, SampleError> {
        let text = run_tool(commands, npusmi::INFO_ARGV, deadline, MISSING)?;
        let table = npusmi::parse_info(&text).map_err(|e| SampleError::Failed(e.to_string()))?;
        let processes = procs::parse_processes(&text);
        let names: Vec<Option<String>> = table
            .chips
            .iter()
            .map(|chip| self.name(commands, deadline, chip))
            .collect();
        Ok(join(&table.chips, &names, processes.as_deref()))
    }
}

/// The processes on `chip`, matched by the NPU ID and the chip index both tables print (a
/// missing chip index is chip 0, as the names are kept). `None` when the output printed no
/// process section, or a row names no NPU it could be counted against (any chip may hold it).
fn processes_on(processes: Option<&[InfoProcess]>, chip: &InfoChip) -> Option<u32> {
    let processes = processes?;
    let npu = chip.npu?;
    if processes.iter().any(|p| p.npu.is_none()) {
        return None;
    }
    let on_chip =
        |p: &&InfoProcess| p.npu == Some(npu) && p.chip.unwrap_or(0) == chip.chip.unwrap_or(0);
    u32::try_from(processes.iter().filter(on_chip).count()).ok()
}

/// One moment's table rows, each named by its die id where one was read, with the processes
/// the same output listed (pure).
pub fn join(
    chips: &[InfoChip],
    names: &[Option<String>],
    processes: Option<&[InfoProcess]>,
) -> UsageSample {
    let accelerators = chips
        .iter()
        .enumerate()
        .map(|(i, chip)| {
            let uuid = names
                .get(i)
                .cloned()
                .flatten()
                .or_else(|| chip.bus_id.clone())
                .unwrap_or_else(|| {
                    format!(
                        "NPU {} chip {}",
                        chip.npu.unwrap_or_default(),
                        chip.chip.unwrap_or(0)
                    )
                });
            // HBM is the VRAM; 310-class cards print `0 / 0` HBM and have DDR only.
            let hbm = chip.hbm_total_mib.filter(|t| *t > 0).is_some();
            let (memory_used_mib, memory_total_mib) = if hbm {
                (chip.hbm_used_mib, chip.hbm_total_mib)
            } else {
                (
                    chip.memory_used_mib,
                    chip.memory_total_mib.filter(|t| *t > 0),
                )
            };
            AcceleratorUsage {
                uuid,
                index: chip.npu,
                utilization_percent: chip.aicore_percent,
                memory_used_mib,
                memory_total_mib,
                temperature_c: chip.temperature_c,
                power_draw_w: chip.power_w,
                power_limit_w: None,
                compute_processes: processes_on(processes, chip),
                extra: BTreeMap::new(),
            }
        })
        .collect();
    UsageSample {
        manufacturer: Manufacturer::Ascend,
        source: serde_json::Value::String(npusmi::INFO_ARGV.join(" ")),
        accelerators,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE_310P: &str = "\
+--------------------------------------------------------------------------------------------------------+
| npu-smi 25.5.1                                   Version: 25.5.1                                       |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 4       310P3                 | OK              | NA           37                0     / 0             |
| 0       0                     | 0000:81:00.0    | 7            1848 / 21525                            |
+===============================+=================+======================================================+
";

    #[test]
    fn a_ddr_card_reports_its_ddr_and_an_unnamed_chip_its_bus_id() {
        let table = npusmi::parse_info(TABLE_310P).unwrap();
        let sample = join(&table.chips, &[None], None);
        let chip = &sample.accelerators[0];
        assert_eq!(chip.uuid, "0000:81:00.0");
        assert_eq!(chip.index, Some(4));
        assert_eq!(chip.utilization_percent, Some(7.0));
        assert_eq!(chip.memory_used_mib, Some(1848));
        assert_eq!(chip.memory_total_mib, Some(21525));
        assert_eq!(chip.temperature_c, Some(37.0));
        assert_eq!(chip.power_draw_w, None, "NA power is no reading");
        assert_eq!(chip.compute_processes, None, "no process section printed");
    }

    #[test]
    fn processes_are_counted_per_npu_and_chip_and_an_unplaced_row_leaves_every_count_unknown() {
        let chip = |npu, chip| InfoChip {
            npu,
            chip,
            ..InfoChip::default()
        };
        let on = |npu, chip| InfoProcess {
            npu,
            chip,
            ..InfoProcess::default()
        };
        let listed = [
            on(Some(4), Some(0)),
            on(Some(4), Some(1)),
            on(Some(4), Some(1)),
        ];
        assert_eq!(
            processes_on(Some(&listed), &chip(Some(4), Some(1))),
            Some(2)
        );
        assert_eq!(
            processes_on(Some(&listed), &chip(Some(4), Some(0))),
            Some(1)
        );
        assert_eq!(
            processes_on(Some(&listed), &chip(Some(5), Some(0))),
            Some(0)
        );
        assert_eq!(
            processes_on(Some(&[on(Some(0), None)]), &chip(Some(0), None)),
            Some(1),
            "no chip column on either side is chip 0"
        );
        assert_eq!(processes_on(None, &chip(Some(4), Some(0))), None);
        assert_eq!(processes_on(Some(&listed), &chip(None, Some(0))), None);
        assert_eq!(
            processes_on(Some(&[on(None, Some(0))]), &chip(Some(4), Some(0))),
            None
        );
    }
}
