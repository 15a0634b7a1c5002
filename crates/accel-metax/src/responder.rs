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
//! A sliced answer (spec §4.3) is one card: its slice is reserved as an sGPU subdevice through
//! [`crate::sgpu::Sgpu`] (or, asking the whole card, held by its marker alone), and the
//! container gets `/dev/mxcd` and the card's render node only, with `METAX_SGPUS` naming the
//! subdevice, its compute share and VRAM, and the Pod's alias for a partial slice. The
//! subdevice outlives the container: the reclaim pass ([`Responder::reclaim_pass`]) destroys it
//! once its Pod has been gone three passes, and the ledger keeps the slice charged until then.

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

use crate::sgpu::{Request, Sgpu};

/// The control nodes, handed once per answer when present.
pub const CONTROL_NODES: [&str; 3] = ["/dev/mxcd", "/dev/mxnd", "/dev/mxgd"];

/// Why a sliced grant is refused where the responder was given no control-file writes.
pub const NO_WRITES: &str =
    "MetaX sgpu slices need the node's sysfs writes, and this responder was given none";
/// The sliced answer's variable (spec §4.3, step 6).
pub const SGPUS_ENV: &str = "METAX_SGPUS";
/// How often the sGPU reclaim pass runs besides after every Pod reconcile (spec §4.6).
pub const RECLAIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

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
    /// The PCI address as sysfs spells it (`0000:3d:00.0`).
    bdf: Option<String>,
    memory_mib: Option<u64>,
}

impl Card {
    fn of(a: &Accelerator) -> Card {
        Card {
            uuid: a.uuid.clone(),
            card: a.drm.and_then(|d| d.card),
            render: a.drm.and_then(|d| d.render),
            bdf: a.bus_id.map(|b| b.sysfs()),
            memory_mib: a.memory_mib,
        }
    }
}

/// The MetaX responder of one node.
pub struct MetaxResponder {
    cards: DetectedCards<Card>,
    host: Option<Arc<dyn Host>>,
    dirs: PodDirs,
    /// The sGPU manager; `None` without the host's files or writes (slices are refused).
    sgpu: Option<Sgpu>,
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
        let sgpu = match (&setup.host, &setup.writes) {
            (Some(host), Some(writes)) => Some(Sgpu::new(
                host.clone(),
                writes.clone(),
                setup.pod_dir_root.clone(),
            )),
            _ => None,
        };
        MetaxResponder {
            cards: DetectedCards::of(&setup.accelerators, Card::of),
            host: setup.host,
            dirs: PodDirs::new(setup.pod_dir_root),
            sgpu,
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
                    "sliced container {container:?} allocated {} cards, but MetaX sgpu slicing is single-card",
                    many.len()
                )));
            }
        };
        // The Pod's and container's names become the marker's path: one component each.
        self.dirs.container(&answer.pod.uid, container)?;
        let card = self.card(seat)?;
        let vram = card.memory_mib.filter(|v| *v > 0).ok_or_else(|| {
            refused("derive sliced memory limit: the card reports no VRAM".into())
        })?;
        if answer.slice_units == 0 {
            return Err(refused(
                "derive sliced memory limit: the slice asks for no memory".into(),
            ));
        }
        let mem_mib = mib_for_units(answer.slice_units, vram).min(vram);
        let cores_pct = answer.cores_percentage.unwrap_or(100);
        let whole_card = cores_pct >= 100 && mem_mib >= vram;
        let bdf = card.bdf.clone().ok_or_else(|| {
            refused("reserve metax sgpu slice: the accelerator reports no pci bus id, so sysfs cannot address it".into())
        })?;
        let sgpu = self
            .sgpu
            .as_ref()
            .ok_or_else(|| refused(NO_WRITES.into()))?;
        let index = sgpu
            .reserve(&Request {
                pod_uid: answer.pod.uid.clone(),
                container: container.to_string(),
                bdf: bdf.clone(),
                cores_pct,
                mem_mib,
                whole_card,
            })
            .map_err(|e| refused(format!("reserve metax sgpu slice: {e}")))?;
        let mut response = Injection::default();
        if self.exists(CONTROL_NODES[0]) {
            response.devices.push(node(CONTROL_NODES[0]));
        } else {
            tracing::warn!(node = CONTROL_NODES[0], "{NO_CONTROL_NODE}");
        }
        match card.render {
            Some(r) => self.push_if_present(&format!("/dev/dri/renderD{r}"), &mut response),
            None => tracing::warn!(uuid = card.uuid.as_deref(), "{NO_RENDER_INDEX}"),
        }
        if !whole_card {
            response.envs.insert(
                SGPUS_ENV.into(),
                format!(
                    "sgpu={bdf}#{index};compute={cores_pct};vram={mem_mib};alias={}{}",
                    crate::sgpu::ALIAS_PREFIX,
                    answer.pod.uid
                ),
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

    /// A gone Pod's directories go with its slices, in the reclaim pass (its markers must
    /// outlive the subdevices they record); a Pod that held none loses its directory now.
    fn reclaim(&self, pod_uid: &str) {
        let marked = self.sgpu.as_ref().is_some_and(|s| s.holds(pod_uid));
        if !marked {
            self.dirs.reclaim(pod_uid);
        }
    }

    fn holds_slices_until_pod_gone(&self) -> bool {
        true
    }

    fn reclaim_interval(&self) -> Option<std::time::Duration> {
        self.sgpu.as_ref().map(|_| RECLAIM_INTERVAL)
    }

    fn reclaim_pass(&self, live: &std::collections::BTreeSet<String>) {
        let Some(sgpu) = &self.sgpu else { return };
        let done = sgpu.reclaim_pass(live);
        for (bdf, index) in &done.destroyed {
            tracing::info!(card = %bdf, index, "destroyed an sgpu subdevice of a gone Pod");
        }
        for error in &done.errors {
            tracing::warn!("sgpu reclaim: {error}");
        }
    }
}
