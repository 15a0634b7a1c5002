//! Where the ROCm-style stack of a Hygon node is installed, and the facts read from it: the
//! runtime version (spec/hygon.md §1.4) and the ASIC family HSA reports for a gfx target
//! (§1.3 step 9). Pure, but for [`RocmHome::from_env`] and [`read_runtime_version`].
//!
//! **The home** is `ROCM_HOME`, else `ROCM_PATH` (spec §1.1, the order the described system's
//! HSA and ROCm-SMI bindings read them), a host path read under the host root. With one set,
//! the runtime version is the first of `<home>/.info/version`, `…/version-rocm`,
//! `…/version-dev`, `…/version-libs`, then the same four under `dirname(home)/.info/`; with
//! neither, the fixed paths read before this setting existed ([`DEFAULT_VERSION_FILES`]:
//! the DTK's `/opt/dtk`, then a stock `/opt/rocm`).

use accel_host::Host;

/// `ROCM_HOME`: the ROCm (DTK) home, read first.
pub const ROCM_HOME_ENV: &str = "ROCM_HOME";
/// `ROCM_PATH`: the ROCm (DTK) home where `ROCM_HOME` is unset.
pub const ROCM_PATH_ENV: &str = "ROCM_PATH";
/// The version files under a home's `.info/`, in the order spec §1.4 reads them.
pub const VERSION_FILES: [&str; 4] = ["version", "version-rocm", "version-dev", "version-libs"];
/// Where the DTK's version is read when neither variable is set (`<home>/.info/version…`; DTK
/// installs at `/opt/dtk`, a stock ROCm layout at `/opt/rocm`).
pub const DEFAULT_VERSION_FILES: &[&str] = &[
    "/opt/dtk/.info/version",
    "/opt/dtk/.info/version-rocm",
    "/opt/dtk/.info/version-dev",
    "/opt/dtk/.info/version-libs",
    "/opt/rocm/.info/version",
    "/opt/rocm/.info/version-rocm",
    "/opt/rocm/.info/version-dev",
    "/opt/rocm/.info/version-libs",
];

/// The home the daemon's environment names: `ROCM_HOME`, else `ROCM_PATH`; `None` when
/// neither is set (or both are empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RocmHome(pub Option<String>);

impl RocmHome {
    /// The home the variables give (`var` answers a variable's value).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> RocmHome {
        let home = [ROCM_HOME_ENV, ROCM_PATH_ENV].into_iter().find_map(|name| {
            let value = var(name)?;
            let value = value.trim();
            if value.is_empty() {
                return None;
            }
            let trimmed = value.trim_end_matches('/');
            Some(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
        });
        RocmHome(home)
    }

    /// The home of this process's environment (the chart row's `env` sets it).
    pub fn from_env() -> RocmHome {
        RocmHome::from_vars(|name| std::env::var(name).ok())
    }

    /// The version files, in the order they are read.
    pub fn version_files(&self) -> Vec<String> {
        let Some(home) = &self.0 else {
            return DEFAULT_VERSION_FILES
                .iter()
                .map(|f| f.to_string())
                .collect();
        };
        let parent = match home.rsplit_once('/') {
            Some(("", _)) | None => "",
            Some((parent, _)) => parent,
        };
        [home.as_str(), parent]
            .iter()
            .flat_map(|dir| {
                VERSION_FILES
                    .iter()
                    .map(move |f| format!("{}/.info/{f}", dir.trim_end_matches('/')))
            })
            .collect()
    }
}

/// `major.minor` of a version file's text (`24.04.3-…` → `24.04`).
pub fn parse_runtime_version(text: &str) -> Option<String> {
    let version = accel_backend::text::dotted_version(text.trim())?;
    let mut parts = version.split(['.', '-']);
    Some(format!("{}.{}", parts.next()?, parts.next()?))
}

/// The runtime version: the first of `home`'s version files that names one.
pub fn read_runtime_version(host: &dyn Host, home: &RocmHome) -> Option<String> {
    home.version_files().iter().find_map(|p| {
        let text = host.read_to_string(p).ok()?;
        parse_runtime_version(&text)
    })
}

/// The ASIC family HSA reports for a gfx target, where the kernel's assignment is known.
///
/// HSA's `ASIC_FAMILY_ID` is the family the kernel driver gives the device (ROCr takes it from
/// libdrm's `amdgpu_query_gpu_info`), named by AMD's id→name table (spec/hygon.md §1.3 step 9,
/// the same table as AMD's). No source this build reads prints it — not `rocminfo` (the DTK's
/// capture shows no family line), not the KFD topology, not `hy-smi` — so it is known here only
/// for the gfx targets Hygon shares with AMD's driver, whose family that driver fixes by the
/// target's GC IP (`gfx906`, the Z100's Vega 20 IP: Arctic Islands). Hygon's own targets
/// (`gfx926`, `gfx928` of the K100 line, `gfx936` of the BW line) have no family in any capture
/// or document, so none is given: absent, never guessed from a neighbouring target.
pub fn asic_family(gfx: &str) -> Option<&'static str> {
    Some(match gfx.trim() {
        "gfx900" | "gfx904" | "gfx906" | "gfx908" | "gfx90a" | "gfx940" | "gfx941" | "gfx942"
        | "gfx950" => "Arctic Islands",
        "gfx902" | "gfx909" | "gfx90c" => "Raven",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn rocm_home_is_read_before_rocm_path() {
        assert_eq!(RocmHome::from_vars(vars(&[])), RocmHome(None));
        assert_eq!(
            RocmHome::from_vars(vars(&[(ROCM_PATH_ENV, "/opt/dtk-24.04/")])),
            RocmHome(Some("/opt/dtk-24.04".into()))
        );
        assert_eq!(
            RocmHome::from_vars(vars(&[
                (ROCM_PATH_ENV, "/opt/dtk-24.04"),
                (ROCM_HOME_ENV, "/opt/dtk-25.04"),
            ])),
            RocmHome(Some("/opt/dtk-25.04".into()))
        );
        assert_eq!(
            RocmHome::from_vars(vars(&[(ROCM_HOME_ENV, " "), (ROCM_PATH_ENV, "/opt/x")])),
            RocmHome(Some("/opt/x".into())),
            "an empty ROCM_HOME is unset"
        );
    }

    #[test]
    fn the_home_then_its_parent() {
        assert_eq!(RocmHome(None).version_files(), DEFAULT_VERSION_FILES);
        assert_eq!(
            RocmHome(Some("/opt/dtk-24.04/dtk".into())).version_files(),
            [
                "/opt/dtk-24.04/dtk/.info/version",
                "/opt/dtk-24.04/dtk/.info/version-rocm",
                "/opt/dtk-24.04/dtk/.info/version-dev",
                "/opt/dtk-24.04/dtk/.info/version-libs",
                "/opt/dtk-24.04/.info/version",
                "/opt/dtk-24.04/.info/version-rocm",
                "/opt/dtk-24.04/.info/version-dev",
                "/opt/dtk-24.04/.info/version-libs",
            ]
        );
        assert_eq!(
            RocmHome(Some("/dtk".into())).version_files()[4],
            "/.info/version"
        );
    }

    #[test]
    fn families_only_where_the_kernel_fixes_them() {
        assert_eq!(asic_family("gfx906"), Some("Arctic Islands"));
        assert_eq!(asic_family("gfx90c"), Some("Raven"));
        for hygon_own in ["gfx926", "gfx928", "gfx936", "gfx", "", "sm_90"] {
            assert_eq!(asic_family(hygon_own), None, "{hygon_own}");
        }
    }
}
