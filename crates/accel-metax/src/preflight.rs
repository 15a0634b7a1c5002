//! MetaX's preflight knowledge (spec/metax.md §5): tier "driver read and injection" — no host
//! cross-check (no established host reader), no probe container, so the sliced rows are the
//! responder's own answers asserted on (`simulated`).
//!
//! - **`sgpu-mode`** (the driver-read row, per card) is read-only: entering sGPU mode creates
//!   state that would have to be torn down, so nothing is toggled. A card already hosting a
//!   subdevice is in sGPU mode; any other is not yet, and the allocator puts it there when the
//!   first slice lands. There is no `not-declared` answer: every MetaX card offers slices.
//! - **Simulated grants** get a responder whose sGPU manager reads the real registry but records
//!   its writes ([`accel_host::RecordingWrites`]); its markers land under preflight's own
//!   render directory, away from `…/operator/pods`.

use std::collections::BTreeSet;
use std::sync::Arc;

use accel_backend::preflight::{DriverRead, NodeAccess, Preflight, State, Tier};
use accel_backend::respond::Injection;
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_host::{HostWrites, RecordingWrites};

use crate::responder::SGPUS_ENV;
use crate::sgpu;

/// The driver-read row's capability.
pub const SGPU_MODE: &str = "sgpu-mode";

/// The group's note.
pub const NOTE: &str = "no container probe: metax's preflight is a driver read and the \
     injection; the simulated slices' sgpu writes are recorded, never made";

/// MetaX's preflight row.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaxPreflight;

/// The `sgpu-mode` row of one card, from the registry as `host` lists it.
pub fn sgpu_mode(accelerator: &Accelerator, host: &dyn accel_host::Host) -> DriverRead {
    let row = |state, reason: &str| DriverRead {
        capability: SGPU_MODE,
        state,
        reason: reason.to_string(),
    };
    let Some(bdf) = accelerator.bus_id.map(|b| b.sysfs()) else {
        return row(
            State::Unavailable,
            "the accelerator reports no pci bus id, so sysfs cannot address it",
        );
    };
    match sgpu::list(host) {
        Err(e) => row(State::Unavailable, &format!("list sgpu subdevices: {e}")),
        Ok(registry) if registry.iter().any(|s| s.bdf == bdf) => row(
            State::Ok,
            "the accelerator already hosts an sgpu subdevice and is in sgpu mode",
        ),
        Ok(_) => row(
            State::Ok,
            "the accelerator is not yet in sgpu mode; the allocator puts it there when the first slice lands",
        ),
    }
}

/// `METAX_SGPUS`'s `key=value` field.
fn sgpus_field<'a>(injection: &'a Injection, key: &str) -> Option<&'a str> {
    injection.envs.get(SGPUS_ENV)?.split(';').find_map(|part| {
        let (k, v) = part.split_once('=')?;
        (k.trim() == key).then_some(v.trim())
    })
}

impl Preflight for MetaxPreflight {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Metax
    }

    fn tier(&self) -> Tier {
        Tier::DriverReadAndInjection
    }

    fn note(&self) -> Option<String> {
        Some(NOTE.to_string())
    }

    fn driver_read_on(
        &self,
        accelerator: &Accelerator,
        node: &NodeAccess<'_>,
    ) -> Option<DriverRead> {
        Some(sgpu_mode(accelerator, node.host))
    }

    fn simulation_writes(&self) -> Option<Arc<dyn HostWrites>> {
        Some(Arc::new(RecordingWrites::default()))
    }

    /// No partitioned family exists for MetaX.
    fn partition_backed(&self, _accelerator: &Accelerator) -> bool {
        false
    }

    /// The slice's `vram=` in `METAX_SGPUS` (one card a slice).
    fn quota_mib(&self, injection: &Injection, position: usize) -> Option<u64> {
        if position != 0 {
            return None;
        }
        sgpus_field(injection, "vram")?.parse().ok()
    }

    fn slice_runtime(&self, injection: &Injection) -> Option<String> {
        let subdevice = sgpus_field(injection, "sgpu")?;
        Some(format!(
            "reserves sgpu subdevice {subdevice} and names it in {SGPUS_ENV}"
        ))
    }

    /// No preload library: the driver enforces the slice.
    fn library_in_container(&self, _injection: &Injection) -> Option<String> {
        None
    }

    /// The cards' render nodes handed (every MetaX answer hands the card's render node).
    fn visible(&self, injection: &Injection) -> BTreeSet<String> {
        injection
            .devices
            .iter()
            .filter(|d| d.container_path.starts_with("/dev/dri/renderD"))
            .map(|d| d.container_path.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_and_the_subdevice_read_off_metax_sgpus() {
        let mut injection = Injection::default();
        assert_eq!(MetaxPreflight.quota_mib(&injection, 0), None);
        injection.envs.insert(
            SGPUS_ENV.into(),
            "sgpu=0000:3d:00.0#2;compute=100;vram=32768;alias=gpustack-u".into(),
        );
        assert_eq!(MetaxPreflight.quota_mib(&injection, 0), Some(32768));
        assert_eq!(MetaxPreflight.quota_mib(&injection, 1), None);
        assert_eq!(
            MetaxPreflight.slice_runtime(&injection).as_deref(),
            Some("reserves sgpu subdevice 0000:3d:00.0#2 and names it in METAX_SGPUS")
        );
    }
}
