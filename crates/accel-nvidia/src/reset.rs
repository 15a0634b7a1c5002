//! Resetting GPUs (seed 002, "gpu.reset"): `nvidia-smi --gpu-reset -i <uuid>` per GPU, refused
//! as a whole when any listed GPU is busy or unknown, then the inventory collected again and each
//! reset GPU marked healthy unless its fresh counters fail the health rule.
//!
//! The order is the seed's: every UUID must be a GPU of the inventory (`unknown GPU`), and none
//! may hold a live grant or a pending release, on itself or on one of its MIG instances, nor be
//! passed through to a VM (`gpu-busy`); one refusal refuses the whole command and runs no reset.
//! Grants come through [`GrantView`], which the node daemon's ledger implements; the caller
//! provides the collection and the fault record. This module decides and runs the resets; it
//! does not hold the ledger, read the machine except through `Commands`, or publish anything.

use std::collections::BTreeMap;
use std::time::Duration;

use accel_core::Manufacturer;
use accel_core::health;
use accel_core::inventory::{Accelerator, Inventory, Source};
use accel_host::{Commands, RunFailure, run_bounded};
use serde::Serialize;

use crate::faults::{FaultError, FaultRecord, FaultWatch};

/// How long one `nvidia-smi --gpu-reset` may take (DESIGN.md: every nvidia-smi call 30 s).
pub const RESET_DEADLINE: Duration = Duration::from_secs(30);

/// The reset command line for one GPU, program first.
pub fn reset_argv(uuid: &str) -> [&str; 4] {
    ["nvidia-smi", "--gpu-reset", "-i", uuid]
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
    /// A UUID the inventory does not list as an NVIDIA GPU.
    #[error("unknown GPU {uuid}: {hint}")]
    UnknownGpu { uuid: String, hint: String },
    /// A listed GPU is granted, awaiting a release, or passed through to a VM.
    #[error("gpu-busy: {}; nothing was reset", describe_busy(.0))]
    Busy(Vec<BusyGpu>),
    /// The daemon cannot reset now (no inventory yet, …).
    #[error("cannot reset now: {0}")]
    Unavailable(String),
    /// The node's accelerators are never reset by the daemon (AMD's: why, in its words).
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
    /// nvidia-smi did not reset the GPU (non-zero exit, no answer in time, not installed).
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

/// The NVIDIA GPUs of the inventory by UUID.
fn nvidia_gpus(inventory: &Inventory) -> impl Iterator<Item = &Accelerator> {
    inventory
        .manufacturers
        .iter()
        .filter(|s| s.name == Manufacturer::Nvidia)
        .flat_map(|s| s.accelerators.iter())
}

fn find_gpu<'a>(inventory: &'a Inventory, uuid: &str) -> Option<&'a Accelerator> {
    nvidia_gpus(inventory).find(|a| a.uuid.as_deref() == Some(uuid))
}

/// Checks a reset of `gpus` against the inventory and the grants, without running anything:
/// the GPUs to reset (duplicates dropped, order kept), or why the whole command is refused.
pub fn check(
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
        let Some(gpu) = find_gpu(inventory, uuid) else {
            return Err(ResetError::UnknownGpu {
                uuid: uuid.clone(),
                hint: unknown_hint(inventory, uuid),
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
                reasons.push(format!("MIG instance {mig_uuid} {why}"));
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

fn unknown_hint(inventory: &Inventory, uuid: &str) -> String {
    let parent = nvidia_gpus(inventory).find(|a| {
        a.mig_devices
            .iter()
            .any(|m| m.uuid.as_deref() == Some(uuid))
    });
    match parent.and_then(|p| p.uuid.as_deref()) {
        Some(parent) => format!("it is a MIG instance of {parent}; reset the GPU itself"),
        None => "the node's inventory lists no NVIDIA GPU with this UUID".to_string(),
    }
}

/// Runs a reset of `gpus`: [`check`] first (a refusal runs nothing), then
/// `nvidia-smi --gpu-reset -i <uuid>` for each GPU with `deadline`, then one collection with
/// `collect`, then each GPU that was reset has its faults cleared when its fresh counters pass
/// the rule (no uncorrectable volatile ECC errors, no failed or pending row remap). The fresh
/// inventory comes back with the rule applied. The caller must keep the ledger from granting
/// these GPUs between the check and the end of the call; the node daemon does it without
/// holding its ledger, with [`check`], [`run_resets`] and [`conclude`] apart.
pub fn reset(
    inventory: &Inventory,
    gpus: &[String],
    grants: &dyn GrantView,
    commands: &dyn Commands,
    deadline: Duration,
    collect: &mut dyn FnMut() -> Result<Inventory, String>,
    faults: &mut dyn ResetFaults,
) -> Result<ResetReport, ResetError> {
    let targets = check(inventory, gpus, grants)?;
    let results = run_resets(commands, &targets, deadline);
    Ok(conclude(results, collect(), faults))
}

/// What `nvidia-smi --gpu-reset` did for each GPU, in order.
pub type ResetResults = Vec<(String, Result<(), String>)>;

/// Runs `nvidia-smi --gpu-reset -i <uuid>` for each of `targets` (as [`check`] answered them)
/// with `deadline`, one after another. Touches nothing but the commands.
pub fn run_resets(commands: &dyn Commands, targets: &[String], deadline: Duration) -> ResetResults {
    let mut results = Vec::with_capacity(targets.len());
    for uuid in targets {
        let result = run_reset(commands, uuid, deadline);
        match &result {
            Ok(()) => tracing::info!(gpu = %uuid, "GPU reset"),
            Err(e) => tracing::warn!(gpu = %uuid, "GPU reset failed: {e}"),
        }
        results.push((uuid.clone(), result));
    }
    results
}

/// Judges each GPU [`run_resets`] ran on against the inventory collected after it (`fresh`):
/// healthy again (its faults cleared) when its fresh counters pass the rule, unhealthy, or
/// unconfirmed when the collection failed or does not list it. The fresh inventory comes back
/// in the report with the rule applied.
pub fn conclude(
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
            (Ok(()), Some(fresh)) => match find_gpu(fresh, &uuid) {
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

/// Runs one GPU's reset; the error is one line naming what nvidia-smi said.
fn run_reset(commands: &dyn Commands, uuid: &str, deadline: Duration) -> Result<(), String> {
    match run_bounded(commands, &reset_argv(uuid), deadline) {
        Ok(_) => Ok(()),
        Err(RunFailure::NotInstalled { .. }) => {
            Err("nvidia-smi not found (no NVIDIA driver on this host)".to_string())
        }
        Err(e) => {
            // nvidia-smi explains a refused reset over a few lines: all of them, on one line.
            let said = e.output().and_then(|out| {
                one_line(&out.stdout_text()).or_else(|| one_line(&out.stderr_text()))
            });
            Err(match said {
                Some(said) => e.with_said(said),
                None => e,
            }
            .to_string())
        }
    }
}

/// What nvidia-smi printed, on one line: it explains a refused reset over a few lines
/// ("could not be reset", then the GPU and why), so the lines are joined, and cut at
/// [`MAX_SAID`] characters.
fn one_line(text: &str) -> Option<String> {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if joined.is_empty() {
        return None;
    }
    Some(match joined.char_indices().nth(MAX_SAID) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    })
}

/// How much of nvidia-smi's explanation a failed reset keeps.
const MAX_SAID: usize = 300;
