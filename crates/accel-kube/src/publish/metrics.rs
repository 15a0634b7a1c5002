//! The publisher's Prometheus metrics: the backlog of desired writes not yet landed, by part
//! and state (waiting: not tried yet or behind the Node's read; retrying: failed, backing off),
//! refreshed after every reconciliation round. This module owns the gauges and their names; the
//! publisher says what is pending.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::family::Family as Series;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// What the publisher writes, one backlog per part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// The read of this node's Node (its UID owns our objects).
    Node,
    NodeFeature,
    Devices,
    DevicesStatus,
    Capacity,
    /// One write per Pod whose `accelerator.allocated` annotation has not landed.
    PodAnnotation,
}

impl Part {
    pub const ALL: [Part; 6] = [
        Part::Node,
        Part::NodeFeature,
        Part::Devices,
        Part::DevicesStatus,
        Part::Capacity,
        Part::PodAnnotation,
    ];

    fn label(self) -> &'static str {
        match self {
            Part::Node => "node",
            Part::NodeFeature => "node_feature",
            Part::Devices => "devices",
            Part::DevicesStatus => "devices_status",
            Part::Capacity => "capacity",
            Part::PodAnnotation => "pod_annotation",
        }
    }
}

/// Where a pending write stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pending {
    /// Not tried yet, or waiting on the Node's read.
    Waiting,
    /// Tried and failed: retried after a capped exponential backoff.
    Retrying,
}

impl Pending {
    const ALL: [Pending; 2] = [Pending::Waiting, Pending::Retrying];

    fn label(self) -> &'static str {
        match self {
            Pending::Waiting => "waiting",
            Pending::Retrying => "retrying",
        }
    }
}

impl EncodeLabelValue for Part {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.label())
    }
}

impl EncodeLabelValue for Pending {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.label())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BacklogLabels {
    part: Part,
    state: Pending,
}

/// The publisher's metrics. [`PublishMetrics::register`] puts them in the daemon's registry;
/// the default records into gauges nobody reads.
#[derive(Debug, Clone)]
pub struct PublishMetrics {
    series: Series<BacklogLabels, Gauge>,
    /// By [`Part::ALL`], then [`Pending::ALL`], made once.
    backlog: [[Gauge; 2]; Part::ALL.len()],
}

impl Default for PublishMetrics {
    fn default() -> Self {
        let series: Series<BacklogLabels, Gauge> = Series::default();
        PublishMetrics {
            backlog: Part::ALL.map(|part| {
                Pending::ALL.map(|state| series.get_or_create_owned(&BacklogLabels { part, state }))
            }),
            series,
        }
    }
}

impl PublishMetrics {
    /// The publisher's metrics, registered in `registry` (whose prefix names them).
    pub fn register(registry: &mut Registry) -> PublishMetrics {
        let metrics = PublishMetrics::default();
        registry.register(
            "publish_backlog",
            "Desired writes to the API server not landed yet, by part (node, node_feature, devices, devices_status, capacity, pod_annotation) and state (waiting, retrying)",
            metrics.series.clone(),
        );
        metrics
    }

    /// Sets one part's backlog.
    pub(crate) fn set(&self, part: Part, waiting: i64, retrying: i64) {
        if let Some(i) = Part::ALL.iter().position(|p| *p == part) {
            self.backlog[i][0].set(waiting);
            self.backlog[i][1].set(retrying);
        }
    }
}
