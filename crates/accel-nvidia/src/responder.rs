//! The NVIDIA responder: what a container granted accelerators gets injected.
//!
//! Exclusive, shared and visibility grants get the visibility injection of the chosen channel:
//! `NVIDIA_VISIBLE_DEVICES=<uuids>` (`envvar`) or the `cdi.k8s.io/gpustack-nvidia` annotation
//! naming the vendor's CDI devices (`cdi-annotations`); `auto` picks per container with the
//! seed's five fall-backs. A slice also gets HAMi-core's budgets, the preload library for the
//! node's CUDA major with an `/etc/ld.so.preload` naming it, a per-Pod working directory, and the
//! quiet/ordering variables unless the container's own `env:` sets them. Positional keys follow
//! ascending accelerator index. This module decides no grant; it only answers for one, behind
//! accel-backend's [`Responder`] (the plugin turns the [`Injection`] into the kubelet's answer).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use accel_backend::chores::{self, PodDirs, PodEnv};
use accel_backend::pod::Pod;
pub use accel_backend::respond::{
    Answer, Channel, EngineFacts, EngineSource, Injection, InjectionStrategy, Mount, ResponderError,
};
use accel_backend::respond::{PrepareError, Responder, ResponderSetup};
use accel_core::ledger::Family;
use accel_core::ledger::units::mib_for_units;

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
    /// The engine's facts `auto` reads, as they stand when a container is answered.
    pub engine: Arc<dyn EngineSource>,
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
    pub fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        // A partition (or a partition owner's sidecar) sees its MIG instance and nothing else,
        // always through the environment: no vendor CDI spec names an instance made at
        // Allocate, and no preload or slicing variable applies.
        if let Some(instance) = answer.partition {
            let mut response = Injection::default();
            response
                .envs
                .insert("NVIDIA_VISIBLE_DEVICES".into(), instance.uuid.clone());
            return Ok(response);
        }
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
                let engine = self.engine.current();
                let (channel, reason) = choose_channel(answer.pod, &engine, &uuids);
                if let Some(reason) = reason {
                    tracing::info!(
                        pod = %format!("{}/{}", answer.pod.namespace, answer.pod.name),
                        "nvidia injection falls back to envvar: {reason}"
                    );
                }
                channel
            }
        };
        // Which channel each grant took: an operator asking why a container sees no GPU
        // starts here.
        tracing::info!(
            pod = %format!("{}/{}", answer.pod.namespace, answer.pod.name),
            container = answer.container.map_or("", |c| c.name.as_str()),
            gpus = %uuids.join(","),
            channel = match channel {
                Channel::Envvar => "envvar",
                Channel::CdiAnnotation => "cdi-annotation",
            },
            "nvidia injection"
        );
        let mut response = Injection::default();
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

    fn slice(&self, answer: &Answer<'_>, response: &mut Injection) -> Result<(), ResponderError> {
        // One driver stack per node: the responder holds the node's single CUDA major, so a
        // grant spanning two majors cannot be expressed here. When the inventory carries a
        // major per accelerator, the seed's refusal belongs where the seats are built.
        let major = self
            .cuda_major
            .ok_or(ResponderError::NoRuntimeMajor { runtime: "CUDA" })?;
        let mut env = PodEnv::new(&mut response.envs, answer.container);
        for (position, seat) in answer.seats.iter().enumerate() {
            let vram = seat
                .memory_mib
                .ok_or(ResponderError::NoVram { index: seat.index })?;
            let mib = mib_for_units(answer.slice_units, vram);
            env.set(
                format!("CUDA_DEVICE_MEMORY_LIMIT_{position}"),
                format!("{mib}m"),
            );
        }
        env.set(
            "CUDA_DEVICE_SM_LIMIT",
            answer.cores_percentage.unwrap_or(100).to_string(),
        );
        env.set("LIBCUDA_LOG_LEVEL", "0");
        env.set("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        let pod_dir = PodDirs::new(&self.pod_dir_root).make_pod(&answer.pod.uid)?;
        let container = answer.container.map_or("main", |c| c.name.as_str());
        env.set(
            "CUDA_DEVICE_MEMORY_SHARED_CACHE",
            format!("{CONTAINER_LIBRARY_DIR}/pod/{container}.cache"),
        );
        response.mounts.push(Mount {
            container_path: format!("{CONTAINER_LIBRARY_DIR}/{PRELOAD_LIBRARY}"),
            host_path: Self::library_path(&self.library_dir, major),
            read_only: true,
        });
        response
            .mounts
            .push(chores::preload_mount(&self.preload_dir));
        response.mounts.push(Mount {
            container_path: format!("{CONTAINER_LIBRARY_DIR}/pod"),
            host_path: path_text(&pod_dir),
            read_only: false,
        });
        Ok(())
    }

    /// Writes the `ld.so.preload` file the sliced containers mount (naming the library where
    /// it appears in the container).
    pub fn stage_preload_file(&self) -> Result<(), PrepareError> {
        chores::stage_preload_file(
            &self.preload_dir,
            &format!("{CONTAINER_LIBRARY_DIR}/{PRELOAD_LIBRARY}"),
        )
    }

    /// Reclaims a gone Pod's working directory.
    pub fn reclaim(&self, pod_uid: &str) {
        PodDirs::new(&self.pod_dir_root).reclaim(pod_uid);
    }
}

impl NvidiaResponder {
    /// The responder of a node whose first detection is known.
    pub fn from_setup(setup: ResponderSetup) -> NvidiaResponder {
        NvidiaResponder {
            strategy: setup.strategy,
            cuda_major: setup.runtime_major,
            pod_dir_root: setup.pod_dir_root,
            preload_dir: setup.preload_dir,
            library_dir: setup.library_dir,
            engine: setup.engine,
        }
    }
}

impl Responder for NvidiaResponder {
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        NvidiaResponder::respond(self, answer)
    }

    fn answers_alike(&self) -> bool {
        // `auto` reads the Pod's runtime class; the other strategies answer every container alike.
        self.strategy != InjectionStrategy::Auto
    }

    fn prepare_slicing(&self) -> Result<(), PrepareError> {
        self.stage_preload_file()
    }

    fn reclaim(&self, pod_uid: &str) {
        NvidiaResponder::reclaim(self, pod_uid);
    }
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_backend::pod::{Container, Phase};
    use accel_core::inventory::Grantable;
    use accel_core::ledger::Seat;
    use std::collections::{BTreeMap, BTreeSet};

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
            partitions: Vec::new(),
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
            engine: Arc::new(EngineFacts::default()),
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
                partition: None,
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
                partition: None,
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
                partition: None,
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
}
