//! The AMD responder: AMD injects the device nodes itself (seed 000, "Exclusive and shared"),
//! so a node needs the amdgpu driver alone — no vendor container runtime, no CDI.
//!
//! Every answer (exclusive, shared, sliced, and the visibility sidecar) carries `/dev/kfd` once,
//! then each granted accelerator's `/dev/dri/card<N>` and `/dev/dri/renderD<M>` (minors as
//! detected, read apart from sysfs), every one required to exist on the host, and
//! `AMD_VISIBLE_DEVICES=none` (the variable and the injected nodes union, so a live variable
//! would be a second grant channel). A slice adds, in ascending accelerator order (one list, so
//! the three positional keys stay in step): `ROCR_VISIBLE_DEVICES` naming exactly the injected
//! accelerators' `GPU-` ids, `VROCM_DEVICE_MEMORY_LIMIT_<i>` (bare MiB), `HSA_CU_MASK`
//! (`<i>:<lo>-<hi>` per accelerator, [`crate::cumask`]), `VROCM_LEDGER_PATH`, the quiet-log
//! variable unless the container's own `env:` sets it, and the shim with its two readers
//! mounted read-only beside a per-container read-write ledger directory.
//!
//! The compute windows in force outlive the process: each sliced container's windows are kept
//! in `<pod-dir-root>/<pod>/c-<container>/cu-windows.json` (0600, atomic; beside the mounted
//! ledger directory, not in it, so the container cannot edit them) and read back when the
//! responder is built, so a restarted daemon places new windows around the running ones. The
//! file goes with the Pod's directory when the Pod is reclaimed (which the plugin's restart
//! reconcile does for a Pod that went while the daemon was down).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use accel_backend::chores::{self, PodDirs, PodEnv, WRITABLE_BY_ANY_USER};
use accel_backend::respond::{
    Answer, DeviceNode, Injection, Mount, PrepareError, Responder, ResponderError, ResponderSetup,
};
use accel_core::inventory::Accelerator;
use accel_core::ledger::units::mib_for_units;
use accel_core::ledger::{Family, Seat};
use accel_host::Host;

use crate::cumask::{self, CuTopology};
use crate::drm;

/// The shim's directory under the library directory (flat: one artifact for every ROCm).
pub const LIBRARY_SUBDIR: &str = "amd";
/// The shim's file name.
pub const SHIM: &str = "libvrocm.so";
/// The two readers mounted beside it.
pub const TOOLS: [&str; 2] = ["rocm-monitor", "rocm-cumask-check"];
/// Where the shim and its tools appear in a sliced container.
pub const CONTAINER_DIR: &str = "/usr/local/vrocm";
/// The per-container ledger directory in the container.
pub const CONTAINER_RUN_DIR: &str = "/var/run/vrocm";
/// `VROCM_LEDGER_PATH`'s value.
pub const LEDGER_PATH: &str = "/var/run/vrocm/ledger";
/// The compute node every grant carries.
pub const KFD: &str = "/dev/kfd";
/// The file a sliced container's compute windows are kept in, in its `c-<container>` directory.
pub const WINDOWS_FILE: &str = "cu-windows.json";

/// One compute window as kept on disk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct KeptWindow {
    uuid: String,
    lo: u32,
    hi: u32,
}

/// One accelerator's facts the responder needs, from the detection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Card {
    uuid: Option<String>,
    bus: Option<String>,
    card: Option<u32>,
    render: Option<u32>,
    vram_mib: Option<u64>,
    topology: Option<CuTopology>,
}

impl Card {
    fn of(a: &Accelerator) -> Card {
        let geometry = a.compute_geometry.clone().unwrap_or_default();
        let topology = match (&a.compute_capability, geometry.compute_units) {
            (Some(gfx), Some(cu)) => Some(CuTopology {
                gfx: gfx.clone(),
                compute_units: cu,
                shader_engines: geometry.shader_engines.unwrap_or(0),
                xccs: geometry.xccs.unwrap_or(0),
            }),
            _ => None,
        };
        Card {
            uuid: a.uuid.clone(),
            bus: a.bus_id.map(|b| b.sysfs()),
            card: a.drm.and_then(|d| d.card),
            render: a.drm.and_then(|d| d.render),
            vram_mib: a.memory_mib,
            topology,
        }
    }
}

/// A compute window held on an accelerator by one container.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    pod: String,
    container: String,
    lo: u32,
    hi: u32,
}

/// The AMD responder of one node.
pub struct AmdResponder {
    cards: BTreeMap<u32, Card>,
    /// The host the device nodes must exist on (`None`: not checked).
    host: Option<Arc<dyn Host>>,
    dirs: PodDirs,
    preload_dir: PathBuf,
    library_dir: PathBuf,
    /// Compute windows in force, by accelerator UUID.
    windows: Mutex<BTreeMap<String, Vec<Held>>>,
}

impl std::fmt::Debug for AmdResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmdResponder")
            .field("cards", &self.cards)
            .field("library_dir", &self.library_dir)
            .finish_non_exhaustive()
    }
}

fn refused(message: String) -> ResponderError {
    ResponderError::Refused(message)
}

impl AmdResponder {
    /// The responder for a node's first detection, with the compute windows kept on disk by an
    /// earlier run.
    pub fn from_setup(setup: ResponderSetup) -> AmdResponder {
        let dirs = PodDirs::new(setup.pod_dir_root);
        let windows = kept_windows(&dirs);
        AmdResponder {
            cards: setup
                .accelerators
                .iter()
                .map(|a| (a.index, Card::of(a)))
                .collect(),
            host: setup.host,
            dirs,
            preload_dir: setup.preload_dir,
            library_dir: setup.library_dir,
            windows: Mutex::new(windows),
        }
    }

    /// The host directory the shim and its readers are staged in.
    pub fn shim_dir(library_dir: &Path) -> PathBuf {
        library_dir.join(LIBRARY_SUBDIR)
    }

    /// The host directory of the `ld.so.preload` file sliced containers mount.
    fn preload_dir(&self) -> PathBuf {
        self.preload_dir.join(LIBRARY_SUBDIR)
    }

    /// The `ld.so.preload` file sliced containers mount.
    pub fn preload_file(&self) -> PathBuf {
        chores::preload_file(&self.preload_dir())
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

    /// The answer for one container.
    pub fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        let container_name = answer.container.map_or("main", |c| c.name.as_str());
        if answer.seats.is_empty() {
            return Err(refused(format!(
                "no allocated accelerator found for container {container_name:?}"
            )));
        }
        let mut granted: Vec<(&Seat, &Card, String)> = Vec::with_capacity(answer.seats.len());
        for seat in answer.seats {
            let uuid = seat.uuid.clone().filter(|u| !u.is_empty()).ok_or_else(|| {
                refused(format!(
                    "card at index {} reports no unique id, so it cannot be granted",
                    seat.index
                ))
            })?;
            granted.push((seat, self.card(seat)?, uuid));
        }
        if !self.exists(KFD) {
            return Err(refused(format!(
                "the host has no device node {KFD:?}, so no accelerator can be granted"
            )));
        }
        let mut response = Injection::default();
        response.devices.push(node(KFD));
        let mut owners: BTreeMap<String, (&str, Option<&str>)> = BTreeMap::new();
        for (_, card, uuid) in &granted {
            let (Some(c), Some(r)) = (card.card, card.render) else {
                return Err(refused(format!(
                    "card {uuid} records no drm card and render node, so the device nodes it needs cannot be named"
                )));
            };
            for path in [format!("/dev/dri/card{c}"), format!("/dev/dri/renderD{r}")] {
                if let Some((other, other_bus)) = owners.get(&path) {
                    return Err(refused(format!(
                        "cards {other} and {uuid} both record drm node {path:?}, so neither can be granted; compare their {} and {} listings",
                        drm::bound_drm_dir(drm::DRIVER, other_bus.unwrap_or("?")),
                        drm::bound_drm_dir(drm::DRIVER, card.bus.as_deref().unwrap_or("?")),
                    )));
                }
                if !self.exists(&path) {
                    return Err(refused(format!(
                        "card {uuid} has no device node {path:?} on the host"
                    )));
                }
                owners.insert(path.clone(), (uuid.as_str(), card.bus.as_deref()));
                response.devices.push(node(&path));
            }
        }
        response
            .envs
            .insert("AMD_VISIBLE_DEVICES".into(), "none".into());
        if answer.family == Some(Family::Sliced) {
            self.slice(answer, &granted, container_name, &mut response)?;
        }
        Ok(response)
    }

    fn slice(
        &self,
        answer: &Answer<'_>,
        granted: &[(&Seat, &Card, String)],
        container: &str,
        response: &mut Injection,
    ) -> Result<(), ResponderError> {
        let percent = answer.cores_percentage.unwrap_or(100);
        let ids: Vec<&str> = granted.iter().map(|(_, _, u)| u.as_str()).collect();
        // Derive every window before holding any, so a refusal leaves nothing held.
        let mut masks = Vec::with_capacity(granted.len());
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (position, (seat, card, uuid)) in granted.iter().enumerate() {
            let vram = card
                .vram_mib
                .or(seat.memory_mib)
                .ok_or(ResponderError::NoVram { index: seat.index })?;
            response.envs.insert(
                format!("VROCM_DEVICE_MEMORY_LIMIT_{position}"),
                mib_for_units(answer.slice_units, vram).to_string(),
            );
            let derive = |reason: String| {
                refused(format!(
                    "derive the compute window of card {uuid}: cannot derive a CU mask for {uuid:?}: {reason}"
                ))
            };
            let topology = card
                .topology
                .as_ref()
                .ok_or_else(|| derive("the detection shows no compute topology".into()))?;
            let window = cumask::window(topology, percent).map_err(derive)?;
            let held = windows.get(uuid.as_str()).cloned().unwrap_or_default();
            let mine = held
                .iter()
                .find(|h| h.pod == answer.pod.uid && h.container == container);
            let (lo, hi) = match mine {
                // A retried Allocate keeps its window.
                Some(h) => (h.lo, h.hi),
                None => {
                    let occupied: Vec<(u32, u32)> = held.iter().map(|h| (h.lo, h.hi)).collect();
                    let lo = cumask::place(
                        topology.compute_units,
                        window.length,
                        window.quantum,
                        &occupied,
                    );
                    (lo, lo + window.length.min(topology.compute_units) - 1)
                }
            };
            if window.aligned_down {
                tracing::info!(
                    card = %uuid,
                    requested = percent,
                    delivered = u64::from(window.length) * 100 / u64::from(topology.compute_units),
                    atom = window.quantum,
                    compute_units = topology.compute_units,
                    "compute request aligned down to the card's allocation atom"
                );
            }
            masks.push((uuid.clone(), position, lo, hi, mine.is_none()));
        }
        // The container's directory holds its ledger directory and its windows file.
        let container_dir = self.dirs.container(&answer.pod.uid, container)?;
        let pod_dir = container_dir.join("run").join("vrocm");
        chores::make_dir(&pod_dir, Some(WRITABLE_BY_ANY_USER))?;
        if masks.iter().any(|m| m.4) {
            let kept: Vec<KeptWindow> = masks
                .iter()
                .map(|(uuid, _, lo, hi, _)| KeptWindow {
                    uuid: uuid.clone(),
                    lo: *lo,
                    hi: *hi,
                })
                .collect();
            let path = container_dir.join(WINDOWS_FILE);
            let text = serde_json::to_vec(&kept).unwrap_or_default();
            accel_host::atomic::write_atomic(&path, &text).map_err(|e| {
                ResponderError::WorkDir {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                }
            })?;
        }
        for (uuid, _, lo, hi, fresh) in &masks {
            if *fresh {
                windows.entry(uuid.clone()).or_default().push(Held {
                    pod: answer.pod.uid.clone(),
                    container: container.to_string(),
                    lo: *lo,
                    hi: *hi,
                });
            }
        }
        drop(windows);
        let mask: Vec<String> = masks
            .iter()
            .map(|(_, i, lo, hi, _)| format!("{i}:{lo}-{hi}"))
            .collect();
        response
            .envs
            .insert("ROCR_VISIBLE_DEVICES".into(), ids.join(","));
        response.envs.insert("HSA_CU_MASK".into(), mask.join(";"));
        response
            .envs
            .insert("VROCM_LEDGER_PATH".into(), LEDGER_PATH.into());
        PodEnv::new(&mut response.envs, answer.container).set("LIBVROCM_LOG_LEVEL", "1");
        let lib = Self::shim_dir(&self.library_dir);
        response
            .mounts
            .push(chores::preload_mount(&self.preload_dir()));
        for file in std::iter::once(SHIM).chain(TOOLS) {
            response.mounts.push(Mount {
                container_path: format!("{CONTAINER_DIR}/{file}"),
                host_path: lib.join(file).display().to_string(),
                read_only: true,
            });
        }
        response.mounts.push(Mount {
            container_path: CONTAINER_RUN_DIR.into(),
            host_path: pod_dir.display().to_string(),
            read_only: false,
        });
        Ok(())
    }

    /// Writes the `ld.so.preload` file naming the shim where it appears in the container.
    pub fn stage_preload_file(&self) -> Result<(), PrepareError> {
        chores::stage_preload_file(&self.preload_dir(), &format!("{CONTAINER_DIR}/{SHIM}"))
    }

    /// Takes back a gone Pod's working directory and compute windows.
    pub fn reclaim(&self, pod_uid: &str) {
        if !chores::is_component(pod_uid) {
            return;
        }
        {
            let mut windows = self
                .windows
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for held in windows.values_mut() {
                held.retain(|h| h.pod != pod_uid);
            }
        }
        self.dirs.reclaim(pod_uid);
    }

    /// The windows held on an accelerator, as `(lo, hi)` (for tests and diagnostics).
    pub fn windows_on(&self, uuid: &str) -> BTreeSet<(u32, u32)> {
        self.windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(uuid)
            .map(|h| h.iter().map(|h| (h.lo, h.hi)).collect())
            .unwrap_or_default()
    }
}

/// The compute windows kept by earlier runs, by accelerator UUID: every
/// `<pod>/c-<container>/cu-windows.json` under the pod-directory root. A file that cannot be read is logged naming it and
/// skipped (its windows may then be placed over: overlapping windows are an over-commit of
/// compute, which slices allow, never a wrong grant).
fn kept_windows(dirs: &PodDirs) -> BTreeMap<String, Vec<Held>> {
    let mut windows: BTreeMap<String, Vec<Held>> = BTreeMap::new();
    for dir in dirs.containers() {
        let path = dir.path.join(WINDOWS_FILE);
        let kept: Vec<KeptWindow> = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(kept) => kept,
                Err(e) => {
                    tracing::error!(
                        "{}: unreadable ({e}); its compute windows are not known",
                        path.display()
                    );
                    continue;
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                tracing::error!(
                    "{}: cannot read ({e}); its compute windows are not known",
                    path.display()
                );
                continue;
            }
        };
        for window in kept.into_iter().filter(|w| w.lo <= w.hi) {
            windows.entry(window.uuid).or_default().push(Held {
                pod: dir.pod_uid.clone(),
                container: dir.container.clone(),
                lo: window.lo,
                hi: window.hi,
            });
        }
    }
    windows
}

fn node(path: &str) -> DeviceNode {
    DeviceNode {
        container_path: path.into(),
        host_path: path.into(),
        permissions: "rw".into(),
    }
}

impl Responder for AmdResponder {
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        AmdResponder::respond(self, answer)
    }

    fn answers_alike(&self) -> bool {
        // Non-sliced answers name the grant's nodes only, whichever container asks.
        true
    }

    fn prepare_slicing(&self) -> Result<(), PrepareError> {
        self.stage_preload_file()
    }

    fn reclaim(&self, pod_uid: &str) {
        AmdResponder::reclaim(self, pod_uid);
    }
}
