//! Ascend's preflight knowledge (spec/ascend.md §8).
//!
//! - **Host cross-check**: `chroot <host> npu-smi info -l`, counting the lines holding `NPU ID`.
//!   A host that lists more than this container detected names what the container lacks,
//!   filtered to what is really absent (the control nodes, the `/dev/davinci<N>` nodes, the
//!   driver tree); a host without `npu-smi` cannot be asked, which is no failure.
//! - **`container-share`** (the driver-read row, per chip): established, not just read. On →
//!   `ok`; off → asked on and put straight back off (the one place the device manager turns the
//!   flag off: it restores what it found); `--dry-run` leaves it off and says why; a V2 (950)
//!   driver has no flag → `not-declared`; a failed read is `unavailable`, never written past.
//! - **A5 host state** (family `950` only): `ascend-docker-runtime` (the install-info file's
//!   `version=`, major ≥ 26) and `hccl-ranktable` (`/etc/hccl_rootinfo.json` absent, or
//!   version `2.0`).
//! - **Slices**: the injection is checked as the responder answers it (vcann-rt mounted and
//!   preloaded, the `npu_info.config` quota, two tenants' own quotas, a sidecar seeing only its
//!   owner's NPU); no probe container is started — its reader, `enpu-monitor`, has no published
//!   output to read it by — so those rows stop at `simulated`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use accel_backend::chores::CONTAINER_PRELOAD;
use accel_backend::preflight::{DriverRead, NodeAccess, Preflight, State, Tier};
use accel_backend::respond::Injection;
use accel_backend::vendor_runtime::visible_names;
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_host::{CommandError, CommandOutput, Commands, EntryKind, Host, RunFailure, run_bounded};

use crate::responder::{RUNTIME_IN_CONTAINER, VISIBLE_DEVICES};
use crate::soc::Family;
use crate::{kernel, npuconfig, npusmi, share};

/// The driver-read row's capability.
pub const CONTAINER_SHARE: &str = "container-share";
/// The A5 rows' capabilities.
pub const ASCEND_DOCKER_RUNTIME: &str = "ascend-docker-runtime";
pub const HCCL_RANKTABLE: &str = "hccl-ranktable";
/// Where the Ascend Docker Runtime records its installed version.
pub const RUNTIME_INSTALL_INFO: &str =
    "/usr/local/Ascend/Ascend-Docker-Runtime/ascend_docker_runtime_install.info";
/// The oldest runtime major that maps the 950 (MindCluster 26.0.0, spec §10).
pub const RUNTIME_MAJOR_FOR_A5: u64 = 26;
/// HCCL's root-info file; absent, or version 2.0, for A5 multi-card jobs.
pub const HCCL_ROOTINFO: &str = "/etc/hccl_rootinfo.json";

/// The group's note: why the sliced rows stop at `simulated`.
pub const NOTE: &str = "no slice probe container is started: its reader, vcann-rt's \
     enpu-monitor, has no published output to read a quota from, so the sliced rows check the \
     responder's own answer (vcann-rt mounted and preloaded, the npu_info.config quota) and stop \
     at simulated";

/// Ascend's preflight row.
#[derive(Debug, Clone, Copy, Default)]
pub struct AscendPreflight;

fn read(state: State, reason: String) -> DriverRead {
    DriverRead {
        capability: CONTAINER_SHARE,
        state,
        reason,
    }
}

fn is_950(accelerator: &Accelerator) -> bool {
    accelerator.architecture.as_deref() == Some(Family::F950.name())
}

fn run(node: &NodeAccess<'_>, argv: &[String]) -> Result<CommandOutput, RunFailure> {
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    run_bounded(node.commands, &argv, node.deadline)
}

/// The `container-share` row of one chip (spec §8).
pub fn container_share(accelerator: &Accelerator, node: &NodeAccess<'_>) -> DriverRead {
    if is_950(accelerator) {
        return read(
            State::NotDeclared,
            "a V2 (950) driver declares no container-share flag: tenanted grants go through and are logged".into(),
        );
    }
    let (card, chip) = match accelerator.physical_indexes.as_slice() {
        [_, card, chip, ..] => (*card, *chip),
        _ => {
            return read(
                State::Unavailable,
                "the accelerator carries no dcmi card/device index".into(),
            );
        }
    };
    let on = match share::read(node.commands, node.deadline, card, chip) {
        Ok(Some(on)) => on,
        Ok(None) => {
            return read(
                State::Unavailable,
                format!(
                    "card {card} device {chip}: npu-smi printed no device-share reading, so nothing was written"
                ),
            );
        }
        Err(RunFailure::NotInstalled { .. }) => {
            return read(State::Unavailable, share::no_api(card, chip));
        }
        Err(e) => {
            return read(
                State::Unavailable,
                format!(
                    "card {card} device {chip}: the flag read failed, so nothing was written: {e}"
                ),
            );
        }
    };
    if on {
        return read(State::Ok, "container-share is enabled".into());
    }
    if node.dry_run {
        return read(
            State::Ok,
            format!(
                "container-share is off and was left that way: asking it on (`{}`) is a write, and this is a dry run",
                npusmi::share_enable_argv(card, chip).join(" ")
            ),
        );
    }
    if let Err(e) = run(node, &npusmi::share_enable_argv(card, chip)) {
        return read(
            State::Unavailable,
            format!(
                "container-share is off and asking it on failed, so shared, sliced and visibility grants of card {card} device {chip} will be refused: {e}"
            ),
        );
    }
    let came_on = share::read(node.commands, node.deadline, card, chip);
    let restored = run(node, &npusmi::share_disable_argv(card, chip));
    match (came_on, restored) {
        (Ok(Some(true)), Ok(_)) => read(
            State::Ok,
            "container-share was off; it was asked on, read back on, and put straight back off"
                .into(),
        ),
        (_, Err(e)) => read(
            State::Unavailable,
            format!(
                "container-share was off and was asked on; putting it back failed, so it is ON now (turn it off with `{}`): {e}",
                npusmi::share_disable_argv(card, chip).join(" ")
            ),
        ),
        (other, Ok(_)) => read(
            State::Unavailable,
            format!(
                "container-share was off; asked on, it did not read back on ({}), and it was put back off",
                match other {
                    Ok(Some(_)) => "it read off".to_string(),
                    Ok(None) => "no reading".to_string(),
                    Err(e) => e.to_string(),
                }
            ),
        ),
    }
}

/// The major of an install-info `version=` value (`v26.0.0` → 26).
pub fn runtime_major(install_info: &str) -> Option<u64> {
    let value = install_info.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        k.trim().eq_ignore_ascii_case("version").then(|| v.trim())
    })?;
    let value = value.strip_prefix(['v', 'V']).unwrap_or(value);
    value.split('.').next()?.trim().parse().ok()
}

/// The `ascend-docker-runtime` row (A5).
pub fn docker_runtime_row(host: &dyn Host) -> DriverRead {
    let row = |state, reason| DriverRead {
        capability: ASCEND_DOCKER_RUNTIME,
        state,
        reason,
    };
    if !host.exists(RUNTIME_INSTALL_INFO) {
        return row(
            State::Unavailable,
            format!(
                "{RUNTIME_INSTALL_INFO} is absent: the 950 needs the Ascend Docker Runtime {RUNTIME_MAJOR_FOR_A5}.0.0 or later, installed"
            ),
        );
    }
    let text = match host.read_to_string(RUNTIME_INSTALL_INFO) {
        Ok(t) => t,
        Err(e) => {
            return row(
                State::Unavailable,
                format!(
                    "{RUNTIME_INSTALL_INFO} is unreadable ({e}): the 950 needs the Ascend Docker Runtime {RUNTIME_MAJOR_FOR_A5}.0.0 or later"
                ),
            );
        }
    };
    match runtime_major(&text) {
        Some(major) if major >= RUNTIME_MAJOR_FOR_A5 => row(
            State::Ok,
            format!(
                "the Ascend Docker Runtime is {major}.x (the 950 needs {RUNTIME_MAJOR_FOR_A5} or later)"
            ),
        ),
        Some(major) => row(
            State::Unavailable,
            format!(
                "the Ascend Docker Runtime is {major}.x: older than {RUNTIME_MAJOR_FOR_A5} it maps Ascend950 to no type and container creation fails on /dev/devmm_svm"
            ),
        ),
        None => row(
            State::Unavailable,
            format!("{RUNTIME_INSTALL_INFO} carries no readable version= line"),
        ),
    }
}

/// The `hccl-ranktable` row (A5).
pub fn ranktable_row(host: &dyn Host) -> DriverRead {
    let row = |state, reason| DriverRead {
        capability: HCCL_RANKTABLE,
        state,
        reason,
    };
    match host.entry_kind(HCCL_ROOTINFO) {
        Ok(EntryKind::Link) => {
            return row(
                State::Unavailable,
                format!("{HCCL_ROOTINFO} is a symlink: it is not followed"),
            );
        }
        Err(_) if !host.exists(HCCL_ROOTINFO) => {
            return row(
                State::Ok,
                format!("{HCCL_ROOTINFO} is absent: HCCL builds its own rank table"),
            );
        }
        _ => {}
    }
    let version = host
        .read_to_string(HCCL_ROOTINFO)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).map_err(|e| e.to_string()))
        .map(|v| {
            v.get("version")
                .and_then(|v| v.as_str())
                .map(str::to_string)
        });
    match version {
        Ok(Some(v)) if v == "2.0" => row(State::Ok, format!("{HCCL_ROOTINFO} is version 2.0")),
        Ok(Some(v)) => row(
            State::Unavailable,
            format!(
                "{HCCL_ROOTINFO} is version {v}: A5 multi-card jobs need it absent or 2.0 (Config_Error_Ranktable(EI0014) otherwise)"
            ),
        ),
        Ok(None) => row(
            State::Unavailable,
            format!("{HCCL_ROOTINFO} names no version: A5 multi-card jobs need it absent or 2.0"),
        ),
        Err(e) => row(
            State::Unavailable,
            format!("{HCCL_ROOTINFO} is unreadable or not JSON: {e}"),
        ),
    }
}

/// The commands the pass's synthetic grants are given: the flag reads on, and nothing else is
/// run — a simulated grant never writes the driver; the `container-share` row is what
/// establishes the flag.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimulatedShare;

impl Commands for SimulatedShare {
    fn run(&self, argv: &[&str], _deadline: Duration) -> Result<CommandOutput, CommandError> {
        match argv {
            ["npu-smi", "info", "-t", "device-share", ..] => Ok(CommandOutput {
                status: Some(0),
                stdout: b"Device-share Status            : True\n".to_vec(),
                stderr: Vec::new(),
            }),
            _ => Err(CommandError::NotInstalled {
                program: argv.first().copied().unwrap_or_default().to_string(),
            }),
        }
    }

    fn is_installed(&self, program: &str) -> bool {
        program == "npu-smi"
    }
}

impl Preflight for AscendPreflight {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Ascend
    }

    fn tier(&self) -> Tier {
        Tier::DriverReadAndInjection
    }

    fn note(&self) -> Option<String> {
        Some(NOTE.to_string())
    }

    /// Shared and sliced Pods run under the Ascend Docker Runtime, which turns
    /// `ASCEND_VISIBLE_DEVICES` into the device nodes.
    fn slices_need_runtime_class(&self) -> bool {
        true
    }

    fn host_listing(&self) -> Option<Vec<String>> {
        Some(npusmi::LIST_ARGV.iter().map(|s| s.to_string()).collect())
    }

    fn count_listed(&self, stdout: &str) -> usize {
        npusmi::count_listed(stdout)
    }

    fn host_cli(&self) -> Option<&'static str> {
        Some("npu-smi")
    }

    fn missing_mounts(&self, host: &dyn Host, _accelerators: &[Accelerator]) -> Vec<String> {
        let mut missing: Vec<String> = kernel::missing_control_nodes(host)
            .into_iter()
            .map(str::to_string)
            .collect();
        if kernel::read_davinci(host).is_empty() {
            missing.push(format!(
                "{}/{}<N> for each accelerator",
                kernel::DEV_DIR,
                kernel::DAVINCI_PREFIX
            ));
        }
        if !host.exists(kernel::DRIVER_DIR) {
            missing.push(kernel::DRIVER_DIR.to_string());
        }
        missing
    }

    fn driver_read_on(
        &self,
        accelerator: &Accelerator,
        node: &NodeAccess<'_>,
    ) -> Option<DriverRead> {
        Some(container_share(accelerator, node))
    }

    fn host_state_rows(&self, accelerator: &Accelerator, node: &NodeAccess<'_>) -> Vec<DriverRead> {
        if !is_950(accelerator) {
            return Vec::new();
        }
        vec![docker_runtime_row(node.host), ranktable_row(node.host)]
    }

    fn simulation_commands(&self) -> Option<Arc<dyn Commands>> {
        Some(Arc::new(SimulatedShare))
    }

    /// No partitioned family exists for Ascend.
    fn partition_backed(&self, _accelerator: &Accelerator) -> bool {
        false
    }

    /// The `memory-quota` of the `npu_info.config` the responder rendered (one NPU a slice).
    fn quota_mib(&self, injection: &Injection, position: usize) -> Option<u64> {
        if position != 0 {
            return None;
        }
        let mount = injection
            .mounts
            .iter()
            .find(|m| m.container_path == npuconfig::CONTAINER_PATH)?;
        let text = std::fs::read_to_string(&mount.host_path).ok()?;
        npuconfig::value(&text, "memory-quota")
    }

    fn slice_runtime(&self, injection: &Injection) -> Option<String> {
        let library = self.library_in_container(injection)?;
        let preloaded = injection
            .mounts
            .iter()
            .any(|m| m.container_path == CONTAINER_PRELOAD);
        let config = injection
            .mounts
            .iter()
            .any(|m| m.container_path == npuconfig::CONTAINER_PATH);
        (preloaded && config).then(|| {
            format!(
                "mounts vcann-rt at {library}, preloads it through {CONTAINER_PRELOAD} and gives it {}",
                npuconfig::CONTAINER_PATH
            )
        })
    }

    fn library_in_container(&self, injection: &Injection) -> Option<String> {
        injection
            .mounts
            .iter()
            .find(|m| m.container_path == RUNTIME_IN_CONTAINER)
            .map(|m| m.container_path.clone())
    }

    fn visible(&self, injection: &Injection) -> BTreeSet<String> {
        visible_names(VISIBLE_DEVICES, injection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_major_reads_with_or_without_a_v() {
        assert_eq!(runtime_major("version=v26.0.0\n"), Some(26));
        assert_eq!(
            runtime_major("install_path=/usr/local\nVersion=7.3.0\n"),
            Some(7)
        );
        assert_eq!(runtime_major("version=\n"), None);
        assert_eq!(runtime_major("nothing here\n"), None);
    }
}
