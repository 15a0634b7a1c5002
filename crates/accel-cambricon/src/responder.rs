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
//! sMLU slices are not served by this build (the manufacturers table gives Cambricon no sliced
//! family), so a sliced answer is refused with that reason rather than handed a whole card.

use std::sync::Arc;

use accel_backend::chores::PodDirs;
use accel_backend::respond::{
    Answer, DetectedCards, DeviceNode, Injection, PrepareError, Responder, ResponderError,
    ResponderSetup,
};
use accel_core::inventory::Accelerator;
use accel_core::ledger::{Family, Seat};
use accel_host::Host;

use crate::nodes;

/// The variable naming the granted cards' driver indexes.
pub const VISIBLE_DEVICES: &str = "CAMBRICON_VISIBLE_DEVICES";

/// Why a sliced grant is refused.
pub const NO_SLICES: &str =
    "Cambricon sMLU slices are not served by this build: only whole cards (exclusive, shared) are";

/// One accelerator's facts the responder needs, from the detection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Card {
    uuid: Option<String>,
    bus: Option<String>,
    driver_index: Option<u32>,
}

impl Card {
    fn of(a: &Accelerator) -> Card {
        Card {
            uuid: a.uuid.clone(),
            bus: a.bus_id.map(|b| b.sysfs()),
            driver_index: a.minor_number,
        }
    }
}

/// The Cambricon responder of one node.
pub struct CambriconResponder {
    cards: DetectedCards<Card>,
    /// The host the device nodes must exist on (`None`: not checked).
    host: Option<Arc<dyn Host>>,
    dirs: PodDirs,
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
    pub fn from_setup(setup: ResponderSetup) -> CambriconResponder {
        CambriconResponder {
            cards: DetectedCards::of(&setup.accelerators, Card::of),
            host: setup.host,
            dirs: PodDirs::new(setup.pod_dir_root),
        }
    }

    fn exists(&self, path: &str) -> bool {
        self.host.as_ref().is_none_or(|h| h.exists(path))
    }

    fn card(&self, seat: &Seat) -> Result<&Card, ResponderError> {
        self.cards.card(seat)
    }

    /// The answer for one container.
    pub fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        if answer.family == Some(Family::Sliced) {
            return Err(refused(NO_SLICES.into()));
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
        // Nothing is staged: no slicing library, and no sliced family in this build.
        Ok(())
    }

    fn reclaim(&self, pod_uid: &str) {
        self.dirs.reclaim(pod_uid);
    }
}
