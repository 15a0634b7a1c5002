//! The Hygon kernel module: which of its two names the host runs (`hycu` from driver 6.3 on,
//! `hydcu` before), its `version` file (spec §1.4: the driver version), and the per-card DRM
//! listing under it (`/sys/module/<driver>/drivers/pci:<driver>/<bdf>/drm`, spec §1.3 step 5),
//! read through [`accel_host::drm`]'s reader that takes the driver name. Nothing here decides
//! the vendor: a card is Hygon's by its PCI vendor id, never by the module that binds it.

use accel_host::Host;

/// The module names, in the order the described system tries them (spec §1.3, §1.4).
pub const DRIVERS: [&str; 2] = ["hycu", "hydcu"];

/// The module's directory.
pub fn module_dir(driver: &str) -> String {
    format!("/sys/module/{driver}")
}

/// The module's version file.
pub fn version_file(driver: &str) -> String {
    format!("/sys/module/{driver}/version")
}

/// The first of [`DRIVERS`] whose module directory exists.
pub fn loaded(host: &dyn Host) -> Option<&'static str> {
    DRIVERS.into_iter().find(|d| host.exists(&module_dir(d)))
}

/// A version file's text: trimmed, NULs dropped; empty is none.
pub fn parse_version(text: &str) -> Option<String> {
    let t = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    (!t.is_empty()).then(|| t.to_string())
}

/// The driver version: the first of the two modules' version files that reads.
pub fn read_version(host: &dyn Host) -> Option<String> {
    DRIVERS.into_iter().find_map(|d| {
        host.read_to_string(&version_file(d))
            .ok()
            .and_then(|t| parse_version(&t))
    })
}

/// The DRM minors `(card, render)` of the PCI device `bdf`: from the first module whose listing
/// of it exists (spec §1.3 step 5); `None` when neither lists it.
pub fn read_minors(host: &dyn Host, bdf: &str) -> Option<(Option<u32>, Option<u32>)> {
    DRIVERS
        .into_iter()
        .find_map(|d| accel_host::drm::read_bound_minors(host, d, bdf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_trimmed_and_empty_is_none() {
        assert_eq!(
            parse_version("rock-6.3.13-V1.12.0\n\0").as_deref(),
            Some("rock-6.3.13-V1.12.0")
        );
        assert_eq!(parse_version(" \n"), None);
    }

    #[test]
    fn hycu_is_read_before_hydcu() {
        let tmp = tempfile::tempdir().unwrap();
        let put = |p: &str, t: &str| {
            let path = tmp.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, t).unwrap();
        };
        put("sys/module/hydcu/version", "6.2.31\n");
        put(
            "sys/module/hydcu/drivers/pci:hydcu/0000:09:00.0/drm/card1/dev",
            "",
        );
        put(
            "sys/module/hydcu/drivers/pci:hydcu/0000:09:00.0/drm/renderD128/dev",
            "",
        );
        let host = accel_host::FsHost::new(tmp.path());
        assert_eq!(loaded(&host), Some("hydcu"));
        assert_eq!(read_version(&host).as_deref(), Some("6.2.31"));
        assert_eq!(
            read_minors(&host, "0000:09:00.0"),
            Some((Some(1), Some(128)))
        );
        put("sys/module/hycu/version", "6.3.13\n");
        assert_eq!(loaded(&host), Some("hycu"));
        assert_eq!(read_version(&host).as_deref(), Some("6.3.13"));
        assert_eq!(read_minors(&host, "0000:0c:00.0"), None);
    }
}
