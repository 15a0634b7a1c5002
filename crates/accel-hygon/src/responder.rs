//! The Hygon responder (spec §4, §5.3, §6.3): the allocator injects the device nodes and mounts
//! itself, so a node needs the vendor driver alone — no runtime, no CDI, and no environment for
//! whole cards.
//!
//! - Exclusive, shared and the visibility sidecar: `/dev/kfd` and `/dev/mkfd` (`rwm`) once, each
//!   card's `/dev/dri/card<N>` and `/dev/dri/renderD<M>` (`rw`), `/opt/hyhal` read-only — every
//!   one best effort: what the host lacks is logged and left out, never indexed blindly.
//! - Sliced: the same, plus `/opt/dtk` at `/opt/hygondriver` and the container's own
//!   `etc/vdev/docker` directory at `/etc/vdev/docker`, read-only (co-tenants must not edit the
//!   ledger): its `vdev<i>.conf` is chosen by [`crate::vdev::allocate`] under one node-wide lock.
//! - A partition (and the sidecar of a partition owner): the card's nodes, the two driver
//!   directories, the partition's registry file mounted read-only at its own host path
//!   (required), and `DMI_MIG_VISIBLE_DEVICE=MIG-<uuid>` — the `MIG-` prefix is mandatory.
//!
//! An empty grant is refused: `no allocated accelerator found for container "<name>"` (a
//! partition's: `no allocated card for partition container "<name>"`, spec §6.3).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use accel_backend::chores::PodDirs;
use accel_backend::respond::{
    Answer, DeviceNode, Injection, Mount, PrepareError, Responder, ResponderError, ResponderSetup,
};
use accel_core::busid::BusId;
use accel_core::inventory::Accelerator;
use accel_core::ledger::units::mib_for_units;
use accel_core::ledger::{Family, Seat};
use accel_host::{Host, HostWrites};

use crate::registry;
use crate::vdev::{self, SliceRequest};

/// The compute control node.
pub const KFD: &str = "/dev/kfd";
/// The management control node of newer stacks.
pub const MKFD: &str = "/dev/mkfd";
/// The driver's user space, mounted at the same path.
pub const HYHAL: &str = "/opt/hyhal";
/// The DTK on the host (HYGONPATH's default) …
pub const DTK: &str = "/opt/dtk";
/// … and where a sliced or partitioned container sees it.
pub const HYGONDRIVER: &str = "/opt/hygondriver";
/// The variable that selects a partition.
pub const MIG_VISIBLE: &str = "DMI_MIG_VISIBLE_DEVICE";

/// One card's facts the responder needs, from the detection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Card {
    uuid: Option<String>,
    bus: Option<BusId>,
    card: Option<u32>,
    render: Option<u32>,
    vram_mib: Option<u64>,
    cus: Option<u32>,
}

impl Card {
    fn of(a: &Accelerator) -> Card {
        Card {
            uuid: a.uuid.clone(),
            bus: a.bus_id,
            card: a.drm.and_then(|d| d.card),
            render: a.drm.and_then(|d| d.render),
            vram_mib: a.memory_mib,
            cus: a.cores,
        }
    }

    fn name(&self, index: u32) -> String {
        self.uuid
            .clone()
            .unwrap_or_else(|| format!("at index {index}"))
    }
}

/// The Hygon responder of one node.
pub struct HygonResponder {
    cards: BTreeMap<u32, Card>,
    host: Option<Arc<dyn Host>>,
    dirs: PodDirs,
    /// Held across one slice's ledger walk and write (spec §5.2: one global mutex).
    ledger: Mutex<()>,
    /// Removes the registry's empty `ci/` directories (spec §6.5); `None`: nothing is swept.
    writes: Option<Arc<dyn HostWrites>>,
    /// The non-empty directories of `ci/` already reported (each is said once).
    reported: Mutex<BTreeSet<String>>,
}

/// How often the registry's `ci/` directory is swept besides after every Pod reconcile.
pub const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

impl std::fmt::Debug for HygonResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HygonResponder")
            .field("cards", &self.cards)
            .field("pods", &self.dirs.root())
            .finish_non_exhaustive()
    }
}

fn refused(message: String) -> ResponderError {
    ResponderError::Refused(message)
}

fn node(path: &str, permissions: &str) -> DeviceNode {
    DeviceNode {
        container_path: path.into(),
        host_path: path.into(),
        permissions: permissions.into(),
    }
}

fn read_only(container: &str, host: &str) -> Mount {
    Mount {
        container_path: container.into(),
        host_path: host.into(),
        read_only: true,
    }
}

impl HygonResponder {
    /// The responder for a node's first detection.
    pub fn from_setup(setup: ResponderSetup) -> HygonResponder {
        HygonResponder {
            cards: setup
                .accelerators
                .iter()
                .map(|a| (a.index, Card::of(a)))
                .collect(),
            host: setup.host,
            dirs: PodDirs::new(setup.pod_dir_root),
            ledger: Mutex::new(()),
            writes: setup.writes,
            reported: Mutex::new(BTreeSet::new()),
        }
    }

    /// Spec §6.5 step 2: a container runtime asked to bind a registry file that is missing
    /// makes a directory of that name, and the driver then refuses that name forever; so each
    /// **empty** directory in `ci/` is removed. A directory with anything in it is reported
    /// (once) and left; files are never touched. Answers the directories removed.
    pub fn sweep_registry(&self) -> Vec<String> {
        let (Some(host), Some(writes)) = (&self.host, &self.writes) else {
            return Vec::new();
        };
        let Ok(names) = host.list(registry::CI_DIR) else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for name in names {
            let path = format!("{}/{name}", registry::CI_DIR);
            if !matches!(host.entry_kind(&path), Ok(accel_host::EntryKind::Dir)) {
                continue;
            }
            let empty = host.list(&path).is_ok_and(|inside| inside.is_empty());
            if empty {
                match writes.remove_empty_dir(&path) {
                    Ok(()) => {
                        tracing::info!(
                            "removed the empty directory {path}: a runtime made it in place of a missing registry file"
                        );
                        removed.push(path);
                    }
                    Err(e) => tracing::warn!("registry sweep: {e}"),
                }
            } else if self
                .reported
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(path.clone())
            {
                tracing::warn!(
                    "{path} is a directory with entries in the multi-instance registry: left as it is (the driver refuses that name until it is removed)"
                );
            }
        }
        removed
    }

    fn exists(&self, path: &str) -> bool {
        self.host.as_ref().is_none_or(|h| h.exists(path))
    }

    fn card(&self, seat: &Seat) -> Result<&Card, ResponderError> {
        self.cards
            .get(&seat.index)
            .filter(|c| c.uuid == seat.uuid)
            .or_else(|| {
                self.cards
                    .values()
                    .find(|c| c.uuid.is_some() && c.uuid == seat.uuid)
            })
            .ok_or_else(|| {
                refused(format!(
                    "card at index {} is not in the detection this responder serves",
                    seat.index
                ))
            })
    }

    /// The control nodes, once per response (best effort).
    fn control_nodes(&self, response: &mut Injection) {
        for path in [KFD, MKFD] {
            if self.exists(path) {
                response.devices.push(node(path, "rwm"));
            } else {
                tracing::info!(
                    node = path,
                    "the host exposes no control device node, so the container will not receive it"
                );
            }
        }
    }

    /// A card's DRM nodes (best effort: a missing index or node is logged, never guessed).
    fn card_nodes(&self, card: &Card, name: &str, response: &mut Injection) {
        let Some(c) = card.card else {
            tracing::warn!(
                card = name,
                "an allocated card records no drm index, so its card node is not injected"
            );
            return;
        };
        let mut paths = vec![format!("/dev/dri/card{c}")];
        match card.render {
            Some(r) => paths.push(format!("/dev/dri/renderD{r}")),
            None => tracing::warn!(
                card = name,
                "an allocated card records no drm render index, so its render node is not injected"
            ),
        }
        for path in paths {
            if self.exists(&path) {
                response.devices.push(node(&path, "rw"));
            } else {
                tracing::warn!(card = name, node = %path, "the host has no device node an allocated card names, so the container will not receive it");
            }
        }
    }

    fn driver_mounts(&self, with_dtk: bool, response: &mut Injection) {
        if with_dtk && self.exists(DTK) {
            response.mounts.push(read_only(HYGONDRIVER, DTK));
        }
        if self.exists(HYHAL) {
            response.mounts.push(read_only(HYHAL, HYHAL));
        }
    }

    /// The answer for one container.
    pub fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        let container = answer.container.map_or("main", |c| c.name.as_str());
        if answer.seats.is_empty() {
            // Spec §6.3 words a partition's empty grant its own way.
            let partitioned =
                answer.family == Some(Family::Partitioned) || answer.partition.is_some();
            return Err(refused(if partitioned {
                format!("no allocated card for partition container {container:?}")
            } else {
                format!("no allocated accelerator found for container {container:?}")
            }));
        }
        let mut granted: Vec<(&Seat, &Card)> = Vec::with_capacity(answer.seats.len());
        for seat in answer.seats {
            granted.push((seat, self.card(seat)?));
        }
        if let Some(partition) = answer.partition {
            return self.partition(&partition.uuid, container, &granted);
        }
        let mut response = Injection::default();
        self.control_nodes(&mut response);
        for (seat, card) in &granted {
            self.card_nodes(card, &card.name(seat.index), &mut response);
        }
        let sliced = answer.family == Some(Family::Sliced);
        self.driver_mounts(sliced, &mut response);
        if sliced {
            let dir = self.slice(answer, &granted, container)?;
            response.mounts.push(Mount {
                container_path: vdev::CONTAINER_DIR.into(),
                host_path: dir.display().to_string(),
                read_only: true,
            });
        }
        Ok(response)
    }

    /// Writes (or reuses) each granted card's `vdev<i>.conf`; answers the directory to mount.
    fn slice(
        &self,
        answer: &Answer<'_>,
        granted: &[(&Seat, &Card)],
        container: &str,
    ) -> Result<PathBuf, ResponderError> {
        let dir = self
            .dirs
            .container(&answer.pod.uid, container)?
            .join(vdev::HOST_SUBDIR);
        let percent = answer.cores_percentage.unwrap_or(100);
        let _held = self
            .ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (position, (seat, card)) in granted.iter().enumerate() {
            let position = u32::try_from(position).unwrap_or(u32::MAX);
            let bus = card.bus.ok_or_else(|| {
                refused(format!(
                    "card {}: no recorded pci address, so no vdev.conf can name it",
                    card.name(seat.index)
                ))
            })?;
            let vram = card
                .vram_mib
                .or(seat.memory_mib)
                .ok_or(ResponderError::NoVram { index: seat.index })?;
            let card_cus = card.cus.unwrap_or(0);
            let cus = vdev::cus_for(percent, card_cus);
            if cus == 0 {
                return Err(refused(format!(
                    "card {}: sliced request resolves to zero compute units (cores-percent={percent}, card cores={card_cus})",
                    bus.sysfs()
                )));
            }
            let own = dir.join(vdev::file_name(position));
            vdev::allocate(
                self.dirs.root(),
                &SliceRequest {
                    bus,
                    card_cus,
                    cus,
                    mem_mib: mib_for_units(answer.slice_units, vram).min(vram),
                    position,
                    own: &own,
                },
            )
            .map_err(refused)?;
        }
        Ok(dir)
    }

    /// A partition's answer: its card's nodes, the driver directories, its registry file at its
    /// own host path, and the variable naming it.
    fn partition(
        &self,
        partition: &str,
        container: &str,
        granted: &[(&Seat, &Card)],
    ) -> Result<Injection, ResponderError> {
        let [(seat, card)] = granted else {
            return Err(refused(format!(
                "container {container:?} was granted {} accelerators, but a hygon partition request can only be served by one: partition {partition} is on one card",
                granted.len()
            )));
        };
        let uuid = partition.strip_prefix("MIG-").unwrap_or(partition);
        let entry = self
            .host
            .as_deref()
            .and_then(|h| registry::find_partition(h, uuid))
            .ok_or_else(|| {
                refused(format!(
                    "the registry file of partition MIG-{uuid} is absent from {}, so the container could not activate it",
                    registry::CI_DIR
                ))
            })?;
        let on_card = self
            .host
            .as_deref()
            .and_then(|h| {
                h.read_to_string(&format!("{}/dev{}", registry::DIR, entry.dev))
                    .ok()
            })
            .as_deref()
            .and_then(registry::parse_dev);
        if let (Some(listed), Some(granted)) = (on_card, card.bus)
            && listed != granted
        {
            return Err(refused(format!(
                "partition MIG-{uuid} is on the card at {} (registry dev{}), not the granted {}: fail closed",
                listed.sysfs(),
                entry.dev,
                granted.sysfs()
            )));
        }
        // The file's own `pci` (its compute-instance block's, addendum H2) must be the card too.
        if let (Some(named), Some(granted)) = (entry.pci, card.bus)
            && named != granted
        {
            return Err(refused(format!(
                "partition MIG-{uuid}'s registry file {:?} names the card at {}, not the granted {}: fail closed",
                entry.path,
                named.sysfs(),
                granted.sysfs()
            )));
        }
        if !self.exists(&entry.path) {
            return Err(refused(format!(
                "the registry file {:?} of partition MIG-{uuid} is absent, so the container could not activate it",
                entry.path
            )));
        }
        let mut response = Injection::default();
        self.control_nodes(&mut response);
        self.card_nodes(card, &card.name(seat.index), &mut response);
        self.driver_mounts(true, &mut response);
        response.mounts.push(read_only(&entry.path, &entry.path));
        response
            .envs
            .insert(MIG_VISIBLE.into(), format!("MIG-{uuid}"));
        Ok(response)
    }
}

impl Responder for HygonResponder {
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        HygonResponder::respond(self, answer)
    }

    fn answers_alike(&self) -> bool {
        // Whole-card answers name the grant's nodes only, whichever container asks.
        true
    }

    fn prepare_slicing(&self) -> Result<(), PrepareError> {
        // Nothing to stage: the slice's file is written per container, the enforcing user space
        // is the host's DTK.
        Ok(())
    }

    fn reclaim(&self, pod_uid: &str) {
        // The Pod's vdev.conf files go with its directory: their slots are free again.
        self.dirs.reclaim(pod_uid);
    }

    fn reclaim_interval(&self) -> Option<std::time::Duration> {
        self.writes.as_ref().map(|_| SWEEP_INTERVAL)
    }

    fn reclaim_pass(&self, _live: &BTreeSet<String>) {
        self.sweep_registry();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_backend::pod::Pod;
    use accel_backend::respond::EngineFacts;
    use accel_core::inventory::{DrmNodes, Source};

    fn accelerator() -> Accelerator {
        let mut a = Accelerator::new(0, Source::Driver);
        a.uuid = Some("GPU-5a1c003e9b4000a1".into());
        a.bus_id = "0000:0f:00.0".parse().ok();
        a.memory_mib = Some(65_520);
        a.cores = Some(80);
        a.drm = Some(DrmNodes {
            card: Some(1),
            render: Some(128),
        });
        a
    }

    fn responder(root: &std::path::Path) -> HygonResponder {
        HygonResponder::from_setup(ResponderSetup {
            scratch: None,
            strategy: Default::default(),
            runtime_major: Some(0),
            pod_dir_root: root.join("pods"),
            preload_dir: root.join("preload"),
            library_dir: root.join("lib"),
            engine: Arc::new(EngineFacts::default()),
            accelerators: vec![accelerator()],
            host: Some(Arc::new(accel_host::FsHost::new(root.join("host")))),
            commands: None,
            runtime_class: None,
            writes: None,
        })
    }

    fn put(root: &std::path::Path, path: &str, text: &str) {
        let p = root.join("host").join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn seat() -> Seat {
        Seat::from_accelerator(&accelerator(), 0)
    }

    fn pod() -> Pod {
        Pod {
            uid: "p".into(),
            namespace: "ns".into(),
            name: "pod-p".into(),
            created: 0,
            phase: accel_backend::pod::Phase::Running,
            runtime_class: None,
            containers: Vec::new(),
            allocated: None,
        }
    }

    fn instance(uuid: &str) -> accel_core::ledger::partitions::PartitionInstance {
        accel_core::ledger::partitions::PartitionInstance {
            gpu_instance: 0,
            compute_instance: 0,
            uuid: uuid.into(),
        }
    }

    fn answer<'a>(
        seats: &'a [&'a Seat],
        pod: &'a Pod,
        partition: Option<&'a accel_core::ledger::partitions::PartitionInstance>,
    ) -> Answer<'a> {
        Answer {
            family: Some(Family::Partitioned),
            seats,
            slice_units: 0,
            cores_percentage: None,
            partition,
            pod,
            container: None,
        }
    }

    #[test]
    fn the_registrys_empty_directories_are_swept_and_nothing_else_is() {
        let root = tempfile::tempdir().unwrap();
        let mut r = responder(root.path());
        r.writes = Some(Arc::new(accel_host::FsWrites::new(
            root.path().join("host"),
        )));
        put(
            root.path(),
            "/etc/dmi_mig_config/ci/dev0gi3ci0.conf",
            "mig_uuid: a\n",
        );
        put(root.path(), "/etc/dmi_mig_config/ci/full/x", "kept\n");
        let made = root
            .path()
            .join("host/etc/dmi_mig_config/ci/dev1gi4ci0.conf");
        std::fs::create_dir_all(&made).unwrap();
        assert_eq!(
            r.sweep_registry(),
            vec!["/etc/dmi_mig_config/ci/dev1gi4ci0.conf".to_string()]
        );
        assert!(!made.exists());
        let ci = root.path().join("host/etc/dmi_mig_config/ci");
        assert!(ci.join("dev0gi3ci0.conf").is_file(), "files never touched");
        assert!(
            ci.join("full/x").is_file(),
            "a directory with entries is left"
        );
        assert!(r.sweep_registry().is_empty());
    }

    #[test]
    fn an_empty_grant_is_refused_naming_the_container() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = pod();
        let e = responder(tmp.path())
            .respond(&Answer {
                family: Some(Family::Exclusive),
                ..answer(&[], &pod, None)
            })
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "no allocated accelerator found for container \"main\""
        );
        let e = responder(tmp.path())
            .respond(&answer(&[], &pod, None))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "no allocated card for partition container \"main\""
        );
        let (a, b) = (seat(), Seat::from_accelerator(&accelerator(), 0));
        let seats = [&a, &b];
        let e = responder(tmp.path())
            .respond(&answer(&seats, &pod, Some(&instance("MIG-x"))))
            .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "container \"main\" was granted 2 accelerators, but a hygon partition request can only be served by one"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_partition_mounts_its_registry_file_at_its_own_path_and_names_itself() {
        let tmp = tempfile::tempdir().unwrap();
        for node in [
            "/dev/kfd",
            "/dev/mkfd",
            "/dev/dri/card1",
            "/dev/dri/renderD128",
            "/opt/dtk/x",
            "/opt/hyhal/x",
        ] {
            put(tmp.path(), node, "");
        }
        let conf = "/etc/dmi_mig_config/ci/dev0gi1ci0.conf";
        let mut file = registry::CiConf::default();
        file.gi.id = Some(1);
        file.ci.gi_id = Some(1);
        file.ci.id = Some(0);
        file.ci.mig_uuid = Some("9c1e0d5a-77f2-4c1b-8d0e-3a2b1c0d9e8f".into());
        put(tmp.path(), conf, &file.render());
        let seat = seat();
        let seats = [&seat];
        let pod = pod();
        let got = responder(tmp.path())
            .respond(&answer(
                &seats,
                &pod,
                Some(&instance("MIG-9c1e0d5a-77f2-4c1b-8d0e-3a2b1c0d9e8f")),
            ))
            .unwrap();
        assert_eq!(
            got.envs.get(MIG_VISIBLE).map(String::as_str),
            Some("MIG-9c1e0d5a-77f2-4c1b-8d0e-3a2b1c0d9e8f")
        );
        let mounts: Vec<(&str, &str, bool)> = got
            .mounts
            .iter()
            .map(|m| (m.container_path.as_str(), m.host_path.as_str(), m.read_only))
            .collect();
        assert_eq!(
            mounts,
            vec![
                (HYGONDRIVER, DTK, true),
                (HYHAL, HYHAL, true),
                (conf, conf, true),
            ]
        );
        let devices: Vec<&str> = got
            .devices
            .iter()
            .map(|d| d.container_path.as_str())
            .collect();
        assert_eq!(
            devices,
            vec![KFD, MKFD, "/dev/dri/card1", "/dev/dri/renderD128"]
        );
        let e = responder(tmp.path())
            .respond(&answer(
                &seats,
                &pod,
                Some(&instance("MIG-00000000-0000-0000-0000-000000000000")),
            ))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the registry file of partition MIG-00000000-0000-0000-0000-000000000000 is absent from /etc/dmi_mig_config/ci, so the container could not activate it"
        );
        // The registry says dev0 is another card: the partition is not this grant's.
        put(tmp.path(), "/etc/dmi_mig_config/dev0", "0000:34:00.0\n");
        let e = responder(tmp.path())
            .respond(&answer(
                &seats,
                &pod,
                Some(&instance("MIG-9c1e0d5a-77f2-4c1b-8d0e-3a2b1c0d9e8f")),
            ))
            .unwrap_err();
        assert!(
            e.to_string().contains("is on the card at 0000:34:00.0 (registry dev0), not the granted 0000:0f:00.0: fail closed"),
            "{e}"
        );
    }

    /// Addendum H2: the registry file's compute-instance block names its card (`pci`); a file
    /// naming another card than the grant's is refused, and one naming the granted card serves.
    #[test]
    fn a_registry_file_whose_pci_line_names_another_card_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        put(tmp.path(), "/etc/dmi_mig_config/dev0", "0000:0f:00.0\n");
        let conf = "/etc/dmi_mig_config/ci/dev0gi3ci0.conf";
        let mut file = registry::CiConf::default();
        file.gi.id = Some(3);
        file.gi.pci = Some("0000:0f:00.0".into());
        file.ci.gi_id = Some(3);
        file.ci.id = Some(0);
        file.ci.pci = Some("0000:34:00.0".into());
        file.ci.mig_uuid = Some("68796700-0003-0000-0000-000000000001".into());
        put(tmp.path(), conf, &file.render());
        let seat = seat();
        let seats = [&seat];
        let pod = pod();
        let partition = instance("MIG-68796700-0003-0000-0000-000000000001");
        // Only the compute-instance block's `pci` counts (position decides): the GI block's
        // agreeing line does not make the file the granted card's.
        let e = responder(tmp.path())
            .respond(&answer(&seats, &pod, Some(&partition)))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "partition MIG-68796700-0003-0000-0000-000000000001's registry file {conf:?} names the card at 0000:34:00.0, not the granted 0000:0f:00.0: fail closed"
            )
        );
        file.ci.pci = Some("0000:0f:00.0".into());
        put(tmp.path(), conf, &file.render());
        let got = responder(tmp.path())
            .respond(&answer(&seats, &pod, Some(&partition)))
            .unwrap();
        assert_eq!(
            got.envs.get(MIG_VISIBLE).map(String::as_str),
            Some("MIG-68796700-0003-0000-0000-000000000001")
        );
    }

    #[test]
    fn a_slice_of_zero_compute_units_is_refused_with_the_specs_words() {
        let tmp = tempfile::tempdir().unwrap();
        let seat = seat();
        let seats = [&seat];
        let pod = pod();
        let e = responder(tmp.path())
            .respond(&Answer {
                family: Some(Family::Sliced),
                cores_percentage: Some(0),
                slice_units: 800_000,
                ..answer(&seats, &pod, None)
            })
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "card 0000:0f:00.0: sliced request resolves to zero compute units (cores-percent=0, card cores=80)"
        );
    }
}
