//! Responding: what one grant injects into its container, per family. The backend's
//! [`Responder`] answers with plain data ([`Injection`]) that the plugin turns into the kubelet's
//! `ContainerAllocateResponse`; it decides no grant (the ledger has already decided) and never
//! sees the ledger. It may keep per-Pod state on the host (a working directory) and is told when
//! a Pod is gone ([`Responder::reclaim`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use accel_core::inventory::Accelerator;
use accel_host::{Commands, Host, HostWrites};

use accel_core::ledger::{Family, Seat};

use crate::pod::{Container, Pod};

/// How grants reach the container, where the manufacturer offers a choice
/// (`GPUSTACK_<MANUFACTURER>_DEVICE_INJECTION_STRATEGY`; seed 000, "Exclusive and shared").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InjectionStrategy {
    /// The visibility variable (`NVIDIA_VISIBLE_DEVICES`), applied by the vendor runtime.
    #[default]
    Envvar,
    /// The `cdi.k8s.io/gpustack-<manufacturer>` annotation, resolved by the container engine.
    CdiAnnotations,
    /// CDI when the engine and the specs can carry it, else `envvar`.
    Auto,
}

/// Which channel carries a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    Envvar,
    CdiAnnotation,
}

/// The container engine's facts `auto` reads (seed 000's five fall-backs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineFacts {
    /// The engine's configuration was read.
    pub readable: bool,
    /// Its default runtime handler is the manufacturer's own.
    pub default_runtime_is_vendor: bool,
    /// It resolves CDI requests.
    pub cdi_enabled: bool,
    /// The CDI device names the loaded specs carry (`nvidia.com/gpu=GPU-…`).
    pub cdi_devices: BTreeSet<String>,
}

/// Where a responder reads the engine's facts from when it answers: [`EngineFacts`] itself
/// (read once, fixed), or a backend's source that reads them again when the files they came
/// from change (NVIDIA's `LiveEngine`): `auto` decides per container, on the node as it is.
pub trait EngineSource: Send + Sync + fmt::Debug {
    /// The facts as they stand now.
    fn current(&self) -> Arc<EngineFacts>;
}

impl EngineSource for EngineFacts {
    fn current(&self) -> Arc<EngineFacts> {
        Arc::new(self.clone())
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
    /// A partition grant's instance (its GPU and compute instance ids and its device UUID,
    /// `MIG-…`), or the owner's for the visibility sidecar of a partition owner: the partition
    /// is injected, never its parent accelerator.
    pub partition: Option<&'a accel_core::ledger::partitions::PartitionInstance>,
    pub pod: &'a Pod,
    pub container: Option<&'a Container>,
}

/// A bind mount into the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub container_path: String,
    pub host_path: String,
    pub read_only: bool,
}

/// A device node handed to the container (cgroup permissions `rw` or `rwm`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    pub container_path: String,
    pub host_path: String,
    pub permissions: String,
}

/// What a grant injects: the answer for one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Injection {
    pub envs: BTreeMap<String, String>,
    pub mounts: Vec<Mount>,
    pub devices: Vec<DeviceNode>,
    pub annotations: BTreeMap<String, String>,
    /// Fully qualified CDI device names for the typed CDI field (unused by NVIDIA, which names
    /// its devices in an annotation; DESIGN.md, "CDI").
    pub cdi_devices: Vec<String>,
}

/// Why the responder refused a grant (the ledger entry is then given back).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponderError {
    #[error("accelerator {index} has no UUID to name it by")]
    NoUuid { index: u32 },
    #[error("slicing needs the node's {runtime} major version, which the driver did not report")]
    NoRuntimeMajor { runtime: &'static str },
    #[error("accelerator {index} reports no VRAM; a slice's memory limit cannot be set")]
    NoVram { index: u32 },
    #[error("cannot create the Pod working directory {path}: {reason}")]
    WorkDir { path: String, reason: String },
    /// The manufacturer's own refusal, in its words (AMD: a device node the host lacks).
    #[error("{0}")]
    Refused(String),
}

/// What the responder could not prepare on the host before serving slices.
#[derive(Debug, thiserror::Error)]
#[error("cannot stage the preload file in {path}: {source}")]
pub struct PrepareError {
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

/// What a responder is built from once the node's first detection is known.
#[derive(Clone)]
pub struct ResponderSetup {
    pub strategy: InjectionStrategy,
    /// The node's runtime major (one driver stack per node), when reported.
    pub runtime_major: Option<u32>,
    /// The host directory per-Pod working directories are made in (a hostPath).
    pub pod_dir_root: PathBuf,
    /// Where files the sliced containers mount are kept (a hostPath).
    pub preload_dir: PathBuf,
    /// The host directory the preload libraries are staged in.
    pub library_dir: PathBuf,
    pub engine: Arc<dyn EngineSource>,
    /// The manufacturer's accelerators as first detected (AMD reads each one's DRM minors and
    /// compute topology from here).
    pub accelerators: Vec<Accelerator>,
    /// The host the grant's device nodes must exist on, for a responder that injects nodes
    /// itself; `None`: not checked.
    pub host: Option<Arc<dyn Host>>,
    /// The node's programs, for a responder that sets a driver flag before it answers (Ascend's
    /// container-share flag through `npu-smi`); `None`: it may run none.
    pub commands: Option<Arc<dyn Commands>>,
    /// The manufacturer's RuntimeClass in force (`…_ACCELERATABLE_RUNTIME_NAME`), for a
    /// responder whose grants work only under it (Iluvatar's slices); `None`: none configured.
    pub runtime_class: Option<String>,
    /// Preflight's redirect: where a responder makes the host directories it would otherwise
    /// make at a fixed host path (Iluvatar's `/tmp/vgpulock`); what it injects still names the
    /// real path. `None`: the daemon, making them where they belong.
    pub scratch: Option<PathBuf>,
    /// The node's control-file writes, for a responder that makes driver objects through sysfs
    /// (MetaX's sGPU subdevices); `None`: it may write none (it refuses what would need one).
    pub writes: Option<Arc<dyn HostWrites>>,
}

impl fmt::Debug for ResponderSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponderSetup")
            .field("strategy", &self.strategy)
            .field("runtime_major", &self.runtime_major)
            .field("pod_dir_root", &self.pod_dir_root)
            .field("preload_dir", &self.preload_dir)
            .field("library_dir", &self.library_dir)
            .field("engine", &self.engine)
            .field("accelerators", &self.accelerators.len())
            .field("host", &self.host.as_ref().map(|h| h.root().to_path_buf()))
            .field("commands", &self.commands.is_some())
            .field("runtime_class", &self.runtime_class)
            .field("scratch", &self.scratch)
            .finish()
    }
}

/// One manufacturer's answer to grants.
pub trait Responder: Send + Sync + fmt::Debug {
    /// The injection for one container.
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError>;
    /// Whether a non-sliced grant's answer is the same whichever container asks (so it may be
    /// given before the container is known); false when it reads the Pod (NVIDIA's `auto`
    /// reads its runtime class).
    fn answers_alike(&self) -> bool;
    /// Prepares on the host what sliced containers mount, before the first slice is served.
    fn prepare_slicing(&self) -> Result<(), PrepareError>;
    /// Takes back a gone Pod's per-Pod state.
    fn reclaim(&self, pod_uid: &str);
    /// Whether a sliced grant stays charged until its Pod object is gone, even after the Pod
    /// finished (MetaX: the reclaimer destroys the slice's driver object only then; spec
    /// metax §4.5); `false`: the ledger's own rule.
    fn holds_slices_until_pod_gone(&self) -> bool {
        false
    }
    /// How often [`Responder::reclaim_pass`] runs besides after every Pod reconcile; `None`:
    /// the responder has no reclaim pass.
    fn reclaim_interval(&self) -> Option<std::time::Duration> {
        None
    }
    /// One pass over the node's driver objects given the UIDs of the Pods that exist (MetaX's
    /// sGPU reclaimer). Never called while the ledger is locked.
    fn reclaim_pass(&self, live: &BTreeSet<String>) {
        let _ = live;
    }
}

/// What a responder keeps of each accelerator of its first detection (`C`: the facts it needs
/// to answer, its nodes' numbers say), found again for a seat of the ledger.
#[derive(Debug, Clone)]
pub struct DetectedCards<C> {
    by_index: BTreeMap<u32, (Option<String>, C)>,
}

impl<C> DetectedCards<C> {
    /// Keeps `keep(a)` of every accelerator, by index, with its UUID.
    pub fn of(accelerators: &[Accelerator], keep: impl Fn(&Accelerator) -> C) -> Self {
        DetectedCards {
            by_index: accelerators
                .iter()
                .map(|a| (a.index, (a.uuid.clone(), keep(a))))
                .collect(),
        }
    }

    /// The card a seat names: the one at the seat's index when their UUIDs agree, else the one
    /// with the seat's UUID (the ledger's index is from a later detection); refused when the
    /// detection this responder serves has neither.
    pub fn card(&self, seat: &Seat) -> Result<&C, ResponderError> {
        self.by_index
            .get(&seat.index)
            .filter(|(uuid, _)| *uuid == seat.uuid)
            .or_else(|| {
                self.by_index
                    .values()
                    .find(|(uuid, _)| uuid.is_some() && *uuid == seat.uuid)
            })
            .map(|(_, card)| card)
            .ok_or_else(|| {
                ResponderError::Refused(format!(
                    "card at index {} is not in the detection this responder serves",
                    seat.index
                ))
            })
    }
}

#[cfg(test)]
mod detected_cards_tests {
    use super::*;
    use accel_core::inventory::Source;

    fn accelerator(index: u32, uuid: Option<&str>) -> Accelerator {
        let mut a = Accelerator::new(index, Source::Driver);
        a.uuid = uuid.map(str::to_string);
        a
    }

    #[test]
    fn a_seat_finds_its_card_by_index_then_by_uuid() {
        let cards = DetectedCards::of(
            &[
                accelerator(0, Some("MLU-a")),
                accelerator(1, Some("MLU-b")),
                accelerator(2, None),
            ],
            |a| a.index * 10,
        );
        let seat = |index, uuid: Option<&str>| {
            let mut s = Seat::from_accelerator(&accelerator(index, uuid), 0);
            s.uuid = uuid.map(str::to_string);
            s
        };
        assert_eq!(cards.card(&seat(1, Some("MLU-b"))).ok(), Some(&10));
        // A later detection renumbered the cards: the UUID finds it.
        assert_eq!(cards.card(&seat(0, Some("MLU-b"))).ok(), Some(&10));
        // No UUID on either side: the index alone.
        assert_eq!(cards.card(&seat(2, None)).ok(), Some(&20));
        let refused = cards.card(&seat(5, Some("MLU-z"))).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "card at index 5 is not in the detection this responder serves"
        );
        // An unnamed seat is never matched to a named card by a UUID it lacks.
        assert!(cards.card(&seat(7, None)).is_err());
    }
}
