//! The node's network interfaces as `Devices.spec.interfaces` carries them (spec/rdma.md §3), and
//! the pure rules over that list: the RDMA link verdict from a device's port values (§4), the
//! first-seen time a failure keeps (§4), what counts as a change for the monitor loop (§6.2), and
//! the `feature.gpustack.ai/rdma.*` node labels (§7).
//!
//! The wire shape mirrors the described system's exactly: every field but `name` is omitted when
//! it is `false`, `0` or `""` (a VF's `name` is always written). Reading sysfs is accel-net's.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::labels::label_value;

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// One network interface of the node (`DeviceInterface`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeviceInterface {
    /// The kernel's interface name: the identity.
    pub name: String,
    /// `pci`, `virtual`, `platform`, `usb`, …
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bus: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pci_bus_id: String,
    /// The outermost PCI bridge above the function (or the function itself).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pci_root_id: String,
    /// The bridges above the function, innermost first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", schemars(extend("x-kubernetes-list-type" = "atomic")))]
    pub pci_switches: Vec<String>,
    /// Raw hex as sysfs has it (`0x15b3`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pci_vendor: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pci_device: String,
    /// The NUMA node; `""` when unknown (sysfs `-1`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub numa_affinity: String,
    /// The CPU list string (`0-15`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpu_affinity: String,
    /// 0 when not read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: i32,
    #[serde(default, skip_serializing_if = "is_false")]
    pub up: bool,
    /// No device behind it (loopback, bridges, bonds, VLANs, veths, …).
    #[serde(default, skip_serializing_if = "is_false")]
    pub r#virtual: bool,
    /// An RDMA device is bound (not "the link works").
    #[serde(default, skip_serializing_if = "is_false")]
    pub rdma: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rdma_device: String,
    /// An SR-IOV physical function (whatever its VF count).
    #[serde(default, skip_serializing_if = "is_false")]
    pub sriov: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", schemars(extend("x-kubernetes-list-type" = "atomic")))]
    pub virtual_functions: Vec<DeviceInterfaceVirtualFunction>,
    /// `None`: nothing to verify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<DeviceInterfaceLink>,
}

/// One SR-IOV virtual function of a physical function.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeviceInterfaceVirtualFunction {
    /// The VF's netdev; `""` for a VF without one (always written).
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pci_bus_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub numa_affinity: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpu_affinity: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: i32,
    #[serde(default, skip_serializing_if = "is_false")]
    pub up: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub rdma: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rdma_device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<DeviceInterfaceLink>,
}

/// The link verdict's three states.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    #[default]
    Ok,
    Unverified,
    Failed,
}

impl LinkState {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Ok => "ok",
            LinkState::Unverified => "unverified",
            LinkState::Failed => "failed",
        }
    }
}

/// An RDMA link's verdict (`DeviceInterfaceLink`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeviceInterfaceLink {
    pub state: LinkState,
    /// Empty exactly when `ok`; the kernel's raw values otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// RFC 3339; only on `failed`: when this failure was first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_seen_time: Option<String>,
}

impl DeviceInterfaceLink {
    pub fn ok() -> Self {
        DeviceInterfaceLink::default()
    }

    pub fn unverified(reason: impl Into<String>) -> Self {
        DeviceInterfaceLink {
            state: LinkState::Unverified,
            reason: reason.into(),
            first_seen_time: None,
        }
    }
}

/// One port of an RDMA device as read: its name and its raw `state` / `phys_state` text
/// (trimmed), `None` when either could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortReading {
    pub port: String,
    pub values: Option<(String, String)>,
}

/// The name half of a port value: the text after the first `:`, trimmed (all of it without one).
fn value_name(raw: &str) -> &str {
    match raw.split_once(':') {
        Some((_, name)) => name.trim(),
        None => raw.trim(),
    }
}

/// The verdict of one RDMA device from its ports, in port-name order (spec §4): the first port
/// reading `ACTIVE` and `LinkUp` makes it `ok`; no port read is `unverified`; some unreadable and
/// none up is `unverified`; every port read and none up is `failed` (the time is stamped by
/// [`carry_first_seen`]). `ports_path` names the directory for the no-port reason.
pub fn link_verdict(ports: &[PortReading], ports_path: &str) -> DeviceInterfaceLink {
    let mut observed = Vec::new();
    let mut unreadable = Vec::new();
    for reading in ports {
        let Some((state, phys)) = &reading.values else {
            unreadable.push(reading.port.as_str());
            continue;
        };
        if value_name(state) == "ACTIVE" && value_name(phys) == "LinkUp" {
            return DeviceInterfaceLink::ok();
        }
        observed.push(format!(
            "port {}: state={state:?} phys_state={phys:?}",
            reading.port
        ));
    }
    if observed.is_empty() {
        return DeviceInterfaceLink::unverified(format!(
            "the RDMA port state could not be read under {ports_path:?}"
        ));
    }
    if !unreadable.is_empty() {
        return DeviceInterfaceLink::unverified(format!(
            "the RDMA link could not be verified: {}; unreadable: {}",
            observed.join("; "),
            unreadable.join(", ")
        ));
    }
    DeviceInterfaceLink {
        state: LinkState::Failed,
        reason: format!("the RDMA link is not usable: {}", observed.join("; ")),
        first_seen_time: None,
    }
}

/// The key a VF's first-seen time is kept under: `<if>/<vf pciBusId, else vf name>`.
pub fn vf_key(interface: &str, vf: &DeviceInterfaceVirtualFunction) -> String {
    let id = if vf.pci_bus_id.is_empty() {
        &vf.name
    } else {
        &vf.pci_bus_id
    };
    format!("{interface}/{id}")
}

fn stored_failures(stored: &[DeviceInterface]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut keep = |key: String, link: &Option<DeviceInterfaceLink>| {
        if let Some(DeviceInterfaceLink {
            state: LinkState::Failed,
            first_seen_time: Some(time),
            ..
        }) = link
        {
            out.insert(key, time.clone());
        }
    };
    for i in stored {
        keep(i.name.clone(), &i.link);
        for vf in &i.virtual_functions {
            keep(vf_key(&i.name, vf), &vf.link);
        }
    }
    out
}

/// Gives every `failed` link in `interfaces` its first-seen time: the stored record's when that
/// one was `failed` with a time (even if the reason changed), else `now`; every other state
/// loses its time (spec §4, `carryLinkFirstSeen`).
pub fn carry_first_seen(interfaces: &mut [DeviceInterface], stored: &[DeviceInterface], now: &str) {
    let times = stored_failures(stored);
    let stamp = |key: String, link: &mut Option<DeviceInterfaceLink>| {
        if let Some(link) = link {
            link.first_seen_time = match link.state {
                LinkState::Failed => {
                    Some(times.get(&key).cloned().unwrap_or_else(|| now.to_string()))
                }
                _ => None,
            };
        }
    };
    for i in interfaces.iter_mut() {
        let name = i.name.clone();
        stamp(name.clone(), &mut i.link);
        for vf in &mut i.virtual_functions {
            let key = vf_key(&name, vf);
            stamp(key, &mut vf.link);
        }
    }
}

/// [`carry_first_seen`] against what the cluster holds, for a list already stamped: a `failed`
/// link whose stored record is `failed` with a time takes that time; nothing else changes. Two
/// daemons of one node, or one across a restart, so write one time for one failure.
pub fn adopt_first_seen(interfaces: &mut [DeviceInterface], stored: &[DeviceInterface]) {
    let times = stored_failures(stored);
    let adopt = |key: String, link: &mut Option<DeviceInterfaceLink>| {
        if let Some(link) = link
            && link.state == LinkState::Failed
            && let Some(time) = times.get(&key)
        {
            link.first_seen_time = Some(time.clone());
        }
    };
    for i in interfaces.iter_mut() {
        let name = i.name.clone();
        adopt(name.clone(), &mut i.link);
        for vf in &mut i.virtual_functions {
            let key = vf_key(&name, vf);
            adopt(key, &mut vf.link);
        }
    }
}

/// What the monitor loop compares (spec §6.2): the interfaces that are not virtual, and virtual
/// ones carrying `rdma` or a `link` (on themselves or a VF), every first-seen time stripped. A
/// Pod's veth coming or going changes nothing here.
pub fn significant(interfaces: &[DeviceInterface]) -> Vec<DeviceInterface> {
    interfaces
        .iter()
        .filter(|i| {
            !i.r#virtual
                || i.rdma
                || i.link.is_some()
                || i.virtual_functions
                    .iter()
                    .any(|vf| vf.rdma || vf.link.is_some())
        })
        .cloned()
        .map(|mut i| {
            if let Some(link) = &mut i.link {
                link.first_seen_time = None;
            }
            for vf in &mut i.virtual_functions {
                if let Some(link) = &mut vf.link {
                    link.first_seen_time = None;
                }
            }
            i
        })
        .collect()
}

/// Where a PCI function sits, as the distance rule reads it (an accelerator or a NIC).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciPlace {
    pub pci_bus_id: String,
    pub pci_root_id: String,
    /// Innermost first.
    pub pci_switches: Vec<String>,
    /// `""` when unknown.
    pub numa: String,
}

/// The topology distance between two PCI functions (the described system's `BusDistance`; only
/// these four and `UNK` are produced).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Distance {
    Pix = 10,
    Pxb = 20,
    Node = 40,
    Sys = 50,
    Unk = 100,
}

impl Distance {
    pub fn as_str(self) -> &'static str {
        match self {
            Distance::Pix => "PIX",
            Distance::Pxb => "PXB",
            Distance::Node => "NODE",
            Distance::Sys => "SYS",
            Distance::Unk => "UNK",
        }
    }
}

/// The distance between `a` and `b` (spec §7): no bus id or root on either side → `UNK`; equal
/// innermost switches → `PIX`; equal roots → `PXB`; then NUMA: either unknown → `UNK`, equal →
/// `NODE`, else `SYS`.
pub fn bus_distance(a: &PciPlace, b: &PciPlace) -> Distance {
    if a.pci_bus_id.is_empty()
        || a.pci_root_id.is_empty()
        || b.pci_bus_id.is_empty()
        || b.pci_root_id.is_empty()
    {
        return Distance::Unk;
    }
    if let (Some(x), Some(y)) = (a.pci_switches.first(), b.pci_switches.first())
        && x == y
    {
        return Distance::Pix;
    }
    if a.pci_root_id == b.pci_root_id {
        return Distance::Pxb;
    }
    if a.numa.is_empty() || b.numa.is_empty() {
        return Distance::Unk;
    }
    if a.numa == b.numa {
        Distance::Node
    } else {
        Distance::Sys
    }
}

/// One RDMA endpoint of the node: an interface, or one VF of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint<'a> {
    /// The interface (the PF for a VF).
    pub interface: &'a DeviceInterface,
    /// The VF, when the endpoint is one.
    pub vf: Option<&'a DeviceInterfaceVirtualFunction>,
}

impl Endpoint<'_> {
    pub fn rdma(&self) -> bool {
        self.vf.map_or(self.interface.rdma, |vf| vf.rdma)
    }

    pub fn rdma_device(&self) -> &str {
        self.vf
            .map_or(&self.interface.rdma_device, |vf| &vf.rdma_device)
    }

    pub fn link(&self) -> Option<&DeviceInterfaceLink> {
        match self.vf {
            Some(vf) => vf.link.as_ref(),
            None => self.interface.link.as_ref(),
        }
    }

    /// The endpoint's NUMA node: a VF's own, else its PF's; `""` when unknown.
    pub fn numa(&self) -> &str {
        match self.vf {
            Some(vf) if !vf.numa_affinity.is_empty() => &vf.numa_affinity,
            _ => &self.interface.numa_affinity,
        }
    }

    /// Usable for the label (`rdmaUsable`): a link that is not `failed`, or, without a link, an
    /// RDMA device bound.
    pub fn usable(&self) -> bool {
        match self.link() {
            Some(link) => link.state != LinkState::Failed,
            None => self.rdma(),
        }
    }

    /// Where it sits on the bus: a VF carries its PF's root and switches.
    pub fn place(&self) -> PciPlace {
        PciPlace {
            pci_bus_id: self
                .vf
                .map_or(&self.interface.pci_bus_id, |vf| &vf.pci_bus_id)
                .clone(),
            pci_root_id: self.interface.pci_root_id.clone(),
            pci_switches: self.interface.pci_switches.clone(),
            numa: self.numa().to_string(),
        }
    }
}

/// Every interface and every VF, in inventory order (each PF's VFs after it).
pub fn endpoints(interfaces: &[DeviceInterface]) -> Vec<Endpoint<'_>> {
    let mut out = Vec::new();
    for i in interfaces {
        out.push(Endpoint {
            interface: i,
            vf: None,
        });
        for vf in &i.virtual_functions {
            out.push(Endpoint {
                interface: i,
                vf: Some(vf),
            });
        }
    }
    out
}

/// The prefix of every RDMA node label; stale keys under it are removed.
pub const RDMA_LABEL_PREFIX: &str = "feature.gpustack.ai/rdma.";
/// `feature.gpustack.ai/rdma.capable`
pub const RDMA_CAPABLE: &str = "feature.gpustack.ai/rdma.capable";
/// `feature.gpustack.ai/rdma.distance`
pub const RDMA_DISTANCE: &str = "feature.gpustack.ai/rdma.distance";
/// `feature.gpustack.ai/rdma.numa`
pub const RDMA_NUMA: &str = "feature.gpustack.ai/rdma.numa";

/// The `rdma.*` labels of a node with these interfaces and accelerators (spec §7): `capable`
/// when some endpoint is usable; `distance`, the smallest between an accelerator and a usable
/// endpoint, only with both; `numa`, the usable endpoints' known NUMA ids sorted as strings and
/// joined with `_`, left out when sanitising would change it (e.g. past 63 characters).
pub fn rdma_labels(
    interfaces: &[DeviceInterface],
    accelerators: &[PciPlace],
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let usable: Vec<Endpoint<'_>> = endpoints(interfaces)
        .into_iter()
        .filter(Endpoint::usable)
        .collect();
    if usable.is_empty() {
        return labels;
    }
    labels.insert(RDMA_CAPABLE.to_string(), "true".to_string());
    if !accelerators.is_empty() {
        let distance = usable
            .iter()
            .flat_map(|e| {
                let place = e.place();
                accelerators.iter().map(move |a| bus_distance(a, &place))
            })
            .min()
            .unwrap_or(Distance::Unk);
        labels.insert(RDMA_DISTANCE.to_string(), distance.as_str().to_string());
    }
    let numa: BTreeSet<&str> = usable
        .iter()
        .map(Endpoint::numa)
        .filter(|n| !n.is_empty())
        .collect();
    if !numa.is_empty() {
        let joined = numa.into_iter().collect::<Vec<_>>().join("_");
        if label_value(&joined) == joined {
            labels.insert(RDMA_NUMA.to_string(), joined);
        }
    }
    labels
}

/// Whether every endpoint that has an RDMA device or a verdict has `failed` (and there is at
/// least one): what `doctor` flags.
pub fn all_links_failed(interfaces: &[DeviceInterface]) -> bool {
    let judged: Vec<Endpoint<'_>> = endpoints(interfaces)
        .into_iter()
        .filter(|e| e.rdma() || e.link().is_some())
        .collect();
    !judged.is_empty()
        && judged
            .iter()
            .all(|e| e.link().is_some_and(|l| l.state == LinkState::Failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(p: &str, state: &str, phys: &str) -> PortReading {
        PortReading {
            port: p.to_string(),
            values: Some((state.to_string(), phys.to_string())),
        }
    }

    fn unreadable(p: &str) -> PortReading {
        PortReading {
            port: p.to_string(),
            values: None,
        }
    }

    #[test]
    fn the_verdict_follows_the_spec_table() {
        let path = "class/infiniband/mlx5_0/ports";
        assert_eq!(
            link_verdict(&[port("1", "4: ACTIVE", "5: LinkUp")], path),
            DeviceInterfaceLink::ok()
        );
        // One port up is enough, whatever the others say.
        assert_eq!(
            link_verdict(
                &[
                    port("1", "1: DOWN", "3: Disabled"),
                    port("2", "4: ACTIVE", "5: LinkUp")
                ],
                path
            )
            .state,
            LinkState::Ok
        );
        let down = link_verdict(
            &[
                port("1", "1: DOWN", "3: Disabled"),
                port("2", "1: DOWN", "3: Disabled"),
            ],
            path,
        );
        assert_eq!(down.state, LinkState::Failed);
        assert_eq!(
            down.reason,
            "the RDMA link is not usable: port 1: state=\"1: DOWN\" phys_state=\"3: Disabled\"; port 2: state=\"1: DOWN\" phys_state=\"3: Disabled\""
        );
        // ACTIVE_DEFER is not ACTIVE; a value without a colon is used whole.
        assert_eq!(
            link_verdict(&[port("1", "5: ACTIVE_DEFER", "5: LinkUp")], path).state,
            LinkState::Failed
        );
        assert_eq!(
            link_verdict(&[port("1", "ACTIVE", "LinkUp")], path).state,
            LinkState::Ok
        );
        assert_eq!(
            link_verdict(&[], path),
            DeviceInterfaceLink::unverified(
                "the RDMA port state could not be read under \"class/infiniband/mlx5_0/ports\""
            )
        );
        assert_eq!(
            link_verdict(&[unreadable("1")], path).state,
            LinkState::Unverified
        );
        assert_eq!(
            link_verdict(&[port("1", "1: DOWN", "2: Polling"), unreadable("2")], path),
            DeviceInterfaceLink::unverified(
                "the RDMA link could not be verified: port 1: state=\"1: DOWN\" phys_state=\"2: Polling\"; unreadable: 2"
            )
        );
    }

    fn nic(name: &str, link: Option<DeviceInterfaceLink>) -> DeviceInterface {
        DeviceInterface {
            name: name.to_string(),
            bus: "pci".to_string(),
            rdma: true,
            rdma_device: format!("{name}_rdma"),
            link,
            ..DeviceInterface::default()
        }
    }

    fn failed(reason: &str) -> DeviceInterfaceLink {
        DeviceInterfaceLink {
            state: LinkState::Failed,
            reason: reason.to_string(),
            first_seen_time: None,
        }
    }

    #[test]
    fn a_failure_keeps_the_time_it_was_first_seen() {
        let mut stored = vec![nic("eth1", Some(failed("a")))];
        carry_first_seen(&mut stored, &[], "2026-09-02T10:00:00Z");
        let mut again = vec![
            nic("eth1", Some(failed("b"))),
            nic("eth2", Some(failed("c"))),
        ];
        carry_first_seen(&mut again, &stored, "2026-09-02T11:00:00Z");
        assert_eq!(
            again[0].link.as_ref().unwrap().first_seen_time.as_deref(),
            Some("2026-09-02T10:00:00Z")
        );
        assert_eq!(
            again[1].link.as_ref().unwrap().first_seen_time.as_deref(),
            Some("2026-09-02T11:00:00Z")
        );
        let mut recovered = vec![nic("eth1", Some(DeviceInterfaceLink::ok()))];
        carry_first_seen(&mut recovered, &again, "2026-09-02T12:00:00Z");
        assert_eq!(recovered[0].link.as_ref().unwrap().first_seen_time, None);
    }

    #[test]
    fn veths_are_no_change_but_a_virtual_rdma_device_is() {
        let veth = DeviceInterface {
            name: "veth1".into(),
            bus: "virtual".into(),
            r#virtual: true,
            ..DeviceInterface::default()
        };
        let base = vec![nic("eth0", Some(DeviceInterfaceLink::ok()))];
        let mut churn = base.clone();
        churn.push(veth.clone());
        assert_eq!(significant(&base), significant(&churn));
        let mut soft = veth;
        soft.rdma = true;
        churn.push(soft);
        assert_ne!(significant(&base), significant(&churn));
    }

    fn place(bus: &str, root: &str, switches: &[&str], numa: &str) -> PciPlace {
        PciPlace {
            pci_bus_id: bus.into(),
            pci_root_id: root.into(),
            pci_switches: switches.iter().map(|s| s.to_string()).collect(),
            numa: numa.into(),
        }
    }

    #[test]
    fn distances() {
        let gpu = place(
            "0000:04:00.0",
            "0000:00:02.0",
            &["0000:03:01.0", "0000:02:00.0"],
            "0",
        );
        let pix = place("0000:05:00.0", "0000:00:02.0", &["0000:03:01.0"], "0");
        let pxb = place("0000:06:00.0", "0000:00:02.0", &["0000:02:01.0"], "0");
        let node = place("0000:81:00.0", "0000:80:01.0", &["0000:80:01.0"], "0");
        let sys = place("0000:81:00.0", "0000:80:01.0", &["0000:80:01.0"], "1");
        assert_eq!(bus_distance(&gpu, &pix), Distance::Pix);
        assert_eq!(bus_distance(&gpu, &pxb), Distance::Pxb);
        assert_eq!(bus_distance(&gpu, &node), Distance::Node);
        assert_eq!(bus_distance(&gpu, &sys), Distance::Sys);
        assert_eq!(
            bus_distance(&gpu, &place("0000:81:00.0", "0000:80:01.0", &[], "")),
            Distance::Unk
        );
        assert_eq!(bus_distance(&gpu, &PciPlace::default()), Distance::Unk);
    }

    #[test]
    fn labels_follow_the_usable_endpoints() {
        let mut up = nic("eth0", Some(DeviceInterfaceLink::ok()));
        up.numa_affinity = "1".into();
        up.pci_bus_id = "0000:81:00.0".into();
        up.pci_root_id = "0000:80:01.0".into();
        let mut down = nic("eth1", Some(failed("x")));
        down.numa_affinity = "0".into();
        let gpu = place("0000:18:00.0", "0000:17:01.0", &["0000:17:01.0"], "0");
        let labels = rdma_labels(&[up.clone(), down.clone()], std::slice::from_ref(&gpu));
        assert_eq!(labels.get(RDMA_CAPABLE).map(String::as_str), Some("true"));
        assert_eq!(labels.get(RDMA_DISTANCE).map(String::as_str), Some("SYS"));
        // The failed port's NUMA node is not the usable endpoints'.
        assert_eq!(labels.get(RDMA_NUMA).map(String::as_str), Some("1"));
        // No accelerator: no distance.
        assert!(!rdma_labels(&[up], &[]).contains_key(RDMA_DISTANCE));
        // Every link failed: no label at all, and doctor's flag.
        assert!(rdma_labels(std::slice::from_ref(&down), &[gpu]).is_empty());
        assert!(all_links_failed(&[down]));
        // An unreadable RDMA tree (rdma false, unverified) still counts as capable.
        let unreadable = DeviceInterface {
            name: "eth3".into(),
            link: Some(DeviceInterfaceLink::unverified("x")),
            ..DeviceInterface::default()
        };
        assert!(rdma_labels(&[unreadable], &[]).contains_key(RDMA_CAPABLE));
    }

    #[test]
    fn numa_ids_sort_as_strings_and_a_too_long_set_is_dropped() {
        let mut list = Vec::new();
        for n in ["2", "10", "0", "1", "1"] {
            let mut i = nic(&format!("eth{n}{}", list.len()), None);
            i.numa_affinity = n.into();
            list.push(i);
        }
        assert_eq!(
            rdma_labels(&list, &[]).get(RDMA_NUMA).map(String::as_str),
            Some("0_1_10_2")
        );
        let many: Vec<DeviceInterface> = (0..40)
            .map(|n| {
                let mut i = nic(&format!("e{n}"), None);
                i.numa_affinity = n.to_string();
                i
            })
            .collect();
        assert!(!rdma_labels(&many, &[]).contains_key(RDMA_NUMA));
    }

    #[test]
    fn the_wire_shape_omits_zero_values_but_not_a_vf_name() {
        let i = DeviceInterface {
            name: "eth2".into(),
            sriov: true,
            virtual_functions: vec![DeviceInterfaceVirtualFunction {
                pci_bus_id: "0000:03:00.2".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&i).unwrap(),
            r#"{"name":"eth2","sriov":true,"virtualFunctions":[{"name":"","pciBusId":"0000:03:00.2"}]}"#
        );
        let link = serde_json::to_string(&failed("r")).unwrap();
        assert_eq!(link, r#"{"state":"failed","reason":"r"}"#);
        let back: DeviceInterface =
            serde_json::from_str(&serde_json::to_string(&i).unwrap()).unwrap();
        assert_eq!(back, i);
    }
}
