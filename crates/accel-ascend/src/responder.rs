//! The Ascend responder (spec/ascend.md §4, §5): every family answers with
//! `ASCEND_VISIBLE_DEVICES` naming the driver's own numbers — the physical id, or on the 950
//! family the dcmi logic id (§4.1) — never our index; the Ascend Docker Runtime (the `ascend`
//! RuntimeClass) turns it into `/dev/davinci<N>`, the control nodes and the driver mounts, so
//! no device node and no mount is injected here, and `ASCEND_RUNTIME_OPTIONS` is never set.
//!
//! Shared, sliced and visibility grants first ensure each chip's container-share flag on
//! ([`crate::share`]); exclusive grants leave it alone. A slice (exactly one NPU, of the
//! node's one family) adds vcann-rt: the per-container `npu_info.config` (§5.3) in the
//! container's working directory, `libvruntime.so` and `enpu-monitor` from
//! `<library-dir>/ascend/cann-<major>-<family>/`, the preload file, `/dev/shm`, and
//! `ENPU_LOG_LEVEL=1`, `ENPU_DSMI_HOOK=1` under the never-overwrite rule.
//!
//! A grant of 950 NPUs, in every family, also names their fabric's topology file in
//! `HCCL_TOPO_FILE_PATH` (spec §4.4) when the detector resolved their product form
//! ([`crate::product`]) and every granted NPU has the same one; otherwise the variable is left
//! out (logged), and the grant goes through, as the spec has it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use accel_backend::chores::{self, PodDirs, PodEnv, WRITABLE_BY_ANY_USER};
use accel_backend::respond::{
    Answer, Injection, Mount, PrepareError, Responder, ResponderError, ResponderSetup,
};
use accel_core::inventory::Accelerator;
use accel_core::ledger::units::mib_for_units;
use accel_core::ledger::{Family, Seat};
use accel_host::Commands;

use crate::npuconfig::{self, NpuConfig};
use crate::product::{self, ProductType};
use crate::share::{self, Outcome};
use crate::soc;

/// The variable the Ascend Docker Runtime reads.
pub const VISIBLE_DEVICES: &str = "ASCEND_VISIBLE_DEVICES";
/// The slicing libraries' directory under the library directory.
pub const LIBRARY_SUBDIR: &str = "ascend";
/// vcann-rt's runtime, in its build's `lib/`.
pub const RUNTIME: &str = "libvruntime.so";
/// Where the runtime appears in a sliced container.
pub const RUNTIME_IN_CONTAINER: &str = "/opt/enpu/vcann-rt/lib/libvruntime.so";
/// vcann-rt's reader, in its build's `tools/`.
pub const MONITOR: &str = "enpu-monitor";
/// Where the reader appears in a sliced container.
pub const MONITOR_IN_CONTAINER: &str = "/opt/enpu/vcann-rt/tools/enpu-monitor";
/// The shared-memory mount every slice of a node shares.
pub const SHM: &str = "/dev/shm";
/// The preload file's lines, verbatim (spec §5.4): the driver's `libdcmi.so` in both places it
/// lives, then the runtime.
pub const PRELOAD_LINES: [&str; 3] = [
    "/usr/local/dcmi/libdcmi.so",
    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
    RUNTIME_IN_CONTAINER,
];
/// The family / CANN-major pairs a vcann-rt build is staged for (spec §5.1).
pub const SLICED_BUILDS: [(soc::Family, &[u32]); 4] = [
    (soc::Family::F910B, &[8, 9]),
    (soc::Family::F910C, &[8, 9]),
    (soc::Family::F950, &[9]),
    (soc::Family::F310P, &[9]),
];
/// How long one `npu-smi` call for the share flag may take.
pub const FLAG_DEADLINE: Duration = Duration::from_secs(30);

/// Whether a vcann-rt build exists for a family and CANN major.
pub fn sliceable(family: soc::Family, major: u32) -> bool {
    SLICED_BUILDS
        .iter()
        .any(|(f, majors)| *f == family && majors.contains(&major))
}

/// The build directory of a family and major (`<lib>/ascend/cann-8-910b`).
pub fn build_dir(library_dir: &Path, major: u32, family: soc::Family) -> PathBuf {
    library_dir.join(LIBRARY_SUBDIR).join(format!(
        "cann-{major}-{}",
        family.name().to_ascii_lowercase()
    ))
}

/// One chip's facts the responder needs, from the detection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Chip {
    uuid: Option<String>,
    family: Option<soc::Family>,
    /// `[physical id, card id, chip index]`.
    slots: Vec<u32>,
    vram_mib: Option<u64>,
    /// The 950's product form, when the detector resolved it.
    product: Option<ProductType>,
}

impl Chip {
    fn of(a: &Accelerator) -> Chip {
        Chip {
            uuid: a.uuid.clone(),
            family: a.architecture.as_deref().and_then(soc::Family::from_name),
            slots: a.physical_indexes.clone(),
            vram_mib: a.memory_mib,
            product: a.product_type.as_deref().and_then(ProductType::from_name),
        }
    }

    fn name(&self) -> &str {
        self.uuid.as_deref().unwrap_or("?")
    }

    fn is_v2(&self) -> bool {
        self.family == Some(soc::Family::F950)
    }

    /// The number `ASCEND_VISIBLE_DEVICES` names (§4.1).
    fn visible(&self) -> Result<u32, ResponderError> {
        if self.is_v2() {
            return self.slots.get(1).copied().ok_or_else(|| {
                refused(format!(
                    "accelerator {:?} carries no dcmi device index",
                    self.name()
                ))
            });
        }
        self.slots.first().copied().ok_or_else(|| {
            refused(format!(
                "accelerator {:?} carries no dcmi physical index",
                self.name()
            ))
        })
    }
}

fn refused(message: String) -> ResponderError {
    ResponderError::Refused(message)
}

/// The topology file a grant of `chips` names (spec §4.4): `None` for a grant of no 950, and
/// for one whose 950 NPUs have no form or not the same one (logged).
fn topology_file(chips: &[&Chip]) -> Option<&'static str> {
    let fabric: Vec<&&Chip> = chips.iter().filter(|c| c.is_v2()).collect();
    let first = fabric.first()?;
    let forms: BTreeSet<Option<ProductType>> = fabric.iter().map(|c| c.product).collect();
    match (forms.len(), first.product) {
        (1, Some(form)) => Some(form.topology_file()),
        _ => {
            tracing::info!(
                accelerators = ?fabric.iter().map(|c| c.name()).collect::<Vec<_>>(),
                forms = ?forms.iter().map(|f| f.map(ProductType::name)).collect::<Vec<_>>(),
                "{} left out: the granted 950 NPUs have no product form, or not one form (`detect` notes why)",
                product::TOPO_ENV
            );
            None
        }
    }
}

/// The Ascend responder of one node.
pub struct AscendResponder {
    chips: BTreeMap<u32, Chip>,
    commands: Option<Arc<dyn Commands>>,
    runtime_major: Option<u32>,
    /// The node's family (one driver stack per node: the first chip's).
    family: Option<soc::Family>,
    dirs: PodDirs,
    preload_dir: PathBuf,
    library_dir: PathBuf,
    /// Held while a flag is read and written (one writer per chip at a time).
    flags: Mutex<()>,
    /// Held while a virtual id is chosen and its file written.
    slices: Mutex<()>,
}

impl std::fmt::Debug for AscendResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendResponder")
            .field("chips", &self.chips)
            .field("runtime_major", &self.runtime_major)
            .field("library_dir", &self.library_dir)
            .finish_non_exhaustive()
    }
}

impl AscendResponder {
    /// The responder for a node's first detection.
    pub fn from_setup(setup: ResponderSetup) -> AscendResponder {
        let chips: BTreeMap<u32, Chip> = setup
            .accelerators
            .iter()
            .map(|a| (a.index, Chip::of(a)))
            .collect();
        AscendResponder {
            family: chips.values().find_map(|c| c.family),
            chips,
            commands: setup.commands,
            runtime_major: setup.runtime_major,
            dirs: PodDirs::new(setup.pod_dir_root),
            preload_dir: setup.preload_dir.join(LIBRARY_SUBDIR),
            library_dir: setup.library_dir,
            flags: Mutex::new(()),
            slices: Mutex::new(()),
        }
    }

    /// The `ld.so.preload` file sliced containers mount.
    pub fn preload_file(&self) -> PathBuf {
        chores::preload_file(&self.preload_dir)
    }

    fn chip(&self, seat: &Seat) -> Result<&Chip, ResponderError> {
        self.chips
            .get(&seat.index)
            .filter(|c| c.uuid == seat.uuid)
            .or_else(|| {
                self.chips
                    .values()
                    .find(|c| c.uuid.is_some() && c.uuid == seat.uuid)
            })
            .ok_or_else(|| {
                refused(format!(
                    "accelerator at index {} is not in the detection this responder serves",
                    seat.index
                ))
            })
    }

    /// Ensures the chip's container-share flag on (§4.2).
    fn ensure_shareable(&self, chip: &Chip) -> Result<(), ResponderError> {
        if chip.is_v2() {
            tracing::info!(
                accelerator = chip.name(),
                "a V2 driver declares no container-share flag: the tenanted grant goes through unchecked"
            );
            return Ok(());
        }
        let [_, card, device, ..] = chip.slots[..] else {
            return Err(refused(format!(
                "accelerator {:?} carries no dcmi card/device index",
                chip.name()
            )));
        };
        let Some(commands) = &self.commands else {
            return Err(refused(share::no_api(card, device)));
        };
        let _held = self.flags.lock().unwrap_or_else(PoisonError::into_inner);
        match share::ensure(commands.as_ref(), FLAG_DEADLINE, card, device).map_err(refused)? {
            Outcome::TurnedOn {
                read_failed: Some(why),
            } => tracing::warn!(
                card,
                device,
                read = %why,
                "enabled container-share mode without a trustworthy read"
            ),
            Outcome::TurnedOn { read_failed: None } => tracing::info!(
                card,
                device,
                "enabled container-share mode (npu-smi warns sharing a chip is a security risk; it stays on until reboot or an operator clears it)"
            ),
            Outcome::AlreadyOn | Outcome::NotDeclared => {}
        }
        Ok(())
    }

    /// The answer for one container.
    pub fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        let container = answer.container.map_or("main", |c| c.name.as_str());
        if answer.family == Some(Family::Partitioned) {
            return Err(refused(
                "ascend has no hardware partitioning, so no partition can be granted".into(),
            ));
        }
        if answer.family == Some(Family::Sliced) && answer.seats.len() != 1 {
            return Err(refused(if answer.seats.is_empty() {
                format!("no allocated accelerator found for sliced container {container:?}")
            } else {
                format!(
                    "sliced container {container:?} allocated {} accelerators, but vcann-rt logical slicing is single-NPU",
                    answer.seats.len()
                )
            }));
        }
        if answer.seats.is_empty() {
            return Err(refused(format!(
                "no allocated accelerator found for container {container:?}"
            )));
        }
        let chips: Vec<&Chip> = answer
            .seats
            .iter()
            .map(|s| self.chip(s))
            .collect::<Result<_, _>>()?;
        let visible: Vec<String> = chips
            .iter()
            .map(|c| c.visible().map(|n| n.to_string()))
            .collect::<Result<_, _>>()?;
        let mut response = Injection::default();
        if let (Some(Family::Sliced), [chip]) = (answer.family, chips.as_slice()) {
            self.slice(answer, chip, container, &mut response)?;
        } else if answer.family != Some(Family::Exclusive) {
            for chip in &chips {
                self.ensure_shareable(chip)?;
            }
        }
        response
            .envs
            .insert(VISIBLE_DEVICES.into(), visible.join(","));
        if let Some(file) = topology_file(&chips) {
            PodEnv::new(&mut response.envs, answer.container).set(product::TOPO_ENV, file);
        }
        Ok(response)
    }

    /// The memory quota and the build a slice of `chip` takes, checked before anything is
    /// written.
    fn quota(&self, answer: &Answer<'_>, chip: &Chip) -> Result<(u64, PathBuf), ResponderError> {
        let major = self
            .runtime_major
            .ok_or(ResponderError::NoRuntimeMajor { runtime: "CANN" })?;
        let family = chip.family.ok_or_else(|| {
            refused(format!(
                "accelerator {:?} has no known family, so no vcann-rt build serves it",
                chip.name()
            ))
        })?;
        if self.family != Some(family) || !sliceable(family, major) {
            return Err(refused(format!(
                "accelerator {:?} is a {} NPU, but this node's vcann-rt build is cann-{major}-{}",
                chip.name(),
                family.name(),
                self.family
                    .map_or("none", soc::Family::name)
                    .to_ascii_lowercase()
            )));
        }
        let vram = chip.vram_mib.ok_or_else(|| {
            refused(format!(
                "derive sliced memory limit: accelerator {:?} reports no VRAM",
                chip.name()
            ))
        })?;
        Ok((
            mib_for_units(answer.slice_units, vram),
            build_dir(&self.library_dir, major, family),
        ))
    }

    fn slice(
        &self,
        answer: &Answer<'_>,
        chip: &Chip,
        container: &str,
        response: &mut Injection,
    ) -> Result<(), ResponderError> {
        let (memory, build) = self.quota(answer, chip)?;
        let physical = chip.slots.first().copied().ok_or_else(|| {
            refused(format!(
                "accelerator {:?} carries no dcmi physical index",
                chip.name()
            ))
        })?;
        self.ensure_shareable(chip)?;
        let dir = self.dirs.container(&answer.pod.uid, container)?;
        chores::make_dir(&dir, Some(WRITABLE_BY_ANY_USER))?;
        let file = dir.join(npuconfig::WORKDIR_PATH);
        {
            let _held = self.slices.lock().unwrap_or_else(PoisonError::into_inner);
            let config = NpuConfig {
                physical_npu_id: physical,
                virtual_npu_id: self.virtual_id(&file, physical),
                aicore_quota: answer.cores_percentage.unwrap_or(100),
                memory_quota_mib: memory,
                shm_id: NpuConfig::shm_id_of(chip.name()),
            };
            if let Some(parent) = file.parent() {
                chores::make_dir(parent, None)?;
            }
            accel_host::atomic::write_atomic_mode(
                &file,
                config.render().as_bytes(),
                chores::PRELOAD_FILE_MODE,
            )
            .map_err(|e| ResponderError::WorkDir {
                path: file.display().to_string(),
                reason: e.to_string(),
            })?;
        }
        let mut env = PodEnv::new(&mut response.envs, answer.container);
        env.set("ENPU_LOG_LEVEL", "1");
        env.set("ENPU_DSMI_HOOK", "1");
        let ro = |container_path: &str, host: PathBuf| Mount {
            container_path: container_path.into(),
            host_path: host.display().to_string(),
            read_only: true,
        };
        response
            .mounts
            .push(chores::preload_mount(&self.preload_dir));
        response
            .mounts
            .push(ro(RUNTIME_IN_CONTAINER, build.join("lib").join(RUNTIME)));
        response
            .mounts
            .push(ro(MONITOR_IN_CONTAINER, build.join("tools").join(MONITOR)));
        response.mounts.push(ro(npuconfig::CONTAINER_PATH, file));
        response.mounts.push(Mount {
            container_path: SHM.into(),
            host_path: SHM.into(),
            read_only: false,
        });
        Ok(())
    }

    /// The virtual id of a slice: the one already in this container's own file when it names
    /// the same chip (a retried Allocate), else the lowest not used on the chip by any other
    /// container's file.
    fn virtual_id(&self, own: &Path, physical: u32) -> u32 {
        if let Some((p, v)) = std::fs::read_to_string(own)
            .ok()
            .and_then(|t| npuconfig::ids(&t))
            && p == physical
        {
            return v;
        }
        let used: BTreeSet<u32> = self
            .dirs
            .containers()
            .into_iter()
            .map(|c| c.path.join(npuconfig::WORKDIR_PATH))
            .filter(|p| p != own)
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .filter_map(|t| npuconfig::ids(&t))
            .filter(|(p, _)| *p == physical)
            .map(|(_, v)| v)
            .collect();
        npuconfig::lowest_free(&used)
    }
}

impl Responder for AscendResponder {
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        AscendResponder::respond(self, answer)
    }

    /// A shared or visibility answer sets a driver flag and a slice writes a file: answered
    /// per container, never ahead.
    fn answers_alike(&self) -> bool {
        false
    }

    fn prepare_slicing(&self) -> Result<(), PrepareError> {
        chores::stage_preload_lines(&self.preload_dir, &PRELOAD_LINES)
    }

    fn reclaim(&self, pod_uid: &str) {
        self.dirs.reclaim(pod_uid);
    }
}
