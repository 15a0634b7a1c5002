//! The MetaX responder: the allocator hands the nodes itself (spec §4.2), so a node needs the
//! MetaX driver alone — no vendor runtime, no CDI, and **no environment variable at all**.
//!
//! Every whole-card answer (exclusive, shared, and the visibility sidecar naming the owner's
//! cards) is, best effort: once, the control nodes `/dev/mxcd`, `/dev/mxnd`, `/dev/mxgd` that
//! exist; then per card in allocation order `/dev/dri/card<N>` and `/dev/dri/renderD<M>`, the
//! minors as detected. A node that cannot be named or is missing on the host is logged, in the
//! described system's words, and left out: the grant still succeeds (unlike AMD, which fails
//! closed). Indexing is length-guarded by construction (the minors are `Option`s).
//!
//! sGPU slices are not served by this build (the manufacturers table gives MetaX no sliced
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

/// The control nodes, handed once per answer when present.
pub const CONTROL_NODES: [&str; 3] = ["/dev/mxcd", "/dev/mxnd", "/dev/mxgd"];

/// Why a sliced grant is refused.
pub const NO_SLICES: &str =
    "MetaX sgpu slices are not served by this build: only whole cards (exclusive, shared) are";

/// The described system's log lines for nodes left out.
pub const NO_CONTROL_NODE: &str =
    "the host exposes no control device node, so the container will not receive it";
pub const NO_DRM_INDEX: &str = "an allocated card records no drm index, so none of its device nodes can be named and the container will receive none of them";
pub const NO_RENDER_INDEX: &str = "an allocated card records no drm render index, so its render node cannot be named and the container will not receive it";
pub const NO_NAMED_NODE: &str =
    "the host has no device node an allocated card names, so the container will not receive it";

/// One accelerator's facts the responder needs, from the detection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Card {
    uuid: Option<String>,
    card: Option<u32>,
    render: Option<u32>,
}

impl Card {
    fn of(a: &Accelerator) -> Card {
        Card {
            uuid: a.uuid.clone(),
            card: a.drm.and_then(|d| d.card),
            render: a.drm.and_then(|d| d.render),
        }
    }
}

/// The MetaX responder of one node.
pub struct MetaxResponder {
    cards: DetectedCards<Card>,
    host: Option<Arc<dyn Host>>,
    dirs: PodDirs,
}

impl std::fmt::Debug for MetaxResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaxResponder")
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

impl MetaxResponder {
    /// The responder for a node's first detection.
    pub fn from_setup(setup: ResponderSetup) -> MetaxResponder {
        MetaxResponder {
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

    fn push_if_present(&self, path: &str, response: &mut Injection) {
        if self.exists(path) {
            response.devices.push(node(path));
        } else {
            tracing::warn!(node = path, "{NO_NAMED_NODE}");
        }
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
        let cards = answer
            .seats
            .iter()
            .map(|s| self.card(s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut response = Injection::default();
        for path in CONTROL_NODES {
            if self.exists(path) {
                response.devices.push(node(path));
            } else {
                tracing::warn!(node = path, "{NO_CONTROL_NODE}");
            }
        }
        for card in cards {
            let Some(c) = card.card else {
                tracing::warn!(uuid = card.uuid.as_deref(), "{NO_DRM_INDEX}");
                continue;
            };
            self.push_if_present(&format!("/dev/dri/card{c}"), &mut response);
            match card.render {
                Some(r) => self.push_if_present(&format!("/dev/dri/renderD{r}"), &mut response),
                None => tracing::warn!(uuid = card.uuid.as_deref(), "{NO_RENDER_INDEX}"),
            }
        }
        Ok(response)
    }
}

impl Responder for MetaxResponder {
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        MetaxResponder::respond(self, answer)
    }

    fn answers_alike(&self) -> bool {
        true
    }

    fn prepare_slicing(&self) -> Result<(), PrepareError> {
        Ok(())
    }

    fn reclaim(&self, pod_uid: &str) {
        self.dirs.reclaim(pod_uid);
    }
}
