//! The driver's multi-instance registry, `/etc/dmi_mig_config` (spec §6.2): `dev<N>` (one line,
//! card N's PCI address), `gi/` (one file per live GPU instance) and
//! `ci/dev<N>gi<G>ci<C>.conf` (a GI block and a CI block ending in `mig_uuid: <uuid>`).
//!
//! It is also how the node's mode is read here (spec §1.2 reads it through the multi-instance
//! library, which is not loaded): the driver keeps the directory only in MIG mode and writes a
//! `dev<N>` file per card, so a registry with `dev<N>` files is a node in MIG mode; no directory,
//! or one without any (the DaemonSet's `DirectoryOrCreate` mount makes an empty one), is a node
//! out of it; a directory that cannot be listed is a mode not known (spec §1.5: neither slicing
//! family is then published).

use std::collections::BTreeMap;

use accel_core::busid::BusId;
use accel_host::Host;

/// The registry's directory.
pub const DIR: &str = "/etc/dmi_mig_config";
/// Its compute-instance files' directory.
pub const CI_DIR: &str = "/etc/dmi_mig_config/ci";
/// Its GPU-instance files' directory.
pub const GI_DIR: &str = "/etc/dmi_mig_config/gi";

/// The node's multi-instance mode as the registry shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeMode {
    /// Not in MIG mode.
    Off,
    /// In MIG mode; each `dev<N>` file's card index and PCI address (a file that does not hold
    /// one is left out).
    On { cards: BTreeMap<u32, BusId> },
    /// The registry could not be read (the reason).
    Unknown(String),
}

/// The `N` of a `dev<N>` file name.
pub fn dev_index(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("dev")?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// A `dev<N>` file's PCI address (the first line, trimmed).
pub fn parse_dev(text: &str) -> Option<BusId> {
    text.lines().next()?.trim().parse().ok()
}

/// Why the registry could not be listed, naming it by its host path (not the path this
/// process reached it by, which is the host root's and says nothing of the node).
fn unreadable(e: &accel_host::HostError) -> String {
    match e {
        accel_host::HostError::Io { source, .. } => format!("{DIR}: {source}"),
        other => format!("{DIR}: {other}"),
    }
}

/// Reads the mode.
pub fn read_mode(host: &dyn Host) -> NodeMode {
    let names = match host.list(DIR) {
        Ok(names) => names,
        Err(e) if e.is_not_found() => return NodeMode::Off,
        Err(e) => return NodeMode::Unknown(unreadable(&e)),
    };
    let devs: Vec<(u32, &String)> = names
        .iter()
        .filter_map(|n| dev_index(n).map(|i| (i, n)))
        .collect();
    if devs.is_empty() {
        return NodeMode::Off;
    }
    let cards = devs
        .into_iter()
        .filter_map(|(i, name)| {
            let text = host.read_to_string(&format!("{DIR}/{name}")).ok()?;
            Some((i, parse_dev(&text)?))
        })
        .collect();
    NodeMode::On { cards }
}

/// The `(dev, gi, ci)` of a compute-instance file name `dev<N>gi<G>ci<C>.conf`.
pub fn parse_ci_name(name: &str) -> Option<(u32, u32, u32)> {
    let rest = name.strip_prefix("dev")?.strip_suffix(".conf")?;
    let (dev, rest) = rest.split_once("gi")?;
    let (gi, ci) = rest.split_once("ci")?;
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    Some((number(dev)?, number(gi)?, number(ci)?))
}

/// The `mig_uuid` of a compute-instance file, read by key (the key trimmed, the value trimmed).
pub fn parse_mig_uuid(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let value = value.trim();
        (key.trim() == "mig_uuid" && !value.is_empty()).then(|| value.to_string())
    })
}

/// One compute instance the registry lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryEntry {
    pub dev: u32,
    pub gpu_instance: u32,
    pub compute_instance: u32,
    /// The file's host path.
    pub path: String,
    pub mig_uuid: Option<String>,
}

/// Every compute-instance file of the registry (none when `ci/` is not there).
pub fn read_entries(host: &dyn Host) -> Vec<RegistryEntry> {
    let Ok(names) = host.list(CI_DIR) else {
        return Vec::new();
    };
    names
        .iter()
        .filter_map(|name| {
            let (dev, gi, ci) = parse_ci_name(name)?;
            let path = format!("{CI_DIR}/{name}");
            let mig_uuid = host
                .read_to_string(&path)
                .ok()
                .and_then(|t| parse_mig_uuid(&t));
            Some(RegistryEntry {
                dev,
                gpu_instance: gi,
                compute_instance: ci,
                path,
                mig_uuid,
            })
        })
        .collect()
}

/// The registry file of the partition `MIG-<uuid>` (the prefix optional, compared without case).
pub fn find_partition(host: &dyn Host, partition: &str) -> Option<RegistryEntry> {
    let bare = partition
        .strip_prefix("MIG-")
        .or_else(|| partition.strip_prefix("mig-"))
        .unwrap_or(partition);
    read_entries(host).into_iter().find(|e| {
        e.mig_uuid.as_deref().is_some_and(|u| {
            let u = u.strip_prefix("MIG-").unwrap_or(u);
            u.eq_ignore_ascii_case(bare)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys() {
        assert_eq!(dev_index("dev7"), Some(7));
        assert_eq!(dev_index("dev"), None);
        assert_eq!(dev_index("device"), None);
        assert_eq!(parse_ci_name("dev3gi1ci0.conf"), Some((3, 1, 0)));
        assert_eq!(parse_ci_name("dev3gi1ci0.conf.tmp"), None);
        assert_eq!(parse_ci_name("devxgi1ci0.conf"), None);
        assert_eq!(
            parse_mig_uuid("gi_id: 1\n ci_id: 0\n mig_uuid : 3f2a-77 \n").as_deref(),
            Some("3f2a-77")
        );
        assert_eq!(parse_mig_uuid("not_mig_uuid: x"), None);
        assert_eq!(
            parse_dev("0000:09:00.0\n").map(|b| b.sysfs()).as_deref(),
            Some("0000:09:00.0")
        );
    }

    #[test]
    fn the_mode_is_the_registrys_dev_files() {
        let tmp = tempfile::tempdir().unwrap();
        let host = accel_host::FsHost::new(tmp.path());
        assert_eq!(read_mode(&host), NodeMode::Off);
        std::fs::create_dir_all(tmp.path().join("etc/dmi_mig_config")).unwrap();
        assert_eq!(read_mode(&host), NodeMode::Off, "an empty directory");
        std::fs::write(tmp.path().join("etc/dmi_mig_config/dev0"), "0000:0f:00.0\n").unwrap();
        let NodeMode::On { cards } = read_mode(&host) else {
            panic!("on")
        };
        assert_eq!(cards[&0].sysfs(), "0000:0f:00.0");
        std::fs::create_dir_all(tmp.path().join("etc/dmi_mig_config/ci")).unwrap();
        std::fs::write(
            tmp.path().join("etc/dmi_mig_config/ci/dev0gi2ci0.conf"),
            "mig_uuid: ab12\n",
        )
        .unwrap();
        let found = find_partition(&host, "MIG-AB12").unwrap();
        assert_eq!((found.dev, found.gpu_instance), (0, 2));
        assert_eq!(found.path, "/etc/dmi_mig_config/ci/dev0gi2ci0.conf");
        assert!(find_partition(&host, "MIG-cd").is_none());
    }
}
