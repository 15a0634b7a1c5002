#!/usr/bin/env python3
"""Assembles the AMD recorded hosts under testdata/hosts/ from ../shared/fixtures/amd.

Run from the repository root: python3 scripts/make-amd-hosts.py. What each host takes from a
capture and what is assembled is written in its NOTES.md (kept by hand, not generated).
"""
import json
import os
import shutil
import tarfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "amd")
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


def pci_function(root, bdf, vendor, device, cls, driver=None, numa=None, card=None, render=None,
                 uevent_extra="", drm_attrs=None):
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
        write(os.path.join(dev, "uevent"),
              f"DRIVER={driver}\nPCI_CLASS={cls:X}\nPCI_ID={vendor:04X}:{device:04X}\n"
              f"PCI_SLOT_NAME={bdf}\n{uevent_extra}")
    for k, v in (drm_attrs or {}).items():
        write(os.path.join(dev, k), v)
    if card is not None:
        os.makedirs(os.path.join(dev, "drm", f"card{card}"), exist_ok=True)
        link(os.path.join(root, "sys", "class", "drm", f"card{card}"),
             f"../../devices/pci{dom_bus}/{bdf}/drm/card{card}")
        link(os.path.join(dev, "drm", f"card{card}", "device"), "../..")
        write(os.path.join(root, "dev", "dri", f"card{card}"), "")
    if render is not None:
        os.makedirs(os.path.join(dev, "drm", f"renderD{render}"), exist_ok=True)
        write(os.path.join(root, "dev", "dri", f"renderD{render}"), "")
    return dev


def kfd_node(root, n, props, name=None):
    base = os.path.join(root, "sys", "class", "kfd", "kfd", "topology", "nodes", str(n))
    write(os.path.join(base, "properties"), "".join(f"{k} {v}\n" for k, v in props))
    if name is not None:
        write(os.path.join(base, "name"), name + "\n")


def read_props(path):
    out = []
    for line in open(path):
        parts = line.split()
        if len(parts) == 2:
            out.append((parts[0], parts[1]))
    return out


def set_props(props, **kv):
    keys = [k for k, _ in props]
    out = [(k, kv.get(k, v)) for k, v in props]
    for k, v in kv.items():
        if k not in keys:
            out.append((k, v))
    return out


def copy_tree(src, dst):
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)


def kfd_dev(root):
    write(os.path.join(root, "dev", "kfd"), "")
    write(os.path.join(root, "sys", "class", "kfd", "kfd", "dev"), "235:0\n")


def location(bdf):
    bus, rest = bdf.split(":")[1:]
    dev, fn = rest.split(".")
    return (int(bus, 16) << 8) | (int(dev, 16) << 3) | int(fn)


def mi300x_8x():
    host = fresh("amd-8x-mi300x")
    root = os.path.join(host, "root")
    static = open(os.path.join(FIX, "amd-smi", "dellai__8x-mi300x-static-json-amdsmi26.2.2-rocm7.2.1.json")).read()
    version = open(os.path.join(FIX, "amd-smi", "dellai__version-json-amdsmi26.2.2-rocm7.2.1.json")).read()
    command(host, "static", ["amd-smi", "static", "--json"], static)
    command(host, "version", ["amd-smi", "version", "--json"], version)
    # The live usage answer is another card's (one Radeon, gpu 0): no MI300X metric capture
    # exists. It names gpu 0 only, so the sampler gives one sample, under gpu 0's identity.
    metric = open(os.path.join(FIX, "amd-smi", "jkoudela__radeon-unnamed-46064mb-metric-json-list.json")).read()
    command(host, "metric", ["amd-smi", "metric", "--json"], metric)
    doc = json.loads(static)["gpu_data"]
    cpx = read_props(os.path.join(FIX, "kfd-topology", "k8sdp__mi300x-8gpu-cpx", "topology", "nodes", "2", "properties"))
    cpu = read_props(os.path.join(FIX, "kfd-topology", "k8sdp__mi300x-8gpu-cpx", "topology", "nodes", "0", "properties"))
    kfd_node(root, 0, cpu)
    kfd_node(root, 1, read_props(os.path.join(FIX, "kfd-topology", "k8sdp__mi300x-8gpu-cpx", "topology", "nodes", "1", "properties")))
    for i, g in enumerate(doc):
        bdf = g["bus"]["bdf"]
        serial = int(g["asic"]["asic_serial"], 16)
        numa = g["numa"]["node"]
        card, render = i + 1, 128 + 8 * i
        props = set_props(cpx, simd_count="1216", array_count="32", num_xcc="8",
                          location_id=str(location(bdf)), unique_id=str(serial),
                          drm_render_minor=str(render))
        kfd_node(root, i + 2, props)
        pci_function(root, bdf, 0x1002, 0x74a1, 0x120000, "amdgpu", numa, card, render,
                     drm_attrs={"mem_info_vram_total": f"{196592 << 20}\n",
                                "unique_id": f"{serial:016x}\n",
                                "current_compute_partition": "SPX\n",
                                "current_memory_partition": "NPS1\n"})
    kfd_dev(root)


def mi210_8x():
    host = fresh("amd-8x-mi210-xgmi")
    root = os.path.join(host, "root")
    copy_tree(os.path.join(FIX, "kfd-topology", "k8sdp__mi210-8gpu-xgmi-pcie", "topology"),
              os.path.join(root, "sys", "class", "kfd", "kfd", "topology"))
    base = os.path.join(root, "sys", "class", "kfd", "kfd", "topology", "nodes")
    gpus = []
    for n in sorted(os.listdir(base), key=int):
        p = dict(read_props(os.path.join(base, n, "properties")))
        if int(p.get("simd_count", 0)) > 0:
            gpus.append(p)
    gpus.sort(key=lambda p: int(p["location_id"]))
    for i, p in enumerate(gpus):
        loc = int(p["location_id"])
        bdf = f"{int(p.get('domain', 0)):04x}:{loc >> 8:02x}:{(loc >> 3) & 31:02x}.{loc & 7:x}"
        pci_function(root, bdf, 0x1002, 0x740f, 0x038000, "amdgpu", 0 if i < 4 else 1,
                     i, int(p["drm_render_minor"]),
                     drm_attrs={"mem_info_vram_total": f"{65520 << 20}\n",
                                "product_name": "AMD Instinct MI210\n",
                                "unique_id": f"{int(p['unique_id']):x}\n"})
    kfd_dev(root)


def mi300x_cpx():
    host = fresh("amd-mi300x-cpx")
    root = os.path.join(host, "root")
    copy_tree(os.path.join(FIX, "kfd-topology", "k8sdp__mi300x-8gpu-cpx", "topology"),
              os.path.join(root, "sys", "class", "kfd", "kfd", "topology"))
    base = os.path.join(root, "sys", "class", "kfd", "kfd", "topology", "nodes")
    boards = {}
    for n in sorted(os.listdir(base), key=int):
        p = dict(read_props(os.path.join(base, n, "properties")))
        if int(p.get("simd_count", 0)) > 0 and int(p["location_id"]) & 7 == 0:
            boards[int(p["location_id"])] = p
    for i, loc in enumerate(sorted(boards)):
        p = boards[loc]
        bdf = f"0000:{loc >> 8:02x}:{(loc >> 3) & 31:02x}.0"
        pci_function(root, bdf, 0x1002, 0x74a1, 0x120000, "amdgpu", 0 if i < 4 else 1,
                     i + 1, int(p["drm_render_minor"]),
                     drm_attrs={"mem_info_vram_total": f"{196592 << 20}\n",
                                "current_compute_partition": "CPX\n",
                                "current_memory_partition": "NPS1\n"})
    kfd_dev(root)


def apu():
    host = fresh("amd-apu-strixpoint")
    root = os.path.join(host, "root")
    copy_tree(os.path.join(FIX, "kfd-topology", "lact__strixpoint-apu", "topology"),
              os.path.join(root, "sys", "class", "kfd", "kfd", "topology"))
    src = os.path.join(FIX, "drm-sysfs", "lact__strixpoint", "card1", "device")
    attrs = {f: open(os.path.join(src, f)).read() for f in os.listdir(src)
             if f not in ("uevent", "vendor", "device", "class", "numa_node")}
    pci_function(root, "0000:c1:00.0", 0x1002, 0x150e, 0x038000, "amdgpu", -1, 1, 128,
                 uevent_extra="PCI_SUBSYS_ID=17AA:3801\n", drm_attrs=attrs)
    write(os.path.join(root, "sys", "class", "kfd", "kfd", "dev"),
          open(os.path.join(FIX, "kfd-topology", "lact__strixpoint-apu", "dev")).read())
    write(os.path.join(root, "dev", "kfd"), "")


def rocm_smi_only():
    host = fresh("amd-rocm-smi-only-rx7800xt")
    root = os.path.join(host, "root")
    doc = open(os.path.join(FIX, "rocm-smi", "gpustack__rx7800xt-navi32-rocm6.2.4.json")).read()
    command(host, "rocm-smi", ["rocm-smi", "--showallinfo", "--json"], doc)
    unique = 0x5c88007d760374f3
    kfd_node(root, 0, read_props(os.path.join(FIX, "kfd-topology", "lact__strixpoint-apu", "topology", "nodes", "0", "properties")))
    props = read_props(os.path.join(FIX, "kfd-topology", "lact__strixpoint-apu", "topology", "nodes", "1", "properties"))
    props = set_props(props, simd_count="120", simd_per_cu="2", array_count="6",
                      simd_arrays_per_engine="2", cu_per_simd_array="10",
                      gfx_target_version="110001", device_id=str(0x747e),
                      location_id=str(location("0000:03:00.0")), unique_id=str(unique),
                      drm_render_minor="128")
    kfd_node(root, 1, props)
    src = os.path.join(FIX, "drm-sysfs", "lact__rx7800xt", "card1", "device")
    attrs = {f: open(os.path.join(src, f)).read() for f in os.listdir(src)
             if f not in ("uevent", "vendor")}
    attrs["mem_info_vram_total"] = "17163091968\n"
    pci_function(root, "0000:03:00.0", 0x1002, 0x747e, 0x030000, "amdgpu", None, 0, 128,
                 uevent_extra="PCI_SUBSYS_ID=148C:2427\n", drm_attrs=attrs)
    kfd_dev(root)


def no_driver():
    host = fresh("amd-no-driver")
    root = os.path.join(host, "root")
    pci_function(root, "0000:1b:00.0", 0x1002, 0x74a1, 0x120000)


if __name__ == "__main__":
    mi300x_8x()
    mi210_8x()
    mi300x_cpx()
    apu()
    rocm_smi_only()
    no_driver()
