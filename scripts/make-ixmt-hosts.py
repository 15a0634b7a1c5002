#!/usr/bin/env python3
"""Assembles the Iluvatar and Moore Threads recorded hosts under testdata/hosts/ from
../shared/fixtures/iluvatar and ../shared/fixtures/mthreads.

Run from the repository root: python3 scripts/make-ixmt-hosts.py. Each host's NOTES.md (kept by
hand, not generated) says what is a capture and what is assembled. The default tables are the
captures byte for byte where a host has one whole; the CSV query, the `-q` report, the PCI
functions and the device nodes are assembled (no capture of them exists, SOURCES.md).
"""
import os
import shutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(os.path.dirname(REPO), "shared", "fixtures")
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


def fixture(vendor, name):
    with open(os.path.join(FIX, vendor, name)) as f:
        return f.read()


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


def command(host, name, argv, stdout="", status=0, stderr=None):
    base = os.path.join(host, "commands", name)
    write(os.path.join(base, "argv"), "\n".join(argv) + "\n")
    write(os.path.join(base, "stdout"), stdout)
    if stderr is not None:
        write(os.path.join(base, "stderr"), stderr)
    if status:
        write(os.path.join(base, "status"), f"{status}\n")


def pci_function(root, bdf, vendor, device, cls, driver, numa):
    dom_bus = bdf.rsplit(":", 1)[0]
    dev = os.path.join(root, "sys", "devices", f"pci{dom_bus}", bdf)
    write(os.path.join(dev, "vendor"), f"0x{vendor:04x}\n")
    write(os.path.join(dev, "device"), f"0x{device:04x}\n")
    write(os.path.join(dev, "class"), f"0x{cls:06x}\n")
    write(os.path.join(dev, "numa_node"), f"{numa}\n")
    link(os.path.join(root, "sys", "bus", "pci", "devices", bdf),
         f"../../../devices/pci{dom_bus}/{bdf}")
    os.makedirs(os.path.join(root, "sys", "bus", "pci", "drivers", driver), exist_ok=True)
    link(os.path.join(dev, "driver"), f"../../../bus/pci/drivers/{driver}")


def sysfs_bdf(nvml):
    """00000000:13:00.0 -> 0000:13:00.0 (lower case)."""
    domain, rest = nvml.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


# --- Iluvatar -----------------------------------------------------------------------------------

IX_QUERY = ["ixsmi", "--query-gpu=index,uuid,name,pci.bus_id,memory.total", "--format=csv"]
IX_CAPS = ["ixsmi", "--query-gpu=index,pci.bus_id,compute_cap", "--format=csv"]
# Stand-in PCI device ids (the PCI ID registry lists none for these boards).
IX_DEVICE = {"Iluvatar BI-V100": 0x0001, "Iluvatar BI-V150": 0x0002, "Iluvatar BI-V150S": 0x0003}


def ix_rows(table):
    """(index, name, bus, total MiB) of each GPU line of an ixsmi table."""
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0][:1].isdigit() and "Iluvatar" in cells[0]:
            index, name = cells[0].split(None, 1)
            rows.append([int(index), name.strip(), cells[1].split()[0]])
    for line in table.splitlines():
        if "MiB /" in line:
            total = line.split("MiB /")[1].split("MiB")[0].strip()
            for r in rows:
                if len(r) == 3:
                    r.append(int(total))
                    break
    return rows


def iluvatar(name, capture, caps, numa_of):
    host = fresh(name)
    root = os.path.join(host, "root")
    table = fixture("iluvatar", capture)
    rows = ix_rows(table)
    command(host, "ixsmi", ["ixsmi"], table)
    query = "index, uuid, name, pci.bus_id, memory.total [MiB]\n"
    cap_lines = "index, pci.bus_id, compute_cap\n"
    for index, product, bus, total in rows:
        query += f"{index}, GPU-1e3e{index:04x}-0000-4000-8000-{bus.replace(':', '').replace('.', '')[-12:]}, {product}, {bus}, {total} MiB\n"
        cap_lines += f"{index}, {bus}, {caps}\n"
        pci_function(root, sysfs_bdf(bus), 0x1e3e, IX_DEVICE[product], 0x030200, "iluvatar",
                     numa_of(index))
        write(os.path.join(root, "dev", f"iluvatar{index}"), "")
    write(os.path.join(root, "dev", "itrctl"), "")
    command(host, "query-gpu", IX_QUERY, query)
    if caps is None:
        command(host, "query-compute-cap", IX_CAPS,
                'Field "compute_cap" is not a valid field to query.\n', status=2)
    else:
        command(host, "query-compute-cap", IX_CAPS, cap_lines)
    return host


def iluvatar_not_answering():
    host = fresh("iluvatar-driver-not-answering")
    root = os.path.join(host, "root")
    for index, bus in enumerate(["0000:13:00.0", "0000:16:00.0"]):
        pci_function(root, bus, 0x1e3e, 0x0002, 0x030200, "iluvatar", 0)
        write(os.path.join(root, "dev", f"iluvatar{index}"), "")
    write(os.path.join(root, "dev", "itrctl"), "")
    said = "Failed to initialize IXML: Unknown Error\n"
    command(host, "ixsmi", ["ixsmi"], said, status=255)
    command(host, "query-gpu", IX_QUERY, said, status=255)
    command(host, "query-compute-cap", IX_CAPS, said, status=255)


# --- Moore Threads ------------------------------------------------------------------------------

MT_DEVICE = {"MTT S4000": 0x0401, "MTT S5000": 0x0501, "MTT S30": 0x0301}  # stand-ins


def gmi_rows(table):
    rows = []
    for line in table.splitlines():
        cells = line.split("|")
        head = cells[0].split()
        if len(cells) >= 3 and head and head[0].isdigit():
            rows.append((int(head[0]), " ".join(head[1:]), cells[1].strip()))
    return rows


def gmi_report(rows, cores):
    out = "Timestamp : (assembled)\n"
    for index, product, bus in rows:
        uuid = f"1ed5{index:04x}-0000-4000-8000-{bus.replace(':', '').replace('.', '')[-12:].lower()}"
        out += f"\nGPU {bus}\n    Index : {index}\n    Product Name : {product}\n"
        out += f"    GPU UUID : {uuid}\n"
        if cores is not None:
            out += f"    GPU Cores : {cores}\n"
    return out


def mthreads(name, table, cores, driver_version, cls, numa_of):
    host = fresh(name)
    root = os.path.join(host, "root")
    rows = gmi_rows(table)
    command(host, "mthreads-gmi", ["mthreads-gmi"], table)
    command(host, "q", ["mthreads-gmi", "-q"], gmi_report(rows, cores))
    for index, product, bus in rows:
        pci_function(root, sysfs_bdf(bus), 0x1ed5, MT_DEVICE[product], cls, "mtgpu",
                     numa_of(index))
        write(os.path.join(root, "dev", f"mtgpu.{index}"), "")
    write(os.path.join(root, "sys", "module", "mtgpu", "version"), f"{driver_version}\n")
    return host


S4000_ROW = """{i}    MTT S4000      |00000000:{bus}:00.0    |0%    2MiB(49152MiB)
     Physical       |16x(16x)            |{t}C   YES
                                         |      N/A
+-------------------------------------------------------------+
"""


def s4000_8x():
    capture = fixture("mthreads", "mthreads-gmi/torchmusa-87__s4000-gmi1.14.0-driver2.7.0-excerpt.txt")
    head = capture.split("0    MTT S4000")[0]
    buses = ["0f", "10", "11", "13", "8a", "8b", "8c", "8e"]
    temps = [38, 39, 39, 38, 37, 38, 39, 38]
    table = head + "".join(S4000_ROW.format(i=i, bus=b, t=t) for i, (b, t) in enumerate(zip(buses, temps)))
    mthreads("mthreads-8x-s4000", table, 8192, "2.7.0", 0x030200, lambda i: 0 if i < 4 else 1)


def s5000():
    capture = fixture("mthreads", "mthreads-gmi/vllmomni-pr2337__s5000-gmi2.3.2-driver3.3.5-server-perf-ecc-excerpt.txt")
    table = capture.split("1    MTT S5000")[0]
    mthreads("mthreads-s5000", table, None, "3.3.5", 0x030200, lambda i: 0)


def s30():
    table = fixture("mthreads", "mthreads-gmi/torchmusa-134__s30-gmi2.0.0-driver3.1.0-user-trimmed.txt")
    mthreads("mthreads-s30-desktop", table, None, "3.1.0", 0x030000, lambda i: 0)


def mthreads_not_answering():
    host = fresh("mthreads-driver-not-answering")
    root = os.path.join(host, "root")
    for index, bus in enumerate(["0000:0f:00.0", "0000:10:00.0"]):
        pci_function(root, bus, 0x1ed5, 0x0401, 0x030200, "mtgpu", 0)
        write(os.path.join(root, "dev", f"mtgpu.{index}"), "")
    write(os.path.join(root, "sys", "module", "mtgpu", "version"), "2.7.0\n")
    said = "mtgpu_device_initialize: mtgpu_query_dev_info failed (-22)\n"
    command(host, "mthreads-gmi", ["mthreads-gmi"], "", status=255, stderr=said)
    command(host, "q", ["mthreads-gmi", "-q"], "", status=255, stderr=said)


if __name__ == "__main__":
    iluvatar("iluvatar-16x-bi-v150", "ixsmi/paddlenlp__16x-bi-v150-ixml4.1.0-dec2024.txt", "7.1",
             lambda i: 0 if i < 8 else 1)
    iluvatar("iluvatar-bi-v100-ixml3", "ixsmi/gpustack-3256__1x-bi-v100-ixml3.1.1-driver3.1.0-centos7-excerpt.txt",
             None, lambda i: 1)
    iluvatar("iluvatar-bi-v150s-cuda-na", "ixsmi/ixctk__1x-bi-v150s-container-ixml4.0.0-driver4.1.0-cuda-na.txt",
             "[N/A]", lambda i: 0)
    iluvatar_not_answering()
    s4000_8x()
    s5000()
    s30()
    mthreads_not_answering()
