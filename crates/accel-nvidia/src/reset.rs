//! Resetting GPUs (seed 002, "gpu.reset"): `nvidia-smi --gpu-reset -i <uuid>` per GPU, refused
//! as a whole when any listed GPU is busy or unknown, then the inventory collected again and each
//! reset GPU marked healthy unless its fresh counters fail the health rule.
//!
//! The order is the seed's: every UUID must be a GPU of the inventory (`unknown GPU`), and none
//! may hold a live grant or a pending release, on itself or on one of its MIG instances, nor be
//! passed through to a VM (`gpu-busy`); one refusal refuses the whole command and runs no reset.
//! Grants come through [`GrantView`], which the node daemon's ledger implements; the caller
//! provides the collection and the fault record. The order and the types are
//! manufacturer-neutral (`accel_backend::reset`); this module is NVIDIA's command
//! ([`SmiReset`], the seam's `Resetter`) and the GPU-named entry points its tests and callers
//! use. It does not hold the ledger, read the machine except through `Commands`, or publish.

use std::time::Duration;

use accel_backend::reset::{self, Resetter};
use accel_core::Manufacturer;
use accel_core::inventory::Inventory;
use accel_host::{Commands, RunFailure, run_bounded};

pub use accel_backend::reset::{
    BusyGpu, GpuReset, GrantView, MemoryGrants, ResetError, ResetFaults, ResetOutcome, ResetReport,
    ResetResults,
};

/// How long one `nvidia-smi --gpu-reset` may take (DESIGN.md: every nvidia-smi call 30 s).
pub const RESET_DEADLINE: Duration = Duration::from_secs(30);

/// The reset command line for one GPU, program first.
pub fn reset_argv(uuid: &str) -> [&str; 4] {
    ["nvidia-smi", "--gpu-reset", "-i", uuid]
}

/// Checks a reset of `gpus` against the inventory and the grants, without running anything:
/// the GPUs to reset (duplicates dropped, order kept), or why the whole command is refused
/// ([`accel_backend::reset::check`] for NVIDIA's GPUs).
pub fn check(
    inventory: &Inventory,
    gpus: &[String],
    grants: &dyn GrantView,
) -> Result<Vec<String>, ResetError> {
    reset::check(
        &SmiReset::default(),
        Manufacturer::Nvidia,
        inventory,
        gpus,
        grants,
    )
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

/// Runs `nvidia-smi --gpu-reset -i <uuid>` for each of `targets` (as [`check`] answered them)
/// with `deadline`, one after another. Touches nothing but the commands.
pub fn run_resets(commands: &dyn Commands, targets: &[String], deadline: Duration) -> ResetResults {
    reset::run_resets(&SmiReset { deadline }, commands, targets, deadline)
}

/// Judges each GPU [`run_resets`] ran on against the inventory collected after it
/// ([`accel_backend::reset::conclude`] for NVIDIA's GPUs).
pub fn conclude(
    results: ResetResults,
    fresh: Result<Inventory, String>,
    faults: &mut dyn ResetFaults,
) -> ResetReport {
    reset::conclude(Manufacturer::Nvidia, results, fresh, faults)
}

/// NVIDIA's reset behind the seam: `nvidia-smi --gpu-reset -i <uuid>`, one GPU at a time.
#[derive(Debug, Clone, Copy)]
pub struct SmiReset {
    /// How long one reset may take.
    pub deadline: Duration,
}

impl Default for SmiReset {
    fn default() -> Self {
        SmiReset {
            deadline: RESET_DEADLINE,
        }
    }
}

impl Resetter for SmiReset {
    fn accelerator_noun(&self) -> &'static str {
        "NVIDIA GPU"
    }

    fn partition_noun(&self) -> &'static str {
        "MIG instance"
    }

    fn deadline(&self) -> Duration {
        self.deadline
    }

    fn reset_one(
        &self,
        commands: &dyn Commands,
        uuid: &str,
        deadline: Duration,
    ) -> Result<(), String> {
        run_reset(commands, uuid, deadline)
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
