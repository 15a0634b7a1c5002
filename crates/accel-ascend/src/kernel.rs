//! What the kernel and the driver's install tree show of Ascend, without asking `npu-smi`: the
//! `/dev/davinci<N>` nodes (numbered by the chip's physical id, HAZARDS item 14), the three
//! control nodes every container needs (`davinci_manager`, `devmm_svm`, `hisi_hdc`), the
//! driver's `version.info` and the CANN toolkit's (spec/ascend.md §1.6). Readers take a
//! [`Host`] and wrap a pure parser; nothing here runs a program.

use std::collections::BTreeSet;

use accel_host::Host;

/// Where the device nodes live.
pub const DEV_DIR: &str = "/dev";
/// The prefix of the per-chip nodes (`/dev/davinci0`).
pub const DAVINCI_PREFIX: &str = "davinci";
/// The control nodes the Ascend Docker Runtime mounts beside the chips' (the 950 generation
/// has no `devmm_svm`).
pub const CONTROL_NODES: [&str; 3] = ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"];
/// The driver's install tree (`CANN_HOME`'s default, `/usr/local/Ascend`, plus `driver`).
pub const DRIVER_DIR: &str = "/usr/local/Ascend/driver";
/// The driver's version file.
pub const DRIVER_VERSION_FILE: &str = "/usr/local/Ascend/driver/version.info";
/// The CANN toolkit's version files, in the order spec/ascend.md §1.6 reads them.
pub const CANN_VERSION_FILES: [&str; 4] = [
    "/usr/local/Ascend/cann/version.info",
    "/usr/local/Ascend/cann/share/info/runtime/version.info",
    "/usr/local/Ascend/ascend-toolkit/latest/runtime/version.info",
    "/usr/local/Ascend/ascend-toolkit/latest/runtime/share/info/runtime/version.info",
];

/// `ASCEND_TOOLKIT_HOME`: the CANN toolkit's home, whose `version.info` names the runtime
/// (spec §1.6, §9).
pub const TOOLKIT_HOME_ENV: &str = "ASCEND_TOOLKIT_HOME";
/// `CANN_HOME`: the Ascend install root the driver's library is searched under (spec §1.1,
/// §9; default `/usr/local/Ascend`): the driver's tree is `<it>/driver`.
pub const CANN_HOME_ENV: &str = "CANN_HOME";
/// `CANN_HOME`'s default.
pub const DEFAULT_CANN_HOME: &str = "/usr/local/Ascend";
/// The toolkit's version files under its home, in the order spec §1.6 reads them.
pub const TOOLKIT_VERSION_FILES: [&str; 2] = ["version.info", "share/info/runtime/version.info"];

/// Where the daemon's environment says Ascend is installed (host paths, read under the host
/// root): `ASCEND_TOOLKIT_HOME` and `CANN_HOME`, each `None` when unset or empty, and then
/// the fixed paths of today's reads stand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstallRoots {
    /// `ASCEND_TOOLKIT_HOME`.
    pub toolkit_home: Option<String>,
    /// `CANN_HOME`.
    pub cann_home: Option<String>,
}

/// A root variable's value: trimmed, a trailing `/` dropped, `None` when empty.
fn root_value(value: Option<String>) -> Option<String> {
    let value = value?;
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let trimmed = value.trim_end_matches('/');
    Some(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
}

impl InstallRoots {
    /// The roots the variables give (`var` answers a variable's value).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> InstallRoots {
        InstallRoots {
            toolkit_home: root_value(var(TOOLKIT_HOME_ENV)),
            cann_home: root_value(var(CANN_HOME_ENV)),
        }
    }

    /// The roots of this process's environment (the chart row's `env` sets them).
    pub fn from_env() -> InstallRoots {
        InstallRoots::from_vars(|name| std::env::var(name).ok())
    }

    /// The driver's install tree, `<CANN_HOME>/driver`.
    pub fn driver_dir(&self) -> String {
        let home = self.cann_home.as_deref().unwrap_or(DEFAULT_CANN_HOME);
        format!("{}/driver", home.trim_end_matches('/'))
    }

    /// The driver's version file, `<CANN_HOME>/driver/version.info`.
    pub fn driver_version_file(&self) -> String {
        format!("{}/version.info", self.driver_dir())
    }

    /// The toolkit's version files, in the order they are read: with `ASCEND_TOOLKIT_HOME`
    /// set, `<it>/version.info` then `<it>/share/info/runtime/version.info` (spec §1.6: the
    /// variable decides the home); unset, today's [`CANN_VERSION_FILES`] (the spec's two
    /// default homes, `/usr/local/Ascend/cann` then `…/ascend-toolkit/latest/runtime`).
    pub fn cann_version_files(&self) -> Vec<String> {
        match &self.toolkit_home {
            Some(home) => TOOLKIT_VERSION_FILES
                .iter()
                .map(|f| format!("{}/{f}", home.trim_end_matches('/')))
                .collect(),
            None => CANN_VERSION_FILES.iter().map(|f| f.to_string()).collect(),
        }
    }
}

/// The numbers of the `/dev/davinci<N>` nodes a listing of `/dev` holds.
pub fn parse_davinci_names<'a>(names: impl IntoIterator<Item = &'a str>) -> BTreeSet<u32> {
    names
        .into_iter()
        .filter_map(|n| n.strip_prefix(DAVINCI_PREFIX))
        .filter(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|rest| rest.parse().ok())
        .collect()
}

/// The chips' device nodes on the host (empty when `/dev` cannot be listed).
pub fn read_davinci(host: &dyn Host) -> BTreeSet<u32> {
    host.list(DEV_DIR)
        .map(|names| parse_davinci_names(names.iter().map(String::as_str)))
        .unwrap_or_default()
}

/// The control nodes the host lacks.
pub fn missing_control_nodes(host: &dyn Host) -> Vec<&'static str> {
    CONTROL_NODES
        .iter()
        .copied()
        .filter(|n| !host.exists(n))
        .collect()
}

/// The value after `Version=` in a `version.info` (`Version=23.0.rc3`), trimmed.
pub fn parse_version_info(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (key, value) = l.trim().split_once('=')?;
        (key.trim().eq_ignore_ascii_case("version"))
            .then(|| value.trim())
            .and_then(accel_backend::text::dotted_version)
            .map(str::to_string)
    })
}

/// The driver's version from its install tree (`CANN_HOME` unset).
pub fn read_driver_version(host: &dyn Host) -> Option<String> {
    read_driver_version_in(host, &InstallRoots::default())
}

/// The driver's version from its install tree under `roots`.
pub fn read_driver_version_in(host: &dyn Host, roots: &InstallRoots) -> Option<String> {
    host.read_to_string(&roots.driver_version_file())
        .ok()
        .and_then(|t| parse_version_info(&t))
}

/// The CANN runtime's version as `major.minor` (`8.5.0` → `8.5`), from the first toolkit file
/// that names one (`ASCEND_TOOLKIT_HOME` unset).
pub fn read_cann_version(host: &dyn Host) -> Option<String> {
    read_cann_version_in(host, &InstallRoots::default())
}

/// The CANN runtime's version under `roots` ([`InstallRoots::cann_version_files`]).
pub fn read_cann_version_in(host: &dyn Host, roots: &InstallRoots) -> Option<String> {
    roots.cann_version_files().iter().find_map(|p| {
        host.read_to_string(p)
            .ok()
            .and_then(|t| parse_version_info(&t))
            .and_then(|v| major_minor(&v))
    })
}

/// `major.minor` of a dotted version (`8.5.0` → `8.5`, `9.1.RC1` → `9.1`, `8` → `8`).
pub fn major_minor(version: &str) -> Option<String> {
    let mut parts = version.split('.');
    let major = parts
        .next()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()) && !p.is_empty())?;
    match parts
        .next()
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        Some(minor) => Some(format!("{major}.{minor}")),
        None => Some(major.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn davinci_nodes_are_the_numbered_ones() {
        let names = [
            "davinci0",
            "davinci12",
            "davinci_manager",
            "davinci",
            "null",
            "davinci3x",
        ];
        assert_eq!(parse_davinci_names(names), BTreeSet::from([0, 12]));
    }

    #[test]
    fn version_files() {
        assert_eq!(
            parse_version_info("Version=23.0.rc3\nascendhal_version=7.35.19\n").as_deref(),
            Some("23.0.rc3")
        );
        assert_eq!(parse_version_info("nothing here"), None);
        assert_eq!(major_minor("8.5.0").as_deref(), Some("8.5"));
        assert_eq!(major_minor("9.1.RC1").as_deref(), Some("9.1"));
        assert_eq!(major_minor("rc"), None);
    }

    #[test]
    fn install_roots_from_the_environment() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let unset = InstallRoots::from_vars(vars(&[]));
        assert_eq!(unset, InstallRoots::default());
        assert_eq!(unset.driver_version_file(), DRIVER_VERSION_FILE);
        assert_eq!(unset.driver_dir(), DRIVER_DIR);
        assert_eq!(unset.cann_version_files(), CANN_VERSION_FILES);
        let set = InstallRoots::from_vars(vars(&[
            (TOOLKIT_HOME_ENV, "/opt/cann/8.5/ "),
            (CANN_HOME_ENV, "/opt/Ascend"),
        ]));
        assert_eq!(
            set.cann_version_files(),
            [
                "/opt/cann/8.5/version.info",
                "/opt/cann/8.5/share/info/runtime/version.info"
            ]
        );
        assert_eq!(set.driver_version_file(), "/opt/Ascend/driver/version.info");
        let empty = InstallRoots::from_vars(vars(&[(TOOLKIT_HOME_ENV, " "), (CANN_HOME_ENV, "")]));
        assert_eq!(empty, InstallRoots::default());
    }
}
