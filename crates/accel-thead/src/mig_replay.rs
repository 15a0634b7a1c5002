//! A recorded T-Head host whose MIG state follows the commands run against it: the
//! dialect-generic replay ([`accel_backend::mig_cli::replay`]) with ppu-smi's side.
//!
//! - `-i` takes a card's UUID (or its index): the UUID is looked up in the recorded `ppu-smi -L`;
//! - `ppu-smi -L` lists each card's MIG devices from the state (the recorded `MIG …` children
//!   are dropped), `    MIG g<GI>.c<CI>.i<CI>, Device <n> (UUID: MIG-…)`, devices numbered per
//!   card from 0 in GPU- then compute-instance order;
//! - `ppu-smi` (the device table) gains the `MIG devices:` table (`PPU GI CI MIG DEV`, the memory
//!   the profile name states, 16 CUs per compute slice) before its `Processes:` table, and a
//!   busy instance has one compute process there (`C`, `python3`) per compute instance;
//! - the driver's capability tree follows the state under the recording's `root/`:
//!   `proc/driver/alixpu/capabilities/ppu<index>/mig/gi<G>/access` and `…/gi<G>/ci<C>/access`
//!   carry `DeviceFileMinor: <m>`, and `dev/alixpu-caps/alixpu-cap<m>` is a character node of
//!   that minor (major [`CAPS_MAJOR`]); a destroyed instance's `gi<G>` directory goes, its nodes
//!   stay (the driver's nodes outlive their instances).
//!
//! What the replay decides where no capture shows the driver's answer (also in the host's
//! `NOTES.md`): GPU instance ids from 0 (the manual's MIG devices table shows GI 0); the
//! capability minors `229376 + 256·index + 16·GI` for a GPU instance and one more than that
//! plus the CI for its compute instance (so PPU 1's GI 0 and CI 0 are the manual's 229632 and
//! 229633); MIG UUIDs with a 13-hex-digit last group, as the manual's are; a busy instance's
//! destroy is not refused (only the allocator's process check keeps it).

use std::path::Path;
use std::time::Duration;

use accel_backend::mig_cli::replay::{self, Dialect, MigState, StateInstance, answer_like};
use accel_host::{CommandError, CommandOutput, Commands};

use crate::responder::CAPABILITIES;
use crate::smi;

pub use accel_backend::mig_cli::replay::STATE_FILE;

/// The major number the replay gives the capability nodes.
pub const CAPS_MAJOR: u32 = 505;
/// The first capability minor the replay hands out.
const CAPS_BASE: u32 = 229_376;

/// ppu-smi's side of the replay.
#[derive(Debug, Clone, Copy, Default)]
pub struct PpuSmiReplay;

/// `inner`, wrapped in the MIG replay when the recording `dir` has a [`STATE_FILE`].
pub fn wrap(dir: &Path, inner: Box<dyn Commands>) -> Box<dyn Commands> {
    replay::wrap(dir, inner, PpuSmiReplay)
}

/// The capability minors of a GPU instance and of its compute instance `ci`.
pub fn capability_minors(index: u32, gpu_instance: u32, ci: u32) -> (u32, u32) {
    let gi = CAPS_BASE + 256 * index + 16 * gpu_instance;
    (gi, gi + 1 + ci)
}

impl Dialect for PpuSmiReplay {
    fn program(&self) -> &'static str {
        "ppu-smi"
    }

    fn device_word(&self) -> &'static str {
        "PPU"
    }

    fn first_gpu_instance(&self) -> u32 {
        0
    }

    fn resolve(
        &self,
        inner: &dyn Commands,
        target: &str,
        deadline: Duration,
    ) -> Result<Option<u32>, CommandError> {
        if let Ok(index) = target.parse::<u32>() {
            return Ok(Some(index));
        }
        let out = inner.run(smi::LIST_ARGV, deadline)?;
        let listed = smi::parse_list(&out.stdout_text()).unwrap_or_default();
        Ok(listed
            .iter()
            .find(|c| c.uuid.as_deref() == Some(target))
            .map(|c| c.index))
    }

    fn uuid_tag(&self) -> u32 {
        0x7070_7500
    }

    fn uuid_last_digits(&self) -> usize {
        13
    }

    /// No capture shows ppu-smi refusing a destroy while a process runs (the spec says only
    /// that an open device node does not block one, and a live CI blocks its GI's): the replay
    /// lets it through, so a busy partition is kept by the allocator's own process check.
    fn busy_refuses_destroy(&self) -> bool {
        false
    }

    fn renders(&self, argv: &[&str]) -> bool {
        argv == smi::LIST_ARGV || argv == smi::TABLE_ARGV
    }

    fn render(
        &self,
        argv: &[&str],
        state: &MigState,
        inner: &dyn Commands,
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        let out = inner.run(argv, deadline)?;
        let text = out.stdout_text();
        let text = if argv == smi::LIST_ARGV {
            list_with(&text, state)
        } else {
            table_with(&text, state)
        };
        Ok(answer_like(&out, text))
    }

    fn changed(&self, dir: &Path, state: &MigState) -> Result<(), String> {
        capabilities_with(&dir.join("root"), state)
    }
}

/// Each card's compute instances, `(instance, compute id)`, in GI then CI order.
fn devices_of(state: &MigState, gpu: u32) -> Vec<(&StateInstance, u32)> {
    state
        .on(Some(gpu))
        .into_iter()
        .flat_map(|i| i.compute_instances.iter().map(move |c| (i, c.id)))
        .collect()
}

/// The cards holding an instance, ascending.
fn cards_of(state: &MigState) -> Vec<u32> {
    let mut gpus: Vec<u32> = state.instances.iter().map(|i| i.gpu).collect();
    gpus.sort_unstable();
    gpus.dedup();
    gpus
}

fn list_with(text: &str, state: &MigState) -> String {
    replay::list_with_children(text, state, "PPU ", &|device, instance, compute| {
        format!(
            "    MIG g{gi}.c{ci}.i{ci}, Device {device} (UUID: {uuid})",
            gi = instance.gpu_instance,
            ci = compute.id,
            uuid = compute.uuid
        )
    })
}

/// The memory a profile name states, in MiB (`4g48gb` → 49152).
fn profile_mib(profile: &str) -> Option<u64> {
    let (_, rest) = profile.split_once('g')?;
    let gb: u64 = rest
        .trim_start_matches('.')
        .strip_suffix("gb")?
        .parse()
        .ok()?;
    Some(gb * 1024)
}

const MIG_RULE: &str =
    "+------------------+---------------------+----------+-------------------------+";
const WIDE_RULE: &str =
    "+-----------------------------------------------------------------------------+";

fn mig_table(state: &MigState) -> String {
    let mut t = format!(
        "{WIDE_RULE}\n| MIG devices:                                                                |\n{MIG_RULE}\n| PPU  GI  CI  MIG |        Memory-Usage |      Vol |         Shared          |\n|      ID  ID  DEV |                     |  CU  Unc | CpyEng ENC DEC OFA JPEG |\n|                  |                     |      ECC |                         |\n+==================+=====================+==========+=========================+\n"
    );
    for gpu in cards_of(state) {
        for (device, (instance, ci)) in devices_of(state, gpu).into_iter().enumerate() {
            let memory = profile_mib(&instance.profile)
                .map_or_else(|| "N/A".to_string(), |m| format!("0MiB / {m}MiB"));
            let cu = 16 * replay::compute_slices(&instance.profile);
            t.push_str(&format!(
                "| {gpu:>2}  {gi:>2}  {ci:>2}  {device:>3} | {memory:>19} | {cu:>3}    0 |   2     0   0   0   0   |\n{MIG_RULE}\n",
                gi = instance.gpu_instance
            ));
        }
    }
    t.push('\n');
    t
}

fn table_with(text: &str, state: &MigState) -> String {
    let lines: Vec<&str> = text.lines().collect();
    // The Processes table begins at the rule above its title.
    let processes = lines
        .iter()
        .position(|l| l.contains("Processes:"))
        .map(|at| at.saturating_sub(1));
    let busy: Vec<String> = cards_of(state)
        .into_iter()
        .flat_map(|gpu| {
            state
                .busy_on(gpu)
                .into_iter()
                .enumerate()
                .map(move |(n, (gi, ci))| {
                    let pid = 4000 + 100 * gpu + u32::try_from(n).unwrap_or(0);
                    format!(
                        "| {gpu:>3}    {gi:>2}   {ci:>2}   {pid:<8} C     python3                              512MiB |"
                    )
                })
        })
        .collect();
    let mut out = String::with_capacity(text.len() + 1024);
    for (at, line) in lines.iter().enumerate() {
        if Some(at) == processes && !state.instances.is_empty() {
            out.push_str(&mig_table(state));
        }
        if !busy.is_empty() && line.contains("No running processes found") {
            for row in &busy {
                out.push_str(row);
                out.push('\n');
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    if processes.is_none() && !state.instances.is_empty() {
        out.push_str(&mig_table(state));
    }
    out
}

/// Brings the capability tree under `root` to `state`.
fn capabilities_with(root: &Path, state: &MigState) -> Result<(), String> {
    let tree = root.join(CAPABILITIES.trim_start_matches('/'));
    let io = |path: &Path, e: std::io::Error| format!("{}: {e}", path.display());
    // Instances gone: their gi<G> directories go.
    if let Ok(cards) = std::fs::read_dir(&tree) {
        for card in cards.filter_map(Result::ok) {
            let name = card.file_name().to_string_lossy().into_owned();
            let Some(index) = name.strip_prefix("ppu").and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(gis) = std::fs::read_dir(card.path().join("mig")) else {
                continue;
            };
            for gi in gis.filter_map(Result::ok) {
                let name = gi.file_name().to_string_lossy().into_owned();
                let Some(id) = name.strip_prefix("gi").and_then(|n| n.parse::<u32>().ok()) else {
                    continue;
                };
                let live = state
                    .instances
                    .iter()
                    .any(|i| i.gpu == index && i.gpu_instance == id);
                if !live {
                    std::fs::remove_dir_all(gi.path()).map_err(|e| io(&gi.path(), e))?;
                }
            }
        }
    }
    let nodes = root.join("dev/alixpu-caps");
    for instance in &state.instances {
        let gi_dir = tree
            .join(format!("ppu{}", instance.gpu))
            .join("mig")
            .join(format!("gi{}", instance.gpu_instance));
        let mut wanted = Vec::new();
        for compute in &instance.compute_instances {
            let (gi, ci) = capability_minors(instance.gpu, instance.gpu_instance, compute.id);
            wanted.push((gi_dir.join("access"), gi));
            wanted.push((gi_dir.join(format!("ci{}", compute.id)).join("access"), ci));
        }
        if instance.compute_instances.is_empty() {
            let (gi, _) = capability_minors(instance.gpu, instance.gpu_instance, 0);
            wanted.push((gi_dir.join("access"), gi));
        }
        for (access, minor) in wanted {
            if let Some(dir) = access.parent() {
                std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
            }
            std::fs::write(&access, format!("DeviceFileMinor: {minor}\n"))
                .map_err(|e| io(&access, e))?;
            std::fs::create_dir_all(&nodes).map_err(|e| io(&nodes, e))?;
            let node = nodes.join(format!("alixpu-cap{minor}"));
            if !node.exists() {
                std::fs::write(&node, format!("c {CAPS_MAJOR}:{minor}\n"))
                    .map_err(|e| io(&node, e))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_minors_match_the_manuals_example_for_ppu_1() {
        assert_eq!(capability_minors(1, 0, 0), (229_632, 229_633));
        assert_ne!(capability_minors(1, 1, 0).0, capability_minors(1, 0, 0).1);
    }

    #[test]
    fn profile_memory_comes_from_the_name() {
        assert_eq!(profile_mib("4g48gb"), Some(49_152));
        assert_eq!(profile_mib("8g.96gb"), Some(98_304));
        assert_eq!(profile_mib("g1.c1.i1"), None);
    }
}
