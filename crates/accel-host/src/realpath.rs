//! Symbolic links followed inside the host root, and a PCI function's place on the bus.
//!
//! sysfs is a tree of links (`class/net/eth0` → `../../devices/pci0000:00/…/net/eth0`); what a
//! device *is* (PCI or virtual, which bridges sit above it) is read off where its link lands.
//! [`resolve`] follows every link of a path through [`Host`], so a recorded host resolves the
//! same way, and refuses a path that lands outside the root (a relocated capture's link with too
//! many `../`, an absolute link under a root that is not `/`). [`read_attribute`] is the one
//! capped, trimmed attribute read. [`pci_topology`] is the bridge walk every PCI-distance rule
//! uses, for a NIC and an accelerator alike ([`function_topology`]), so their roots compare.

use std::path::{Component, Path};

use crate::host::{EntryKind, Host, HostError};

/// The most links followed while resolving one path (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// The largest attribute [`read_attribute`] reads.
pub const ATTRIBUTE_CAP: usize = 64 << 10;

/// Why a path could not be resolved or read.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The path, or a link's target on the way, does not exist.
    #[error("{path}: not found")]
    NotFound { path: String },
    /// The path resolves outside the host root.
    #[error("sysfs path {path:?} resolves to {resolved:?}, outside {root:?}")]
    Outside {
        path: String,
        resolved: String,
        root: String,
    },
    /// More than [`MAX_LINKS`] links (a loop).
    #[error("{path}: too many levels of symbolic links")]
    Loop { path: String },
    /// An attribute larger than [`ATTRIBUTE_CAP`].
    #[error("sysfs attribute {path:?} exceeds {cap} bytes")]
    TooLarge { path: String, cap: usize },
    #[error("{0}")]
    Host(HostError),
}

impl ResolveError {
    pub fn is_not_found(&self) -> bool {
        match self {
            ResolveError::NotFound { .. } => true,
            ResolveError::Host(e) => e.is_not_found(),
            _ => false,
        }
    }
}

fn join(parts: &[String]) -> String {
    parts.join("/")
}

/// `path` (relative to the host root) with every symbolic link followed, as a root-relative path
/// without `.`, `..` or links. A link target is taken relative to the link's directory; an
/// absolute one only under the root `/`.
pub fn resolve(host: &dyn Host, path: &str) -> Result<String, ResolveError> {
    let live_root = host.root() == Path::new("/");
    let mut pending: Vec<String> = components(Path::new(path.trim_start_matches('/')))
        .into_iter()
        .rev()
        .collect();
    let mut done: Vec<String> = Vec::new();
    let mut links = 0;
    let outside = |resolved: String| ResolveError::Outside {
        path: path.to_string(),
        resolved,
        root: host.root().display().to_string(),
    };
    while let Some(part) = pending.pop() {
        match part.as_str() {
            "" | "." => continue,
            ".." => {
                if done.pop().is_none() {
                    return Err(outside(format!("../{}", join(&done))));
                }
                continue;
            }
            _ => {}
        }
        done.push(part);
        let here = join(&done);
        match host.entry_kind(&here) {
            Ok(EntryKind::Link) => {}
            Ok(_) => continue,
            Err(e) if e.is_not_found() => return Err(ResolveError::NotFound { path: here }),
            Err(e) => return Err(ResolveError::Host(e)),
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(ResolveError::Loop {
                path: path.to_string(),
            });
        }
        let target = host.read_link(&here).map_err(|e| {
            if e.is_not_found() {
                ResolveError::NotFound { path: here.clone() }
            } else {
                ResolveError::Host(e)
            }
        })?;
        done.pop();
        if target.is_absolute() {
            if !live_root {
                return Err(outside(target.display().to_string()));
            }
            done.clear();
        }
        for c in components(&target).into_iter().rev() {
            pending.push(c);
        }
    }
    Ok(join(&done))
}

fn components(path: &Path) -> Vec<String> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            Component::ParentDir => Some("..".to_string()),
            _ => None,
        })
        .collect()
}

/// Whether `path` itself exists, a final link not followed (`lstat`).
pub fn lexists(host: &dyn Host, path: &str) -> bool {
    host.entry_kind(path).is_ok()
}

/// One attribute: `path` resolved inside the root, at most [`ATTRIBUTE_CAP`] bytes, whitespace
/// trimmed (an empty file is `""`).
pub fn read_attribute(host: &dyn Host, path: &str) -> Result<String, ResolveError> {
    let real = resolve(host, path)?;
    let bytes = host.read(&real).map_err(|e| {
        if e.is_not_found() {
            ResolveError::NotFound { path: real.clone() }
        } else {
            ResolveError::Host(e)
        }
    })?;
    if bytes.len() > ATTRIBUTE_CAP {
        return Err(ResolveError::TooLarge {
            path: real,
            cap: ATTRIBUTE_CAP,
        });
    }
    Ok(String::from_utf8_lossy(&bytes).trim().to_string())
}

/// Where a PCI function sits: the bridges above it, innermost first, and the outermost of them
/// (the function itself when no bridge is above it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciTopology {
    pub root: String,
    pub switches: Vec<String>,
}

/// Whether a path component is a PCI address (two colons: `0000:00:01.0`, not `pci0000:00`).
pub fn is_pci_address(name: &str) -> bool {
    name.matches(':').count() == 2
}

/// The bridge walk of a resolved device path (`devices/pci0000:00/0000:00:02.0/…/0000:04:00.0`):
/// every ancestor that is a PCI address, innermost first; the root is the last of them, or the
/// function's own address with none. `None` when the path's last component is no PCI address.
pub fn pci_topology(resolved: &str) -> Option<PciTopology> {
    let parts: Vec<&str> = resolved.split('/').filter(|p| !p.is_empty()).collect();
    let (own, ancestors) = parts.split_last()?;
    if !is_pci_address(own) {
        return None;
    }
    let switches: Vec<String> = ancestors
        .iter()
        .rev()
        .filter(|p| is_pci_address(p))
        .map(|p| p.to_string())
        .collect();
    let root = switches.last().cloned().unwrap_or_else(|| own.to_string());
    Some(PciTopology { root, switches })
}

/// The topology of the PCI function `address` (sysfs form, `0000:18:00.0`) through its
/// `bus/pci/devices` link.
pub fn function_topology(host: &dyn Host, address: &str) -> Option<PciTopology> {
    let real = resolve(host, &format!("{}/{address}", crate::pci::PCI_DEVICES_DIR)).ok()?;
    pci_topology(&real)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::FsHost;
    use std::os::unix::fs::symlink;

    #[test]
    fn the_bridge_walk_matches_the_described_table() {
        assert_eq!(
            pci_topology("devices/pci0000:00/0000:00:01.0/0000:01:00.0"),
            Some(PciTopology {
                root: "0000:00:01.0".into(),
                switches: vec!["0000:00:01.0".into()]
            })
        );
        assert_eq!(
            pci_topology("devices/pci0000:00/0000:05:00.0"),
            Some(PciTopology {
                root: "0000:05:00.0".into(),
                switches: vec![]
            })
        );
        assert_eq!(
            pci_topology("devices/pci0000:00/0000:00:02.0/0000:02:00.0/0000:03:01.0/0000:04:00.0"),
            Some(PciTopology {
                root: "0000:00:02.0".into(),
                switches: vec![
                    "0000:03:01.0".into(),
                    "0000:02:00.0".into(),
                    "0000:00:02.0".into()
                ]
            })
        );
        assert_eq!(pci_topology("devices/virtual/net/lo"), None);
    }

    #[test]
    fn links_resolve_inside_the_root_and_not_outside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("sys/devices/pci0000:00/0000:00:01.0/net/eth0")).unwrap();
        std::fs::write(
            root.join("sys/devices/pci0000:00/0000:00:01.0/net/eth0/mtu"),
            "1500\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("sys/class/net")).unwrap();
        symlink(
            "../../devices/pci0000:00/0000:00:01.0/net/eth0/",
            root.join("sys/class/net/eth0"),
        )
        .unwrap();
        symlink("../../../../../../..", root.join("sys/class/net/far")).unwrap();
        symlink("/etc", root.join("sys/class/net/abs")).unwrap();
        symlink("loop", root.join("sys/class/net/loop")).unwrap();
        let host = FsHost::new(root);
        assert_eq!(
            resolve(&host, "sys/class/net/eth0").unwrap(),
            "sys/devices/pci0000:00/0000:00:01.0/net/eth0"
        );
        assert_eq!(
            read_attribute(&host, "sys/class/net/eth0/mtu").unwrap(),
            "1500"
        );
        assert!(matches!(
            resolve(&host, "sys/class/net/far"),
            Err(ResolveError::Outside { .. })
        ));
        assert!(matches!(
            resolve(&host, "sys/class/net/abs"),
            Err(ResolveError::Outside { .. })
        ));
        assert!(matches!(
            resolve(&host, "sys/class/net/loop"),
            Err(ResolveError::Loop { .. })
        ));
        assert!(
            resolve(&host, "sys/class/net/none")
                .unwrap_err()
                .is_not_found()
        );
        std::fs::write(root.join("sys/big"), vec![b'x'; ATTRIBUTE_CAP + 1]).unwrap();
        assert!(matches!(
            read_attribute(&host, "sys/big"),
            Err(ResolveError::TooLarge { .. })
        ));
    }
}
