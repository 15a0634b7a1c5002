//! Every capture in `../shared/fixtures/rdma/` read as a host: the record and the verdict each
//! must yield. The archives are unpacked with `tar`; the extracted subtrees (links stored as
//! link-text files) are made trees again and must read as their archive reads; procfs' ttar is
//! written out. A new or vanished file fails the test (`assert_same_files`).

mod support;

use std::path::Path;

use accel_core::interfaces::{DeviceInterface, LinkState, rdma_labels};
use accel_host::FsHost;
use accel_net::inventory::device_link;
use accel_net::{read_interfaces, verbs_device};

fn read(root: &Path) -> Result<Vec<DeviceInterface>, accel_net::NetError> {
    read_interfaces(&FsHost::new(root))
}

fn by_name<'a>(list: &'a [DeviceInterface], name: &str) -> &'a DeviceInterface {
    list.iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("{name} in {:?}", names(list)))
}

fn names(list: &[DeviceInterface]) -> Vec<&str> {
    list.iter().map(|i| i.name.as_str()).collect()
}

fn archive(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let top = support::unpack(&support::fixtures().join(name), dir.path());
    (dir, top)
}

/// The subtree `name`, its links made links again; `links` is SOURCES.md's count.
fn subtree(name: &str, links: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let made = support::relink(&support::fixtures().join(name), dir.path());
    assert_eq!(made, links, "{name}: the symlinks SOURCES.md counts");
    dir
}

const HWLOC_32EM64T: &str = "hwloc__32em64t-2n8c+dax+nvme+mic+dimms";
const HWLOC_40INTEL64: &str = "hwloc__40intel64-2g2n4c+pcilocality";
const HWLOC_2PA: &str = "hwloc__2pa-pcidomain32bits";
const HWLOC_32INTEL64: &str = "hwloc__32intel64-2p8co2t+8ve";
const GHW_PR230: &str = "ghw__linux-amd64-8581cf3a529e5d8b97ea876eade2f60d__pr230-9058f61f";
const GHW_MASTER: &str = "ghw__linux-amd64-8581cf3a529e5d8b97ea876eade2f60d__3500903a";
const NFD: &str = "nfd__pci-rootfs-1";
const PROCFS: &str = "procfs__fixtures.ttar";

#[test]
fn every_capture_is_covered() {
    let covered = [
        "SOURCES.md".to_string(),
        "HAZARDS.md".to_string(),
        HWLOC_32EM64T.to_string(),
        format!("{HWLOC_32EM64T}.tar.bz2"),
        HWLOC_40INTEL64.to_string(),
        format!("{HWLOC_40INTEL64}.tar.bz2"),
        HWLOC_2PA.to_string(),
        format!("{HWLOC_2PA}.tar.bz2"),
        format!("{HWLOC_32INTEL64}.tar.bz2"),
        GHW_PR230.to_string(),
        format!("{GHW_PR230}.tar.gz"),
        format!("{GHW_MASTER}.tar.gz"),
        NFD.to_string(),
        PROCFS.to_string(),
    ];
    accel_testkit::assert_same_files(
        "rdma",
        accel_testkit::file_names(&support::fixtures()),
        covered,
    );
}

/// 32em64t: a ConnectX-3 in InfiniBand mode (`ib0` on `mlx4_0`, port ACTIVE/LinkUp), two I350
/// ports, four virtual netdevs whose targets were not captured (dangling: skipped as gone), and
/// a MIC's `scif0` RDMA entry that dangles: the spec §12 defect would make both I350 ports
/// `unverified`; here they carry no link at all.
fn check_32em64t(list: &[DeviceInterface]) {
    assert_eq!(names(list), ["eth0", "eth1", "ib0"]);
    let ib0 = by_name(list, "ib0");
    assert_eq!(ib0.bus, "pci");
    assert_eq!(ib0.pci_bus_id, "0000:82:00.0");
    assert_eq!(ib0.pci_root_id, "0000:80:02.2");
    assert_eq!(ib0.pci_switches, ["0000:80:02.2"]);
    assert_eq!(
        (ib0.pci_vendor.as_str(), ib0.pci_device.as_str()),
        ("0x15b3", "0x1003")
    );
    assert_eq!(ib0.numa_affinity, "1");
    assert_eq!(ib0.cpu_affinity, "8-15");
    assert_eq!(ib0.mtu, 2044);
    assert!(ib0.up && ib0.rdma && !ib0.r#virtual && !ib0.sriov);
    assert_eq!(ib0.rdma_device, "mlx4_0");
    assert_eq!(ib0.link.as_ref().unwrap().state, LinkState::Ok);
    assert_eq!(ib0.link.as_ref().unwrap().reason, "");
    let eth0 = by_name(list, "eth0");
    assert_eq!(eth0.pci_bus_id, "0000:02:00.0");
    assert_eq!(eth0.pci_root_id, "0000:00:01.1");
    assert_eq!(eth0.numa_affinity, "0");
    assert!(eth0.up);
    assert!(!eth0.rdma);
    assert_eq!(
        eth0.link, None,
        "scif0's dangling entry makes no NIC unverified"
    );
    let eth1 = by_name(list, "eth1");
    assert!(!eth1.up, "operstate down");
    assert_eq!(eth1.link, None);
    let labels = rdma_labels(list, &[]);
    assert_eq!(
        labels.get("feature.gpustack.ai/rdma.capable").unwrap(),
        "true"
    );
    assert_eq!(labels.get("feature.gpustack.ai/rdma.numa").unwrap(), "1");
}

#[test]
fn hwloc_32em64t_connectx3_infiniband() {
    let (_dir, top) = archive(&format!("{HWLOC_32EM64T}.tar.bz2"));
    let list = read(&top).unwrap();
    check_32em64t(&list);
    // The verbs node through the device's own infiniband_verbs (no verbs class captured).
    assert_eq!(
        verbs_device(&FsHost::new(&top), "mlx4_0").unwrap(),
        "/dev/infiniband/uverbs0"
    );
    let missing = verbs_device(&FsHost::new(&top), "mlx5_9").unwrap_err();
    assert!(
        missing.to_string().contains("tried both sysfs layouts"),
        "{missing}"
    );
    let subtree = subtree(HWLOC_32EM64T, 44);
    assert_eq!(read(subtree.path()).unwrap(), list);
}

/// 40intel64: a QLogic QLE7340 (`qib0`, NUMA 2 while its bridge says -1) and four bnx2 NICs
/// whose `numa_node` is -1 (unknown, never node 0).
fn check_40intel64(list: &[DeviceInterface]) {
    assert_eq!(names(list), ["eth0", "eth1", "eth2", "eth3", "ib0"]);
    let ib0 = by_name(list, "ib0");
    assert_eq!(ib0.rdma_device, "qib0");
    assert_eq!(ib0.numa_affinity, "2");
    assert_eq!(ib0.cpu_affinity, "0-39");
    assert_eq!(ib0.pci_root_id, "0000:40:03.0");
    assert_eq!(
        (ib0.pci_vendor.as_str(), ib0.pci_device.as_str()),
        ("0x1077", "0x7322")
    );
    assert_eq!(ib0.link.as_ref().unwrap().state, LinkState::Ok);
    for eth in ["eth0", "eth1", "eth2", "eth3"] {
        let e = by_name(list, eth);
        assert_eq!(e.numa_affinity, "", "{eth}: -1 is unknown");
        assert_eq!(e.pci_vendor, "0x14e4");
        assert_eq!(e.link, None);
        assert_eq!(e.up, eth == "eth0");
    }
    assert_eq!(by_name(list, "eth2").pci_root_id, "0000:00:06.0");
}

#[test]
fn hwloc_40intel64_qlogic_infiniband() {
    let (_dir, top) = archive(&format!("{HWLOC_40INTEL64}.tar.bz2"));
    let list = read(&top).unwrap();
    check_40intel64(&list);
    assert_eq!(
        verbs_device(&FsHost::new(&top), "qib0").unwrap(),
        "/dev/infiniband/uverbs0"
    );
    // The subtree dropped two hand-added files the reader never reads.
    let subtree = subtree(HWLOC_40INTEL64, 56);
    assert_eq!(read(subtree.path()).unwrap(), list);
}

/// 2pa: a KVM guest whose `ens3` device is `virtio0` (virtio ids, no `numa_node`) under the PCI
/// function: its subsystem is virtio, so it gets no PCI fields (not `virtio0` as a PCI address).
#[test]
fn hwloc_2pa_virtio_guest() {
    let (_dir, top) = archive(&format!("{HWLOC_2PA}.tar.bz2"));
    let list = read(&top).unwrap();
    assert_eq!(names(&list), ["ens3"]);
    let ens3 = &list[0];
    assert_eq!(ens3.bus, "virtio");
    assert_eq!(ens3.pci_bus_id, "");
    assert_eq!(ens3.pci_vendor, "");
    assert_eq!(ens3.numa_affinity, "");
    assert!(ens3.up && !ens3.r#virtual && !ens3.rdma);
    assert_eq!(ens3.link, None);
    assert!(rdma_labels(&list, &[]).is_empty());
    let subtree = subtree(HWLOC_2PA, 11);
    assert_eq!(read(subtree.path()).unwrap(), list);
}

/// 32intel64: an X722 behind three bridges (the walk innermost first), an SR-IOV PF with no VF.
#[test]
fn hwloc_32intel64_deep_bridges() {
    let (_dir, top) = archive(&format!("{HWLOC_32INTEL64}.tar.bz2"));
    let list = read(&top).unwrap();
    assert_eq!(names(&list), ["enp96s0f0", "enp96s0f1"]);
    let f0 = &list[0];
    assert_eq!(f0.pci_bus_id, "0000:60:00.0");
    assert_eq!(
        f0.pci_switches,
        ["0000:5f:03.0", "0000:5e:00.0", "0000:5d:02.0"]
    );
    assert_eq!(f0.pci_root_id, "0000:5d:02.0");
    assert_eq!(f0.numa_affinity, "0");
    assert_eq!(f0.cpu_affinity, "0-7,16-23");
    assert!(f0.sriov, "sriov_numvfs present, 0 VFs");
    assert!(f0.virtual_functions.is_empty());
    assert!(f0.up && !list[1].up);
    assert!(list.iter().all(|i| i.link.is_none() && !i.rdma));
}

/// Gives a ghw snapshot the `class/net` entries and `device` links a live kernel shows for the
/// netdev folders it captured (ghw keeps only the folders' names).
fn assemble_ghw(top: &Path) {
    let functions = top.join("sys/devices/pci0000:00/0000:00:09.0");
    std::fs::create_dir_all(top.join("sys/class/net")).unwrap();
    for entry in std::fs::read_dir(&functions).unwrap() {
        let function = entry.unwrap().path();
        let Ok(netdevs) = std::fs::read_dir(function.join("net")) else {
            continue;
        };
        let bdf = function.file_name().unwrap().to_string_lossy().into_owned();
        for netdev in netdevs {
            let name = netdev.unwrap().file_name().to_string_lossy().into_owned();
            std::os::unix::fs::symlink(
                format!("../../devices/pci0000:00/0000:00:09.0/{bdf}/net/{name}"),
                top.join("sys/class/net").join(&name),
            )
            .unwrap();
            std::os::unix::fs::symlink(
                format!("../../../{bdf}"),
                function.join("net").join(&name).join("device"),
            )
            .unwrap();
        }
    }
}

/// ghw: two I350 PFs with four VFs each, interleaved on the bus (PF0: 05:10.0, 10.4, 11.0, 11.4).
fn check_ghw(archive_name: &str) {
    check_ghw_with(archive_name, true);
}

fn check_ghw_with(archive_name: &str, netdevs_captured: bool) {
    let (_dir, top) = archive(archive_name);
    // As captured: no sys/class/net, so nothing can be enumerated.
    let err = read(&top).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("enumerate network interfaces: "),
        "{err}"
    );
    assemble_ghw(&top);
    let list = read(&top).unwrap();
    if !netdevs_captured {
        // The June 2021 snapshot kept no netdev folder: nothing to list, and that is an answer.
        assert_eq!(list, vec![]);
        return;
    }
    assert_eq!(
        names(&list),
        ["enp5s0f0", "enp5s0f1"],
        "VFs nest under their PF"
    );
    let pf0 = &list[0];
    assert!(pf0.sriov);
    assert_eq!(pf0.pci_bus_id, "0000:05:00.0");
    assert_eq!(pf0.pci_root_id, "0000:00:09.0");
    let vfs: Vec<(&str, &str)> = pf0
        .virtual_functions
        .iter()
        .map(|vf| (vf.pci_bus_id.as_str(), vf.name.as_str()))
        .collect();
    assert_eq!(
        vfs,
        [
            ("0000:05:10.0", "enp5s0f0v0"),
            ("0000:05:10.4", "enp5s0f0v1"),
            ("0000:05:11.0", "enp5s0f0v2"),
            ("0000:05:11.4", "enp5s0f0v3")
        ]
    );
    assert_eq!(list[1].virtual_functions[0].pci_bus_id, "0000:05:10.1");
    assert!(
        list.iter()
            .flat_map(|i| &i.virtual_functions)
            .all(|vf| !vf.rdma && vf.link.is_none())
    );
}

#[test]
fn ghw_sriov_pr230() {
    check_ghw(&format!("{GHW_PR230}.tar.gz"));
    // The subtree lost its empty netdev folders to git, and has no class/net either.
    let subtree = subtree(GHW_PR230, 37);
    assert!(read(subtree.path()).is_err());
}

#[test]
fn ghw_sriov_master() {
    check_ghw_with(&format!("{GHW_MASTER}.tar.gz"), false);
}

/// nfd: plain folders under `bus/pci/devices` (no links at all): nothing to enumerate; with a
/// netdev folder added under the X722 it is an SR-IOV PF (`sriov_numvfs` 0) off any `devices/`
/// path, so no bus is claimed and no PCI field either.
#[test]
fn nfd_plain_folders() {
    let dir = subtree(NFD, 0);
    assert!(read(dir.path()).is_err());
    let function = dir.path().join("sys/bus/pci/devices/0000:3f:00.0");
    std::fs::create_dir_all(function.join("net/eno1")).unwrap();
    std::os::unix::fs::symlink("../..", function.join("net/eno1/device")).unwrap();
    std::fs::create_dir_all(dir.path().join("sys/class/net")).unwrap();
    std::os::unix::fs::symlink(
        "../../bus/pci/devices/0000:3f:00.0/net/eno1",
        dir.path().join("sys/class/net/eno1"),
    )
    .unwrap();
    let list = read(dir.path()).unwrap();
    assert_eq!(names(&list), ["eno1"]);
    assert_eq!(list[0].bus, "");
    assert!(list[0].sriov);
    assert_eq!(list[0].numa_affinity, "0");
    assert_eq!(list[0].pci_bus_id, "");
}

/// procfs: hand-made values (use the values, not the layout): class entries are plain folders
/// with no `device` link, so no NIC is mapped and none is `unverified` (spec §12's fix);
/// mlx5_0's impossible `phys_state` `4: ACTIVE` is no LinkUp, so its verdict is `failed` naming
/// both raw values.
#[test]
fn procfs_values() {
    let dir = tempfile::tempdir().unwrap();
    support::untar_ttar(&support::fixtures().join(PROCFS), dir.path());
    let host = FsHost::new(dir.path());
    let list = read(dir.path()).unwrap();
    let eth0 = by_name(&list, "eth0");
    assert_eq!(eth0.mtu, 1500);
    assert!(eth0.up);
    assert_eq!(eth0.cpu_affinity, "0-7");
    assert_eq!(eth0.numa_affinity, "");
    assert_eq!(eth0.link, None);
    assert!(!eth0.rdma);
    assert_eq!(
        device_link(&host, "sys/class/infiniband/hfi1_0").state,
        LinkState::Ok
    );
    assert_eq!(
        device_link(&host, "sys/class/infiniband/mlx4_0").state,
        LinkState::Ok
    );
    let mlx5 = device_link(&host, "sys/class/infiniband/mlx5_0");
    assert_eq!(mlx5.state, LinkState::Failed);
    assert_eq!(
        mlx5.reason,
        "the RDMA link is not usable: port 1: state=\"4: ACTIVE\" phys_state=\"4: ACTIVE\""
    );
}
