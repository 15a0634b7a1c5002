#!/usr/bin/env python3
"""Assembles the Cambricon and MetaX recorded hosts under testdata/hosts/ from
../shared/fixtures/{cambricon,metax}.

Run from the repository root: python3 scripts/make-cnmx-hosts.py. What each host takes from a
capture and what is assembled is written in its NOTES.md (kept by hand, not generated).
"""
import os
import shutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "fixtures")
HOSTS = os.path.join(REPO, "testdata", "hosts")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def link(path, target):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.remove(path)
    os.symlink(target, path)


def capture(*parts):
    return open(os.path.join(SHARED, *parts)).read()


def fresh(name):
    d = os.path.join(HOSTS, name)
    notes = None
    if os.path.exists(os.path.join(d, "NOTES.md")):
        notes = open(os.path.join(d, "NOTES.md")).read()
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "root"))
    write(os.path.join(d, "recorded-host.json"), '{\n  "format": 1\n}\n')
    if notes is not None:
        write(os.path.join(d, "NOTES.md"), notes)
    return d


def command(host, name, argv, stdout, status=0):
    base = os.path.join(host, "commands", name)
    write(os.path.join(base, "argv"), "\n".join(argv) + "\n")
    write(os.path.join(base, "stdout"), stdout)
    if status:
        write(os.path.join(base, "status"), f"{status}\n")


def pci_function(root, bdf, vendor, device, cls, driver=None, numa=None, physfn=None):
    dom_bus = bdf.rsplit(":", 1)[0]
    dev = os.path.join(root, "sys", "devices", f"pci{dom_bus}", bdf)
    write(os.path.join(dev, "vendor"), f"0x{vendor:04x}\n")
    write(os.path.join(dev, "device"), f"0x{device:04x}\n")
    write(os.path.join(dev, "class"), f"0x{cls:06x}\n")
    if numa is not None:
        write(os.path.join(dev, "numa_node"), f"{numa}\n")
    link(os.path.join(root, "sys", "bus", "pci", "devices", bdf),
         f"../../../devices/pci{dom_bus}/{bdf}")
    if driver:
        os.makedirs(os.path.join(root, "sys", "bus", "pci", "drivers", driver), exist_ok=True)
        link(os.path.join(dev, "driver"), f"../../../bus/pci/drivers/{driver}")
    if physfn:
        link(os.path.join(dev, "physfn"), f"../{physfn}")
    return dev


def node(root, name):
    write(os.path.join(root, "dev", name), "")


# ---------------------------------------------------------------------------------------------
# Cambricon

CABC, MLU370, ACCEL_CLASS = 0xCABC, 0x0370, 0x120000
# The 8 addresses the v5.10.31 capture prints (upper-case there; sysfs spells them lower-case).
BUS8 = ["0000:4f:00.0", "0000:53:00.0", "0000:6f:00.0", "0000:73:00.0",
        "0000:af:00.0", "0000:b3:00.0", "0000:cf:00.0", "0000:d3:00.0"]


def cnmon_v5_8x():
    """The v5.10.10 capture's box, its one card row repeated for eight cards at BUS8."""
    text = capture("cambricon", "cnmon", "llamafactory-6429__1x-mlu370-x4-cnmon-v5.10.10.txt")
    lines = text.splitlines()
    head = lines[:7]
    row = lines[7:10]
    tail = lines[10:]
    body = []
    for i, bdf in enumerate(BUS8):
        first = row[0].replace("| 0     /", f"| {i:<5} /", 1).replace("0000:34:00.0", bdf.upper())
        body += [first, row[1], row[2]]
    return "\n".join(head + body + tail) + "\n"


def cnmon_info(uuids, buses):
    out = []
    for i, (uuid, bus) in enumerate(zip(uuids, buses)):
        out.append(f"Card {i}\n")
        out.append("  Product Name                   : MLU370-X4\n")
        out.append(f"  UUID                           : {uuid}\n")
        if bus:
            out.append(f"  PCIe Bus Id                    : {bus.upper()}\n")
    return "".join(out)


def cambricon_host(name, table, buses, driver_version, cnmon_info_buses, neuware=None):
    d = fresh(name)
    root = os.path.join(d, "root")
    uuids = [f"3f9c{i:02x}e1-7a52-4c0b-9d1e-5b3a0c7e{i:04x}" for i in range(len(buses))]
    for i, bdf in enumerate(buses):
        pci_function(root, bdf, CABC, MLU370, ACCEL_CLASS, driver="cambricon_drv",
                     numa=0 if i < len(buses) // 2 or len(buses) < 4 else 1)
        node(root, f"cambricon_dev{i}")
        node(root, f"cambricon_ipcm{i}")
        node(root, f"cmsg_ctrl{i}")
    node(root, "cambricon_ctl")
    write(os.path.join(root, "sys", "module", "cambricon_drv", "version"), driver_version + "\n")
    if neuware:
        write(os.path.join(root, "usr", "local", "neuware", "version.txt"), neuware)
    command(d, "cnmon", ["cnmon"], table)
    command(d, "cnmon-info", ["cnmon", "info"], cnmon_info(uuids, cnmon_info_buses))


def cambricon():
    cambricon_host("cambricon-8x-mlu370-cnmon-v5", cnmon_v5_8x(), BUS8, "5.10.10", BUS8,
                   neuware="Neuware Version 1.15.0\n")
    v4 = capture("cambricon", "cnmon", "paddledocs__3x-mlu370-x4-cnmon-v4.20.11-inited-vmemory.txt")
    buses = ["0000:1a:00.0", "0000:3d:00.0", "0000:5e:00.0"]
    cambricon_host("cambricon-3x-mlu370-cnmon-v4", v4, buses, "4.20.11", [None] * 3)
    d = fresh("cambricon-no-driver")
    pci_function(os.path.join(d, "root"), "0000:4f:00.0", CABC, MLU370, ACCEL_CLASS)


# ---------------------------------------------------------------------------------------------
# MetaX

METAX, C500, C550, DISPLAY_CLASS = 0x9999, 0x4001, 0x4003, 0x038000


def mx_smi_c500_8x():
    """The 2.1.12 excerpt (GPUs 0-1, cut mid-table), completed to eight GPUs in its layout."""
    text = capture("metax", "mx-smi", "gpustack-4832__8x-c500-mx-smi2.1.12-kmd2.12.13-excerpt.txt")
    lines = text.rstrip("\n").splitlines()
    rule = "+------------------------------------+---------------------+----------------------+"
    out = lines + [rule]
    for i, bus in enumerate(C500_BUS[2:], start=2):
        out.append(f"| {i:<11} MetaX C500             | {bus:<19} | 0%                   |")
        out.append("| 35C         48W / 350W             | 826/65536 MiB       |                      |")
        out.append(rule)
    return "\n".join(out) + "\n"


C500_BUS = ["0000:0e:00.0", "0000:0f:00.0", "0000:10:00.0", "0000:12:00.0",
            "0000:8a:00.0", "0000:8b:00.0", "0000:8c:00.0", "0000:8e:00.0"]
C550_BUS = ["0000:2a:00.0", "0000:3a:00.0", "0000:4c:00.0", "0000:5c:00.0",
            "0000:aa:00.0", "0000:ba:00.0", "0000:ca:00.0", "0000:da:00.0"]


def mx_smi_list(name, buses):
    return "".join(
        f"GPU#{i} {name} {bus} (UUID: GPU-{0x3fd4ee00 + i:08x}-169c-6d31-f9dc-c2a90a44{i:04x})\n"
        for i, bus in enumerate(buses))


def metax_host(name, table, listing_name, buses, device, driver_version, pci_driver):
    d = fresh(name)
    root = os.path.join(d, "root")
    for i, bdf in enumerate(buses):
        pci_function(root, bdf, METAX, device, DISPLAY_CLASS, driver="metax",
                     numa=0 if i < 4 else 1)
        card, render = i + 1, 128 + i
        drm = os.path.join(root, "sys", "module", "metax", "drivers", f"pci:{pci_driver}", bdf,
                           "drm")
        os.makedirs(os.path.join(drm, f"card{card}"), exist_ok=True)
        os.makedirs(os.path.join(drm, f"renderD{render}"), exist_ok=True)
        node(root, f"dri/card{card}")
        node(root, f"dri/renderD{render}")
    for n in ("mxcd", "mxnd", "mxgd"):
        node(root, n)
    write(os.path.join(root, "sys", "module", "metax", "version"), driver_version + "\n")
    command(d, "mx-smi", ["mx-smi"], table)
    command(d, "mx-smi-list", ["mx-smi", "-L"], mx_smi_list(listing_name, buses))
    return d


def metax():
    metax_host("metax-8x-c500", mx_smi_c500_8x(), "MetaX C500", C500_BUS, C500, "2.12.13",
               "METAX")
    c550 = capture("metax", "mx-smi", "paddlenlp__8x-mxc550-mx-smi2.1.6-kmd2.5.014-power-no-cap.txt")
    d = metax_host("metax-8x-c550", c550, "MXC550", C550_BUS, C550, "2.5.014", "metax")
    # A virtual function of the first GPU: listed by the bus, skipped by the detector.
    pci_function(os.path.join(d, "root"), "0000:2a:00.1", METAX, C550, DISPLAY_CLASS,
                 driver="metax", numa=0, physfn="0000:2a:00.0")
    d = fresh("metax-no-driver")
    pci_function(os.path.join(d, "root"), "0000:0e:00.0", METAX, C500, DISPLAY_CLASS)


if __name__ == "__main__":
    cambricon()
    metax()
