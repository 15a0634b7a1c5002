//! Resetting accelerators through the admin socket (seed 002, "gpu.reset"), manufacturer by
//! manufacturer: a backend either resets (a [`Resetter`]: one accelerator's reset command) or
//! says why the daemon never does ([`Reset::Refused`], in its own words).
//!
//! The order is the seed's and the same for every manufacturer: every named accelerator must be
//! one of the inventory's (`unknown GPU`), and none may hold a live grant or a pending release,
//! on itself or on one of its partitions, nor be passed through to a VM (`gpu-busy`); one
//! refusal refuses the whole command and runs no reset ([`check`]). Then each reset runs
//! ([`run_resets`]), the inventory is collected again, and each accelerator that was reset is
//! healthy again (its faults cleared) unless its fresh counters fail the health rule
//! ([`conclude`]). Grants come through [`GrantView`], which the node daemon's ledger implements.
//! This module decides; it holds no ledger and runs nothing but the backend's reset command.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use accel_core::Manufacturer;
use accel_core::health;
use accel_core::inventory::{Accelerator, Inventory, Source};
use accel_host::Commands;
use serde::Serialize;

use crate::faults::{FaultError, FaultRecord, FaultWatch};

/// How a manufacturer's accelerators are reset by the daemon, or why they are not.
#[derive(Clone)]
pub enum Reset {
    /// The daemon resets them with this backend's command.
    By(Arc<dyn Resetter>),
    /// The daemon never resets them: why, and what the operator does instead (one line).
    Refused(String),
}

impl std::fmt::Debug for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reset::By(_) => f.write_str("Reset::By(..)"),
            Reset::Refused(why) => f.debug_tuple("Reset::Refused").field(why).finish(),
        }
    }
}

/// One manufacturer's reset of one accelerator (NVIDIA: `nvidia-smi --gpu-reset -i <uuid>`).
pub trait Resetter: Send + Sync {
    /// What the manufacturer calls one accelerator in a refusal (`NVIDIA GPU`).
    fn accelerator_noun(&self) -> &'static str;
    /// What it calls one of an accelerator's hardware partitions (`MIG instance`).
    fn partition_noun(&self) -> &'static str;
    /// How long one accelerator's reset may take.
    fn deadline(&self) -> Duration;
    /// Resets the accelerator `uuid`, waiting at most `deadline`; the error is one line naming
    /// what the tool said.
    fn reset_one(
        &self,
        commands: &dyn Commands,
        uuid: &str,
        deadline: Duration,
    ) -> Result<(), String>;
}

/// What the ledger tells the reset: whether a GPU is taken. The node daemon's ledger implements
/// it; [`MemoryGrants`] is the in-memory one for tests.
pub trait GrantView {
    /// Why `uuid` (a GPU's UUID, or one of its MIG instances' `MIG-…` UUIDs) cannot be reset
    /// now: a live grant or a pending release, in words an operator can act on
    /// (`"granted to default/trainer-0"`). `None` when nothing holds it. The reset asks once
    /// for the GPU and once for each MIG instance the inventory lists on it.
    fn busy(&self, uuid: &str) -> Option<String>;
}

/// A [`GrantView`] kept in memory: grants and pending releases by UUID.
#[derive(Debug, Clone, Default)]
pub struct MemoryGrants {
    grants: BTreeMap<String, String>,
    releases: BTreeMap<String, String>,
}

impl MemoryGrants {
    /// No grants.
    pub fn new() -> Self {
        MemoryGrants::default()
    }

    /// Records a live grant of `uuid` to `holder`.
    pub fn grant(&mut self, uuid: impl Into<String>, holder: impl Into<String>) -> &mut Self {
        self.grants.insert(uuid.into(), holder.into());
        self
    }

    /// Records a grant of `uuid` whose release by `holder` is still pending.
    pub fn pending_release(
        &mut self,
        uuid: impl Into<String>,
        holder: impl Into<String>,
    ) -> &mut Self {
        self.releases.insert(uuid.into(), holder.into());
        self
    }
}

impl GrantView for MemoryGrants {
    fn busy(&self, uuid: &str) -> Option<String> {
        if let Some(holder) = self.grants.get(uuid) {
            return Some(format!("granted to {holder}"));
        }
        self.releases
            .get(uuid)
            .map(|holder| format!("release by {holder} pending"))
    }
}

/// The fault record the reset clears GPUs from: the daemon's [`FaultWatch`] (which saves
/// `faults.json`) or a bare [`FaultRecord`].
pub trait ResetFaults {
    /// Clears `accelerator`'s faults when its fresh counters pass the rule; whether it did.
    fn after_reset(&mut self, accelerator: &Accelerator) -> Result<bool, FaultError>;
    /// Applies the health rule (counters plus remaining faults) to the inventory.
    fn apply(&self, inventory: &mut Inventory);
    /// How many faults the GPU `uuid` has this boot.
    fn count(&self, uuid: &str) -> usize;
}

impl ResetFaults for FaultWatch {
    fn after_reset(&mut self, accelerator: &Accelerator) -> Result<bool, FaultError> {
        FaultWatch::after_reset(self, accelerator)
    }

    fn apply(&self, inventory: &mut Inventory) {
        FaultWatch::apply(self, inventory);
    }

    fn count(&self, uuid: &str) -> usize {
        self.record().faults_of(uuid).count()
    }
}

impl ResetFaults for FaultRecord {
    fn after_reset(&mut self, accelerator: &Accelerator) -> Result<bool, FaultError> {
        Ok(self.clear_after_reset(accelerator))
    }

    fn apply(&self, inventory: &mut Inventory) {
        FaultRecord::apply(self, inventory);
    }

    fn count(&self, uuid: &str) -> usize {
        self.faults_of(uuid).count()
    }
}

/// One GPU the reset refuses to touch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BusyGpu {
    pub uuid: String,
    /// Every reason, e.g. `MIG-… granted to default/a`, `passed through to a VM`.
    pub reasons: Vec<String>,
}

/// A reset refused as a whole: no GPU was reset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResetError {
    /// No UUID was given.
    #[error("no GPU to reset: name at least one GPU UUID")]
    NoGpus,
    /// A UUID the inventory does not list as one of the manufacturer's accelerators.
    #[error("unknown GPU {uuid}: {hint}")]
    UnknownGpu { uuid: String, hint: String },
    /// A listed GPU is granted, awaiting a release, or passed through to a VM.
    #[error("gpu-busy: {}; nothing was reset", describe_busy(.0))]
    Busy(Vec<BusyGpu>),
    /// The daemon cannot reset now (no inventory yet, …).
    #[error("cannot reset now: {0}")]
    Unavailable(String),
    /// The node's accelerators are never reset by the daemon ([`Reset::Refused`]: why, in the
    /// manufacturer's words).
    #[error("{0}")]
    Unsupported(String),
}

fn describe_busy(busy: &[BusyGpu]) -> String {
    busy.iter()
        .map(|b| format!("{} ({})", b.uuid, b.reasons.join(", ")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What became of one GPU the reset ran on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "result"
)]
pub enum ResetOutcome {
    /// Reset, and the fresh counters pass the rule: the GPU is healthy again.
    Healthy {
        /// How many of this boot's faults of the GPU were cleared (0 when it had none, or
        /// when saving the record failed: see the report's notes).
        faults_cleared: usize,
    },
    /// Reset, but the fresh counters still fail the rule; its faults are kept.
    Unhealthy { reasons: Vec<String> },
    /// Reset, but the fresh collection does not tell (it failed, or does not list the GPU).
    Unconfirmed { reason: String },
    /// The tool did not reset it (non-zero exit, no answer in time, not installed).
    Failed { error: String },
}

/// One GPU's line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuReset {
    pub uuid: String,
    #[serde(flatten)]
    pub outcome: ResetOutcome,
}

/// What a reset that was not refused did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResetReport {
    /// Each GPU in the order asked.
    pub gpus: Vec<GpuReset>,
    /// The inventory collected after the resets, health applied; `None` when the collection
    /// failed (the caller keeps its last one).
    #[serde(skip)]
    pub inventory: Option<Inventory>,
    /// What went wrong on the way that is no GPU's outcome (collection, saving faults).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ResetReport {
    /// Whether every GPU came back healthy.
    pub fn all_healthy(&self) -> bool {
        self.gpus
            .iter()
            .all(|g| matches!(g.outcome, ResetOutcome::Healthy { .. }))
    }
}

/// The manufacturer's accelerators of the inventory.
fn accelerators(
    manufacturer: Manufacturer,
    inventory: &Inventory,
) -> impl Iterator<Item = &Accelerator> {
    inventory
        .manufacturers
        .iter()
        .filter(move |s| s.name == manufacturer)
        .flat_map(|s| s.accelerators.iter())
}

fn find_gpu<'a>(
    manufacturer: Manufacturer,
    inventory: &'a Inventory,
    uuid: &str,
) -> Option<&'a Accelerator> {
    accelerators(manufacturer, inventory).find(|a| a.uuid.as_deref() == Some(uuid))
}

/// Checks a reset of `gpus` against the inventory and the grants, without running anything:
/// the GPUs to reset (duplicates dropped, order kept), or why the whole command is refused.
pub fn check(
    resetter: &dyn Resetter,
    manufacturer: Manufacturer,
    inventory: &Inventory,
    gpus: &[String],
    grants: &dyn GrantView,
) -> Result<Vec<String>, ResetError> {
    let mut wanted: Vec<String> = Vec::new();
    for uuid in gpus {
        let uuid = uuid.trim();
        if !uuid.is_empty() && !wanted.iter().any(|w| w == uuid) {
            wanted.push(uuid.to_string());
        }
    }
    if wanted.is_empty() {
        return Err(ResetError::NoGpus);
    }
    let mut found = Vec::with_capacity(wanted.len());
    for uuid in &wanted {
        let Some(gpu) = find_gpu(manufacturer, inventory, uuid) else {
            return Err(ResetError::UnknownGpu {
                uuid: uuid.clone(),
                hint: unknown_hint(resetter, manufacturer, inventory, uuid),
            });
        };
        found.push(gpu);
    }
    let mut busy = Vec::new();
    for (uuid, gpu) in wanted.iter().zip(found) {
        let mut reasons = Vec::new();
        if gpu.source == Source::Passthrough {
            reasons.push("passed through to a VM".to_string());
        }
        if let Some(why) = grants.busy(uuid) {
            reasons.push(why);
        }
        for mig in &gpu.mig_devices {
            if let Some(mig_uuid) = mig.uuid.as_deref()
                && let Some(why) = grants.busy(mig_uuid)
            {
                reasons.push(format!("{} {mig_uuid} {why}", resetter.partition_noun()));
            }
        }
        if !reasons.is_empty() {
            busy.push(BusyGpu {
                uuid: uuid.clone(),
                reasons,
            });
        }
    }
    if !busy.is_empty() {
        return Err(ResetError::Busy(busy));
    }
    Ok(wanted)
}

fn unknown_hint(
    resetter: &dyn Resetter,
    manufacturer: Manufacturer,
    inventory: &Inventory,
    uuid: &str,
) -> String {
    let parent = accelerators(manufacturer, inventory).find(|a| {
        a.mig_devices
            .iter()
            .any(|m| m.uuid.as_deref() == Some(uuid))
    });
    match parent.and_then(|p| p.uuid.as_deref()) {
        Some(parent) => format!(
            "it is a {} of {parent}; reset the {} itself",
            resetter.partition_noun(),
            gpu_word(resetter)
        ),
        None => format!(
            "the node's inventory lists no {} with this UUID",
            resetter.accelerator_noun()
        ),
    }
}

/// The last word of the accelerator noun (`NVIDIA GPU` → `GPU`), as a hint says it.
fn gpu_word(resetter: &dyn Resetter) -> &'static str {
    let noun = resetter.accelerator_noun();
    noun.rsplit(' ').next().unwrap_or(noun)
}

/// What each accelerator's reset did, in order.
pub type ResetResults = Vec<(String, Result<(), String>)>;

/// Runs the backend's reset for each of `targets` (as [`check`] answered them), each bounded
/// by `deadline` (the backend's [`Resetter::deadline`] unless the daemon is told otherwise),
/// one after another. Touches nothing but the commands.
pub fn run_resets(
    resetter: &dyn Resetter,
    commands: &dyn Commands,
    targets: &[String],
    deadline: Duration,
) -> ResetResults {
    let mut results = Vec::with_capacity(targets.len());
    for uuid in targets {
        let result = resetter.reset_one(commands, uuid, deadline);
        match &result {
            Ok(()) => tracing::info!(gpu = %uuid, "reset"),
            Err(e) => tracing::warn!(gpu = %uuid, "reset failed: {e}"),
        }
        results.push((uuid.clone(), result));
    }
    results
}

/// Judges each accelerator [`run_resets`] ran on against the inventory collected after it (`fresh`):
/// healthy again (its faults cleared) when its fresh counters pass the rule, unhealthy, or
/// unconfirmed when the collection failed or does not list it. The fresh inventory comes back
/// in the report with the rule applied.
pub fn conclude(
    manufacturer: Manufacturer,
    results: ResetResults,
    fresh: Result<Inventory, String>,
    faults: &mut dyn ResetFaults,
) -> ResetReport {
    let mut notes = Vec::new();
    let mut fresh = match fresh {
        Ok(fresh) => Some(fresh),
        Err(e) => {
            notes.push(format!("collecting the inventory after the reset: {e}"));
            None
        }
    };
    let mut report = Vec::with_capacity(results.len());
    for (uuid, result) in results {
        let outcome = match (result, &fresh) {
            (Err(error), _) => ResetOutcome::Failed { error },
            (Ok(()), None) => ResetOutcome::Unconfirmed {
                reason: "the inventory could not be collected after the reset".to_string(),
            },
            (Ok(()), Some(fresh)) => match find_gpu(manufacturer, fresh, &uuid) {
                None => ResetOutcome::Unconfirmed {
                    reason: "the inventory collected after the reset does not list it".to_string(),
                },
                Some(gpu) => {
                    let reasons = health::counter_reasons(gpu);
                    if reasons.is_empty() {
                        let had = faults.count(&uuid);
                        let faults_cleared = match faults.after_reset(gpu) {
                            Ok(true) => had,
                            Ok(false) => 0,
                            Err(e) => {
                                notes.push(format!("{uuid}: {e}"));
                                0
                            }
                        };
                        ResetOutcome::Healthy { faults_cleared }
                    } else {
                        ResetOutcome::Unhealthy { reasons }
                    }
                }
            },
        };
        report.push(GpuReset { uuid, outcome });
    }
    if let Some(fresh) = &mut fresh {
        faults.apply(fresh);
    }
    ResetReport {
        gpus: report,
        inventory: fresh,
        notes,
    }
}
