//! The shapes no real capture shows (SOURCES.md, "Not found anywhere"), built as sysfs trees:
//! RoCE with a port down, SR-IOV VFs carrying their own RDMA devices past ten, soft RoCE on a
//! bond (spec §12's defect, fixed), the failures that fail the whole read, and the ones that do
//! not.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use accel_core::interfaces::{LinkState, rdma_labels};
use accel_host::FsHost;
use accel_net::{read_interfaces, verbs_device};

struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        let tree = Tree {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(tree.path("sys/class/net")).unwrap();
        tree
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, p: &str, text: &str) {
        let path = self.path(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn link(&self, p: &str, target: &str) {
        let path = self.path(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    /// A PCI function `dev` (`pci0000:00/0000:00:01.0/0000:01:00.0`) with its attributes.
    fn function(&self, dev: &str, numa: &str) {
        let d = format!("sys/devices/{dev}");
        self.write(&format!("{d}/vendor"), "0x15b3\n");
        self.write(&format!("{d}/device"), "0x1017\n");
        self.write(&format!("{d}/numa_node"), &format!("{numa}\n"));
        self.write(&format!("{d}/local_cpulist"), "0-15\n");
        let depth = d.matches('/').count() + 1;
        self.link(
            &format!("{d}/subsystem"),
            &format!("{}bus/pci", "../".repeat(depth - 1)),
        );
        std::fs::create_dir_all(self.path("sys/bus/pci")).unwrap();
    }

    /// A netdev `name` on the function `dev`.
    fn netdev(&self, dev: &str, name: &str, up: bool) {
        let d = format!("sys/devices/{dev}/net/{name}");
        self.write(&format!("{d}/mtu"), "9000\n");
        self.write(
            &format!("{d}/operstate"),
            if up { "up\n" } else { "down\n" },
        );
        self.link(&format!("{d}/device"), "../..");
        self.link(
            &format!("sys/class/net/{name}"),
            &format!("../../devices/{dev}/net/{name}"),
        );
    }

    /// An RDMA device `name` under the function `dev`, its ports' values, in both layouts.
    fn rdma(&self, dev: &str, name: &str, ports: &[(&str, &str)]) {
        let d = format!("sys/devices/{dev}/infiniband/{name}");
        for (i, (state, phys)) in ports.iter().enumerate() {
            self.write(&format!("{d}/ports/{}/state", i + 1), &format!("{state}\n"));
            self.write(
                &format!("{d}/ports/{}/phys_state", i + 1),
                &format!("{phys}\n"),
            );
        }
        self.link(&format!("{d}/device"), "../../");
        self.link(
            &format!("sys/class/infiniband/{name}"),
            &format!("../../devices/{dev}/infiniband/{name}"),
        );
        let verbs = format!("sys/devices/{dev}/infiniband_verbs/uverbs{}", name.len());
        self.write(&format!("{verbs}/ibdev"), &format!("{name}\n"));
    }

    fn virtual_netdev(&self, name: &str) {
        self.write(&format!("sys/devices/virtual/net/{name}/mtu"), "1500\n");
        self.write(&format!("sys/devices/virtual/net/{name}/operstate"), "up\n");
        self.link(
            &format!("sys/class/net/{name}"),
            &format!("../../devices/virtual/net/{name}"),
        );
    }

    fn read(&self) -> Result<Vec<accel_core::interfaces::DeviceInterface>, accel_net::NetError> {
        read_interfaces(&FsHost::new(self.root()))
    }
}

const ETH0: &str = "pci0000:00/0000:00:01.0/0000:01:00.0";
const ETH1: &str = "pci0000:00/0000:00:01.0/0000:02:00.0";

#[test]
fn roce_with_one_port_down_and_the_spec_example() {
    let t = Tree::new();
    t.function(ETH0, "0");
    t.netdev(ETH0, "eth0", true);
    t.rdma(ETH0, "mlx5_0", &[("4: ACTIVE", "5: LinkUp")]);
    t.function(ETH1, "0");
    t.netdev(ETH1, "eth1", true);
    t.rdma(ETH1, "mlx5_1", &[("1: DOWN", "3: Disabled")]);
    t.virtual_netdev("bond0");
    t.virtual_netdev("lo");
    t.write("sys/class/net/bonding_masters", "bond0\n");
    let list = t.read().unwrap();
    let names: Vec<&str> = list.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        ["bond0", "eth0", "eth1", "lo"],
        "bonding_masters left out"
    );
    let eth1 = &list[2];
    assert_eq!(
        serde_json::to_value(eth1).unwrap(),
        serde_json::json!({"name": "eth1", "bus": "pci", "pciBusId": "0000:02:00.0",
            "pciRootId": "0000:00:01.0", "pciSwitches": ["0000:00:01.0"], "pciVendor": "0x15b3",
            "pciDevice": "0x1017", "numaAffinity": "0", "cpuAffinity": "0-15", "mtu": 9000,
            "up": true, "rdma": true, "rdmaDevice": "mlx5_1",
            "link": {"state": "failed",
                     "reason": "the RDMA link is not usable: port 1: state=\"1: DOWN\" phys_state=\"3: Disabled\""}})
    );
    assert_eq!(
        serde_json::to_value(&list[0]).unwrap(),
        serde_json::json!({"name": "bond0", "bus": "virtual", "mtu": 1500, "up": true, "virtual": true})
    );
    assert_eq!(list[1].link.as_ref().unwrap().state, LinkState::Ok);
    // The verbs node of each device through its hardware parent.
    assert_eq!(
        verbs_device(&FsHost::new(t.root()), "mlx5_1").unwrap(),
        "/dev/infiniband/uverbs6"
    );
}

#[test]
fn virtual_functions_past_ten_nest_sorted_by_address_with_their_own_rdma() {
    let t = Tree::new();
    let pf = "pci0000:00/0000:00:02.0/0000:03:00.0";
    t.function(pf, "1");
    t.netdev(pf, "eth2", true);
    t.rdma(pf, "mlx5_2", &[("4: ACTIVE", "5: LinkUp")]);
    t.write(&format!("sys/devices/{pf}/sriov_numvfs"), "12\n");
    for n in 0..12u32 {
        let vf = format!(
            "pci0000:00/0000:00:02.0/0000:03:{:02x}.{}",
            n / 8 + 1,
            n % 8
        );
        t.function(&vf, "-1");
        t.link(&format!("sys/devices/{vf}/physfn"), "../0000:03:00.0");
        t.link(
            &format!("sys/devices/{pf}/virtfn{n}"),
            &format!("../{}", vf.rsplit('/').next().unwrap()),
        );
        if n < 11 {
            t.netdev(&vf, &format!("eth2v{n}"), n % 2 == 0);
            t.rdma(
                &vf,
                &format!("mlx5_{}", n + 3),
                &[("4: ACTIVE", "5: LinkUp")],
            );
        }
    }
    let list = t.read().unwrap();
    assert_eq!(list.len(), 1, "VFs are not listed at the top");
    let vfs = &list[0].virtual_functions;
    assert!(list[0].sriov);
    assert_eq!(vfs.len(), 12);
    let ids: Vec<&str> = vfs.iter().map(|v| v.pci_bus_id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    assert_eq!(vfs[0].name, "eth2v0");
    assert_eq!(vfs[0].rdma_device, "mlx5_3");
    assert_eq!(vfs[0].numa_affinity, "", "-1 is unknown");
    assert_eq!(vfs[11].name, "", "a VF without a netdev");
    assert!(!vfs[11].rdma);
    let labels = rdma_labels(&list, &[]);
    // A VF with no NUMA of its own takes its PF's.
    assert_eq!(labels.get("feature.gpustack.ai/rdma.numa").unwrap(), "1");
}

/// Spec §12: soft RoCE (`rxe0`, no `device` link) must not make every plain NIC `unverified` nor
/// the node `rdma.capable`.
#[test]
fn soft_roce_is_no_hardware_parent_and_makes_nothing_unverified() {
    let t = Tree::new();
    t.function(ETH0, "0");
    t.netdev(ETH0, "eth0", true);
    t.virtual_netdev("bond0");
    t.write(
        "sys/devices/virtual/infiniband/rxe0/ports/1/state",
        "4: ACTIVE\n",
    );
    t.write(
        "sys/devices/virtual/infiniband/rxe0/ports/1/phys_state",
        "5: LinkUp\n",
    );
    t.write("sys/devices/virtual/infiniband/rxe0/parent", "bond0\n");
    t.link(
        "sys/class/infiniband/rxe0",
        "../../devices/virtual/infiniband/rxe0",
    );
    let list = t.read().unwrap();
    assert!(list.iter().all(|i| i.link.is_none() && !i.rdma), "{list:?}");
    assert!(rdma_labels(&list, &[]).is_empty(), "not rdma.capable");

    // A `device` link that exists and dangles is still an unreadable tree.
    t.link(
        "sys/devices/virtual/infiniband/rxe0/device",
        "../../../nowhere",
    );
    let list = t.read().unwrap();
    let eth0 = list.iter().find(|i| i.name == "eth0").unwrap();
    let link = eth0.link.as_ref().unwrap();
    assert_eq!(link.state, LinkState::Unverified);
    assert_eq!(
        link.reason,
        "the RDMA tree is present but could not be read; tried /sys/class/infiniband"
    );
    assert!(!eth0.rdma);
}

#[test]
fn an_unreadable_port_is_unverified_never_failed() {
    let t = Tree::new();
    t.function(ETH0, "0");
    t.netdev(ETH0, "eth0", true);
    t.rdma(ETH0, "mlx5_0", &[("1: DOWN", "2: Polling")]);
    std::fs::create_dir_all(t.path(&format!("sys/devices/{ETH0}/infiniband/mlx5_0/ports/2")))
        .unwrap();
    let list = t.read().unwrap();
    let link = list[0].link.as_ref().unwrap();
    assert_eq!(link.state, LinkState::Unverified);
    assert_eq!(
        link.reason,
        "the RDMA link could not be verified: port 1: state=\"1: DOWN\" phys_state=\"2: Polling\"; unreadable: 2"
    );
}

#[test]
fn a_usb_nic_under_a_pci_path_gets_no_pci_fields() {
    let t = Tree::new();
    let dev = "pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0";
    t.write(&format!("sys/devices/{dev}/numa_node"), "-1\n");
    t.link(
        &format!("sys/devices/{dev}/subsystem"),
        "../../../../../../bus/usb",
    );
    t.netdev(dev, "enx0", true);
    let list = t.read().unwrap();
    assert_eq!(list[0].bus, "usb");
    assert_eq!(list[0].pci_bus_id, "");
}

#[test]
fn what_fails_the_whole_read() {
    // No class/net at all.
    let empty = tempfile::tempdir().unwrap();
    let err = read_interfaces(&FsHost::new(empty.path())).unwrap_err();
    assert!(err.0.starts_with("enumerate network interfaces: "), "{err}");
    // A physical interface whose device link does not resolve.
    let t = Tree::new();
    t.function(ETH0, "0");
    t.netdev(ETH0, "eth0", true);
    std::fs::remove_file(t.path(&format!("sys/devices/{ETH0}/net/eth0/device"))).unwrap();
    let err = t.read().unwrap_err();
    assert!(err.0.starts_with("resolve the device of eth0: "), "{err}");
    // A class entry that leaves the root.
    let t = Tree::new();
    t.link("sys/class/net/far", "../../../../../../../../etc");
    let err = t.read().unwrap_err();
    assert!(
        err.0.starts_with("classify the net class entry far: "),
        "{err}"
    );
    assert!(err.0.contains("outside"), "{err}");
    // A dangling class entry (gone since the listing) is skipped; an empty list is an answer.
    let t = Tree::new();
    t.link("sys/class/net/veth9", "../../devices/virtual/net/veth9");
    assert_eq!(t.read().unwrap(), vec![]);
}

#[test]
fn an_unreadable_attribute_is_only_an_unknown_field() {
    let t = Tree::new();
    t.function(ETH0, "zero");
    t.netdev(ETH0, "eth0", true);
    t.write(&format!("sys/devices/{ETH0}/net/eth0/mtu"), "jumbo\n");
    std::fs::remove_file(t.path(&format!("sys/devices/{ETH0}/net/eth0/operstate"))).unwrap();
    t.write(&format!("sys/devices/{ETH0}/net/eth0/carrier"), "1\n");
    let list = t.read().unwrap();
    assert_eq!(list[0].mtu, 0);
    assert_eq!(list[0].numa_affinity, "");
    assert!(list[0].up, "carrier when operstate cannot be read");
}
