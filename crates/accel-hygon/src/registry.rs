//! The driver's multi-instance registry, `/etc/dmi_mig_config` (spec §6.2): `dev<N>` (one line,
//! card N's PCI address), `gi/` (one file per live GPU instance, its format unmeasured and not
//! read) and `ci/dev<N>gi<G>ci<C>.conf` (a GI block and a CI block ending in `mig_uuid: <uuid>`).
//!
//! A compute-instance file is read as Hygon's own library reads it (addendum H2, `hcu-dcgm`'s
//! `parseSingleConfFile`): each line trimmed; empty lines and lines without `:` skipped; split at
//! the first `:`, both sides trimmed. The keys repeat between the blocks, so **position
//! decides**: the first [`GI_LINES`] key/value lines are the GPU-instance block, the rest the
//! compute-instance block; within a block a key is matched by name (the two `cu_mask` lines in
//! order). A key the block does not know is skipped, a number that does not parse is `None`.
//! It is also how the node's live instances are found ([`read_confs`]): Hygon's own MIG
//! discovery reads nothing else (addendum H3).
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

/// How many key/value lines the GPU-instance block of a compute-instance file holds: the
/// lines before them are the GI block, the lines after the CI block (addendum H2).
pub const GI_LINES: usize = 13;

/// The GPU-instance block of a compute-instance file (addendum H2's keys; each `None` when the
/// block does not carry it or it does not parse).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GiBlock {
    pub pci: Option<String>,
    /// The GPU instance's id.
    pub id: Option<u32>,
    pub pipe_mask: Option<String>,
    pub gpu_slice_mask: Option<String>,
    /// The two `cu_mask` lines, in order.
    pub cu_mask: Vec<String>,
    pub profile_id: Option<u32>,
    pub gi_count_max: Option<u32>,
    pub cu_count: Option<u32>,
    pub gpu_slice_count: Option<u32>,
    /// `memory_size_MB` (MiB, as the profile info's field is).
    pub memory_size_mb: Option<u64>,
    pub placement_start: Option<u32>,
    pub placement_size: Option<u32>,
}

/// The compute-instance block of a compute-instance file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CiBlock {
    pub pci: Option<String>,
    /// The GPU instance it belongs to.
    pub gi_id: Option<u32>,
    /// The compute instance's id.
    pub id: Option<u32>,
    pub pipe_mask: Option<String>,
    pub gpu_slice_mask: Option<String>,
    pub cu_mask: Vec<String>,
    pub profile_id: Option<u32>,
    pub ci_count_max: Option<u32>,
    pub cu_count: Option<u32>,
    pub gpu_slice_count: Option<u32>,
    pub placement_start: Option<u32>,
    pub placement_size: Option<u32>,
    /// The partition's identity (a container selects it as `MIG-<mig_uuid>`).
    pub mig_uuid: Option<String>,
}

/// One compute-instance file: its two blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CiConf {
    pub gi: GiBlock,
    pub ci: CiBlock,
}

/// Why a compute-instance file was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfError {
    /// Fewer key/value lines than a GI block: no compute-instance block at all.
    #[error(
        "it holds {lines} key/value line(s), fewer than the {GI_LINES} of a GPU-instance block, so no compute-instance block"
    )]
    NoComputeBlock { lines: usize },
}

/// The key/value lines of a file, as Hygon's reader takes them.
fn key_values(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect()
}

fn number<T: std::str::FromStr>(value: &str) -> Option<T> {
    value.parse().ok()
}

fn text_value(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_string())
}

fn gi_block(lines: &[(&str, &str)]) -> GiBlock {
    let mut b = GiBlock::default();
    for (key, value) in lines {
        match *key {
            "pci" => b.pci = text_value(value),
            "id" => b.id = number(value),
            "pipe_mask" => b.pipe_mask = text_value(value),
            "gpu_slice_mask" => b.gpu_slice_mask = text_value(value),
            "cu_mask" => b.cu_mask.push(value.to_string()),
            "profile_id" => b.profile_id = number(value),
            "gi_count_max" => b.gi_count_max = number(value),
            "cu_count" => b.cu_count = number(value),
            "gpu_slice_count" => b.gpu_slice_count = number(value),
            "memory_size_MB" => b.memory_size_mb = number(value),
            "placement_start" => b.placement_start = number(value),
            "placement_size" => b.placement_size = number(value),
            _ => {}
        }
    }
    b
}

fn ci_block(lines: &[(&str, &str)]) -> CiBlock {
    let mut b = CiBlock::default();
    for (key, value) in lines {
        match *key {
            "pci" => b.pci = text_value(value),
            "gi_id" => b.gi_id = number(value),
            "id" => b.id = number(value),
            "pipe_mask" => b.pipe_mask = text_value(value),
            "gpu_slice_mask" => b.gpu_slice_mask = text_value(value),
            "cu_mask" => b.cu_mask.push(value.to_string()),
            "profile_id" => b.profile_id = number(value),
            "ci_count_max" => b.ci_count_max = number(value),
            "cu_count" => b.cu_count = number(value),
            "gpu_slice_count" => b.gpu_slice_count = number(value),
            "placement_start" => b.placement_start = number(value),
            "placement_size" => b.placement_size = number(value),
            "mig_uuid" => b.mig_uuid = text_value(value),
            _ => {}
        }
    }
    b
}

/// Reads a compute-instance file in Hygon's grammar (the module's doc).
pub fn parse_conf(text: &str) -> Result<CiConf, ConfError> {
    let lines = key_values(text);
    if lines.len() <= GI_LINES {
        return Err(ConfError::NoComputeBlock { lines: lines.len() });
    }
    let (gi, ci) = lines.split_at(GI_LINES);
    Ok(CiConf {
        gi: gi_block(gi),
        ci: ci_block(ci),
    })
}

impl CiConf {
    /// The file in Hygon's grammar as the replay writes it: the GI block's 13 lines, then the
    /// CI block's 14, each in the order Hygon's reader lists its keys (the order inside a real
    /// file beyond "GI block first" is unmeasured), `key: value` a line; an absent value is
    /// written empty, a missing `cu_mask` as `0x0`.
    pub fn render(&self) -> String {
        fn v<T: ToString>(x: &Option<T>) -> String {
            x.as_ref().map(ToString::to_string).unwrap_or_default()
        }
        let mask = |m: &[String], i: usize| m.get(i).cloned().unwrap_or_else(|| "0x0".into());
        let g = &self.gi;
        let c = &self.ci;
        let lines: [(&str, String); 27] = [
            ("pci", v(&g.pci)),
            ("id", v(&g.id)),
            ("pipe_mask", v(&g.pipe_mask)),
            ("gpu_slice_mask", v(&g.gpu_slice_mask)),
            ("cu_mask", mask(&g.cu_mask, 0)),
            ("cu_mask", mask(&g.cu_mask, 1)),
            ("profile_id", v(&g.profile_id)),
            ("gi_count_max", v(&g.gi_count_max)),
            ("cu_count", v(&g.cu_count)),
            ("gpu_slice_count", v(&g.gpu_slice_count)),
            ("memory_size_MB", v(&g.memory_size_mb)),
            ("placement_start", v(&g.placement_start)),
            ("placement_size", v(&g.placement_size)),
            ("pci", v(&c.pci)),
            ("gi_id", v(&c.gi_id)),
            ("id", v(&c.id)),
            ("pipe_mask", v(&c.pipe_mask)),
            ("gpu_slice_mask", v(&c.gpu_slice_mask)),
            ("cu_mask", mask(&c.cu_mask, 0)),
            ("cu_mask", mask(&c.cu_mask, 1)),
            ("profile_id", v(&c.profile_id)),
            ("ci_count_max", v(&c.ci_count_max)),
            ("cu_count", v(&c.cu_count)),
            ("gpu_slice_count", v(&c.gpu_slice_count)),
            ("placement_start", v(&c.placement_start)),
            ("placement_size", v(&c.placement_size)),
            ("mig_uuid", v(&c.mig_uuid)),
        ];
        lines.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
    }
}

/// The `mig_uuid` of a compute-instance file: its compute-instance block's (position decides,
/// [`parse_conf`]).
pub fn parse_mig_uuid(text: &str) -> Option<String> {
    parse_conf(text).ok()?.ci.mig_uuid
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
    /// The compute-instance block's `pci` (the card it is on).
    pub pci: Option<BusId>,
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
            let conf = host
                .read_to_string(&path)
                .ok()
                .and_then(|t| parse_conf(&t).ok());
            Some(RegistryEntry {
                dev,
                gpu_instance: gi,
                compute_instance: ci,
                path,
                mig_uuid: conf.as_ref().and_then(|c| c.ci.mig_uuid.clone()),
                pci: conf
                    .as_ref()
                    .and_then(|c| c.ci.pci.as_deref())
                    .and_then(|p| p.parse().ok()),
            })
        })
        .collect()
}

/// One compute-instance file of a card as read, or why it was not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfRead {
    pub gpu_instance: u32,
    pub compute_instance: u32,
    /// The file's host path.
    pub path: String,
    pub conf: Result<CiConf, String>,
}

/// Every compute-instance file of card `dev` (`ci/dev<dev>gi<G>ci<C>.conf`), in name order;
/// no `ci/` directory is none, a directory that cannot be listed an error naming it.
pub fn read_confs(host: &dyn Host, dev: u32) -> Result<Vec<ConfRead>, String> {
    let mut names = match host.list(CI_DIR) {
        Ok(names) => names,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => {
            return Err(match &e {
                accel_host::HostError::Io { source, .. } => format!("{CI_DIR}: {source}"),
                other => format!("{CI_DIR}: {other}"),
            });
        }
    };
    names.sort();
    Ok(names
        .iter()
        .filter_map(|name| {
            let (d, gi, ci) = parse_ci_name(name)?;
            (d == dev).then_some((name, gi, ci))
        })
        .map(|(name, gi, ci)| {
            let path = format!("{CI_DIR}/{name}");
            let conf = match host.read_to_string(&path) {
                Ok(text) => parse_conf(&text).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            ConfRead {
                gpu_instance: gi,
                compute_instance: ci,
                path,
                conf,
            }
        })
        .collect())
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
            format!("{}mig_uuid: ab12\n", "k: v\n".repeat(GI_LINES)),
        )
        .unwrap();
        let found = find_partition(&host, "MIG-AB12").unwrap();
        assert_eq!((found.dev, found.gpu_instance), (0, 2));
        assert_eq!(found.path, "/etc/dmi_mig_config/ci/dev0gi2ci0.conf");
        assert!(find_partition(&host, "MIG-cd").is_none());
    }

    /// Addendum H2: the first 13 key/value lines are the GI block whatever their keys, the
    /// rest the CI block; keys repeat between them; the two `cu_mask` lines stay in order;
    /// blank lines and lines without a colon do not count.
    #[test]
    fn position_decides_between_the_blocks() {
        let text = "\
pci: 0000:0f:00.0
id: 3

pipe_mask: 0x1
gpu_slice_mask: 0x1
a line without a colon
cu_mask: 0x000fffff
cu_mask: 0x00000000
profile_id: 3
gi_count_max: 4
cu_count: 20
gpu_slice_count: 1
memory_size_MB: 16380
placement_start: 0
placement_size: 1
pci: 0000:0f:00.0
gi_id: 3
id: 0
pipe_mask: 0x1
gpu_slice_mask: 0x1
cu_mask: 0x000fffff
cu_mask: 0x00000000
profile_id: 0
ci_count_max: 1
cu_count: 20
gpu_slice_count: 1
placement_start: 0
placement_size: 1
mig_uuid: 5f0c2a9e-1b7d-4c3e-8a61-0d2f9b7e4c11
";
        let conf = parse_conf(text).unwrap();
        assert_eq!(
            parse_conf(&conf.render()).unwrap(),
            conf,
            "rendered as read"
        );
        assert_eq!(conf.gi.id, Some(3));
        assert_eq!(
            conf.gi.profile_id,
            Some(3),
            "the GI block's, not the CI's 0"
        );
        assert_eq!(conf.gi.memory_size_mb, Some(16380));
        assert_eq!(conf.gi.cu_mask, ["0x000fffff", "0x00000000"]);
        assert_eq!(
            (conf.gi.placement_start, conf.gi.placement_size),
            (Some(0), Some(1))
        );
        assert_eq!((conf.ci.gi_id, conf.ci.id), (Some(3), Some(0)));
        assert_eq!(conf.ci.profile_id, Some(0));
        assert_eq!(
            conf.ci.mig_uuid.as_deref(),
            Some("5f0c2a9e-1b7d-4c3e-8a61-0d2f9b7e4c11")
        );
        assert_eq!(
            parse_mig_uuid(text).as_deref(),
            Some("5f0c2a9e-1b7d-4c3e-8a61-0d2f9b7e4c11")
        );
        // A `mig_uuid` inside the first 13 lines is a GI-block line: no identity.
        let early = "mig_uuid: x\npci: 0000:0f:00.0\n";
        assert_eq!(parse_mig_uuid(early), None);
        assert_eq!(
            parse_conf(early),
            Err(ConfError::NoComputeBlock { lines: 2 })
        );
    }
}
