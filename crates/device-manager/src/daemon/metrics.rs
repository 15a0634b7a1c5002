//! The node daemon's Prometheus metrics: kernel-log faults of every manufacturer by
//! manufacturer, accelerator, condition and class (`accelerator_faults`; NVIDIA's also as XIDs
//! by code and class, counted where the daemon takes each kernel-log event), detection passes by
//! outcome and their duration; read at scrape time from what the daemon holds, so they cannot
//! drift from it: each accelerator's info series and health as the inventory last published it
//! and the detection's own state ([`AcceleratorSeries`], from
//! [`Daemon::published`](super::Daemon::published)), each accelerator's live usage as last
//! sampled ([`GpuUsageMetrics`], the samples `monitor` prints), and who holds what in the
//! plugins' ledger ([`LedgerMetrics`]: one series per holding, each accelerator's occupancy).
//!
//! Every per-accelerator series carries `manufacturer` and `uuid`, the keys of the info series
//! (`accelerator_info`: index, product, group, bus id, NUMA node), so a query reaches the model
//! through one join (the kube-state-metrics pattern). This module owns the metric handles and
//! their names; what a pass or a fault means stays in `daemon` and the backends, who holds what
//! in the ledger.

use std::fmt::Write as _;
use std::time::Duration;

use accel_backend::health::{FaultClass, KernelFault};
use accel_backend::usage::{AcceleratorUsage, UsageSample};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeLabelValue, EncodeMetric,
    LabelValueEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family as Series;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_core::labels::{GroupNaming, group_key};
use accel_plugin::PluginHandle;
use accel_plugin::pods::PodSource;

use super::Published;
use crate::holdings::{self, Holding};

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
    /// The accelerator at the fault's bus address; empty when the line names none the
    /// inventory knows.
    uuid: String,
    condition: String,
    class: Class,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PassLabels {
    outcome: PassOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AcceleratorLabels {
    manufacturer: String,
    index: u32,
    uuid: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct InfoLabels {
    manufacturer: String,
    index: u32,
    uuid: String,
    product: String,
    group: String,
    bus_id: String,
    numa_node: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ManufacturerLabels {
    manufacturer: String,
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
            "Accelerator faults read from the kernel log, every manufacturer's, by manufacturer, accelerator (uuid; empty when the line names no accelerator the inventory knows), condition (Xid79, FallenOffBus, AmdRasUncorrectable, AmdAcaDeferred, AmdGpuReset, AmdRingTimeout, AmdPageFault …) and class (application: a condition only, the workload's fault; hardware: takes the accelerator out of service)",
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

    /// Counts one kernel-log fault: by manufacturer, accelerator (`uuid`, the one at the
    /// fault's bus address, if known) and condition, and, where its classifier counts faults by
    /// code (NVIDIA's XIDs), also by code.
    pub fn fault(&self, fault: &KernelFault, uuid: Option<&str>, by_code: bool) {
        self.faults
            .get_or_create(&FaultLabels {
                manufacturer: fault.manufacturer.name().to_string(),
                uuid: uuid.unwrap_or_default().to_string(),
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

/// Each accelerator as last published, read at every scrape: its info series (1, with what it
/// is), its health (1 healthy, 0 not), and the detection's state (whether the last pass failed,
/// and when the last one that measured ran).
#[derive(Debug)]
pub struct AcceleratorSeries {
    pub published: watch::Receiver<Option<Published>>,
    /// How group ids are formed on this deployment (the `group` label is the `Devices` group).
    pub naming: GroupNaming,
}

impl Collector for AcceleratorSeries {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let published = self.published.borrow();
        let accelerators: Vec<(Manufacturer, &Accelerator)> = published
            .iter()
            .flat_map(|p| p.inventory.manufacturers.iter())
            .flat_map(|s| s.accelerators.iter().map(move |a| (s.name, a)))
            .collect();
        gauges(
            &mut encoder,
            (
                "accelerator_info",
                "Each accelerator the daemon detected (always 1), with what it is: manufacturer, index, uuid, product, group (the Devices group id), bus_id, numa_node; join on manufacturer and uuid",
            ),
            accelerators.iter().map(|(m, a)| {
                let product = a.product.as_deref().unwrap_or_default();
                let labels = InfoLabels {
                    manufacturer: m.name().to_string(),
                    index: a.index,
                    uuid: a.uuid.clone().unwrap_or_default(),
                    product: product.to_string(),
                    group: group_key(*m, product, a.memory_mib, self.naming),
                    bus_id: a.bus_id.map(|b| b.to_string()).unwrap_or_default(),
                    numa_node: a.numa_node.map(|n| n.to_string()).unwrap_or_default(),
                };
                (labels, Some(1_i64))
            }),
        )?;
        gauges(
            &mut encoder,
            (
                "accelerator_healthy",
                "Whether the accelerator passes the health rule as last published (1) or not (0), by manufacturer, index and uuid",
            ),
            accelerators.iter().map(|(m, a)| {
                let labels = AcceleratorLabels {
                    manufacturer: m.name().to_string(),
                    index: a.index,
                    uuid: a.uuid.clone().unwrap_or_default(),
                };
                (labels, Some(i64::from(a.healthy)))
            }),
        )?;
        let of = |p: &Published| ManufacturerLabels {
            manufacturer: p.manufacturer.name().to_string(),
        };
        gauges(
            &mut encoder,
            (
                "detection_failing",
                "Whether the daemon's last detection pass could not measure (1; the last inventory is kept) or measured (0), by manufacturer",
            ),
            published
                .iter()
                .map(|p| (of(p), Some(i64::from(p.failure.is_some())))),
        )?;
        gauges(
            &mut encoder,
            (
                "detection_last_success_timestamp_seconds",
                "When the last detection pass that measured finished, in seconds since the Unix epoch, by manufacturer",
            ),
            published.iter().map(|p| {
                let at = p
                    .detected_at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                (of(p), Some(at))
            }),
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GpuLabels {
    manufacturer: String,
    uuid: String,
}

/// Each accelerator's live usage as last sampled (the backend's `UsageSampler`, every monitor
/// period), read at every scrape, by manufacturer and uuid. A reading the driver did not give has no series; a GPU the
/// last sample did not list has none either.
#[derive(Debug)]
pub struct GpuUsageMetrics {
    pub usage: watch::Receiver<Option<UsageSample>>,
}

impl Collector for GpuUsageMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let usage = self.usage.borrow();
        let gpus = usage.as_ref().map_or(&[][..], |s| &s.accelerators[..]);
        let manufacturer = usage
            .as_ref()
            .map(|s| s.manufacturer.name().to_string())
            .unwrap_or_default();
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
                        manufacturer: manufacturer.clone(),
                        uuid: gpu.uuid.clone(),
                    };
                    ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, EncodeLabelSet)]
struct HoldingLabels {
    manufacturer: String,
    index: u32,
    uuid: String,
    namespace: String,
    pod: String,
    pod_uid: String,
    container: String,
    family: String,
    /// A partition's profile; empty (no label) for the other families.
    profile: String,
}

impl HoldingLabels {
    fn of(h: &Holding) -> HoldingLabels {
        let holder = h.holder.as_ref();
        HoldingLabels {
            manufacturer: h.manufacturer.name().to_string(),
            index: h.index,
            uuid: h.uuid.clone().unwrap_or_default(),
            namespace: holder.map(|n| n.namespace.clone()).unwrap_or_default(),
            pod: holder.map(|n| n.pod.clone()).unwrap_or_default(),
            pod_uid: h.pod_uid.clone(),
            container: holder
                .map(|n| n.container.clone())
                .or_else(|| h.container.clone())
                .unwrap_or_default(),
            family: h.family.name().to_string(),
            profile: h.profile.clone().unwrap_or_default(),
        }
    }
}

/// The holdings sharing one label set: how many (more than one only for grants not named yet,
/// several shares of one card), and their slices' budgets summed.
#[derive(Debug, Default)]
struct Held {
    grants: i64,
    memory_mib: Option<u64>,
    cores_percentage: Option<u32>,
}

/// Who holds what in the plugins' ledger, read at every scrape: one series per holding (a grant
/// on one accelerator, named by its Pod through the daemon's Pod watch), present while the grant
/// lives and gone with it, with the slice's budget beside it; and each accelerator's occupancy.
/// Nothing before the plugins serve. The series are bounded by the node's grants: at most one
/// per token the kubelet can hand out.
pub struct LedgerMetrics {
    pub manufacturer: Manufacturer,
    /// The running plugins, once they serve.
    pub plugins: std::sync::Arc<dyn Fn() -> Option<PluginHandle> + Send + Sync>,
    /// The node's Pods, which name each grant's Pod UID.
    pub pods: std::sync::Arc<dyn PodSource>,
}

impl std::fmt::Debug for LedgerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerMetrics")
            .field("manufacturer", &self.manufacturer)
            .finish_non_exhaustive()
    }
}

/// One gauge family of `rows`, each row's value read by `value` (no series where it gives none).
fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue + Copy>(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    rows: impl Iterator<Item = (L, Option<V>)>,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<V>: EncodeMetric,
{
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in rows {
        if let Some(value) = value {
            ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

impl Collector for LedgerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(plugins) = (self.plugins)() else {
            return Ok(());
        };
        // The Pods first: the ledger lock is held only to read the ledger.
        let pods = self.pods.snapshot().unwrap_or_default();
        let name = holdings::name_by_uid(pods.iter().map(|p| &**p));
        let (rows, occupied) = plugins.with_ledger(|ledger| {
            let cards = holdings::cards_of_seats(ledger.seats());
            let rows = holdings::holdings(self.manufacturer, ledger.grants(), &cards, &name);
            (rows, holdings::occupancy(self.manufacturer, ledger))
        });
        let mut held: std::collections::BTreeMap<HoldingLabels, Held> = Default::default();
        for row in &rows {
            let entry = held.entry(HoldingLabels::of(row)).or_default();
            entry.grants += 1;
            if let Some(mib) = row.memory_mib {
                entry.memory_mib = Some(entry.memory_mib.unwrap_or(0) + mib);
            }
            if let Some(cores) = row.cores_percentage {
                entry.cores_percentage = Some(entry.cores_percentage.unwrap_or(0) + cores);
            }
        }
        gauges(
            &mut encoder,
            (
                "ledger_holding",
                "One series per grant on an accelerator while the grant lives (the value counts grants not yet named that share the labels): manufacturer, index, uuid, namespace, pod, pod_uid, container, family, profile (partitions)",
            ),
            held.iter().map(|(l, h)| (l.clone(), Some(h.grants))),
        )?;
        gauges(
            &mut encoder,
            (
                "ledger_holding_memory_mib",
                "The memory budget of a slice, or the VRAM of a partition's profile, held on the accelerator, in MiB (sliced and partitioned holdings)",
            ),
            held.iter()
                .map(|(l, h)| (l.clone(), h.memory_mib.map(|m| m as f64))),
        )?;
        gauges(
            &mut encoder,
            (
                "ledger_holding_cores_percent",
                "The compute cap of a slice held on the accelerator, in percent (sliced holdings)",
            ),
            held.iter()
                .map(|(l, h)| (l.clone(), h.cores_percentage.map(i64::from))),
        )?;
        let by_card = |o: &holdings::Occupied| AcceleratorLabels {
            manufacturer: o.manufacturer.name().to_string(),
            index: o.index,
            uuid: o.uuid.clone().unwrap_or_default(),
        };
        gauges(
            &mut encoder,
            (
                "ledger_used_percent",
                "The ledger's charge on the accelerator, in percent of it (a share is 10, a slice its memory budget, an exclusive or partitioned grant what it takes)",
            ),
            occupied.iter().map(|o| (by_card(o), Some(o.used_percent))),
        )?;
        gauges(
            &mut encoder,
            (
                "ledger_shares_taken",
                "Ownership shares taken on the accelerator (of 10)",
            ),
            occupied
                .iter()
                .map(|o| (by_card(o), Some(i64::from(o.shares)))),
        )?;
        gauges(
            &mut encoder,
            (
                "ledger_slices_taken",
                "Logical slices taken on the accelerator",
            ),
            occupied
                .iter()
                .map(|o| (by_card(o), Some(i64::from(o.slices)))),
        )?;
        gauges(
            &mut encoder,
            ("ledger_holders", "Grants that charge the accelerator"),
            occupied
                .iter()
                .map(|o| (by_card(o), Some(i64::from(o.holders)))),
        )
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
