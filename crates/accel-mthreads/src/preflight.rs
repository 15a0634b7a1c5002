//! Moore Threads' preflight knowledge (spec §5, tier "injection only"): every answer is
//! environment alone — `MTHREADS_VISIBLE_DEVICES`, and for a slice the two QoS variables the
//! host's sGPU kernel module and the MT container runtime enforce — so no driver is read to
//! serve an allocation, and there is no host cross-check, no driver-read row and no container
//! probe. The responder writes nothing to the host. Every row stops at `simulated`.

use std::collections::BTreeSet;

use accel_backend::preflight::{Preflight, Tier};
use accel_backend::respond::Injection;
use accel_backend::vendor_runtime::visible_names;
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;

use crate::responder::{QOS_COMPUTING_POWER_WEIGHT, QOS_MEMORY_LIMIT, VISIBLE_DEVICES};

/// The group's note: why the group has no driver-read row.
pub const NOTE: &str = "the mthreads allocator reads no driver at allocation time: every \
     mode's response is env vars only -- mthreads_visible_devices plus, for a sliced container, \
     a qos memory cap and compute weight derived purely from the container's own resource \
     request -- the host sgpu kmod and mthreads container runtime enforce them, and no driver \
     call is made to serve an allocation";

const MIB: u64 = 1024 * 1024;

/// Moore Threads' preflight row.
#[derive(Debug, Clone, Copy, Default)]
pub struct MthreadsPreflight;

impl Preflight for MthreadsPreflight {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Mthreads
    }

    fn tier(&self) -> Tier {
        Tier::InjectionOnly
    }

    fn note(&self) -> Option<String> {
        Some(NOTE.to_string())
    }

    /// No partitioned family exists for Moore Threads.
    fn partition_backed(&self, _accelerator: &Accelerator) -> bool {
        false
    }

    /// A slice is one accelerator: its quota is the QoS memory cap, in bytes, read as MiB (a
    /// figure that is not whole MiB is not one this responder sets).
    fn quota_mib(&self, injection: &Injection, position: usize) -> Option<u64> {
        if position != 0 {
            return None;
        }
        let bytes: u64 = injection.envs.get(QOS_MEMORY_LIMIT)?.parse().ok()?;
        bytes.is_multiple_of(MIB).then_some(bytes / MIB)
    }

    fn slice_runtime(&self, injection: &Injection) -> Option<String> {
        let memory = injection.envs.get(QOS_MEMORY_LIMIT)?;
        let weight = injection.envs.get(QOS_COMPUTING_POWER_WEIGHT)?;
        Some(format!(
            "sets {QOS_MEMORY_LIMIT}={memory} and {QOS_COMPUTING_POWER_WEIGHT}={weight}, which the host's sGPU kernel module enforces (the weight is a scheduling weight, not a cap)"
        ))
    }

    /// No preload library: the kernel module enforces the slice.
    fn library_in_container(&self, _injection: &Injection) -> Option<String> {
        None
    }

    fn visible(&self, injection: &Injection) -> BTreeSet<String> {
        visible_names(VISIBLE_DEVICES, injection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_is_the_memory_cap_in_whole_mib() {
        let mut injection = Injection::default();
        assert_eq!(MthreadsPreflight.quota_mib(&injection, 0), None);
        injection
            .envs
            .insert(QOS_MEMORY_LIMIT.into(), (24576 * MIB).to_string());
        assert_eq!(MthreadsPreflight.quota_mib(&injection, 0), Some(24576));
        assert_eq!(MthreadsPreflight.quota_mib(&injection, 1), None);
        injection
            .envs
            .insert(QOS_MEMORY_LIMIT.into(), (24576 * MIB + 1).to_string());
        assert_eq!(MthreadsPreflight.quota_mib(&injection, 0), None);
    }

    #[test]
    fn the_slice_runtime_is_both_qos_variables() {
        let mut injection = Injection::default();
        injection
            .envs
            .insert(QOS_MEMORY_LIMIT.into(), (8 * 1024 * MIB).to_string());
        assert_eq!(MthreadsPreflight.slice_runtime(&injection), None);
        injection
            .envs
            .insert(QOS_COMPUTING_POWER_WEIGHT.into(), "50".into());
        let what = MthreadsPreflight
            .slice_runtime(&injection)
            .unwrap_or_default();
        assert!(
            what.contains("MTHREADS_QOS_MEMORY_LIMIT=8589934592"),
            "{what}"
        );
        assert!(
            what.contains("MTHREADS_QOS_COMPUTING_POWER_WEIGHT=50"),
            "{what}"
        );
        assert!(what.contains("not a cap"), "{what}");
    }
}
