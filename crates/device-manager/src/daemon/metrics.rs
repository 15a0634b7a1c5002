//! The node daemon's Prometheus metrics: kernel-log faults of every manufacturer by
//! manufacturer, condition and class (`accelerator_faults`; NVIDIA's also as XIDs by code and
//! class, counted where the daemon takes each kernel-log event), detection passes by outcome and their duration, and each
//! accelerator's health as the inventory last published it (read at scrape time from
//! [`Daemon::published`](super::Daemon::published), so it cannot drift from what is published),
//! and each GPU's live usage as last sampled ([`GpuUsageMetrics`], the samples `monitor` prints).
//!
//! This module owns the metric handles and their names; what a pass or a fault means stays in
//! `daemon` and the backends.

use std::fmt::Write as _;
use std::time::Duration;

use accel_backend::health::{FaultClass, KernelFault};
use accel_backend::usage::{AcceleratorUsage, UsageSample};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family as Series;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use super::Published;

/// Upper bounds of the detection-duration buckets, in seconds: a pass over procfs alone takes
/// milliseconds, nvidia-smi's `-q -x` on a loaded 8-GPU node a few seconds, and each query is
/// bounded at 30 s and the snapshot at 60 s (DESIGN.md, "Performance and reliability").
pub const DETECTION_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// What a detection pass found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PassOutcome {
    /// It measured, and the manufacturer's accelerators answered.
    Measured,
    /// It measured and found none of the manufacturer's accelerators.
    Empty,
    /// It could not measure (the last detection is kept).
    Failed,
}

impl PassOutcome {
    const ALL: [PassOutcome; 3] = [
        PassOutcome::Measured,
        PassOutcome::Empty,
        PassOutcome::Failed,
    ];

    fn label(self) -> &'static str {
        match self {
            PassOutcome::Measured => "measured",
            PassOutcome::Empty => "empty",
            PassOutcome::Failed => "failed",
        }
    }
}

impl EncodeLabelValue for PassOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.label())
    }
}

/// An XID code as a label value; a GPU fallen off the bus reported without one is
/// `fallen_off_bus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct XidCode(Option<u32>);

impl EncodeLabelValue for XidCode {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        match self.0 {
            Some(code) => write!(encoder, "{code}"),
            None => encoder.write_str("fallen_off_bus"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Class(FaultClass);

impl EncodeLabelValue for Class {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        write!(encoder, "{}", self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct XidLabels {
    code: XidCode,
    class: Class,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FaultLabels {
    manufacturer: String,
    condition: String,
    class: Class,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PassLabels {
    outcome: PassOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AcceleratorLabels {
    index: u32,
    uuid: String,
}

/// The daemon's metrics. [`DaemonMetrics::register`] puts them in the registry `serve` serves;
/// the default records into series nobody reads.
#[derive(Debug, Clone)]
pub struct DaemonMetrics {
    xids: Series<XidLabels, Counter>,
    faults: Series<FaultLabels, Counter>,
    passes_series: Series<PassLabels, Counter>,
    /// One handle per [`PassOutcome::ALL`], made once.
    passes: [Counter; PassOutcome::ALL.len()],
    pass_duration: Histogram,
}

impl Default for DaemonMetrics {
    fn default() -> Self {
        let passes_series: Series<PassLabels, Counter> = Series::default();
        DaemonMetrics {
            xids: Series::default(),
            faults: Series::default(),
            passes: PassOutcome::ALL
                .map(|outcome| passes_series.get_or_create_owned(&PassLabels { outcome })),
            passes_series,
            pass_duration: Histogram::new(DETECTION_BUCKETS),
        }
    }
}

impl DaemonMetrics {
    /// The daemon's metrics, registered in `registry` (whose prefix names them).
    pub fn register(registry: &mut Registry) -> DaemonMetrics {
        let metrics = DaemonMetrics::default();
        registry.register(
            "xids",
            "XID events read from the kernel log, by code (fallen_off_bus: a GPU fallen off the bus reported without one) and class (application: the workload's fault; hardware: takes the GPU out of service)",
            metrics.xids.clone(),
        );
        registry.register(
            "accelerator_faults",
            "Accelerator faults read from the kernel log, every manufacturer's, by manufacturer, condition (Xid79, FallenOffBus, AmdRasUncorrectable, AmdAcaDeferred, AmdGpuReset, AmdRingTimeout, AmdPageFault …) and class (application: a condition only, the workload's fault; hardware: takes the accelerator out of service)",
            metrics.faults.clone(),
        );
        registry.register(
            "detection_passes",
            "Inventory detection passes run, by outcome: measured (accelerators answered), empty (none found), failed (could not measure; the last detection is kept)",
            metrics.passes_series.clone(),
        );
        registry.register(
            "detection_duration_seconds",
            "Time one inventory detection pass took (procfs, sysfs and the bounded vendor queries)",
            metrics.pass_duration.clone(),
        );
        metrics
    }

    /// Counts one kernel-log fault: by manufacturer and condition, and, where its classifier
    /// counts faults by code (NVIDIA's XIDs), also by code.
    pub fn fault(&self, fault: &KernelFault, by_code: bool) {
        self.faults
            .get_or_create(&FaultLabels {
                manufacturer: fault.manufacturer.name().to_string(),
                condition: fault.condition.clone(),
                class: Class(fault.class),
            })
            .inc();
        if by_code {
            self.xid(fault.code, fault.class);
        }
    }

    /// Counts one XID (or fallen-off-the-bus) event of `class`.
    pub fn xid(&self, code: Option<u32>, class: FaultClass) {
        self.xids
            .get_or_create(&XidLabels {
                code: XidCode(code),
                class: Class(class),
            })
            .inc();
    }

    /// Counts one detection pass that took `took`.
    pub fn pass(&self, outcome: PassOutcome, took: Duration) {
        if let Some(i) = PassOutcome::ALL.iter().position(|o| *o == outcome) {
            self.passes[i].inc();
        }
        self.pass_duration.observe(took.as_secs_f64());
    }
}

/// Each accelerator's health as last published, read at every scrape: 1 healthy, 0 not.
#[derive(Debug)]
pub struct AcceleratorHealth {
    pub published: watch::Receiver<Option<Published>>,
}

impl Collector for AcceleratorHealth {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "accelerator_healthy",
            "Whether the accelerator passes the health rule as last published (1) or not (0), by index and UUID",
            None,
            MetricType::Gauge,
        )?;
        let published = self.published.borrow();
        let accelerators = published
            .iter()
            .flat_map(|p| p.inventory.manufacturers.iter())
            .flat_map(|s| s.accelerators.iter());
        for accelerator in accelerators {
            let labels = AcceleratorLabels {
                index: accelerator.index,
                uuid: accelerator.uuid.clone().unwrap_or_default(),
            };
            ConstGauge::new(i64::from(accelerator.healthy))
                .encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GpuLabels {
    uuid: String,
}

/// Each accelerator's live usage as last sampled (the backend's `UsageSampler`, every monitor
/// period), read at every scrape. A reading the driver did not give has no series; a GPU the
/// last sample did not list has none either.
#[derive(Debug)]
pub struct GpuUsageMetrics {
    pub usage: watch::Receiver<Option<UsageSample>>,
}

impl Collector for GpuUsageMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let usage = self.usage.borrow();
        let gpus = usage.as_ref().map_or(&[][..], |s| &s.accelerators[..]);
        type Reading = fn(&AcceleratorUsage) -> Option<f64>;
        let series: [(
            &str,
            &str,
            Option<prometheus_client::registry::Unit>,
            Reading,
        ); 6] = [
            (
                "gpu_utilization_percent",
                "GPU utilization over the driver's last sample period, in percent",
                None,
                |g| g.utilization_percent,
            ),
            (
                "gpu_memory_used_mib",
                "Framebuffer memory in use, in MiB",
                None,
                |g| g.memory_used_mib.map(|m| m as f64),
            ),
            (
                "gpu_memory_total_mib",
                "Framebuffer memory in all, in MiB",
                None,
                |g| g.memory_total_mib.map(|m| m as f64),
            ),
            (
                "gpu_temperature_celsius",
                "GPU core temperature, in degrees Celsius",
                None,
                |g| g.temperature_c,
            ),
            (
                "gpu_power_draw_watts",
                "Power drawn by the board, in watts",
                None,
                |g| g.power_draw_w,
            ),
            (
                "gpu_compute_processes",
                "Compute processes on the GPU (graphics processes are no workload)",
                None,
                |g| g.compute_processes.map(f64::from),
            ),
        ];
        for (name, help, unit, reading) in series {
            let mut family =
                encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
            for gpu in gpus {
                if let Some(value) = reading(gpu) {
                    let labels = GpuLabels {
                        uuid: gpu.uuid.clone(),
                    };
                    ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_fallen_off_the_bus_without_a_code_has_its_own_label() {
        let mut registry = Registry::with_prefix("device_manager");
        let metrics = DaemonMetrics::register(&mut registry);
        metrics.xid(None, FaultClass::Hardware);
        metrics.xid(Some(79), FaultClass::Hardware);
        metrics.pass(PassOutcome::Measured, Duration::from_millis(30));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                "device_manager_xids_total{code=\"fallen_off_bus\",class=\"hardware\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains("device_manager_xids_total{code=\"79\",class=\"hardware\"} 1\n"));
        assert!(text.contains("device_manager_detection_duration_seconds_bucket{le=\"0.05\"} 1\n"));
        assert!(
            text.contains("device_manager_detection_duration_seconds_bucket{le=\"0.025\"} 0\n")
        );
    }
}
