//! AMD's live usage behind the seam: `amd-smi metric --json` for the readings (its parser is
//! [`crate::amdsmi::parse_metric`]) and `amd-smi static --json` for whose they are. Both lists
//! carry amd-smi's own `gpu` index; the index joins the two answers of one moment (it is never
//! kept, nor used to join with the inventory), and the board's identity is the detector's:
//! ROCr's `GPU-<16 hex>` from the unique id, else the PCI address.
//!
//! A GPU the metric answer lists and `static` does not is sampled under its bus address when
//! the metric answer gives none either: `gpu <n>`; such a sample names no accelerator of the
//! inventory, and the usage gauges then show it under that name.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_backend::usage::{AcceleratorUsage, SampleError, UsageSample, UsageSampler, run_tool};
use accel_core::Manufacturer;
use accel_host::Commands;

/// What a missing amd-smi means here.
const MISSING: &str = "no AMD tools on this host";

use crate::amdsmi::{self, MetricGpu, StaticGpu};
use crate::detector::AMD_SMI_STATIC;
use crate::text::rocr_uuid;

/// The live usage query.
pub const AMD_SMI_METRIC: &[&str] = &["amd-smi", "metric", "--json"];

/// amd-smi's live usage.
#[derive(Debug, Clone, Copy, Default)]
pub struct AmdSmiSampler;

impl UsageSampler for AmdSmiSampler {
    fn sample(
        &self,
        commands: &dyn Commands,
        deadline: Duration,
    ) -> Result<UsageSample, SampleError> {
        let metric = run_tool(commands, AMD_SMI_METRIC, deadline, MISSING)?;
        let metric =
            amdsmi::parse_metric(&metric).map_err(|e| SampleError::Failed(e.to_string()))?;
        // Identity is worth a second call; a static answer that fails leaves the samples named
        // by index, never the whole sample lost.
        let identities = match run_tool(commands, AMD_SMI_STATIC, deadline, MISSING) {
            Ok(text) => amdsmi::parse_static(&text).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        Ok(join(&metric, &identities))
    }
}

/// Joins one moment's metric and static answers by amd-smi's index (pure).
pub fn join(metric: &[MetricGpu], identities: &[StaticGpu]) -> UsageSample {
    let by_index: BTreeMap<u64, &StaticGpu> = identities
        .iter()
        .filter_map(|g| Some((g.gpu?, g)))
        .collect();
    let accelerators = metric
        .iter()
        .enumerate()
        .map(|(position, m)| {
            let index = m.gpu.unwrap_or(position as u64);
            let identity = by_index.get(&index);
            let uuid = identity
                .and_then(|g| g.unique_id.map(rocr_uuid))
                .or_else(|| identity.and_then(|g| g.bus_id.map(|b| b.to_string())))
                .unwrap_or_else(|| format!("gpu {index}"));
            AcceleratorUsage {
                uuid,
                index: u32::try_from(index).ok(),
                utilization_percent: m.utilization_percent,
                memory_used_mib: m.memory_used_mib,
                memory_total_mib: m.memory_total_mib,
                temperature_c: m.temperature_c,
                power_draw_w: m.power_w,
                power_limit_w: None,
                compute_processes: None,
                extra: BTreeMap::new(),
            }
        })
        .collect();
    UsageSample {
        manufacturer: Manufacturer::Amd,
        source: serde_json::Value::String(AMD_SMI_METRIC.join(" ")),
        accelerators,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_named_by_the_boards_unique_id_else_its_address_else_the_index() {
        let metric = vec![
            MetricGpu {
                gpu: Some(0),
                utilization_percent: Some(12.0),
                memory_used_mib: Some(100),
                memory_total_mib: Some(1000),
                ..MetricGpu::default()
            },
            MetricGpu {
                gpu: Some(1),
                ..MetricGpu::default()
            },
            MetricGpu {
                gpu: Some(7),
                ..MetricGpu::default()
            },
        ];
        let identities = vec![
            StaticGpu {
                gpu: Some(1),
                bus_id: "0000:1b:00.0".parse().ok(),
                ..StaticGpu::default()
            },
            StaticGpu {
                gpu: Some(0),
                unique_id: Some(0xabc),
                ..StaticGpu::default()
            },
        ];
        let sample = join(&metric, &identities);
        let names: Vec<&str> = sample
            .accelerators
            .iter()
            .map(|a| a.uuid.as_str())
            .collect();
        assert_eq!(names, ["GPU-0000000000000abc", "00000000:1B:00.0", "gpu 7"]);
        assert_eq!(sample.accelerators[0].utilization_percent, Some(12.0));
        assert_eq!(sample.accelerators[0].memory_used_mib, Some(100));
        assert_eq!(sample.accelerators[2].index, Some(7));
        assert_eq!(sample.manufacturer, Manufacturer::Amd);
    }
}
