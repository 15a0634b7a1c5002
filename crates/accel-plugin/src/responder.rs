//! The NVIDIA responder: what a container granted accelerators gets injected.
//!
//! Exclusive, shared and visibility grants get the visibility injection of the chosen channel:
//! `NVIDIA_VISIBLE_DEVICES=<uuids>` (`envvar`) or the `cdi.k8s.io/gpustack-nvidia` annotation
//! naming the vendor's CDI devices (`cdi-annotations`); `auto` picks per container with the
//! seed's five fall-backs. A slice also gets HAMi-core's budgets, the preload library for the
//! node's CUDA major with an `/etc/ld.so.preload` naming it, a per-Pod working directory, and the
//! quiet/ordering variables unless the container's own `env:` sets them. Positional keys follow
//! ascending accelerator index. This module decides no grant; it only answers for one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use accel_core::ledger::units::mib_for_units;
use accel_core::ledger::{Family, Seat};

use crate::api::deviceplugin::{ContainerAllocateResponse, Mount};
use crate::pods::{Container, Pod};
use crate::settings::InjectionStrategy;

/// Where the init container stages the preload libraries on the host, unless `serve
/// --library-dir` says otherwise ([`NvidiaResponder::library_dir`]).
pub const HOST_LIBRARY_DIR: &str = "/var/lib/gpustack/operator/lib";
/// HAMi-core's library file name.
pub const PRELOAD_LIBRARY: &str = "libvgpu.so";
/// Where the library appears in a sliced container.
pub const CONTAINER_LIBRARY_DIR: &str = "/usr/local/vgpu";
/// The CDI annotation key of NVIDIA grants.
pub const CDI_ANNOTATION: &str = "cdi.k8s.io/gpustack-nvidia";
/// The CDI kind the vendor's generator writes.
pub const CDI_KIND: &str = "nvidia.com/gpu";

/// Why the responder refused a grant (the ledger entry is then given back).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponderError {
    #[error("accelerator {index} has no UUID to name it by")]
    NoUuid { index: u32 },
    #[error("slicing needs the node's CUDA major version, which the driver did not report")]
    NoCudaMajor,
    #[error("accelerator {index} reports no VRAM; a slice's memory limit cannot be set")]
    NoVram { index: u32 },
    #[error("cannot create the Pod working directory {path}: {reason}")]
    WorkDir { path: String, reason: String },
}

/// The container engine's facts `auto` reads (seed 000's five fall-backs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineFacts {
    /// The engine's configuration was read.
    pub readable: bool,
    /// Its default runtime handler is NVIDIA's.
    pub default_runtime_is_vendor: bool,
    /// It resolves CDI requests.
    pub cdi_enabled: bool,
    /// The CDI device names the loaded specs carry (`nvidia.com/gpu=GPU-…`).
    pub cdi_devices: BTreeSet<String>,
}

/// Which channel carries a grant, and why `auto` fell back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    Envvar,
    CdiAnnotation,
}

/// `auto`'s choice for one container: CDI only when none of the five fall-backs holds.
pub fn choose_channel(
    pod: &Pod,
    engine: &EngineFacts,
    uuids: &[String],
) -> (Channel, Option<&'static str>) {
    let reason = if pod.runtime_class.is_some() {
        Some("the Pod names a runtimeClassName whose handler owns injection")
    } else if !engine.readable {
        Some("the container engine's configuration could not be read")
    } else if engine.default_runtime_is_vendor {
        Some("the engine's default runtime is NVIDIA's, where the variable already works")
    } else if !engine.cdi_enabled {
        Some("the engine does not resolve CDI requests")
    } else if !uuids
        .iter()
        .all(|u| engine.cdi_devices.contains(&format!("{CDI_KIND}={u}")))
    {
        Some("the loaded CDI specifications do not name every granted accelerator")
    } else {
        None
    };
    match reason {
        Some(r) => (Channel::Envvar, Some(r)),
        None => (Channel::CdiAnnotation, None),
    }
}

/// What one answer is for.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    /// The grant's family; `None` for the visibility sidecar (plain injection only).
    pub family: Option<Family>,
    /// The accelerators, ascending by index.
    pub seats: &'a [&'a Seat],
    /// Units per accelerator of a slice.
    pub slice_units: u64,
    pub cores_percentage: Option<u32>,
    pub pod: &'a Pod,
    pub container: Option<&'a Container>,
}

/// The NVIDIA responder of one node.
#[derive(Debug, Clone)]
pub struct NvidiaResponder {
    pub strategy: InjectionStrategy,
    /// The node's CUDA major (one driver stack per node), when reported.
    pub cuda_major: Option<u32>,
    /// The host directory per-Pod working directories are made in (a hostPath).
    pub pod_dir_root: PathBuf,
    /// Where the `ld.so.preload` files the containers mount are kept (a hostPath).
    pub preload_dir: PathBuf,
    /// The host directory the preload libraries are staged in, one `cuda-<major>/` each
    /// ([`HOST_LIBRARY_DIR`] by default): the kubelet mounts the library from there.
    pub library_dir: PathBuf,
    pub engine: EngineFacts,
}

impl NvidiaResponder {
    /// The host path of the preload library for a CUDA major, under the library directory
    /// `library_dir`.
    pub fn library_path(library_dir: &Path, major: u32) -> String {
        path_text(
            &library_dir
                .join(format!("cuda-{major}"))
                .join(PRELOAD_LIBRARY),
        )
    }

    /// The answer for one container.
    pub fn respond(
        &self,
        answer: &Answer<'_>,
    ) -> Result<ContainerAllocateResponse, ResponderError> {
        let mut uuids = Vec::with_capacity(answer.seats.len());
        for seat in answer.seats {
            match &seat.uuid {
                Some(u) => uuids.push(u.clone()),
                None => return Err(ResponderError::NoUuid { index: seat.index }),
            }
        }
        let channel = match self.strategy {
            InjectionStrategy::Envvar => Channel::Envvar,
            InjectionStrategy::CdiAnnotations => Channel::CdiAnnotation,
            InjectionStrategy::Auto => {
                let (channel, reason) = choose_channel(answer.pod, &self.engine, &uuids);
                if let Some(reason) = reason {
                    tracing::info!(
                        pod = %format!("{}/{}", answer.pod.namespace, answer.pod.name),
                        "nvidia injection falls back to envvar: {reason}"
                    );
                }
                channel
            }
        };
        let mut response = ContainerAllocateResponse::default();
        match channel {
            Channel::Envvar => {
                response
                    .envs
                    .insert("NVIDIA_VISIBLE_DEVICES".into(), uuids.join(","));
            }
            Channel::CdiAnnotation => {
                let names: Vec<String> = uuids.iter().map(|u| format!("{CDI_KIND}={u}")).collect();
                response
                    .annotations
                    .insert(CDI_ANNOTATION.into(), names.join(","));
            }
        }
        if answer.family == Some(Family::Sliced) {
            self.slice(answer, &mut response)?;
        }
        Ok(response)
    }

    fn slice(
        &self,
        answer: &Answer<'_>,
        response: &mut ContainerAllocateResponse,
    ) -> Result<(), ResponderError> {
        // One driver stack per node: the responder holds the node's single CUDA major, so a
        // grant spanning two majors cannot be expressed here. When the inventory carries a
        // major per accelerator, the seed's refusal belongs where the seats are built.
        let major = self.cuda_major.ok_or(ResponderError::NoCudaMajor)?;
        let own = |name: &str| answer.container.is_some_and(|c| c.env.contains_key(name));
        let mut set = |name: String, value: String| {
            if !own(&name) {
                response.envs.insert(name, value);
            }
        };
        for (position, seat) in answer.seats.iter().enumerate() {
            let vram = seat
                .memory_mib
                .ok_or(ResponderError::NoVram { index: seat.index })?;
            let mib = mib_for_units(answer.slice_units, vram);
            set(
                format!("CUDA_DEVICE_MEMORY_LIMIT_{position}"),
                format!("{mib}m"),
            );
        }
        set(
            "CUDA_DEVICE_SM_LIMIT".into(),
            answer.cores_percentage.unwrap_or(100).to_string(),
        );
        set("LIBCUDA_LOG_LEVEL".into(), "0".into());
        set("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
        let pod_dir = self.pod_dir_root.join(&answer.pod.uid);
        std::fs::create_dir_all(&pod_dir).map_err(|e| ResponderError::WorkDir {
            path: pod_dir.display().to_string(),
            reason: e.to_string(),
        })?;
        let container = answer.container.map_or("main", |c| c.name.as_str());
        set(
            "CUDA_DEVICE_MEMORY_SHARED_CACHE".into(),
            format!("{CONTAINER_LIBRARY_DIR}/pod/{container}.cache"),
        );
        response.mounts.push(Mount {
            container_path: format!("{CONTAINER_LIBRARY_DIR}/{PRELOAD_LIBRARY}"),
            host_path: Self::library_path(&self.library_dir, major),
            read_only: true,
        });
        response.mounts.push(Mount {
            container_path: "/etc/ld.so.preload".into(),
            host_path: path_text(&self.preload_dir.join("ld.so.preload")),
            read_only: true,
        });
        response.mounts.push(Mount {
            container_path: format!("{CONTAINER_LIBRARY_DIR}/pod"),
            host_path: path_text(&pod_dir),
            read_only: false,
        });
        Ok(())
    }

    /// Writes the `ld.so.preload` file the sliced containers mount (naming the library where
    /// it appears in the container).
    pub fn stage_preload_file(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.preload_dir)?;
        let text = format!("{CONTAINER_LIBRARY_DIR}/{PRELOAD_LIBRARY}\n");
        accel_host::atomic::write_atomic(&self.preload_dir.join("ld.so.preload"), text.as_bytes())
            .map_err(std::io::Error::other)
    }

    /// Reclaims a gone Pod's working directory.
    pub fn reclaim(&self, pod_uid: &str) {
        if pod_uid.is_empty() || pod_uid.contains('/') || pod_uid.contains("..") {
            return;
        }
        let dir = self.pod_dir_root.join(pod_uid);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot reclaim {}: {e}", dir.display()),
        }
    }
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}

/// Folds a container's sliced requests into units per accelerator and a cores percentage, the
/// seed's defaults applied for Pods that skipped the webhook: the percentage wins over MiB,
/// cores default to 100, and no budget at all means the whole accelerator.
pub fn slice_budget(
    container: Option<&Container>,
    resource: &str,
    vram_mib: Option<u64>,
) -> Result<(u64, u32), accel_core::units::UnitsError> {
    use accel_core::units::{MemoryBudget, UNITS_PER_ACCELERATOR, fold};
    let get = |suffix: &str| container.and_then(|c| c.count(&format!("{resource}.{suffix}")));
    let cores = get("cores-percentage").map_or(100, |c| c.min(100) as u32);
    let units = if let Some(p) = get("memory-percentage") {
        fold(MemoryBudget::Percentage(p), vram_mib)?
    } else if let Some(m) = get("memory-mib") {
        // Seed 000: a MiB budget is "floored and capped at the accelerator VRAM" (the webhook
        // refuses one over it; a Pod that skipped the webhook gets the whole VRAM).
        let capped = vram_mib.map_or(m, |vram| m.min(vram));
        fold(MemoryBudget::Mib(capped), vram_mib)?
    } else if let Some(u) = get("units") {
        u.min(UNITS_PER_ACCELERATOR)
    } else {
        UNITS_PER_ACCELERATOR
    };
    Ok((units, cores))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::Phase;
    use accel_core::inventory::Grantable;
    use std::collections::BTreeMap;

    fn seat(index: u32) -> Seat {
        Seat {
            index,
            uuid: Some(format!("GPU-{index}")),
            numa_node: None,
            peers: BTreeMap::new(),
            memory_mib: Some(80_000),
            grantable: Grantable::Whole,
            healthy: true,
            slice_capacity: 128,
        }
    }

    fn pod(env: &[(&str, &str)]) -> (Pod, Container) {
        let container = Container {
            name: "main".into(),
            limits: BTreeMap::new(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        (
            Pod {
                uid: "uid-1".into(),
                namespace: "ns".into(),
                name: "p".into(),
                created: 0,
                phase: Phase::Pending,
                runtime_class: None,
                allocated: None,
                containers: vec![container.clone()],
            },
            container,
        )
    }

    fn responder(dir: &Path, strategy: InjectionStrategy) -> NvidiaResponder {
        NvidiaResponder {
            strategy,
            cuda_major: Some(13),
            pod_dir_root: dir.join("pods"),
            preload_dir: dir.join("preload"),
            library_dir: PathBuf::from(HOST_LIBRARY_DIR),
            engine: EngineFacts::default(),
        }
    }

    #[test]
    fn slice_gets_budgets_in_index_order_and_keeps_the_containers_env() {
        let dir = tempfile::tempdir().unwrap();
        let (pod, container) = pod(&[("CUDA_DEVICE_ORDER", "FASTEST_FIRST")]);
        let (a, b) = (seat(1), seat(4));
        let seats = [&a, &b];
        let r = responder(dir.path(), InjectionStrategy::Envvar)
            .respond(&Answer {
                family: Some(Family::Sliced),
                seats: &seats,
                slice_units: 400_000,
                cores_percentage: Some(30),
                pod: &pod,
                container: Some(&container),
            })
            .unwrap();
        assert_eq!(r.envs["NVIDIA_VISIBLE_DEVICES"], "GPU-1,GPU-4");
        assert_eq!(r.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], "20000m");
        assert_eq!(r.envs["CUDA_DEVICE_MEMORY_LIMIT_1"], "20000m");
        assert_eq!(r.envs["CUDA_DEVICE_SM_LIMIT"], "30");
        assert_eq!(r.envs["LIBCUDA_LOG_LEVEL"], "0");
        assert!(!r.envs.contains_key("CUDA_DEVICE_ORDER"));
        assert_eq!(
            r.mounts[0].host_path,
            "/var/lib/gpustack/operator/lib/cuda-13/libvgpu.so"
        );
        assert_eq!(r.mounts[1].container_path, "/etc/ld.so.preload");
        assert!(dir.path().join("pods/uid-1").is_dir());
    }

    #[test]
    fn a_slice_mounts_the_library_from_the_configured_host_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (pod, container) = pod(&[]);
        let a = seat(0);
        let seats = [&a];
        let responder = NvidiaResponder {
            library_dir: PathBuf::from("/opt/gpustack/staged"),
            ..responder(dir.path(), InjectionStrategy::Envvar)
        };
        let r = responder
            .respond(&Answer {
                family: Some(Family::Sliced),
                seats: &seats,
                slice_units: 400_000,
                cores_percentage: None,
                pod: &pod,
                container: Some(&container),
            })
            .unwrap();
        assert_eq!(
            r.mounts[0].host_path,
            "/opt/gpustack/staged/cuda-13/libvgpu.so"
        );
        assert_eq!(r.mounts[0].container_path, "/usr/local/vgpu/libvgpu.so");
    }

    #[test]
    fn cdi_channel_names_the_vendor_devices() {
        let dir = tempfile::tempdir().unwrap();
        let (pod, _) = pod(&[]);
        let (a, b) = (seat(0), seat(2));
        let seats = [&a, &b];
        let r = responder(dir.path(), InjectionStrategy::CdiAnnotations)
            .respond(&Answer {
                family: Some(Family::Exclusive),
                seats: &seats,
                slice_units: 0,
                cores_percentage: None,
                pod: &pod,
                container: None,
            })
            .unwrap();
        assert_eq!(
            r.annotations[CDI_ANNOTATION],
            "nvidia.com/gpu=GPU-0,nvidia.com/gpu=GPU-2"
        );
        assert!(r.envs.is_empty());
    }

    #[test]
    fn auto_falls_back_in_the_seeds_order() {
        let (mut pod, _) = pod(&[]);
        let uuids = vec!["GPU-0".to_string()];
        let mut engine = EngineFacts {
            readable: true,
            default_runtime_is_vendor: false,
            cdi_enabled: true,
            cdi_devices: BTreeSet::from(["nvidia.com/gpu=GPU-0".to_string()]),
        };
        assert_eq!(
            choose_channel(&pod, &engine, &uuids),
            (Channel::CdiAnnotation, None)
        );
        engine.cdi_devices.clear();
        assert!(
            choose_channel(&pod, &engine, &uuids)
                .1
                .unwrap()
                .contains("do not name")
        );
        engine.cdi_enabled = false;
        assert!(
            choose_channel(&pod, &engine, &uuids)
                .1
                .unwrap()
                .contains("does not resolve")
        );
        engine.default_runtime_is_vendor = true;
        assert!(
            choose_channel(&pod, &engine, &uuids)
                .1
                .unwrap()
                .contains("default runtime")
        );
        engine.readable = false;
        assert!(
            choose_channel(&pod, &engine, &uuids)
                .1
                .unwrap()
                .contains("could not be read")
        );
        pod.runtime_class = Some("nvidia".into());
        assert!(
            choose_channel(&pod, &engine, &uuids)
                .1
                .unwrap()
                .contains("runtimeClassName")
        );
    }

    #[test]
    fn budgets_default_like_the_seed() {
        let mut c = Container::default();
        assert_eq!(
            slice_budget(Some(&c), "nvidia.com/gpu.sliced", Some(80_000)),
            Ok((1_600_000, 100))
        );
        c.limits
            .insert("nvidia.com/gpu.sliced.memory-mib".into(), "20000".into());
        assert_eq!(
            slice_budget(Some(&c), "nvidia.com/gpu.sliced", Some(80_000)),
            Ok((400_000, 100))
        );
        c.limits.insert(
            "nvidia.com/gpu.sliced.memory-percentage".into(),
            "50".into(),
        );
        c.limits
            .insert("nvidia.com/gpu.sliced.cores-percentage".into(), "20".into());
        assert_eq!(
            slice_budget(Some(&c), "nvidia.com/gpu.sliced", Some(80_000)),
            Ok((800_000, 20))
        );
    }

    #[test]
    fn slice_budgets_fold_through_the_one_units_function() {
        use accel_core::units::{UNITS_PER_ACCELERATOR, UnitsError};
        let budget = |key: &str, value: &str, vram: Option<u64>| {
            let c = Container {
                name: "main".into(),
                limits: [(format!("nvidia.com/gpu.sliced.{key}"), value.to_string())].into(),
                env: Default::default(),
            };
            slice_budget(Some(&c), "nvidia.com/gpu.sliced", vram).map(|(units, _)| units)
        };
        assert_eq!(budget("memory-percentage", "25", None), Ok(400_000));
        assert_eq!(
            budget("memory-percentage", "101", Some(10)),
            Err(UnitsError::Percentage(101))
        );
        // 20,000 MiB of an 81,559 MiB H100: floor(20000 × 1.6M / 81559) = 392,354.
        assert_eq!(budget("memory-mib", "20000", Some(81_559)), Ok(392_354));
        // Over the VRAM (a Pod that skipped the webhook): capped at the whole accelerator.
        assert_eq!(
            budget("memory-mib", "999999", Some(81_559)),
            Ok(UNITS_PER_ACCELERATOR)
        );
        assert_eq!(
            budget("memory-mib", "1", None),
            Err(UnitsError::VramUnknown)
        );
        assert_eq!(budget("memory-mib", "0", Some(10)), Err(UnitsError::Empty));
    }
}
