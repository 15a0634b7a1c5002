//! Iluvatar's preflight knowledge (spec §5, tier "injection only"): the allocator reads no corex
//! driver to serve an allocation — visibility is handed to ix-container-runtime, and a slice's
//! limits are HAMi-core's preload variables derived from the container's own request — so there
//! is no host cross-check, no driver-read row and no container probe. What is checked is the
//! responder's own answer: HAMi-core mounted and preloaded, the quota it sets, two tenants'
//! own quotas, and a sidecar seeing only its owner's accelerators. Every row stops at
//! `simulated`.

use std::collections::BTreeSet;

use accel_backend::chores::CONTAINER_PRELOAD;
use accel_backend::preflight::{Preflight, Tier};
use accel_backend::respond::Injection;
use accel_backend::vendor_runtime::visible_names;
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;

use crate::responder::{CONTAINER_LIBRARY, VISIBLE_DEVICES};

/// The group's note: why the group has no driver-read row.
pub const NOTE: &str = "the iluvatar allocator reads no driver at allocation time: \
     exclusive/shared/visibility hand device visibility to corex's ix-container-runtime, and \
     the sliced path's sm/vram limits are hami-core preload envs derived purely from the \
     container's own resource request -- no corex driver call is made to serve an allocation";

/// Iluvatar's preflight row.
#[derive(Debug, Clone, Copy, Default)]
pub struct IluvatarPreflight;

impl Preflight for IluvatarPreflight {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Iluvatar
    }

    fn tier(&self) -> Tier {
        Tier::InjectionOnly
    }

    fn note(&self) -> Option<String> {
        Some(NOTE.to_string())
    }

    /// HAMi-core hooks the corex library only ix-container-runtime provides.
    fn slices_need_runtime_class(&self) -> bool {
        true
    }

    /// No partitioned family exists for Iluvatar.
    fn partition_backed(&self, _accelerator: &Accelerator) -> bool {
        false
    }

    fn quota_mib(&self, injection: &Injection, position: usize) -> Option<u64> {
        injection
            .envs
            .get(&format!("CUDA_DEVICE_MEMORY_LIMIT_{position}"))
            .and_then(|v| v.strip_suffix('m'))
            .and_then(|v| v.parse().ok())
    }

    fn slice_runtime(&self, injection: &Injection) -> Option<String> {
        let library = self.library_in_container(injection)?;
        let preloaded = injection
            .mounts
            .iter()
            .any(|m| m.container_path == CONTAINER_PRELOAD);
        preloaded.then(|| {
            format!("mounts HAMi-core at {library} and preloads it through {CONTAINER_PRELOAD}")
        })
    }

    fn library_in_container(&self, injection: &Injection) -> Option<String> {
        injection
            .mounts
            .iter()
            .find(|m| m.container_path == CONTAINER_LIBRARY)
            .map(|m| m.container_path.clone())
    }

    fn visible(&self, injection: &Injection) -> BTreeSet<String> {
        visible_names(VISIBLE_DEVICES, injection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_backend::respond::Mount;

    fn mount(container: &str) -> Mount {
        Mount {
            container_path: container.into(),
            host_path: format!("/host{container}"),
            read_only: true,
        }
    }

    #[test]
    fn the_slice_runtime_needs_the_library_and_the_preload_file() {
        let mut injection = Injection::default();
        injection.mounts.push(mount(CONTAINER_LIBRARY));
        assert_eq!(IluvatarPreflight.slice_runtime(&injection), None);
        injection.mounts.push(mount("/etc/ld.so.preload"));
        assert_eq!(
            IluvatarPreflight.slice_runtime(&injection).as_deref(),
            Some(
                "mounts HAMi-core at /usr/local/vgpu/libvgpu.so and preloads it through /etc/ld.so.preload"
            )
        );
    }

    #[test]
    fn the_quota_is_the_first_position_in_mib() {
        let mut injection = Injection::default();
        injection
            .envs
            .insert("CUDA_DEVICE_MEMORY_LIMIT_0".into(), "16384m".into());
        injection
            .envs
            .insert("CUDA_DEVICE_MEMORY_LIMIT_1".into(), "16384".into());
        assert_eq!(IluvatarPreflight.quota_mib(&injection, 0), Some(16384));
        assert_eq!(IluvatarPreflight.quota_mib(&injection, 1), None);
        injection
            .envs
            .insert(VISIBLE_DEVICES.into(), "GPU-a, GPU-b".into());
        assert_eq!(
            IluvatarPreflight.visible(&injection),
            BTreeSet::from(["GPU-a".to_string(), "GPU-b".to_string()])
        );
    }
}
