//! A recorded Hygon host whose MIG state follows the commands run against it: the
//! dialect-generic replay ([`accel_backend::mig_cli::replay`]) with hy-smi's side.
//!
//! - `hy-smi mig -i <N>` names card `N` (the registry's `dev<N>`);
//! - the driver's registry follows the state under the recording's `root/`: one
//!   `etc/dmi_mig_config/gi/dev<N>gi<G>.conf` per GPU instance and one
//!   `etc/dmi_mig_config/ci/dev<N>gi<G>ci<C>.conf` per compute instance (the GI block, the CI
//!   block, then `mig_uuid: <uuid>`, spec §6.2 and C11); a destroyed instance's files go, and
//!   anything else in those directories (a directory a runtime made) is left alone;
//! - a busy instance's compute instance is refused `The device is exist and may be in use.`
//!   (spec §6.5, measured C5).
//!
//! What the replay decides where no capture shows the driver's answer (also in the host's
//! `NOTES.md`): the listings' device word `DCU`; GPU instance ids from 3 (the spec's measured
//! card handed out 3, 4, 5, 6 for its first four); the blocks' keys (`dev_id`, `gi_id`,
//! `profile_id`, `start`, `size`, `ci_id`), one `key: value` a line; the UUID's shape (the
//! 8-4-4-4-12 form a container's `MIG-` value carries); the `gi/` file names.

use std::path::Path;
use std::time::Duration;

use accel_backend::mig_cli::replay::{self, Dialect, MigState};
use accel_host::{CommandError, CommandOutput, Commands};

use crate::registry;

pub use accel_backend::mig_cli::replay::STATE_FILE;

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
        registry_with(&dir.join("root"), state)
    }
}

/// The file name of GPU instance `gi` of card `dev` under `gi/`.
fn gi_name(dev: u32, gi: u32) -> String {
    format!("dev{dev}gi{gi}.conf")
}

/// Brings the registry under `root` up to `state`.
fn registry_with(root: &Path, state: &MigState) -> Result<(), String> {
    let base = root.join(registry::DIR.trim_start_matches('/'));
    let io = |path: &Path, e: std::io::Error| format!("{}: {e}", path.display());
    let gi_dir = base.join("gi");
    let ci_dir = base.join("ci");
    let mut wanted_gi = Vec::new();
    let mut wanted_ci = Vec::new();
    for instance in &state.instances {
        let gi_block = format!(
            "dev_id: {}\ngi_id: {}\nprofile_id: {}\nstart: {}\nsize: {}\n",
            instance.gpu, instance.gpu_instance, instance.profile_id, instance.start, instance.size
        );
        wanted_gi.push((
            gi_name(instance.gpu, instance.gpu_instance),
            gi_block.clone(),
        ));
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
                format!("{gi_block}ci_id: {}\nmig_uuid: {uuid}\n", compute.id),
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
    fn gi_names() {
        assert!(is_gi_name("dev0gi3.conf"));
        assert!(!is_gi_name("dev0gi3ci0.conf"));
        assert!(!is_gi_name("notes.txt"));
    }
}
