#!/usr/bin/env python3
"""Grows testdata/hosts/hgx-h100-8gpu a network: 8 ConnectX-7 InfiniBand NICs, one beside each
GPU behind the same PCIe switch (the HGX H100 layout), with sys/class/net, sys/class/infiniband,
each NIC's RDMA device, port state and verbs node, the loopback, and /dev/infiniband markers.

Assembled, not captured: the attribute *formats* and the tree *shape* are the real captures' in
../shared/fixtures/rdma/ (hwloc 32em64t: ib0 beside infiniband/mlx4_0 under one PCI function,
ports/1/state "4: ACTIVE", phys_state "5: LinkUp", IPoIB mtu 2044, infiniband_verbs/uverbs0/ibdev,
class/* entries as relative links); the values are chosen (see the host's NOTES.md, "Network").
Idempotent: re-run it to rebuild the network part. Run from the repository root.
"""

import os
import shutil

HOST = "testdata/hosts/hgx-h100-8gpu/root"
SYS = os.path.join(HOST, "sys")
# GPU bus -> NUMA node (NOTES.md "Bus layout and NUMA").
GPUS = [(0x18, 0), (0x2A, 0), (0x3A, 0), (0x5D, 0), (0x9A, 1), (0xAB, 1), (0xBA, 1), (0xDB, 1)]
CPUS = {0: "0-47,96-143", 1: "48-95,144-191"}


def bdf(bus, dev=0, fn=0):
    return f"0000:{bus:02x}:{dev:02x}.{fn}"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def link(path, target):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.remove(path)
    os.symlink(target, path)


def up_to_sys(rel):
    """'../' enough to climb from the folder sys/<rel> to sys/."""
    return "../" * len(rel.split("/"))


def bridge(rel, numa):
    d = os.path.join(SYS, rel)
    write(os.path.join(d, "vendor"), "0x1000\n")
    write(os.path.join(d, "device"), "0xc030\n")
    write(os.path.join(d, "class"), "0x060400\n")
    write(os.path.join(d, "numa_node"), f"{numa}\n")
    link(os.path.join(d, "driver"), up_to_sys(rel) + "bus/pci/drivers/pcieport")
    link(os.path.join(d, "subsystem"), up_to_sys(rel) + "bus/pci")


def move_function(address, rel):
    """Moves sys/devices/pci0000:<bus>/<address> to sys/<rel>, relinking it."""
    flat = os.path.join(SYS, "devices", f"pci0000:{address[5:7]}", address)
    deep = os.path.join(SYS, rel)
    if os.path.isdir(flat) and not os.path.islink(flat):
        os.makedirs(os.path.dirname(deep), exist_ok=True)
        shutil.move(flat, deep)
        os.rmdir(os.path.dirname(flat))
    driver = os.path.join(deep, "driver")
    name = os.path.basename(os.readlink(driver))
    link(driver, up_to_sys(rel) + f"bus/pci/drivers/{name}")
    link(os.path.join(deep, "subsystem"), up_to_sys(rel) + "bus/pci")
    link(os.path.join(SYS, "bus/pci/devices", address), "../../../" + rel)
    link(os.path.join(SYS, "bus/pci/drivers", name, address), "../../../../" + rel)


def main():
    for old in ["class/net", "class/infiniband"]:
        shutil.rmtree(os.path.join(SYS, old), ignore_errors=True)
    shutil.rmtree(os.path.join(SYS, "devices/virtual/net"), ignore_errors=True)
    shutil.rmtree(os.path.join(HOST, "dev/infiniband"), ignore_errors=True)
    for n, (bus, numa) in enumerate(GPUS):
        root = f"devices/pci0000:{bus - 3:02x}"
        port = f"{root}/{bdf(bus - 3, 1)}"
        upstream = f"{port}/{bdf(bus - 2)}"
        down_gpu = f"{upstream}/{bdf(bus - 1, 0)}"
        down_nic = f"{upstream}/{bdf(bus - 1, 1)}"
        for b in [port, upstream, down_gpu, down_nic]:
            if b == down_gpu and bus == 0x18:
                # The switch port the flat host already had (0000:17:00.0) moves in place.
                move_function(bdf(0x17), b)
                continue
            bridge(b, numa)
        move_function(bdf(bus), f"{down_gpu}/{bdf(bus)}")
        nic_bus = bus + 1
        nic_rel = f"{down_nic}/{bdf(nic_bus)}"
        nic = os.path.join(SYS, nic_rel)
        if bus == 0x18:
            move_function(bdf(nic_bus), nic_rel)
        else:
            write(os.path.join(nic, "vendor"), "0x15b3\n")
            write(os.path.join(nic, "device"), "0x1021\n")
            write(os.path.join(nic, "numa_node"), f"{numa}\n")
            link(os.path.join(nic, "driver"), up_to_sys(nic_rel) + "bus/pci/drivers/mlx5_core")
            link(os.path.join(nic, "subsystem"), up_to_sys(nic_rel) + "bus/pci")
            link(os.path.join(SYS, "bus/pci/devices", bdf(nic_bus)), "../../../" + nic_rel)
            link(os.path.join(SYS, "bus/pci/drivers/mlx5_core", bdf(nic_bus)),
                 "../../../../" + nic_rel)
        # InfiniBand mode: network controller, InfiniBand.
        write(os.path.join(nic, "class"), "0x020700\n")
        write(os.path.join(nic, "local_cpulist"), CPUS[numa] + "\n")
        ifname = f"ibp{nic_bus}s0"
        net = os.path.join(nic, "net", ifname)
        write(os.path.join(net, "mtu"), "2044\n")
        write(os.path.join(net, "operstate"), "up\n")
        write(os.path.join(net, "carrier"), "1\n")
        write(os.path.join(net, "type"), "32\n")
        link(os.path.join(net, "device"), "../../../" + bdf(nic_bus))
        link(os.path.join(SYS, "class/net", ifname), f"../../{nic_rel}/net/{ifname}")
        ibdev = f"mlx5_{n}"
        ib = os.path.join(nic, "infiniband", ibdev)
        write(os.path.join(ib, "ports/1/state"), "4: ACTIVE\n")
        write(os.path.join(ib, "ports/1/phys_state"), "5: LinkUp\n")
        write(os.path.join(ib, "ports/1/link_layer"), "InfiniBand\n")
        write(os.path.join(ib, "ports/1/rate"), "400 Gb/sec (4X NDR)\n")
        write(os.path.join(ib, "node_type"), "1: CA\n")
        link(os.path.join(ib, "device"), "../../../" + bdf(nic_bus))
        link(os.path.join(SYS, "class/infiniband", ibdev), f"../../{nic_rel}/infiniband/{ibdev}")
        verbs = os.path.join(nic, "infiniband_verbs", f"uverbs{n}")
        write(os.path.join(verbs, "ibdev"), ibdev + "\n")
        write(os.path.join(verbs, "dev"), f"231:{192 + n}\n")
        write(os.path.join(HOST, "dev/infiniband", f"uverbs{n}"), "")
    write(os.path.join(HOST, "dev/infiniband/rdma_cm"), "")
    lo = os.path.join(SYS, "devices/virtual/net/lo")
    write(os.path.join(lo, "mtu"), "65536\n")
    write(os.path.join(lo, "operstate"), "unknown\n")
    link(os.path.join(SYS, "class/net/lo"), "../../devices/virtual/net/lo")


if __name__ == "__main__":
    main()
