//! The Cambricon responder: the allocator hands each card's device nodes itself (spec §4.2),
//! so a node needs the Cambricon driver alone — no `cambricon-container-runtime`, no CDI.
//!
//! Every whole-card answer (exclusive, shared, and the visibility sidecar naming the owner's
//! cards) is, in allocation order: per card its card node `/dev/cambricon_dev<idx>`
//! (required: a card whose node is missing refuses the grant) and the optional per-card nodes
//! that exist; then, once, the node-level `/dev/cambricon_ctl` and `/dev/cambricon_gdr` where
//! present; and `CAMBRICON_VISIBLE_DEVICES`, the driver indexes comma-joined (for deployments
//! that still run Cambricon's runtime). `idx` is cnDev's device index (the detection's
//! `minorNumber`), never the accelerator's compact index. No mounts, no annotations.
//!
//! A sliced answer (spec §4.3) is one card: its slice is an sMLU instance reserved through
//! [`crate::smlu::Smlu`] (the mode turned on when off, a profile reused or made, the instance
//! made, a marker written), and the container gets, each where it exists, the card node
//! `/dev/cambricon_dev<idx>` and `/dev/cambricon_ipcm<idx>`, the instance's own node
//! `/dev/cambricon-caps/cap_dev<idx>_mi<i>`, then the node-level `/dev/cambricon_ctl` and
//! `/dev/cambricon_gdr` (the seed's list; the described system's code leaves those two out,
//! spec §4.3 step 5 [UNSURE]), and `VIRTUAL_DEVICES=<instance node>` — no
//! `CAMBRICON_VISIBLE_DEVICES`. The instance outlives the container: the reclaim pass
//! ([`Responder::reclaim_pass`]) destroys it once its Pod has been gone three passes, and the
//! ledger keeps the slice charged until then. In preflight's simulation nothing is made: the
//! answer has no instance node and no `VIRTUAL_DEVICES`, and carries [`SIMULATED_SLICE`]
//! instead, for preflight to read the quota it would have made.

use std::sync::Arc;

use accel_backend::chores::PodDirs;
use accel_backend::respond::{
    Answer, DetectedCards, DeviceNode, Injection, PrepareError, Responder, ResponderError,
    ResponderSetup,
};
use accel_core::inventory::Accelerator;
use accel_core::ledger::units::mib_for_units;
use accel_core::ledger::{Family, Seat};
use accel_host::Host;

use crate::nodes;
use crate::smlu::{Request, Smlu};

/// The variable naming the granted cards' driver indexes.
pub const VISIBLE_DEVICES: &str = "CAMBRICON_VISIBLE_DEVICES";

/// Why a sliced grant is refused where the responder may run no cnmon.
pub const NO_SLICES: &str = "Cambricon sMLU slices need the node's cnmon and its files, and this responder was given neither";
/// The sliced answer's variable naming the instance node (spec §4.3 step 6).
pub const VIRTUAL_DEVICES: &str = "VIRTUAL_DEVICES";
/// The annotation a simulated slice carries (preflight alone): `card=<bdf>;cores=<%>;memMiB=<n>`.
pub const SIMULATED_SLICE: &str = "device.gpustack.ai/cambricon-smlu-simulated";
/// How often the sMLU reclaim pass runs besides after every Pod reconcile (spec §4.6).
pub const RECLAIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// One accelerator's facts the responder needs, from the detection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Card {
    uuid: Option<String>,
    bus: Option<String>,
    driver_index: Option<u32>,
    memory_mib: Option<u64>,
}

impl Card {
    fn of(a: &Accelerator) -> Card {
        Card {
            uuid: a.uuid.clone(),
            bus: a.bus_id.map(|b| b.sysfs()),
            driver_index: a.minor_number,
            memory_mib: a.memory_mib,
        }
    }
}

/// The Cambricon responder of one node.
pub struct CambriconResponder {
    cards: DetectedCards<Card>,
    /// The host the device nodes must exist on (`None`: not checked).
    host: Option<Arc<dyn Host>>,
    dirs: PodDirs,
    /// The sMLU manager; `None` without the host's files and cnmon (slices are refused).
    smlu: Option<Smlu>,
}

impl std::fmt::Debug for CambriconResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CambriconResponder")
            .field("cards", &self.cards)
            .finish_non_exhaustive()
    }
}

fn refused(message: String) -> ResponderError {
    ResponderError::Refused(message)
}

fn node(path: &str) -> DeviceNode {
    DeviceNode {
        container_path: path.into(),
        host_path: path.into(),
        permissions: "rw".into(),
    }
}

impl CambriconResponder {
    /// The responder for a node's first detection.
    /// Preflight's simulation is told by its recorded writes (the one simulation signal the
    /// seam has, MetaX's): the sMLU manager then runs no cnmon.
    pub fn from_setup(setup: ResponderSetup) -> CambriconResponder {
        let cards: Vec<(String, u32)> = setup
            .accelerators
            .iter()
            .filter_map(|a| Some((a.bus_id?.sysfs(), a.minor_number?)))
            .collect();
        let simulated = setup.writes.as_ref().is_some_and(|w| !w.takes_effect());
        let pods = setup.pod_dir_root.clone();
        let smlu = match (&setup.host, &setup.commands, simulated) {
            (Some(host), _, true) => Some(Smlu::simulated(host.clone(), pods, cards)),
            (Some(host), Some(commands), false) => {
                let smlu = Smlu::new(host.clone(), commands.clone(), pods, cards);
                smlu.log_survey();
                Some(smlu)
            }
            _ => None,
        };
        CambriconResponder {
            cards: DetectedCards::of(&setup.accelerators, Card::of),
            host: setup.host,
            dirs: PodDirs::new(setup.pod_dir_root),
            smlu,
        }
    }

    /// The sMLU manager, where slices can be served.
    pub fn smlu(&self) -> Option<&Smlu> {
        self.smlu.as_ref()
    }

    fn exists(&self, path: &str) -> bool {
        self.host.as_ref().is_none_or(|h| h.exists(path))
    }

    fn card(&self, seat: &Seat) -> Result<&Card, ResponderError> {
        self.cards.card(seat)
    }

    fn push_present(&self, path: &str, response: &mut Injection) {
        if self.host.is_some() && self.exists(path) {
            response.devices.push(node(path));
        }
    }

    /// A sliced container's answer (spec §4.3).
    fn respond_sliced(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        let container = answer.container.map_or("main", |c| c.name.as_str());
        let seat = match answer.seats {
            [] => {
                return Err(refused(format!(
                    "no allocated accelerator found for sliced container {container:?}"
                )));
            }
            [one] => *one,
            many => {
                return Err(refused(format!(
                    "sliced container {container:?} allocated {} cards, but Cambricon sMLU slicing is single-card",
                    many.len()
                )));
            }
        };
        // The Pod's and container's names become the marker's path: one component each.
        self.dirs.container(&answer.pod.uid, container)?;
        let card = self.card(seat)?;
        let id = seat
            .uuid
            .clone()
            .unwrap_or_else(|| format!("{}", seat.index));
        // The record is checked before the request (spec §4.3 step 2).
        let index = card
            .driver_index
            .ok_or_else(|| refused(format!("accelerator {id:?} carries no cnDev device index")))?;
        let vram = card.memory_mib.filter(|v| *v > 0).ok_or_else(|| {
            refused("derive sliced memory limit: the card reports no memory".into())
        })?;
        if answer.slice_units == 0 {
            return Err(refused(
                "derive sliced memory limit: the slice asks for no memory".into(),
            ));
        }
        let mem_mib = mib_for_units(answer.slice_units, vram).min(vram);
        let cores_pct = answer.cores_percentage.unwrap_or(100);
        let bdf = card.bus.clone().ok_or_else(|| {
            refused("reserve cambricon smlu instance: the accelerator reports no pci bus id, so the driver's sMLU listing cannot be found".into())
        })?;
        let smlu = self
            .smlu
            .as_ref()
            .ok_or_else(|| refused(NO_SLICES.into()))?;
        let reserved = smlu
            .reserve(&Request {
                pod_uid: answer.pod.uid.clone(),
                container: container.to_string(),
                bdf: bdf.clone(),
                driver_index: index,
                cores_pct,
                mem_mib,
            })
            .map_err(|e| refused(format!("reserve cambricon smlu instance: {e}")))?;
        let mut response = Injection::default();
        self.push_present(&nodes::card(index), &mut response);
        self.push_present(&nodes::ipcm(index), &mut response);
        if let Some(instance) = &reserved.node {
            response.devices.push(node(instance));
            response
                .envs
                .insert(VIRTUAL_DEVICES.to_string(), instance.clone());
        }
        for path in nodes::NODE_LEVEL {
            self.push_present(path, &mut response);
        }
        if smlu.is_simulated() {
            response.annotations.insert(
                SIMULATED_SLICE.into(),
                format!("card={bdf};cores={cores_pct};memMiB={mem_mib}"),
            );
        }
        Ok(response)
    }

    /// The answer for one container.
    pub fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        if answer.family == Some(Family::Sliced) {
            return self.respond_sliced(answer);
        }
        let container = answer.container.map_or("main", |c| c.name.as_str());
        if answer.seats.is_empty() {
            return Err(refused(format!(
                "no allocated accelerator found for container {container:?}"
            )));
        }
        // Every card's index is checked before any node is probed (spec §4.2 step 1).
        let mut granted: Vec<(String, &Card, u32)> = Vec::with_capacity(answer.seats.len());
        for seat in answer.seats {
            let card = self.card(seat)?;
            let id = seat
                .uuid
                .clone()
                .unwrap_or_else(|| format!("{}", seat.index));
            let index = card.driver_index.ok_or_else(|| {
                refused(format!("accelerator {id:?} carries no cnDev device index"))
            })?;
            granted.push((id, card, index));
        }
        let mut response = Injection::default();
        for (id, card, index) in &granted {
            let path = nodes::card(*index);
            if !self.exists(&path) {
                return Err(refused(format!(
                    "accelerator {id:?} of card {:?} has no device node {path:?}",
                    card.bus.as_deref().unwrap_or("")
                )));
            }
            response.devices.push(node(&path));
            for optional in nodes::per_card_optional(*index) {
                if self.exists(&optional) && self.host.is_some() {
                    response.devices.push(node(&optional));
                }
            }
        }
        for path in nodes::NODE_LEVEL {
            if self.exists(path) && self.host.is_some() {
                response.devices.push(node(path));
            }
        }
        let indexes: Vec<String> = granted.iter().map(|(_, _, i)| i.to_string()).collect();
        response
            .envs
            .insert(VISIBLE_DEVICES.into(), indexes.join(","));
        Ok(response)
    }
}

impl Responder for CambriconResponder {
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        CambriconResponder::respond(self, answer)
    }

    fn answers_alike(&self) -> bool {
        // Whole-card answers name the grant's nodes only, whichever container asks.
        true
    }

    fn prepare_slicing(&self) -> Result<(), PrepareError> {
        // Nothing is staged: the slices are driver objects made at Allocate.
        Ok(())
    }

    /// A gone Pod's directories go with its instances, in the reclaim pass (its markers must
    /// outlive what they record); a Pod that held none loses its directory now.
    fn reclaim(&self, pod_uid: &str) {
        let marked = self.smlu.as_ref().is_some_and(|s| s.holds(pod_uid));
        if !marked {
            self.dirs.reclaim(pod_uid);
        }
    }

    fn holds_slices_until_pod_gone(&self) -> bool {
        true
    }

    fn reclaim_interval(&self) -> Option<std::time::Duration> {
        self.smlu
            .as_ref()
            .filter(|s| !s.is_simulated())
            .map(|_| RECLAIM_INTERVAL)
    }

    fn reclaim_pass(&self, live: &std::collections::BTreeSet<String>) {
        let Some(smlu) = &self.smlu else { return };
        let done = smlu.reclaim_pass(live);
        for (bdf, instance) in &done.destroyed {
            tracing::info!(card = %bdf, instance = %instance, "destroyed the sMLU instance of a gone Pod");
        }
        for (bdf, profile) in &done.profiles {
            tracing::info!(card = %bdf, profile, "destroyed an sMLU profile no instance uses");
        }
        for error in &done.errors {
            tracing::warn!("smlu reclaim: {error}");
        }
    }
}
