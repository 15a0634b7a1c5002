//! One read of the node's network interfaces (spec/rdma.md §2): `sys/class/net` listed, each
//! entry classified by where its link lands, a physical one's device read (PCI place, NUMA, CPU
//! list, vendor and device ids, SR-IOV and its virtual functions), and the RDMA device bound to
//! the same PCI function found in either layout, with its ports' verdict.
//!
//! What fails the whole read (the daemon then keeps the inventory it had): `class/net` unreadable,
//! an entry that is neither gone nor a directory nor a file, a physical interface whose `device`
//! link does not resolve, a PF whose virtual functions cannot be listed or resolved. One
//! attribute that cannot be read is only an unknown field.
//!
//! **Decision (spec §12, the soft-RoCE defect):** in the reverse `class/infiniband` layout an
//! entry whose `device` link does not exist at all (software RDMA `rxe0`/`siw0`, a MIC's
//! `scif0` whose class entry dangles, a capture that stores the class entry as a plain folder) has
//! no hardware parent and is skipped; only a `device` link that exists and will not resolve
//! (dangling, outside the root) makes the tree "present but unreadable". The described system
//! took both as unreadable, so every plain Ethernet NIC on such a host became `unverified` and
//! the node `rdma.capable` with nothing to advertise.
//!
//! **Decision (a `subsystem` link that dangles):** its link text's last part still names the
//! subsystem (`../../../../bus/virtio` → `virtio`), so a virtio NIC whose `bus/` was not captured
//! is not taken for a PCI function and handed `virtio0` as its PCI address.

use std::collections::BTreeMap;

use accel_core::interfaces::{
    DeviceInterface, DeviceInterfaceLink, DeviceInterfaceVirtualFunction, PortReading, link_verdict,
};
use accel_host::Host;
use accel_host::realpath::{
    ResolveError, is_pci_address, lexists, pci_topology, read_attribute, resolve,
};

/// Where the kernel lists the network interfaces (relative to the host root).
pub const NET_CLASS: &str = "sys/class/net";
/// Where the kernel lists the RDMA devices.
pub const INFINIBAND_CLASS: &str = "sys/class/infiniband";

/// Why the interfaces could not be enumerated; the message is one line naming the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NetError(pub String);

fn last(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The bus a resolved `class/net` entry's path says: under `sys/devices/`, `virtual` is
/// virtual, a `pci…` segment is `pci`, any other segment is itself; elsewhere `""`.
fn bus_of_path(resolved: &str) -> (String, bool) {
    let mut parts = resolved.split('/');
    if parts.next() != Some("sys") || parts.next() != Some("devices") {
        return (String::new(), false);
    }
    match parts.next() {
        Some("virtual") => ("virtual".to_string(), true),
        Some(p) if p.starts_with("pci") => ("pci".to_string(), false),
        Some(p) => (p.to_string(), false),
        None => (String::new(), false),
    }
}

fn attribute(host: &dyn Host, path: &str) -> Option<String> {
    read_attribute(host, path).ok()
}

fn mtu(host: &dyn Host, dir: &str) -> i32 {
    attribute(host, &format!("{dir}/mtu"))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

/// `up` iff `operstate` reads exactly `up`; only when it cannot be read, `carrier` == `1`.
fn up(host: &dyn Host, dir: &str) -> bool {
    match read_attribute(host, &format!("{dir}/operstate")) {
        Ok(state) => state == "up",
        Err(_) => attribute(host, &format!("{dir}/carrier")).is_some_and(|c| c == "1"),
    }
}

/// `numa_node`: `-1`, unreadable or not a figure → `""`.
fn numa(host: &dyn Host, dev: &str) -> String {
    match attribute(host, &format!("{dev}/numa_node")) {
        Some(n) if n.parse::<u32>().is_ok() => n,
        _ => String::new(),
    }
}

fn cpus(host: &dyn Host, dev: &str) -> String {
    attribute(host, &format!("{dev}/local_cpulist")).unwrap_or_default()
}

/// The reverse `class/infiniband` index, built once per read: resolved device path → the class
/// entry, and whether some entry's existing `device` link would not resolve.
#[derive(Debug, Default)]
struct ClassIndex {
    by_device: BTreeMap<String, String>,
    listed: bool,
    unlistable: bool,
    unresolvable: bool,
}

impl ClassIndex {
    fn build(host: &dyn Host) -> ClassIndex {
        let mut index = ClassIndex::default();
        let names = match host.list(INFINIBAND_CLASS) {
            Ok(names) => names,
            Err(e) if e.is_not_found() => return index,
            Err(_) => {
                index.unlistable = true;
                return index;
            }
        };
        index.listed = true;
        for name in names {
            let entry = format!("{INFINIBAND_CLASS}/{name}");
            let device = format!("{entry}/device");
            // No `device` at all: software RDMA or no hardware parent (spec §12's decision).
            if !lexists(host, &device) {
                continue;
            }
            match resolve(host, &device) {
                Ok(real) => {
                    index.by_device.entry(real).or_insert(entry);
                }
                Err(_) => index.unresolvable = true,
            }
        }
        index
    }
}

/// The RDMA device bound to the PCI function `dev` (resolved): `Ok(Some((name, dir)))`, `Ok(None)`
/// when there is none, `Err(tried)` when the tree is present but could not be read.
fn rdma_of(
    host: &dyn Host,
    dev: &str,
    index: &ClassIndex,
) -> Result<Option<(String, String)>, Vec<String>> {
    let mut tried = Vec::new();
    let under = format!("{dev}/infiniband");
    match host.list(&under) {
        Ok(names) => {
            if let Some(first) = names.into_iter().next() {
                let dir = format!("{under}/{first}");
                return Ok(Some((first, dir)));
            }
        }
        Err(e) if e.is_not_found() => {}
        Err(_) => tried.push(format!("/{under}")),
    }
    if let Some(entry) = index.by_device.get(dev) {
        return Ok(Some((last(entry).to_string(), entry.clone())));
    }
    if index.unlistable || (index.listed && index.unresolvable) {
        tried.push(format!("/{INFINIBAND_CLASS}"));
    }
    if tried.is_empty() {
        Ok(None)
    } else {
        Err(tried)
    }
}

/// The verdict of the RDMA device whose directory is `dir` (spec §4). An unreadable, missing or
/// empty `ports/` yields no port (then `unverified`).
pub fn device_link(host: &dyn Host, dir: &str) -> DeviceInterfaceLink {
    let ports_dir = format!("{dir}/ports");
    let ports = host.list(&ports_dir).unwrap_or_default();
    let readings: Vec<PortReading> = ports
        .into_iter()
        .map(|port| {
            let state = read_attribute(host, &format!("{ports_dir}/{port}/state"));
            let phys = read_attribute(host, &format!("{ports_dir}/{port}/phys_state"));
            PortReading {
                values: match (state, phys) {
                    (Ok(s), Ok(p)) => Some((s, p)),
                    _ => None,
                },
                port,
            }
        })
        .collect();
    link_verdict(&readings, &format!("/{ports_dir}"))
}

/// Fills `rdma`, `rdmaDevice` and `link` for the function `dev`.
fn rdma_fields(
    host: &dyn Host,
    dev: &str,
    index: &ClassIndex,
) -> (bool, String, Option<DeviceInterfaceLink>) {
    match rdma_of(host, dev, index) {
        Ok(Some((name, dir))) => (true, name, Some(device_link(host, &dir))),
        Ok(None) => (false, String::new(), None),
        Err(tried) => (
            false,
            String::new(),
            Some(DeviceInterfaceLink::unverified(format!(
                "the RDMA tree is present but could not be read; tried {}",
                tried.join(", ")
            ))),
        ),
    }
}

fn resolve_error(e: &ResolveError) -> String {
    e.to_string()
}

/// The virtual functions of the PF `dev` (spec §2.5), sorted by PCI address.
fn virtual_functions(
    host: &dyn Host,
    interface: &str,
    dev: &str,
    index: &ClassIndex,
) -> Result<Vec<DeviceInterfaceVirtualFunction>, NetError> {
    let entries = host.list(dev).map_err(|e| {
        NetError(format!(
            "read the virtual functions of {interface}: list the virtual functions of {interface}: {e}"
        ))
    })?;
    let mut out = Vec::new();
    for entry in entries.into_iter().filter(|e| e.starts_with("virtfn")) {
        let vf = resolve(host, &format!("{dev}/{entry}")).map_err(|e| {
            NetError(format!(
                "resolve {entry} of {interface}: {}",
                resolve_error(&e)
            ))
        })?;
        let net_dir = format!("{vf}/net");
        let netdev = host
            .list(&net_dir)
            .ok()
            .and_then(|names| names.into_iter().next());
        let (mtu, up, name) = match &netdev {
            Some(name) => {
                let dir = format!("{net_dir}/{name}");
                (mtu(host, &dir), up(host, &dir), name.clone())
            }
            None => (0, false, String::new()),
        };
        let (rdma, rdma_device, link) = rdma_fields(host, &vf, index);
        out.push(DeviceInterfaceVirtualFunction {
            name,
            pci_bus_id: last(&vf).to_string(),
            numa_affinity: numa(host, &vf),
            cpu_affinity: cpus(host, &vf),
            mtu,
            up,
            rdma,
            rdma_device,
            link,
        });
    }
    out.sort_by(|a, b| a.pci_bus_id.cmp(&b.pci_bus_id));
    Ok(out)
}

/// The subsystem `dev` belongs to: the last part of where its `subsystem` link lands, or of the
/// link's own text when its target is absent.
fn subsystem(host: &dyn Host, dev: &str) -> Option<String> {
    let link = format!("{dev}/subsystem");
    if !matches!(host.entry_kind(&link), Ok(accel_host::EntryKind::Link)) {
        return None;
    }
    match resolve(host, &link) {
        Ok(real) => Some(last(&real).to_string()),
        Err(_) => host.read_link(&link).ok().and_then(|t| {
            t.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .filter(|n| !n.is_empty() && n != "..")
        }),
    }
}

/// Every network interface of the host, sorted by name (spec §2). See the module for what fails
/// the read.
pub fn read_interfaces(host: &dyn Host) -> Result<Vec<DeviceInterface>, NetError> {
    let names = host
        .list(NET_CLASS)
        .map_err(|e| NetError(format!("enumerate network interfaces: {e}")))?;
    let index = ClassIndex::build(host);
    let mut out = Vec::new();
    for name in names {
        let entry = format!("{NET_CLASS}/{name}");
        let real = match resolve(host, &entry) {
            Ok(real) => real,
            // Gone since the listing, or a link to nothing: skipped.
            Err(e) if e.is_not_found() => continue,
            Err(e) => {
                return Err(NetError(format!(
                    "classify the net class entry {name}: {}",
                    resolve_error(&e)
                )));
            }
        };
        match host.entry_kind(&real) {
            Ok(accel_host::EntryKind::Dir) => {}
            // `bonding_masters` and the like.
            Ok(_) => continue,
            Err(e) if e.is_not_found() => continue,
            Err(e) => {
                return Err(NetError(format!(
                    "classify the net class entry {name}: {e}"
                )));
            }
        }
        let (mut bus, is_virtual) = bus_of_path(&real);
        let mut record = DeviceInterface {
            name: name.clone(),
            mtu: mtu(host, &real),
            up: up(host, &real),
            ..DeviceInterface::default()
        };
        if is_virtual {
            record.bus = bus;
            record.r#virtual = true;
            out.push(record);
            continue;
        }
        let dev = resolve(host, &format!("{entry}/device")).map_err(|e| {
            NetError(format!(
                "resolve the device of {name}: {}",
                resolve_error(&e)
            ))
        })?;
        if lexists(host, &format!("{dev}/physfn")) {
            // A VF: listed under its PF.
            continue;
        }
        if let Some(sub) = subsystem(host, &dev) {
            bus = sub;
        }
        record.numa_affinity = numa(host, &dev);
        record.cpu_affinity = cpus(host, &dev);
        if bus == "pci" && is_pci_address(last(&dev)) {
            record.pci_bus_id = last(&dev).to_string();
            if let Some(topology) = pci_topology(&dev) {
                record.pci_root_id = topology.root;
                record.pci_switches = topology.switches;
            }
            record.pci_vendor = attribute(host, &format!("{dev}/vendor")).unwrap_or_default();
            record.pci_device = attribute(host, &format!("{dev}/device")).unwrap_or_default();
        }
        record.bus = bus;
        record.sriov = lexists(host, &format!("{dev}/sriov_numvfs"));
        record.virtual_functions = virtual_functions(host, &name, &dev, &index)?;
        let (rdma, rdma_device, link) = rdma_fields(host, &dev, &index);
        record.rdma = rdma;
        record.rdma_device = rdma_device;
        record.link = link;
        out.push(record);
    }
    out.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bus_comes_from_where_the_entry_lands() {
        assert_eq!(
            bus_of_path("sys/devices/virtual/net/lo"),
            ("virtual".into(), true)
        );
        assert_eq!(
            bus_of_path("sys/devices/pci0000:00/0000:00:03.0/net/eth0"),
            ("pci".into(), false)
        );
        assert_eq!(
            bus_of_path("sys/devices/platform/hisi-roce.0/net/hccn0"),
            ("platform".into(), false)
        );
        assert_eq!(bus_of_path("sys/class/net/eth0"), (String::new(), false));
    }
}
