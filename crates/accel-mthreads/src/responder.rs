//! The Moore Threads responder: every answer is environment only — no device node, no mount, no
//! file on the host, nothing kept (spec §4). Exclusive, shared and visibility grants are exactly
//! `MTHREADS_VISIBLE_DEVICES=<IDs>` (the accelerators' UUIDs, comma-joined in ascending index),
//! which the MT container runtime turns into device nodes and the user-space driver. A slice adds
//! the two QoS variables the host's sGPU kernel module enforces:
//! `MTHREADS_QOS_MEMORY_LIMIT` (the VRAM budget in **bytes**, the hard cap) and
//! `MTHREADS_QOS_COMPUTING_POWER_WEIGHT` (the cores percentage, 100 unless asked — a relative
//! scheduling weight, not a cap). A slice is one accelerator (the webhook's rule), whose VRAM is
//! the budget's basis.

use accel_backend::respond::{Answer, Injection, PrepareError, Responder, ResponderError};
use accel_backend::vendor_runtime::{slice_mib, visible_devices};
use accel_core::ledger::Family;

/// The visible-devices variable the MT container runtime reads.
pub const VISIBLE_DEVICES: &str = "MTHREADS_VISIBLE_DEVICES";
/// A slice's VRAM cap, in bytes.
pub const QOS_MEMORY_LIMIT: &str = "MTHREADS_QOS_MEMORY_LIMIT";
/// A slice's compute weight.
pub const QOS_COMPUTING_POWER_WEIGHT: &str = "MTHREADS_QOS_COMPUTING_POWER_WEIGHT";

/// The Moore Threads responder (stateless).
#[derive(Debug, Clone, Copy, Default)]
pub struct MthreadsResponder;

impl MthreadsResponder {
    /// The answer for one container.
    pub fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        let mut injection = visible_devices(VISIBLE_DEVICES, answer.seats)?;
        if answer.family == Some(Family::Sliced) {
            let Some(first) = answer.seats.first() else {
                return Err(ResponderError::Refused(format!(
                    "no allocated accelerator found for sliced container {:?}",
                    answer.container.map_or("main", |c| c.name.as_str())
                )));
            };
            let bytes = slice_mib(first, answer.slice_units)?.saturating_mul(1024 * 1024);
            injection
                .envs
                .insert(QOS_MEMORY_LIMIT.into(), bytes.to_string());
            injection.envs.insert(
                QOS_COMPUTING_POWER_WEIGHT.into(),
                answer.cores_percentage.unwrap_or(100).to_string(),
            );
        }
        Ok(injection)
    }
}

impl Responder for MthreadsResponder {
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        MthreadsResponder::respond(self, answer)
    }

    fn answers_alike(&self) -> bool {
        true
    }

    /// Nothing to stage: the sGPU kernel module and the runtime enforce the variables.
    fn prepare_slicing(&self) -> Result<(), PrepareError> {
        Ok(())
    }

    /// Nothing was kept for the Pod.
    fn reclaim(&self, _pod_uid: &str) {}
}
