//! A recorded Hygon host whose MIG state follows the commands run against it: the
//! dialect-generic replay ([`accel_backend::mig_cli::replay`]) with hy-smi's side.
//!
//! - `hy-smi mig -i <N>` names card `N` (the registry's `dev<N>`); the create form Hygon
//!   documents, `hy-smi mig -cgi <profile id> -C -i <N>` (no placement), takes the lowest free
//!   legal placement, as the generic replay does for any `-cgi` without one;
//! - the driver's registry follows the state under the recording's `root/`: one
//!   `etc/dmi_mig_config/ci/dev<N>gi<G>ci<C>.conf` per compute instance in Hygon's grammar
//!   (addendum H2: the GPU-instance block's 13 lines, then the compute-instance block's 14,
//!   `mig_uuid` last; [`registry::CiConf::render`]) and one `etc/dmi_mig_config/gi/dev<N>gi<G>.conf`
//!   per GPU instance (its GI block: that directory's format is unmeasured and nothing reads
//!   it); a destroyed instance's files go, and anything else in those directories (a directory a
//!   runtime made) is left alone;
//! - the blocks' per-profile figures (`gi_count_max`, `cu_count`, `gpu_slice_count`,
//!   `memory_size_MB`) are the library's profile infos, which no listing prints exactly: they
//!   are the host's [`PROFILES_FILE`], beside its state;
//! - a busy instance's compute instance is refused `The device is exist and may be in use.`
//!   (spec §6.5, measured C5).
//!
//! What the replay decides where no capture shows the driver's answer (also in the host's
//! `NOTES.md`): the listings' device word `DCU`; the create's answer (nvidia-smi's lines); GPU
//! instance ids from 3 (the spec's measured card handed out 3, 4, 5, 6 for its first four); the
//! masks (`gpu_slice_mask` the GI's slices, `cu_mask` its compute units 64 a line, `pipe_mask`
//! one bit a slice); the compute instance's profile id (its slices − 1) and placement (0 and
//! the GI's slices); the UUID's shape (the 8-4-4-4-12 form a container's `MIG-` value carries);
//! the `gi/` file names.

use std::path::Path;
use std::time::Duration;

use accel_backend::mig_cli::replay::{self, Dialect, MigState, StateInstance};
use accel_host::{CommandError, CommandOutput, Commands};
use serde::{Deserialize, Serialize};

use crate::registry::{self, CiBlock, CiConf, GiBlock};

pub use accel_backend::mig_cli::replay::STATE_FILE;

/// The file, beside [`STATE_FILE`], holding the library's profile infos the registry files
/// carry (`nvmlGpuInstanceProfileInfo_t`'s figures, spec §6.1).
pub const PROFILES_FILE: &str = "mig-profiles.json";

/// [`PROFILES_FILE`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileInfos {
    pub profiles: Vec<ProfileInfo>,
}

/// One GPU-instance profile's infos, the same on every card of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileInfo {
    /// The profile id (`-cgi`'s, the registry's `profile_id`).
    pub id: u32,
    pub gi_count_max: u32,
    pub cu_count: u32,
    pub gpu_slice_count: u32,
    #[serde(rename = "memorySizeMB")]
    pub memory_size_mb: u64,
}

impl ProfileInfos {
    /// The host's file; its absence is an error (the registry files cannot be written).
    pub fn load(dir: &Path) -> Result<ProfileInfos, String> {
        let path = dir.join(PROFILES_FILE);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// hy-smi's side of the replay.
#[derive(Debug, Clone, Copy, Default)]
pub struct HySmiReplay;

/// `inner`, wrapped in the MIG replay when the recording `dir` has a [`STATE_FILE`].
pub fn wrap(dir: &Path, inner: Box<dyn Commands>) -> Box<dyn Commands> {
    replay::wrap(dir, inner, HySmiReplay)
}

/// What the driver answers for a busy instance (spec §6.5).
pub const IN_USE: &str = "The device is exist and may be in use.";

impl Dialect for HySmiReplay {
    fn program(&self) -> &'static str {
        "hy-smi"
    }

    fn device_word(&self) -> &'static str {
        "DCU"
    }

    fn first_gpu_instance(&self) -> u32 {
        3
    }

    fn uuid_tag(&self) -> u32 {
        0x6879_6700
    }

    fn in_use(&self) -> &'static str {
        IN_USE
    }

    fn renders(&self, _argv: &[&str]) -> bool {
        false
    }

    fn render(
        &self,
        argv: &[&str],
        _state: &MigState,
        inner: &dyn Commands,
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        inner.run(argv, deadline)
    }

    fn changed(&self, dir: &Path, state: &MigState) -> Result<(), String> {
        registry_with(&dir.join("root"), state, &ProfileInfos::load(dir)?)
    }
}

/// The file name of GPU instance `gi` of card `dev` under `gi/`.
fn gi_name(dev: u32, gi: u32) -> String {
    format!("dev{dev}gi{gi}.conf")
}

/// `count` one-bits from bit `from`, as hex (`0x…`), cut to the 64 bits of one mask line:
/// `line` 0 the low 64, 1 the next.
fn bits(from: u32, count: u32, line: u32) -> String {
    let (lo, hi) = (line * 64, line * 64 + 64);
    let mut value: u64 = 0;
    for bit in from.max(lo)..(from + count).min(hi) {
        value |= 1 << (bit - lo);
    }
    format!("{value:#018x}")
}

/// The GPU-instance block of `instance` on the card at `pci`.
fn gi_block(instance: &StateInstance, info: &ProfileInfo, pci: &Option<String>) -> GiBlock {
    let cus_per_slice = info.cu_count / info.gpu_slice_count.max(1);
    let first_cu = instance.start * cus_per_slice;
    GiBlock {
        pci: pci.clone(),
        id: Some(instance.gpu_instance),
        pipe_mask: Some(bits(instance.start, instance.size, 0)),
        gpu_slice_mask: Some(bits(instance.start, instance.size, 0)),
        cu_mask: (0..2).map(|l| bits(first_cu, info.cu_count, l)).collect(),
        profile_id: Some(instance.profile_id),
        gi_count_max: Some(info.gi_count_max),
        cu_count: Some(info.cu_count),
        gpu_slice_count: Some(info.gpu_slice_count),
        memory_size_mb: Some(info.memory_size_mb),
        placement_start: Some(instance.start),
        placement_size: Some(instance.size),
    }
}

/// The file of compute instance `ci` (covering its GPU instance) with MIG UUID `uuid`.
fn ci_conf(gi: &GiBlock, ci: u32, uuid: &str) -> CiConf {
    let slices = gi.gpu_slice_count.unwrap_or(1);
    CiConf {
        gi: gi.clone(),
        ci: CiBlock {
            pci: gi.pci.clone(),
            gi_id: gi.id,
            id: Some(ci),
            pipe_mask: gi.pipe_mask.clone(),
            gpu_slice_mask: gi.gpu_slice_mask.clone(),
            cu_mask: gi.cu_mask.clone(),
            profile_id: Some(slices.saturating_sub(1)),
            ci_count_max: Some(1),
            cu_count: gi.cu_count,
            gpu_slice_count: Some(slices),
            placement_start: Some(0),
            placement_size: Some(slices),
            mig_uuid: Some(uuid.to_string()),
        },
    }
}

/// Brings the registry under `root` up to `state`.
fn registry_with(root: &Path, state: &MigState, infos: &ProfileInfos) -> Result<(), String> {
    let base = root.join(registry::DIR.trim_start_matches('/'));
    let io = |path: &Path, e: std::io::Error| format!("{}: {e}", path.display());
    let gi_dir = base.join("gi");
    let ci_dir = base.join("ci");
    let mut wanted_gi = Vec::new();
    let mut wanted_ci = Vec::new();
    for instance in &state.instances {
        let info = infos
            .profiles
            .iter()
            .find(|p| p.id == instance.profile_id)
            .ok_or_else(|| {
                format!(
                    "{PROFILES_FILE}: no profile {} (GPU instance {} on DCU {})",
                    instance.profile_id, instance.gpu_instance, instance.gpu
                )
            })?;
        let pci = std::fs::read_to_string(base.join(format!("dev{}", instance.gpu)))
            .ok()
            .as_deref()
            .and_then(registry::parse_dev)
            .map(|b| b.sysfs());
        let gi = gi_block(instance, info, &pci);
        let gi_text: String = CiConf {
            gi: gi.clone(),
            ci: CiBlock::default(),
        }
        .render()
        .lines()
        .take(registry::GI_LINES)
        .map(|l| format!("{l}\n"))
        .collect();
        wanted_gi.push((gi_name(instance.gpu, instance.gpu_instance), gi_text));
        for compute in &instance.compute_instances {
            let uuid = compute
                .uuid
                .strip_prefix(crate::mig::MIG_PREFIX)
                .unwrap_or(&compute.uuid);
            wanted_ci.push((
                format!(
                    "dev{}gi{}ci{}.conf",
                    instance.gpu, instance.gpu_instance, compute.id
                ),
                ci_conf(&gi, compute.id, uuid).render(),
            ));
        }
    }
    for (dir, wanted, is_ours) in [
        (&gi_dir, &wanted_gi, is_gi_name as fn(&str) -> bool),
        (&ci_dir, &wanted_ci, |n: &str| {
            registry::parse_ci_name(n).is_some()
        }),
    ] {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let present = std::fs::read_dir(dir).map_err(|e| io(dir, e))?;
        for entry in present.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_file = entry.file_type().is_ok_and(|t| t.is_file());
            if is_file && is_ours(&name) && !wanted.iter().any(|(n, _)| *n == name) {
                std::fs::remove_file(entry.path()).map_err(|e| io(&entry.path(), e))?;
            }
        }
        for (name, text) in wanted.iter() {
            let path = dir.join(name);
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                accel_host::atomic::write_atomic(&path, text.as_bytes())
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
    }
    Ok(())
}

fn is_gi_name(name: &str) -> bool {
    name.strip_prefix("dev")
        .and_then(|n| n.strip_suffix(".conf"))
        .and_then(|n| n.split_once("gi"))
        .is_some_and(|(d, g)| {
            !d.is_empty()
                && !g.is_empty()
                && d.bytes().all(|b| b.is_ascii_digit())
                && g.bytes().all(|b| b.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_cut_at_64_bits() {
        assert_eq!(bits(0, 1, 0), "0x0000000000000001");
        assert_eq!(bits(20, 20, 0), "0x000000fffff00000");
        assert_eq!(bits(60, 20, 0), "0xf000000000000000");
        assert_eq!(bits(60, 20, 1), "0x000000000000ffff");
    }

    #[test]
    fn gi_names() {
        assert!(is_gi_name("dev0gi3.conf"));
        assert!(!is_gi_name("dev0gi3ci0.conf"));
        assert!(!is_gi_name("notes.txt"));
    }
}
