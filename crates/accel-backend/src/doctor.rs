//! `device-manager doctor` behind the seam: one pass over what a node needs for its
//! manufacturer, each check `ok`, `warn` or `fail` with a one-line reason and what to do. The
//! shape of a check and of the report is the same for every manufacturer (one [`Check`] type,
//! one JSON document); which checks run, and how the host is read for them, is the backend's
//! [`Doctor`]. A doctor reads the host through `Host` and `Commands` and changes nothing.

use std::fmt;
use std::path::PathBuf;

use accel_host::{Commands, Host};
use serde::Serialize;

use crate::detect::Deadlines;
use crate::respond::InjectionStrategy;

/// Where the host's preload libraries live, relative to the host root (DESIGN.md).
pub const LIBRARY_DIR: &str = "var/lib/gpustack/operator/lib";
/// The kubelet's directory by default, relative to the host root.
pub const KUBELET_DIR: &str = "var/lib/kubelet";

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        })
    }
}

/// One check: its name, verdict, a one-line reason, and what to do when it is not ok.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub reason: String,
    pub action: Option<String>,
}

impl Check {
    /// A check that passed.
    pub fn ok(name: &str, reason: impl Into<String>) -> Self {
        Check {
            name: name.to_string(),
            status: Status::Ok,
            reason: reason.into(),
            action: None,
        }
    }

    /// A check that warns, and what to do about it.
    pub fn warn(name: &str, reason: impl Into<String>, action: impl Into<String>) -> Self {
        Check {
            name: name.to_string(),
            status: Status::Warn,
            reason: reason.into(),
            action: Some(action.into()),
        }
    }

    /// A check that failed, and what to do about it.
    pub fn fail(name: &str, reason: impl Into<String>, action: impl Into<String>) -> Self {
        Check {
            name: name.to_string(),
            status: Status::Fail,
            reason: reason.into(),
            action: Some(action.into()),
        }
    }
}

/// `unique-ids`, for a manufacturer whose grants name accelerators by UUID: `ok` when every
/// accelerator of `section` has one, else `warn` naming the indexes without (they cannot be
/// granted). `noun` is what the manufacturer's accelerators are called (`GPU`, `card`); `action`
/// where to look on the host.
pub fn unique_ids(section: &accel_core::ManufacturerInventory, noun: &str, action: &str) -> Check {
    const NAME: &str = "unique-ids";
    let unnamed: Vec<String> = section
        .accelerators
        .iter()
        .filter(|a| a.uuid.as_deref().is_none_or(str::is_empty))
        .map(|a| a.index.to_string())
        .collect();
    if unnamed.is_empty() {
        Check::ok(
            NAME,
            format!(
                "every one of {} {noun}(s) has a UUID",
                section.accelerators.len()
            ),
        )
    } else {
        Check::warn(
            NAME,
            format!(
                "{noun}(s) {} report no UUID, so they cannot be granted",
                unnamed.join(", ")
            ),
            action,
        )
    }
}

/// One accelerator's diagnosis (`--gpus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuDiagnosis {
    pub uuid: String,
    pub index: Option<u32>,
    /// True only when no check of this accelerator failed.
    pub passed: bool,
    pub checks: Vec<Check>,
}

/// Everything doctor found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub checks: Vec<Check>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuDiagnosis>,
    /// False when any check failed.
    pub passed: bool,
}

impl Report {
    /// A report of host checks only; it passes when none failed.
    pub fn of(checks: Vec<Check>) -> Report {
        let passed = checks.iter().all(|c| c.status != Status::Fail);
        Report {
            checks,
            gpus: Vec::new(),
            passed,
        }
    }
}

/// What to check, as `doctor`'s flags and the settings give it.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long the vendor's tool may take per query and for its whole snapshot.
    pub deadlines: Deadlines,
    /// The kubelet's directory, relative to the host root.
    pub kubelet_dir: String,
    /// The preload library directory, relative to the host root.
    pub library_dir: String,
    /// The kernel log, when it is not `dev/kmsg` under the host root (`--kmsg-path`).
    pub kmsg: Option<PathBuf>,
    /// `Some`: diagnose these accelerators (empty: every one the tool lists).
    pub gpus: Option<Vec<String>>,
    /// The injection strategy configured for the manufacturer, where it has a choice.
    pub injection: Option<InjectionStrategy>,
    /// The container engine's configuration directory (a host path), for what the strategy
    /// needs of it.
    pub containerd_config_dir: PathBuf,
    /// The CPU architecture the daemon's image is built for (`x86_64`, `aarch64`).
    pub arch: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            deadlines: Deadlines::default(),
            kubelet_dir: KUBELET_DIR.to_string(),
            library_dir: LIBRARY_DIR.to_string(),
            kmsg: None,
            gpus: None,
            injection: None,
            containerd_config_dir: PathBuf::from("/etc/containerd"),
            arch: std::env::consts::ARCH.to_string(),
        }
    }
}

/// One manufacturer's doctor.
pub trait Doctor: Send + Sync {
    /// Whether the host shows this manufacturer's driver (its kernel module's tree), which is
    /// how `doctor` picks a manufacturer when none is named (with the PCI bus).
    fn driver_shown(&self, host: &dyn Host) -> bool;
    /// Runs every check.
    fn run(&self, host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report;
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::inventory::{Accelerator, Source};
    use accel_core::{Manufacturer, ManufacturerInventory};

    #[test]
    fn unique_ids_names_the_accelerators_without_one() {
        let mut section = ManufacturerInventory::empty(Manufacturer::Metax);
        for (index, uuid) in [
            (0, Some("GPU-a")),
            (1, None),
            (2, Some("")),
            (3, Some("GPU-d")),
        ] {
            let mut a = Accelerator::new(index, Source::Driver);
            a.uuid = uuid.map(str::to_string);
            section.accelerators.push(a);
        }
        let check = unique_ids(&section, "GPU", "check `mx-smi -L` on the host");
        assert_eq!(check.status, Status::Warn);
        assert_eq!(
            check.reason,
            "GPU(s) 1, 2 report no UUID, so they cannot be granted"
        );
        assert_eq!(
            check.action.as_deref(),
            Some("check `mx-smi -L` on the host")
        );
        section
            .accelerators
            .retain(|a| a.uuid.as_deref().is_some_and(|u| !u.is_empty()));
        let check = unique_ids(&section, "card", "");
        assert_eq!(check.status, Status::Ok);
        assert_eq!(check.reason, "every one of 2 card(s) has a UUID");
    }

    #[test]
    fn a_report_passes_only_without_a_failed_check() {
        let warned = Report::of(vec![
            Check::ok("a", "fine"),
            Check::warn("b", "hmm", "look"),
        ]);
        assert!(warned.passed);
        let failed = Report::of(vec![Check::ok("a", "fine"), Check::fail("b", "no", "fix")]);
        assert!(!failed.passed);
        assert_eq!(failed.checks[1].action.as_deref(), Some("fix"));
        assert_eq!(Status::Warn.to_string(), "warn");
    }
}
