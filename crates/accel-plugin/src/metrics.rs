//! The device plugin's Prometheus metrics: how long Allocate and GetPreferredAllocation take per
//! resource (measured inside the plugin, from the request received to the answer built), what
//! Allocate's time is made of ([`Stage`]: identification, the ledger lock, the ledger, the
//! responder, the journal's write and the wait for its sync), the journal's own syncs, the
//! refusals by reason, and the grants by family.
//!
//! This module owns the metric handles, their names, and the closed set of refusal reasons
//! ([`RefusalReason`]), derived from the refusal kinds (`accel_core::ledger::Refusal`,
//! identification failures, invalid arguments, journal failures); a reason is a label value,
//! never a message. Refusal sites mark the `tonic::Status` they build with its reason
//! ([`Refuse::refused`]); the tonic handler reads it back ([`RefusalReason::of`]) and counts.
//! Recording is cheap on Allocate's path: the handles per resource are made once when the
//! plugins start, so a call builds no label and allocates nothing; a counter is one atomic add,
//! a histogram observation one uncontended lock. It must not decide anything.

use std::sync::Arc;
use std::time::Duration;

use accel_core::ledger::{Family, Refusal};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family as Series;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tonic::{Code, Status};

use crate::identify::IdentifyError;

/// Upper bounds of the Allocate and GetPreferredAllocation latency buckets, in seconds:
/// 10 µs … 1 s. The bottom resolves what never leaves the process (a hint is a ledger read
/// under one lock, tens of µs; an exclusive or shared grant without the kubelet lookup); 100 µs
/// – 1 ms resolves the durable journal's fdatasync and the peer we are measured against
/// (NVIDIA's plugin: Allocate 165 µs p50 / 0.5 ms p99, its hint 0.5 ms / 1.6 ms; our hint's p99
/// must stay under a quarter of that); 1 – 500 ms covers the pod-resources List (bounded at
/// 500 ms) and a bounded wait for identification; past 1 s the kubelet's own deadline is what
/// matters, and `+Inf` still counts the call.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Why an Allocate was refused: a closed set, one label value each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    // The ledger's refusals, one per `accel_core::ledger::Refusal` variant.
    Empty,
    UnknownAccelerator,
    FamilyNotServed,
    NotGrantable,
    Unhealthy,
    Repeated,
    OtherMode,
    ExclusivelyHeld,
    NoShare,
    NoSlot,
    NoRoom,
    BadBudget,
    SecondFamily,
    // Identification.
    /// The node's Pods are not known yet.
    PodsUnknown,
    /// No pending container asks for what the call names.
    NoCandidate,
    /// The identified Pod left the node during the call.
    PodGone,
    /// The kubelet admits a Pod the watch never delivered and the API server did not answer
    /// for within the identification bound.
    NotDelivered,
    // The call itself.
    /// Unknown device IDs, no device IDs, no container request.
    InvalidArgument,
    /// The accelerators were replaced during the call (retry).
    SeatsChanged,
    /// A visibility sidecar whose Pod holds no accelerator to make visible.
    NoOwner,
    /// The responder could not build the answer (the grant was given back).
    Responder,
    /// The grant could not be made durable in the journal (given back).
    Journal,
    /// A refusal no site marked (a bug to fix: every site names its reason).
    Other,
}

impl RefusalReason {
    /// Every reason, in exposition order.
    pub const ALL: [RefusalReason; 23] = [
        RefusalReason::Empty,
        RefusalReason::UnknownAccelerator,
        RefusalReason::FamilyNotServed,
        RefusalReason::NotGrantable,
        RefusalReason::Unhealthy,
        RefusalReason::Repeated,
        RefusalReason::OtherMode,
        RefusalReason::ExclusivelyHeld,
        RefusalReason::NoShare,
        RefusalReason::NoSlot,
        RefusalReason::NoRoom,
        RefusalReason::BadBudget,
        RefusalReason::SecondFamily,
        RefusalReason::PodsUnknown,
        RefusalReason::NoCandidate,
        RefusalReason::PodGone,
        RefusalReason::NotDelivered,
        RefusalReason::InvalidArgument,
        RefusalReason::SeatsChanged,
        RefusalReason::NoOwner,
        RefusalReason::Responder,
        RefusalReason::Journal,
        RefusalReason::Other,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            RefusalReason::Empty => "empty",
            RefusalReason::UnknownAccelerator => "unknown_accelerator",
            RefusalReason::FamilyNotServed => "family_not_served",
            RefusalReason::NotGrantable => "not_grantable",
            RefusalReason::Unhealthy => "unhealthy",
            RefusalReason::Repeated => "repeated",
            RefusalReason::OtherMode => "other_mode",
            RefusalReason::ExclusivelyHeld => "exclusively_held",
            RefusalReason::NoShare => "no_share",
            RefusalReason::NoSlot => "no_slot",
            RefusalReason::NoRoom => "no_room",
            RefusalReason::BadBudget => "bad_budget",
            RefusalReason::SecondFamily => "second_family",
            RefusalReason::PodsUnknown => "pods_unknown",
            RefusalReason::NoCandidate => "no_candidate",
            RefusalReason::PodGone => "pod_gone",
            RefusalReason::NotDelivered => "not_delivered",
            RefusalReason::InvalidArgument => "invalid_argument",
            RefusalReason::SeatsChanged => "seats_changed",
            RefusalReason::NoOwner => "no_owner",
            RefusalReason::Responder => "responder",
            RefusalReason::Journal => "journal",
            RefusalReason::Other => "other",
        }
    }

    /// The reason a refusal site marked `status` with; unmarked, what its code says.
    pub fn of(status: &Status) -> RefusalReason {
        let marked = std::error::Error::source(status).and_then(|s| s.downcast_ref::<Marked>());
        match marked {
            Some(Marked(reason)) => *reason,
            None if status.code() == Code::InvalidArgument => RefusalReason::InvalidArgument,
            None => RefusalReason::Other,
        }
    }

    fn index(self) -> usize {
        // ALL lists every variant once, so the position is always found.
        RefusalReason::ALL
            .iter()
            .position(|r| *r == self)
            .unwrap_or(RefusalReason::ALL.len() - 1)
    }
}

impl From<&Refusal> for RefusalReason {
    /// Exhaustive on purpose: a new refusal kind must choose its label here.
    fn from(refusal: &Refusal) -> RefusalReason {
        match refusal {
            Refusal::Empty { .. } => RefusalReason::Empty,
            Refusal::UnknownAccelerator { .. } => RefusalReason::UnknownAccelerator,
            Refusal::FamilyNotServed { .. } => RefusalReason::FamilyNotServed,
            Refusal::NotGrantable { .. } => RefusalReason::NotGrantable,
            Refusal::Unhealthy { .. } => RefusalReason::Unhealthy,
            Refusal::Repeated { .. } => RefusalReason::Repeated,
            Refusal::OtherMode { .. } => RefusalReason::OtherMode,
            Refusal::ExclusivelyHeld { .. } => RefusalReason::ExclusivelyHeld,
            Refusal::NoShare { .. } => RefusalReason::NoShare,
            Refusal::NoSlot { .. } => RefusalReason::NoSlot,
            Refusal::NoRoom { .. } => RefusalReason::NoRoom,
            Refusal::BadBudget { .. } => RefusalReason::BadBudget,
            Refusal::SecondFamily { .. } => RefusalReason::SecondFamily,
            Refusal::PartitionShape { .. } => RefusalReason::Empty,
            Refusal::NotOffered { .. } => RefusalReason::NotGrantable,
            Refusal::PlacementTaken { .. } => RefusalReason::NoRoom,
            // No room for the slice's compute, as `NoRoom` is none for its VRAM.
            Refusal::NoCompute { .. } => RefusalReason::NoRoom,
        }
    }
}

impl From<&IdentifyError> for RefusalReason {
    /// Exhaustive on purpose: a new identification failure must choose its label here.
    fn from(error: &IdentifyError) -> RefusalReason {
        match error {
            IdentifyError::PodsUnknown { .. } => RefusalReason::PodsUnknown,
            IdentifyError::NoCandidate { .. } => RefusalReason::NoCandidate,
            IdentifyError::PodGone { .. } => RefusalReason::PodGone,
            IdentifyError::NotDelivered { .. } => RefusalReason::NotDelivered,
        }
    }
}

impl EncodeLabelValue for RefusalReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.label())
    }
}

/// The reason a refusal site attached to its `Status` (as its source: it never leaves the
/// process, the kubelet sees the message only).
#[derive(Debug)]
struct Marked(RefusalReason);

impl std::fmt::Display for Marked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused: {}", self.0.label())
    }
}

impl std::error::Error for Marked {}

/// Marks a refusal with its reason, for the refusals counter.
pub trait Refuse {
    /// This refusal, marked with `reason`.
    fn refused(self, reason: RefusalReason) -> Status;
}

impl Refuse for Status {
    fn refused(mut self, reason: RefusalReason) -> Status {
        self.set_source(Arc::new(Marked(reason)));
        self
    }
}

/// What a grant was, as the grants counter labels it: a family, or the visibility sidecar's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct GrantKind(Option<Family>);

const GRANT_KINDS: [GrantKind; 5] = [
    GrantKind(Some(Family::Exclusive)),
    GrantKind(Some(Family::Shared)),
    GrantKind(Some(Family::Sliced)),
    GrantKind(Some(Family::Partitioned)),
    GrantKind(None),
];

impl EncodeLabelValue for GrantKind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let name = self.0.map_or("visibility", Family::name);
        std::fmt::Write::write_str(encoder, name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RefusalLabels {
    resource: String,
    reason: RefusalReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GrantLabels {
    family: GrantKind,
}

/// Who named the container a grant was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attribution {
    /// The Pod watch's sole candidate, before the kubelet was asked (exclusive and shared).
    Watch,
    /// The kubelet's pod-resources answer, or the pending-Pod matching when it could not tell.
    Kubelet,
    /// A grant the watch attributed, moved to the container the kubelet then named.
    Moved,
    /// Answered before any container was named (exclusive and shared, the watch not showing
    /// one candidate yet).
    Unnamed,
    /// An unnamed grant given the container the kubelet then named.
    Named,
}

impl Attribution {
    const ALL: [Attribution; 5] = [
        Attribution::Watch,
        Attribution::Kubelet,
        Attribution::Moved,
        Attribution::Unnamed,
        Attribution::Named,
    ];

    fn label(self) -> &'static str {
        match self {
            Attribution::Watch => "watch",
            Attribution::Kubelet => "kubelet",
            Attribution::Moved => "moved",
            Attribution::Unnamed => "unnamed",
            Attribution::Named => "named",
        }
    }
}

impl EncodeLabelValue for Attribution {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.label())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AttributionLabels {
    by: Attribution,
}

/// A part of one Allocate's time inside the plugin (issue 44 item 13: what its tail is made
/// of). Each is timed where it happens and observed once per container request; stages a call
/// did not go through are not observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Naming the container: the Pod watch's snapshot and candidate, or the pod-resources List
    /// and any wait for a Pod the watch lags on (with the kubelet's road, the ledger lock too).
    Identify,
    /// Waiting for the ledger lock (the watch's road; the kubelet's counts it in `identify`).
    Lock,
    /// The ledger's decision.
    Ledger,
    /// The manufacturer's responder building the answer.
    Respond,
    /// Writing the grant's journal entry (under the lock; not yet durable).
    JournalWrite,
    /// Waiting, with the lock released, for the `fdatasync` that makes the entry durable.
    Durable,
}

impl Stage {
    /// Every stage, in exposition order.
    pub const ALL: [Stage; 6] = [
        Stage::Identify,
        Stage::Lock,
        Stage::Ledger,
        Stage::Respond,
        Stage::JournalWrite,
        Stage::Durable,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Identify => "identify",
            Stage::Lock => "lock",
            Stage::Ledger => "ledger",
            Stage::Respond => "respond",
            Stage::JournalWrite => "journal_write",
            Stage::Durable => "durable",
        }
    }

    fn index(self) -> usize {
        Stage::ALL
            .iter()
            .position(|s| *s == self)
            .unwrap_or(Stage::ALL.len() - 1)
    }
}

impl EncodeLabelValue for Stage {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.label())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StageLabels {
    resource: String,
    stage: Stage,
}

/// The stages one Allocate went through, and how long each took (summed when a stage ran more
/// than once, as identification does when it waits for the watch).
#[derive(Debug, Clone, Copy, Default)]
pub struct StageTimes {
    took: [Option<Duration>; Stage::ALL.len()],
}

impl StageTimes {
    /// Adds `took` to `stage`.
    pub fn add(&mut self, stage: Stage, took: Duration) {
        let slot = &mut self.took[stage.index()];
        *slot = Some(slot.unwrap_or_default() + took);
    }

    /// Adds the time since `since` to `stage`, and answers now (the next stage's start).
    pub fn lap(&mut self, stage: Stage, since: std::time::Instant) -> std::time::Instant {
        let now = std::time::Instant::now();
        self.add(stage, now.saturating_duration_since(since));
        now
    }

    /// What `stage` took, if the call went through it.
    pub fn get(&self, stage: Stage) -> Option<Duration> {
        self.took[stage.index()]
    }
}

/// The ledger journal's own metrics: each `fdatasync` (how long, how many appends it made
/// durable: a group commit covers several) and each time the file grew.
#[derive(Debug, Clone)]
pub struct JournalMetrics {
    sync: Histogram,
    synced_appends: Counter,
    grown: Counter,
}

impl Default for JournalMetrics {
    fn default() -> Self {
        JournalMetrics {
            sync: latency_histogram(),
            synced_appends: Counter::default(),
            grown: Counter::default(),
        }
    }
}

impl JournalMetrics {
    /// One `fdatasync` that took `took` (whatever it answered).
    pub fn synced(&self, took: Duration) {
        self.sync.observe(took.as_secs_f64());
    }

    /// A sync made `appends` more appends durable.
    pub fn covered(&self, appends: u64) {
        self.synced_appends.inc_by(appends);
    }

    /// The file grew by its preallocation.
    pub fn grown(&self) {
        self.grown.inc();
    }

    /// The appends made durable so far.
    pub fn synced_appends(&self) -> u64 {
        self.synced_appends.get()
    }
}

type HistogramSeries = Series<ResourceLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The plugins' metrics. [`PluginMetrics::register`] puts them in the daemon's registry; the
/// default records into series nobody reads (tests and benches that do not look).
#[derive(Debug, Clone)]
pub struct PluginMetrics {
    allocate: HistogramSeries,
    stages: Series<StageLabels, Histogram, fn() -> Histogram>,
    preferred: HistogramSeries,
    refusals: Series<RefusalLabels, Counter>,
    grants_series: Series<GrantLabels, Counter>,
    /// One handle per [`GRANT_KINDS`], made once.
    grants: [Counter; GRANT_KINDS.len()],
    attributed_series: Series<AttributionLabels, Counter>,
    /// One handle per [`Attribution`], made once.
    attributed: [Counter; Attribution::ALL.len()],
    journal: JournalMetrics,
}

impl Default for PluginMetrics {
    fn default() -> Self {
        let grants_series: Series<GrantLabels, Counter> = Series::default();
        let attributed_series: Series<AttributionLabels, Counter> = Series::default();
        PluginMetrics {
            attributed: Attribution::ALL
                .map(|by| attributed_series.get_or_create_owned(&AttributionLabels { by })),
            attributed_series,
            allocate: Series::new_with_constructor(latency_histogram as fn() -> Histogram),
            stages: Series::new_with_constructor(latency_histogram as fn() -> Histogram),
            preferred: Series::new_with_constructor(latency_histogram as fn() -> Histogram),
            refusals: Series::default(),
            grants: GRANT_KINDS
                .map(|family| grants_series.get_or_create_owned(&GrantLabels { family })),
            grants_series,
            journal: JournalMetrics::default(),
        }
    }
}

impl PluginMetrics {
    /// The plugins' metrics, registered in `registry` (whose prefix names them:
    /// `device_manager_` in the daemon).
    pub fn register(registry: &mut Registry) -> PluginMetrics {
        let metrics = PluginMetrics::default();
        registry.register(
            "allocate_duration_seconds",
            "Time the plugin took to answer one Allocate call (every container of it), from the request received to the answer built, refusals included, by resource",
            metrics.allocate.clone(),
        );
        registry.register(
            "allocate_stage_duration_seconds",
            "Time one Allocate spent in each stage inside the plugin, by resource and stage: identify (the container named: Pod watch, pod-resources List, waits), lock (the ledger lock awaited), ledger (its decision), respond (the manufacturer's answer), journal_write (the entry written), durable (the wait for the fdatasync that makes it durable, before the answer)",
            metrics.stages.clone(),
        );
        registry.register(
            "journal_sync_duration_seconds",
            "Time each fdatasync of the ledger journal took (one sync covers every append that queued while the previous one ran)",
            metrics.journal.sync.clone(),
        );
        registry.register(
            "journal_synced_appends",
            "Journal appends made durable by its syncs (a sync covering several is a group commit)",
            metrics.journal.synced_appends.clone(),
        );
        registry.register(
            "journal_grown",
            "Times the ledger journal's preallocated file grew (its one sync that commits metadata)",
            metrics.journal.grown.clone(),
        );
        registry.register(
            "preferred_allocation_duration_seconds",
            "Time the plugin took to answer one GetPreferredAllocation call, from the request received to the answer built, by resource",
            metrics.preferred.clone(),
        );
        registry.register(
            "allocate_refusals",
            "Allocate calls refused, by resource and reason (a closed set: the ledger's refusal kinds, identification failures, invalid arguments, journal and responder failures)",
            metrics.refusals.clone(),
        );
        registry.register(
            "grants",
            "Grants recorded (a retried Allocate is not counted again), by family: exclusive, shared, sliced, partitioned, visibility",
            metrics.grants_series.clone(),
        );
        registry.register(
            "grants_attributed",
            "How each new exclusive, shared or sliced grant got its container: watch (the Pod watch's sole candidate, answered before asking the kubelet), kubelet (pod-resources first), unnamed (answered before any container was named); then moved (a watch attribution the kubelet corrected) and named (an unnamed grant given the container the kubelet names)",
            metrics.attributed_series.clone(),
        );
        metrics
    }

    /// Counts one grant's attribution.
    pub fn attributed(&self, by: Attribution) {
        if let Some(i) = Attribution::ALL.iter().position(|a| *a == by) {
            self.attributed[i].inc();
        }
    }

    /// How many grants were attributed `by` so far (for tests and the daemon's own checks).
    pub fn attributed_count(&self, by: Attribution) -> u64 {
        Attribution::ALL
            .iter()
            .position(|a| *a == by)
            .map_or(0, |i| self.attributed[i].get())
    }

    /// The journal's handles.
    pub fn journal(&self) -> JournalMetrics {
        self.journal.clone()
    }

    /// The handles of one resource, made once per pool when the plugins start.
    pub fn for_resource(&self, resource: &str) -> ResourceMetrics {
        let labels = ResourceLabels {
            resource: resource.to_string(),
        };
        ResourceMetrics {
            allocate: self.allocate.get_or_create_owned(&labels),
            stages: Stage::ALL.map(|stage| {
                self.stages.get_or_create_owned(&StageLabels {
                    resource: resource.to_string(),
                    stage,
                })
            }),
            preferred: self.preferred.get_or_create_owned(&labels),
            refusals: RefusalReason::ALL.map(|reason| {
                self.refusals.get_or_create_owned(&RefusalLabels {
                    resource: resource.to_string(),
                    reason,
                })
            }),
        }
    }

    /// Counts one grant recorded: `None` is a visibility sidecar's.
    pub fn granted(&self, family: Option<Family>) {
        if let Some(i) = GRANT_KINDS.iter().position(|k| k.0 == family) {
            self.grants[i].inc();
        }
    }
}

/// One resource's handles: recording touches nothing else.
#[derive(Debug, Clone)]
pub struct ResourceMetrics {
    allocate: Histogram,
    stages: [Histogram; Stage::ALL.len()],
    preferred: Histogram,
    refusals: [Counter; RefusalReason::ALL.len()],
}

impl ResourceMetrics {
    /// One Allocate answered in `took`; `refusal` when it was refused.
    pub fn allocated(&self, took: Duration, refusal: Option<&Status>) {
        self.allocate.observe(took.as_secs_f64());
        if let Some(status) = refusal {
            self.refusals[RefusalReason::of(status).index()].inc();
        }
    }

    /// The stages one Allocate went through.
    pub fn staged(&self, times: &StageTimes) {
        for stage in Stage::ALL {
            if let Some(took) = times.get(stage) {
                self.stages[stage.index()].observe(took.as_secs_f64());
            }
        }
    }

    /// One GetPreferredAllocation answered in `took`.
    pub fn preferred(&self, took: Duration) {
        self.preferred.observe(took.as_secs_f64());
    }
}

/// A parsed Prometheus text exposition, for tests: each sample by metric name and labels.
#[cfg(any(test, feature = "testing"))]
pub mod exposition {
    use std::collections::BTreeMap;

    /// The samples of one exposition.
    #[derive(Debug, Clone, Default)]
    pub struct Samples {
        samples: BTreeMap<(String, BTreeMap<String, String>), f64>,
        types: BTreeMap<String, String>,
    }

    impl Samples {
        /// Parses the text format: `# HELP`/`# TYPE` lines and `name{label="value",…} value`
        /// samples; a sample whose family has no `# TYPE` line, or any line that is neither, is
        /// an error naming the line.
        pub fn parse(text: &str) -> Result<Samples, String> {
            let mut out = Samples::default();
            for (n, line) in text.lines().enumerate() {
                let at = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
                if line.is_empty() || line.starts_with("# HELP ") {
                    continue;
                }
                if let Some(rest) = line.strip_prefix("# TYPE ") {
                    let (name, kind) = rest.split_once(' ').ok_or_else(|| at("bad TYPE"))?;
                    out.types.insert(name.to_string(), kind.to_string());
                    continue;
                }
                if line.starts_with('#') {
                    return Err(at("unknown comment"));
                }
                let (series, value) = line.rsplit_once(' ').ok_or_else(|| at("no value"))?;
                let value: f64 = match value {
                    "+Inf" => f64::INFINITY,
                    "-Inf" => f64::NEG_INFINITY,
                    v => v.parse().map_err(|_| at("bad value"))?,
                };
                let (name, labels) = match series.split_once('{') {
                    None => (series.to_string(), BTreeMap::new()),
                    Some((name, rest)) => {
                        let body = rest
                            .strip_suffix('}')
                            .ok_or_else(|| at("unclosed labels"))?;
                        (name.to_string(), parse_labels(body).map_err(|e| at(&e))?)
                    }
                };
                let family = ["_bucket", "_sum", "_count", "_total"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| out.types.contains_key(*f)))
                    .unwrap_or(&name);
                if !out.types.contains_key(family) && !out.types.contains_key(&name) {
                    return Err(at("sample without a TYPE line"));
                }
                out.samples.insert((name, labels), value);
            }
            Ok(out)
        }

        /// The sample `name` with exactly these labels.
        pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
            let labels: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            self.samples.get(&(name.to_string(), labels)).copied()
        }

        /// Every sample of `name`, with its labels.
        pub fn all(&self, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
            self.samples
                .iter()
                .filter(|((n, _), _)| n == name)
                .map(|((_, labels), v)| (labels.clone(), *v))
                .collect()
        }

        /// The `# TYPE` of a metric family.
        pub fn kind(&self, family: &str) -> Option<&str> {
            self.types.get(family).map(String::as_str)
        }
    }

    fn parse_labels(mut body: &str) -> Result<BTreeMap<String, String>, String> {
        let mut labels = BTreeMap::new();
        while !body.is_empty() {
            let (key, rest) = body.split_once("=\"").ok_or("a label without =\"")?;
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next() {
                    Some((i, '"')) => break i,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c)) => value.push(c),
                        None => return Err("a dangling escape".into()),
                    },
                    Some((_, c)) => value.push(c),
                    None => return Err("an unclosed label value".into()),
                }
            };
            labels.insert(key.to_string(), value);
            body = rest[end + 1..].trim_start_matches(',');
        }
        Ok(labels)
    }
}

#[cfg(test)]
mod tests {
    use super::exposition::Samples;
    use super::*;
    use accel_core::ledger::GrantKey;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn a_marked_refusal_counts_under_its_reason_an_unmarked_one_by_its_code() {
        let mut registry = Registry::with_prefix("device_manager");
        let metrics = PluginMetrics::register(&mut registry);
        let gpu = metrics.for_resource("nvidia.com/gpu");
        let refusal = Refusal::NoRoom {
            accelerator: "0".into(),
            remaining: 1,
            needed: 2,
        };
        let marked = Status::failed_precondition("x").refused((&refusal).into());
        gpu.allocated(Duration::from_micros(30), Some(&marked));
        gpu.allocated(
            Duration::from_micros(300),
            Some(&Status::invalid_argument("no IDs")),
        );
        gpu.allocated(
            Duration::from_micros(300),
            Some(&Status::failed_precondition("unmarked")),
        );
        gpu.allocated(Duration::from_millis(2), None);
        gpu.preferred(Duration::from_micros(12));
        metrics.granted(Some(Family::Sliced));
        metrics.granted(None);
        let samples = Samples::parse(&text(&registry)).unwrap();
        let refusals = |reason: &str| {
            samples.get(
                "device_manager_allocate_refusals_total",
                &[("resource", "nvidia.com/gpu"), ("reason", reason)],
            )
        };
        assert_eq!(refusals("no_room"), Some(1.0));
        assert_eq!(refusals("invalid_argument"), Some(1.0));
        assert_eq!(refusals("other"), Some(1.0));
        assert_eq!(
            refusals("no_slot"),
            Some(0.0),
            "every reason is pre-created"
        );
        let gpu = [("resource", "nvidia.com/gpu")];
        assert_eq!(
            samples.get("device_manager_allocate_duration_seconds_count", &gpu),
            Some(4.0)
        );
        let bucket = |le: &str| {
            samples.get(
                "device_manager_allocate_duration_seconds_bucket",
                &[("resource", "nvidia.com/gpu"), ("le", le)],
            )
        };
        assert_eq!(bucket("2.5e-05"), Some(0.0));
        assert_eq!(bucket("5e-05"), Some(1.0));
        assert_eq!(bucket("0.0005"), Some(3.0));
        assert_eq!(bucket("+Inf"), Some(4.0));
        assert_eq!(
            samples.get(
                "device_manager_preferred_allocation_duration_seconds_bucket",
                &[("resource", "nvidia.com/gpu"), ("le", "2.5e-05")]
            ),
            Some(1.0)
        );
        let grants =
            |family: &str| samples.get("device_manager_grants_total", &[("family", family)]);
        assert_eq!(grants("sliced"), Some(1.0));
        assert_eq!(grants("visibility"), Some(1.0));
        assert_eq!(grants("partitioned"), Some(0.0));
        assert_eq!(samples.kind("device_manager_grants_total"), Some("counter"));
        assert_eq!(
            samples.kind("device_manager_allocate_duration_seconds"),
            Some("histogram")
        );
    }

    #[test]
    fn every_refusal_kind_has_its_own_label() {
        let key = GrantKey::new("u", "main");
        let reasons: Vec<RefusalReason> = [
            Refusal::Empty { key: key.clone() },
            Refusal::NoShare {
                accelerator: "0".into(),
                used: 10,
                total: 10,
            },
        ]
        .iter()
        .map(RefusalReason::from)
        .collect();
        assert_eq!(reasons, [RefusalReason::Empty, RefusalReason::NoShare]);
        let labels: std::collections::BTreeSet<&str> =
            RefusalReason::ALL.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), RefusalReason::ALL.len());
        for (i, reason) in RefusalReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i);
        }
        let unknown = IdentifyError::PodsUnknown {
            resource: "r".into(),
        };
        assert_eq!(
            RefusalReason::of(&Status::unavailable("x").refused((&unknown).into())),
            RefusalReason::PodsUnknown
        );
    }

    #[test]
    fn the_exposition_parser_reads_labels_and_refuses_untyped_samples() {
        let text = "# TYPE a counter\na_total{x=\"q\\\"uote\",y=\"2\"} 3\n";
        let samples = Samples::parse(text).unwrap();
        assert_eq!(
            samples.get("a_total", &[("x", "q\"uote"), ("y", "2")]),
            Some(3.0)
        );
        assert!(
            Samples::parse("b 1\n")
                .unwrap_err()
                .contains("without a TYPE")
        );
    }
}
