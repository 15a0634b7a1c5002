//! The T-Head responder: PPUs are injected by device nodes alone (no vendor runtime hook, no
//! visibility variable; spec/thead.md §3–§5).
//!
//! Every answer (exclusive, shared, sliced, the visibility sidecar) carries `/dev/alixpu` and
//! `/dev/alixpu_ctl` once, each required to be a character device, then each granted card's
//! `/dev/alixpu_ppu<ordinal>`, proven to carry the kernel minor the detection recorded before it
//! is named ([`crate::devnode::prove_card`]); any refusal names the card and the node. No env
//! and no mounts, except for a slice, which adds, in ascending card-ordinal order (the SDK
//! renumbers the injected cards by ascending ordinal, so the positional limits must follow it):
//! `HGGC_DEVICE_SM_LIMIT` (always, even at 100: the shim refuses a card whose figure is missing),
//! `HGGC_DEVICE_MEMORY_LIMIT_<position>` in bare MiB, `HGGC_LEDGER_PATH`, `LIBHGGC_LOG_LEVEL=1`
//! unless the container's own `env:` sets it; the shim pair, `ppu-monitor` and the
//! `ld.so.preload` naming the pair, all read-only from the flat `<library-dir>/thead`; and a
//! per-container read-write ledger directory (`<pod-dir>/<pod>/c-<container>/run/vppu`, mode
//! 0777) at `/var/run/vppu` — per container because the region is indexed by container-local
//! card index.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use accel_backend::chores::{self, PodDirs, PodEnv, WRITABLE_BY_ANY_USER};
use accel_backend::respond::{
    Answer, DeviceNode, Injection, Mount, PrepareError, Responder, ResponderError, ResponderSetup,
};
use accel_core::inventory::Accelerator;
use accel_core::ledger::partitions::PartitionInstance;
use accel_core::ledger::units::mib_for_units;
use accel_core::ledger::{Family, Seat};
use accel_host::Host;

use crate::devnode::{self, NodeError};

/// The shims' directory under the library directory (flat: no runtime-version subdirectory).
pub const LIBRARY_SUBDIR: &str = "thead";
/// The enforcement shim.
pub const QUOTA_SHIM: &str = "hggc_quota.so";
/// The visibility shim (interposes `dlsym`).
pub const HOOK_SHIM: &str = "hgml_dlsym_hook.so";
/// The ledger reader mounted beside the shims.
pub const MONITOR: &str = "ppu-monitor";
/// The files a sliced container mounts from `<library-dir>/thead` besides `ld.so.preload`, in
/// mount order.
pub const STAGED: [&str; 3] = [HOOK_SHIM, QUOTA_SHIM, MONITOR];
/// Where the shims and the reader appear in a sliced container.
pub const CONTAINER_DIR: &str = "/usr/local/vppu";
/// The per-container ledger directory in the container.
pub const CONTAINER_RUN_DIR: &str = "/var/run/vppu";
/// `HGGC_LEDGER_PATH`'s value.
pub const LEDGER_PATH: &str = "/var/run/vppu/ledger";
/// The `ld.so.preload` the image stages in `<library-dir>/thead` (PRELOAD, verbatim; the order
/// is inert, only the hook defines `dlsym`).
pub const PRELOAD_TEXT: &str =
    "/usr/local/vppu/hgml_dlsym_hook.so\n/usr/local/vppu/hggc_quota.so\n";

/// The driver's capability tree: `ppu<N>/mig/gi<G>/access` and `…/gi<G>/ci<C>/access`.
pub const CAPABILITIES: &str = "/proc/driver/alixpu/capabilities";
/// The capability nodes' prefix (`/dev/alixpu-caps/alixpu-cap<minor>`).
pub const CAPABILITY_NODE_PREFIX: &str = "/dev/alixpu-caps/alixpu-cap";

/// One card's facts the responder needs, from the detection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Card {
    uuid: Option<String>,
    minor: Option<u32>,
    vram_mib: Option<u64>,
}

impl Card {
    fn of(a: &Accelerator) -> Card {
        Card {
            uuid: a.uuid.clone(),
            minor: a.minor_number,
            vram_mib: a.memory_mib,
        }
    }
}

/// The T-Head responder of one node.
pub struct TheadResponder {
    /// By ordinal.
    cards: BTreeMap<u32, Card>,
    /// The host the nodes are proven on (`None`: a preflight's simulation, not checked).
    host: Option<Arc<dyn Host>>,
    dirs: PodDirs,
    library_dir: PathBuf,
}

impl std::fmt::Debug for TheadResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TheadResponder")
            .field("cards", &self.cards)
            .field("library_dir", &self.library_dir)
            .finish_non_exhaustive()
    }
}

fn refused(e: NodeError) -> ResponderError {
    ResponderError::Refused(e.to_string())
}

impl TheadResponder {
    /// The responder for a node's first detection.
    pub fn from_setup(setup: ResponderSetup) -> TheadResponder {
        TheadResponder {
            cards: setup
                .accelerators
                .iter()
                .map(|a| (a.index, Card::of(a)))
                .collect(),
            host: setup.host,
            dirs: PodDirs::new(setup.pod_dir_root),
            library_dir: setup.library_dir,
        }
    }

    /// The host directory the shims, the reader and `ld.so.preload` are staged in.
    pub fn shim_dir(library_dir: &Path) -> PathBuf {
        library_dir.join(LIBRARY_SUBDIR)
    }

    /// The card of a seat: its ordinal's record, which must name the seat's UUID.
    fn card(&self, seat: &Seat) -> Result<(&Card, String), ResponderError> {
        let name = seat
            .uuid
            .clone()
            .unwrap_or_else(|| format!("at ordinal {}", seat.index));
        match self.cards.get(&seat.index) {
            Some(card) if card.uuid.is_some() && card.uuid == seat.uuid => Ok((card, name)),
            _ => Err(refused(NodeError::Absent { card: name })),
        }
    }

    /// The device set of a grant: the control nodes, then each card's proven node.
    fn nodes<'s>(
        &self,
        seats: &[&'s Seat],
    ) -> Result<Vec<(String, &Card, &'s Seat)>, ResponderError> {
        if let Some(host) = &self.host {
            devnode::require(host.as_ref(), devnode::CONTROL).map_err(refused)?;
            devnode::require(host.as_ref(), devnode::CONTROL_CTL).map_err(refused)?;
        }
        let mut granted = Vec::with_capacity(seats.len());
        for seat in seats {
            let (card, name) = self.card(seat)?;
            let path = match &self.host {
                Some(host) => devnode::prove_card(host.as_ref(), &name, seat.index, card.minor)
                    .map_err(refused)?,
                None => devnode::card_node(seat.index),
            };
            granted.push((path, card, *seat));
        }
        Ok(granted)
    }

    /// The answer for one container.
    pub fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        let container = answer.container.map_or("main", |c| c.name.as_str());
        if answer.seats.is_empty() {
            let what = if answer.family == Some(Family::Sliced) {
                "sliced container"
            } else {
                "container"
            };
            return Err(ResponderError::Refused(format!(
                "no allocated accelerator found for {what} {container:?}"
            )));
        }
        let mut seats: Vec<&Seat> = answer.seats.to_vec();
        seats.sort_by_key(|s| s.index);
        if answer.family == Some(Family::Partitioned) || answer.partition.is_some() {
            let Some(instance) = answer.partition else {
                return Err(ResponderError::Refused(format!(
                    "container {container:?}: a partition grant names no instance: fail closed"
                )));
            };
            let [seat] = seats.as_slice() else {
                return Err(ResponderError::Refused(format!(
                    "container {container:?} was granted {} accelerators, but a T-Head partition is served by one",
                    seats.len()
                )));
            };
            return self.partition(seat, instance);
        }
        let granted = self.nodes(&seats)?;
        let mut response = Injection::default();
        for path in [devnode::CONTROL, devnode::CONTROL_CTL] {
            response.devices.push(node(path));
        }
        for (path, _, _) in &granted {
            response.devices.push(node(path));
        }
        if answer.family == Some(Family::Sliced) {
            self.slice(answer, &granted, container, &mut response)?;
        }
        Ok(response)
    }

    /// A partition (or its owner's sidecar): the control nodes, the card's proven node, then
    /// the GPU instance's and the compute instance's capability nodes, their minors read now
    /// from the driver's capability tree (spec §6.3; the nodes outlive their instances, so they
    /// are never read as state) and each node proven to carry its minor. No env, no mounts.
    fn partition(
        &self,
        seat: &Seat,
        instance: &PartitionInstance,
    ) -> Result<Injection, ResponderError> {
        let granted = self.nodes(&[seat])?;
        let mut response = Injection::default();
        for path in [devnode::CONTROL, devnode::CONTROL_CTL] {
            response.devices.push(node(path));
        }
        for (path, _, _) in &granted {
            response.devices.push(node(path));
        }
        let gi_dir = format!(
            "{CAPABILITIES}/ppu{}/mig/gi{}",
            seat.index, instance.gpu_instance
        );
        let ci_dir = format!("{gi_dir}/ci{}", instance.compute_instance);
        for dir in [gi_dir, ci_dir] {
            response
                .devices
                .push(node(&self.capability_node(&format!("{dir}/access"))?));
        }
        Ok(response)
    }

    /// The capability node an `access` file names (`DeviceFileMinor: <n>` →
    /// `/dev/alixpu-caps/alixpu-cap<n>`), proven to carry that minor.
    fn capability_node(&self, access: &str) -> Result<String, ResponderError> {
        let Some(host) = &self.host else {
            return Err(ResponderError::Refused(format!(
                "read capability file: {access}: no host to read it on"
            )));
        };
        let text = host
            .read_to_string(access)
            .map_err(|e| ResponderError::Refused(format!("read capability file: {e}")))?;
        let minor = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("DeviceFileMinor:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
            .ok_or_else(|| {
                ResponderError::Refused(format!(
                    "capability file {access:?} carries no DeviceFileMinor: field"
                ))
            })?;
        let path = format!("{CAPABILITY_NODE_PREFIX}{minor}");
        let found = devnode::minor(host.as_ref(), &path).map_err(refused)?;
        if found != minor {
            return Err(ResponderError::Refused(format!(
                "capability node {path:?} carries minor {found}, want {minor}: fail closed"
            )));
        }
        Ok(path)
    }

    fn slice(
        &self,
        answer: &Answer<'_>,
        granted: &[(String, &Card, &Seat)],
        container: &str,
        response: &mut Injection,
    ) -> Result<(), ResponderError> {
        let lib = Self::shim_dir(&self.library_dir);
        let staged: Vec<String> = std::iter::once(chores::PRELOAD_FILE)
            .chain(STAGED)
            .map(|f| lib.join(f).display().to_string())
            .collect();
        if let Some(host) = &self.host
            && let Some(missing) = staged.iter().find(|p| !host.exists(p))
        {
            return Err(ResponderError::Refused(format!(
                "the slicing file {missing:?} is not staged on the host, so no slice can be served"
            )));
        }
        let percent = answer.cores_percentage.unwrap_or(100);
        response
            .envs
            .insert("HGGC_DEVICE_SM_LIMIT".into(), percent.to_string());
        for (position, (_, card, seat)) in granted.iter().enumerate() {
            let vram = card
                .vram_mib
                .or(seat.memory_mib)
                .ok_or(ResponderError::NoVram { index: seat.index })?;
            response.envs.insert(
                format!("HGGC_DEVICE_MEMORY_LIMIT_{position}"),
                mib_for_units(answer.slice_units, vram).to_string(),
            );
        }
        response
            .envs
            .insert("HGGC_LEDGER_PATH".into(), LEDGER_PATH.into());
        PodEnv::new(&mut response.envs, answer.container).set("LIBHGGC_LOG_LEVEL", "1");
        let ledger_dir = self
            .dirs
            .container(&answer.pod.uid, container)?
            .join("run")
            .join("vppu");
        chores::make_dir(&ledger_dir, Some(WRITABLE_BY_ANY_USER))?;
        response.mounts.push(Mount {
            container_path: chores::CONTAINER_PRELOAD.into(),
            host_path: lib.join(chores::PRELOAD_FILE).display().to_string(),
            read_only: true,
        });
        for file in STAGED {
            response.mounts.push(Mount {
                container_path: format!("{CONTAINER_DIR}/{file}"),
                host_path: lib.join(file).display().to_string(),
                read_only: true,
            });
        }
        response.mounts.push(Mount {
            container_path: CONTAINER_RUN_DIR.into(),
            host_path: ledger_dir.display().to_string(),
            read_only: false,
        });
        Ok(())
    }

    /// Takes back a gone Pod's working directory (its ledger directories).
    pub fn reclaim(&self, pod_uid: &str) {
        if chores::is_component(pod_uid) {
            self.dirs.reclaim(pod_uid);
        }
    }
}

fn node(path: &str) -> DeviceNode {
    DeviceNode {
        container_path: path.into(),
        host_path: path.into(),
        permissions: "rw".into(),
    }
}

impl Responder for TheadResponder {
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        TheadResponder::respond(self, answer)
    }

    fn answers_alike(&self) -> bool {
        // Non-sliced answers name the grant's nodes only, whichever container asks.
        true
    }

    /// Nothing to write: the image's init container stages `<library-dir>/thead` whole,
    /// `ld.so.preload` included (a slice is refused naming any file that is missing).
    fn prepare_slicing(&self) -> Result<(), PrepareError> {
        Ok(())
    }

    fn reclaim(&self, pod_uid: &str) {
        TheadResponder::reclaim(self, pod_uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_backend::pod::{Container, Phase, Pod};
    use accel_backend::respond::EngineFacts;
    use accel_core::inventory::Source;

    fn card(index: u32, minor: u32, vram: u64) -> Accelerator {
        let mut a = Accelerator::new(index, Source::Driver);
        a.uuid = Some(format!("GPU-{index}"));
        a.minor_number = Some(minor);
        a.memory_mib = Some(vram);
        a
    }

    #[test]
    fn a_two_card_slice_numbers_its_limits_in_ascending_ordinal_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        let lib = root.join("var/lib/gpustack/operator/lib/thead");
        std::fs::create_dir_all(&lib).unwrap();
        for f in std::iter::once(chores::PRELOAD_FILE).chain(STAGED) {
            std::fs::write(lib.join(f), "").unwrap();
        }
        std::fs::create_dir_all(root.join("dev")).unwrap();
        for (name, number) in [
            ("alixpu", "c 509:0"),
            ("alixpu_ctl", "c 508:0"),
            ("alixpu_ppu2", "c 509:3"),
            ("alixpu_ppu5", "c 509:6"),
        ] {
            std::fs::write(root.join("dev").join(name), number).unwrap();
        }
        let accelerators = vec![card(2, 3, 98_304), card(5, 6, 49_152)];
        let seats: Vec<Seat> = accelerators
            .iter()
            .map(|a| Seat::from_accelerator(a, 128))
            .collect();
        let responder = TheadResponder::from_setup(ResponderSetup {
            scratch: None,
            strategy: accel_backend::InjectionStrategy::Envvar,
            runtime_major: Some(0),
            pod_dir_root: dir.path().join("pods"),
            preload_dir: dir.path().join("preload"),
            library_dir: "/var/lib/gpustack/operator/lib".into(),
            engine: Arc::new(EngineFacts::default()),
            accelerators,
            host: Some(Arc::new(accel_host::FsHost::new(&root))),
            commands: None,
            runtime_class: None,
            writes: None,
        });
        let container = Container {
            name: "main".into(),
            ..Container::default()
        };
        let pod = Pod {
            uid: "p".into(),
            namespace: "ns".into(),
            name: "p".into(),
            created: 0,
            phase: Phase::Pending,
            runtime_class: None,
            containers: vec![container.clone()],
            allocated: None,
        };
        // Handed out of order: the answer follows the ordinals, not the hand-over.
        let given = [&seats[1], &seats[0]];
        let injection = responder
            .respond(&Answer {
                family: Some(Family::Sliced),
                seats: &given,
                slice_units: 800_000,
                cores_percentage: Some(40),
                partition: None,
                pod: &pod,
                container: Some(&container),
            })
            .unwrap();
        assert_eq!(injection.envs["HGGC_DEVICE_MEMORY_LIMIT_0"], "49152");
        assert_eq!(injection.envs["HGGC_DEVICE_MEMORY_LIMIT_1"], "24576");
        assert_eq!(injection.envs["HGGC_DEVICE_SM_LIMIT"], "40");
        let nodes: Vec<&str> = injection
            .devices
            .iter()
            .map(|d| d.host_path.as_str())
            .collect();
        assert_eq!(
            nodes,
            [
                "/dev/alixpu",
                "/dev/alixpu_ctl",
                "/dev/alixpu_ppu2",
                "/dev/alixpu_ppu5"
            ]
        );
        assert!(dir.path().join("pods/p/c-main/run/vppu").is_dir());
        responder.reclaim("p");
        assert!(!dir.path().join("pods/p").exists());
    }

    #[test]
    fn a_partition_gets_its_card_and_the_two_capability_nodes_the_driver_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        let write = |path: &str, text: &str| {
            let full = root.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        };
        write("dev/alixpu", "c 509:0");
        write("dev/alixpu_ctl", "c 508:0");
        write("dev/alixpu_ppu3", "c 509:4");
        let caps = "proc/driver/alixpu/capabilities/ppu3/mig/gi1";
        write(
            &format!("{caps}/access"),
            "DeviceFileMinor: 229632\nDeviceFileMode: 292\n",
        );
        write(&format!("{caps}/ci0/access"), "DeviceFileMinor: 229633\n");
        write("dev/alixpu-caps/alixpu-cap229632", "c 237:229632");
        write("dev/alixpu-caps/alixpu-cap229633", "c 237:229633");
        let accelerators = vec![card(3, 4, 98_304)];
        let seat = Seat::from_accelerator(&accelerators[0], 128);
        let responder = TheadResponder::from_setup(ResponderSetup {
            scratch: None,
            strategy: accel_backend::InjectionStrategy::Envvar,
            runtime_major: Some(0),
            pod_dir_root: dir.path().join("pods"),
            preload_dir: dir.path().join("preload"),
            library_dir: "/var/lib/gpustack/operator/lib".into(),
            engine: Arc::new(EngineFacts::default()),
            accelerators,
            host: Some(Arc::new(accel_host::FsHost::new(&root))),
            commands: None,
            runtime_class: None,
            writes: None,
        });
        let pod = Pod {
            uid: "p".into(),
            namespace: "ns".into(),
            name: "p".into(),
            created: 0,
            phase: Phase::Pending,
            runtime_class: None,
            containers: vec![],
            allocated: None,
        };
        let mut instance = PartitionInstance {
            gpu_instance: 1,
            compute_instance: 0,
            uuid: "MIG-79c62632-04cc-574b-af7b-cb2e307121c85".into(),
        };
        let seats = [&seat];
        fn answer<'a>(
            seats: &'a [&'a Seat],
            pod: &'a Pod,
            instance: &'a PartitionInstance,
        ) -> Answer<'a> {
            Answer {
                family: Some(Family::Partitioned),
                seats,
                slice_units: 0,
                cores_percentage: None,
                partition: Some(instance),
                pod,
                container: None,
            }
        }
        let injection = responder.respond(&answer(&seats, &pod, &instance)).unwrap();
        let nodes: Vec<&str> = injection
            .devices
            .iter()
            .map(|d| d.host_path.as_str())
            .collect();
        assert_eq!(
            nodes,
            [
                "/dev/alixpu",
                "/dev/alixpu_ctl",
                "/dev/alixpu_ppu3",
                "/dev/alixpu-caps/alixpu-cap229632",
                "/dev/alixpu-caps/alixpu-cap229633"
            ]
        );
        assert!(injection.envs.is_empty() && injection.mounts.is_empty());
        // The sidecar of the owner sees the same set.
        let sidecar = Answer {
            family: None,
            ..answer(&seats, &pod, &instance)
        };
        assert_eq!(
            responder.respond(&sidecar).unwrap().devices,
            injection.devices
        );

        // An instance the tree does not name, a file without the field, a node with another minor.
        instance.compute_instance = 2;
        let e = responder
            .respond(&answer(&seats, &pod, &instance))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("read capability file: "), "{e}");
        instance.compute_instance = 0;
        write(&format!("{caps}/ci0/access"), "DeviceFileMode: 292\n");
        let e = responder
            .respond(&answer(&seats, &pod, &instance))
            .unwrap_err()
            .to_string();
        assert!(e.contains("carries no DeviceFileMinor: field"), "{e}");
        write(&format!("{caps}/ci0/access"), "DeviceFileMinor: 229633\n");
        write("dev/alixpu-caps/alixpu-cap229633", "c 237:229640");
        let e = responder
            .respond(&answer(&seats, &pod, &instance))
            .unwrap_err()
            .to_string();
        assert!(e.contains("carries minor 229640, want 229633"), "{e}");
    }
}
