//! The verbs character device an RDMA device is used through (spec/rdma.md §8.2): the
//! `uverbs<N>` whose `ibdev` names it, looked up first in `class/infiniband_verbs/`, then under the
//! RDMA device's hardware parent (`class/infiniband/<name>/device/infiniband_verbs/`, the only
//! layout the real captures carry). The node is `/dev/infiniband/<uverbsN>`.

use accel_host::Host;
use accel_host::realpath::read_attribute;

/// Where the verbs class lists its devices.
pub const VERBS_CLASS: &str = "sys/class/infiniband_verbs";
/// The directory of the RDMA device nodes.
pub const DEVICE_DIR: &str = "/dev/infiniband";
/// The RDMA connection manager's node, injected once per answer when the host has it.
pub const RDMA_CM: &str = "/dev/infiniband/rdma_cm";

/// Why no verbs node could be named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    #[error("the RDMA device name is empty")]
    EmptyName,
    #[error(
        "no verbs character device for RDMA device {name:?} under {root:?}: tried both sysfs layouts, {class:?} (the verbs class directory) and the {parent:?} directory under {device:?} (the RDMA device's hardware parent)"
    )]
    None {
        name: String,
        root: String,
        class: String,
        parent: String,
        device: String,
    },
    #[error(
        "whether RDMA device {name:?} has a verbs character device could not be established under {root:?}: {error}"
    )]
    Unreadable {
        name: String,
        root: String,
        error: String,
    },
}

/// Looks through `dir`'s `uverbs*` entries for the one whose `ibdev` is `name` (trimmed, exact).
fn find_in(host: &dyn Host, dir: &str, name: &str) -> Result<Option<String>, String> {
    let entries = match host.list(dir) {
        Ok(entries) => entries,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    for entry in entries.into_iter().filter(|e| e.starts_with("uverbs")) {
        match read_attribute(host, &format!("{dir}/{entry}/ibdev")) {
            Ok(ibdev) if ibdev == name => return Ok(Some(entry)),
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(None)
}

/// The verbs node of the RDMA device `name`: `/dev/infiniband/uverbs<N>`.
pub fn verbs_device(host: &dyn Host, name: &str) -> Result<String, VerbsError> {
    if name.is_empty() {
        return Err(VerbsError::EmptyName);
    }
    let root = host.root().display().to_string();
    let unreadable = |error: String| VerbsError::Unreadable {
        name: name.to_string(),
        root: root.clone(),
        error,
    };
    if let Some(entry) = find_in(host, VERBS_CLASS, name).map_err(unreadable)? {
        return Ok(format!("{DEVICE_DIR}/{entry}"));
    }
    let device = format!("sys/class/infiniband/{name}/device");
    let parent = format!("{device}/infiniband_verbs");
    if let Some(entry) = find_in(host, &parent, name).map_err(unreadable)? {
        return Ok(format!("{DEVICE_DIR}/{entry}"));
    }
    Err(VerbsError::None {
        name: name.to_string(),
        root,
        class: format!("/{VERBS_CLASS}"),
        parent: "infiniband_verbs".to_string(),
        device: format!("/{device}"),
    })
}
