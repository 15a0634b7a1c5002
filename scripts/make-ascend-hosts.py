#!/usr/bin/env python3
"""Assembles the Ascend recorded hosts under testdata/hosts/ from ../shared/fixtures/ascend.

Run from the repository root: python3 scripts/make-ascend-hosts.py. What each host takes from a
capture and what is assembled is written in its NOTES.md (kept by hand, not generated).
"""
import json
import os
import shutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "ascend")
HOSTS = os.path.join(REPO, "testdata", "hosts")
VENDOR = 0x19E5
CLASS = 0x120000  # processing accelerator


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def link(path, target):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.remove(path)
    os.symlink(target, path)


def fixture(rel):
    with open(os.path.join(FIX, rel)) as f:
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


def command(host, name, argv, stdout, status=0, stderr=None):
    base = os.path.join(host, "commands", name)
    write(os.path.join(base, "argv"), "\n".join(argv) + "\n")
    write(os.path.join(base, "stdout"), stdout)
    if stderr is not None:
        write(os.path.join(base, "stderr"), stderr)
    if status:
        write(os.path.join(base, "status"), f"{status}\n")


def pci_function(root, bdf, device, numa=None, driver="devdrv_device_driver"):
    dom_bus = bdf.rsplit(":", 1)[0]
    dev = os.path.join(root, "sys", "devices", f"pci{dom_bus}", bdf)
    write(os.path.join(dev, "vendor"), f"0x{VENDOR:04x}\n")
    write(os.path.join(dev, "device"), f"0x{device:04x}\n")
    write(os.path.join(dev, "class"), f"0x{CLASS:06x}\n")
    if numa is not None:
        write(os.path.join(dev, "numa_node"), f"{numa}\n")
    link(os.path.join(root, "sys", "bus", "pci", "devices", bdf),
         f"../../../devices/pci{dom_bus}/{bdf}")
    # git keeps no empty folder: the driver's folder holds a `.keep`.
    write(os.path.join(root, "sys", "bus", "pci", "drivers", driver, ".keep"), "")
    link(os.path.join(dev, "driver"), f"../../../bus/pci/drivers/{driver}")


def dev_nodes(root, physical_ids, control=("davinci_manager", "devmm_svm", "hisi_hdc")):
    for n in physical_ids:
        write(os.path.join(root, "dev", f"davinci{n}"), "")
    for c in control:
        write(os.path.join(root, "dev", c), "")


def versions(root, driver=None, cann=None):
    if driver:
        write(os.path.join(root, "usr/local/Ascend/driver/version.info"),
              f"Version={driver}\nascendhal_version=7.35.23\n")
    if cann:
        write(os.path.join(root, "usr/local/Ascend/ascend-toolkit/latest/runtime/version.info"),
              f"Version={cann}\n")


def stage_vcann(root, build):
    write(os.path.join(root, "var/lib/gpustack/operator/lib/ascend", build, "lib/libvruntime.so"), "")
    write(os.path.join(root, "var/lib/gpustack/operator/lib/ascend", build, "tools/enpu-monitor"), "")


def padded(words):
    """The die id as npu-smi prints it: each word padded to eight hex digits."""
    return " ".join(w.rjust(8, "0") for w in words.split())


def board(host, npu, chip, die, name=None, bus=None, v2=False):
    """`npu-smi info -t board`, chip level. On V2 (the 950) the tool takes no `-c` (spec addendum
    A1): the detector asks `-i <npu>`; the `-c 0` form stays recorded for the usage sampler,
    which still asks it."""
    lines = [f"NPU ID                         : {npu}",
             f"Chip ID                        : {chip}",
             "Chip Type                      : Ascend"]
    if name:
        lines.append(f"Chip Name                      : {name}")
    lines.append(f"VDie ID                        : {padded(die)}")
    if bus:
        lines.append(f"PCIe Bus Info                  : {bus}")
    text = "\n".join(lines) + "\n"
    command(host, f"board-{npu}-{chip}", ["npu-smi", "info", "-t", "board", "-i", str(npu), "-c", str(chip)], text)
    if v2:
        command(host, f"board-{npu}", ["npu-smi", "info", "-t", "board", "-i", str(npu)], text)


def board_950(host, npu, die, name, bus, main_board, board_id="0x1b"):
    """The V2 (950) `npu-smi info -t board -i <npu>` in the field order of the 950 manual's example
    (`canndriver-950doc__atlas350-info-t-board-i0-mainboard-1p-doc-example.txt`) and TAB-indented
    30-wide labels as npu-smi's source prints them; the values are ours. Also recorded in the
    `-c 0` form the usage sampler asks."""
    fields = [("NPU ID", npu), ("Product Name", "xxx"), ("NPU Name", "xxx"), ("Chip Name", name),
              ("Chip Version", "V100"), ("Model", "xxx"), ("Manufacturer", "Huawei"),
              ("Serial Number", f"2102315NNH10{npu:04d}"), ("Software Version", "25.7.rc1.6"),
              ("Firmware Version", "7.8.0.6.201"), ("Compatibility", "OK"), ("Board ID", board_id),
              ("Main Board ID", main_board), ("PCB ID", "A"), ("BOM ID", "1"), ("PCIe Bus Info", bus),
              ("Slot ID", npu), ("Class ID", "NA"), ("PCI Vendor ID", "0x19E5"),
              ("PCI Device ID", "0xD806"), ("Subsystem Vendor ID", "0x19E5"),
              ("Subsystem Device ID", "0x4004"), ("Chip Count", 1), ("DDie ID", padded(die)),
              ("Chip Position ID", 0)]
    text = "".join(f"\t{k:<30} : {v}\n" for k, v in fields)
    command(host, f"board-{npu}", ["npu-smi", "info", "-t", "board", "-i", str(npu)], text)
    command(host, f"board-{npu}-0", ["npu-smi", "info", "-t", "board", "-i", str(npu), "-c", "0"], text)


def spod(host, npu, chip, text):
    """`npu-smi info -t spod-info`: `-i <card> -c <chip>` on A3 (chip=None: the 950's `-i <npu>`)."""
    where = ["-i", str(npu)] + ([] if chip is None else ["-c", str(chip)])
    name = f"spod-{npu}" + ("" if chip is None else f"-{chip}")
    command(host, name, ["npu-smi", "info", "-t", "spod-info"] + where, text)


def spod_lines(fields):
    """`key : value` lines as npu-smi's source prints them: TAB, the label left-justified to 30."""
    return "".join(f"\t{k:<30} : {v}\n" for k, v in fields)


def health_ok(host, npu, chip=None):
    """`npu-smi info -t health`: V1 `-i <npu> -c <chip>` in the real 910A capture's form
    (`Health Status`), V2 `-i <npu>` in the 950 manual's (`NPU ID`, `Health`)."""
    if chip is None:
        text = spod_lines([("NPU ID", npu), ("Health", "OK"), ("Error Code", "NA"), ("Error Information", "NA")])
        command(host, f"health-{npu}", ["npu-smi", "info", "-t", "health", "-i", str(npu)], text)
    else:
        text = fixture("npu-smi/mindcluster-faultdiag__910a-info-t-health-i0-c0-health-status-ok.txt")
        command(host, f"health-{npu}-{chip}",
                ["npu-smi", "info", "-t", "health", "-i", str(npu), "-c", str(chip)], text)


def phyid(host, npu, chip, phy, v2=False):
    """`npu-smi info -t phyid-remap`: `-i <npu> -c <chip>`, or `-i <npu>` on V2 (no `-c`)."""
    where = ["-i", str(npu)] + ([] if v2 else ["-c", str(chip)])
    name = f"phyid-{npu}" + ("" if v2 else f"-{chip}")
    command(host, name, ["npu-smi", "info", "-t", "phyid-remap"] + where, f"Chip Phy-ID                    : {phy}\n")


def common(host, npu, chips, cores=None):
    text = f"NPU ID                         : {npu}\nChip Count                     : {len(chips)}\n"
    for c in chips:
        text += f"\nChip ID                        : {c}\nMemory Usage Rate(%)           : 3\n"
        if cores is not None:
            text += f"Aicore Count                   : {cores}\n"
        text += "Temperature(C)                 : 45\n"
    text += "\nChip Name                      : mcu\nTemperature(C)                 : 48\n"
    command(host, f"common-{npu}", ["npu-smi", "info", "-t", "common", "-i", str(npu)], text)


def ecc(host, npu, chip=None, memory="HBM", single=0, double=0, enabled="True", chip_id=0):
    """`npu-smi info -t ecc` and `-t ecc-enable` for one NPU (chip=None: asked without -c, the
    NPU's one chip answering) or one chip of a several-chip NPU. Neither query is captured: the
    key names and the `key : value` layout follow Huawei's npu-smi manual (910B: DDR and HBM
    counters then `Chip ID`; 950: HBM alone); the counts are ours."""
    suffix = f"-{npu}" if chip is None else f"-{npu}-{chip}"
    where = ["-i", str(npu)] + ([] if chip is None else ["-c", str(chip)])
    lines = [f"NPU ID                                   : {npu}",
             "Chip Count                               : 1", ""]
    kinds = ["DDR", "HBM"] if memory == "HBM+DDR" else [memory]
    for m in kinds:
        s_, d_ = (single, double) if m == kinds[-1] else (0, 0)
        lines += [f"{m} Single Bit Error Count               : {s_}",
                  f"{m} Double Bit Error Count               : {d_}",
                  f"{m} Single Bit Aggregate Total Err Cnt   : {s_}",
                  f"{m} Double Bit Aggregate Total Err Cnt   : {d_}",
                  f"{m} Single Bit Isolated Pages Count      : 0",
                  f"{m} Double Bit Isolated Pages Count      : 0"]
    lines.append(f"Chip ID                                  : {chip_id if chip is None else chip}")
    command(host, f"ecc{suffix}", ["npu-smi", "info", "-t", "ecc"] + where,
            "".join(f"\t{l}\n" if l else "\n" for l in lines))
    enable = "".join(f"\t{m} ECC-Enable Status          : {enabled}\n" for m in kinds)
    command(host, f"ecc-enable{suffix}", ["npu-smi", "info", "-t", "ecc-enable"] + where, enable)


def share_state(host):
    write(os.path.join(host, "share-state.json"), '{\n  "on": [],\n  "refuse": [],\n  "writes": 0\n}\n')


def table_910b(version, rows):
    """An `npu-smi info` table in the 910B layout (as paddledocs' 23.0.rc3 and 25.2.0 print it)."""
    out = ["+------------------------------------------------------------------------------------------------+",
           f"| npu-smi {version:<24} Version: {version:<53}|",
           "+---------------------------+---------------+----------------------------------------------------+",
           "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
           "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
           "+===========================+===============+====================================================+"]
    for npu, name, bus, power, temp, used, total in rows:
        out.append(f"| {npu:<5} {name:<19} | OK            | {power:<11} {temp:<17} 0    / 0             |")
        hbm = f"{used} / {total}"
        out.append(f"| 0                         | {bus:<13} | 0           0    / 0          {hbm:<21}|")
        out.append("+===========================+===============+====================================================+")
    return "\n".join(out) + "\n"


def host_910b2():
    h = fresh("ascend-8x-910b2")
    root = os.path.join(h, "root")
    npus = json.loads(fixture("gpustack-runtime-detect/gpustackruntime__8x-910b2-detect-json.json"))
    rows = []
    for d in npus:
        ap = d["appendix"]
        bus = ap["bdf"].upper().replace("0000:", "0000:", 1)
        rows.append((ap["card_id"], d["name"], bus, d["power_used"], d["temperature"],
                     d["memory_used"], d["memory"]))
        pci_function(root, ap["bdf"], 0xD802, numa=int(ap["numa"]))
        board(h, ap["card_id"], ap["device_id"], d["uuid"], name=d["name"], bus=ap["bdf"].upper())
        phyid(h, ap["card_id"], ap["device_id"], ap["physical_id"])
        common(h, ap["card_id"], [0], cores=d["cores"])
        ecc(h, ap["card_id"], memory="HBM+DDR")
    command(h, "info", ["npu-smi", "info"], table_910b("25.5.1", rows))
    command(h, "info-m", ["npu-smi", "info", "-m"],
            fixture("npu-smi/gpustack-test__8x-910b-info-m-mcu-rows-redacted.txt"))
    command(h, "info-l", ["npu-smi", "info", "-l"],
            "\tTotal Count                    : 8\n\n" + "".join(
                f"\tNPU ID                         : {n}\n\tChip Count                     : 1\n\n" for n in range(8)))
    dev_nodes(root, range(8))
    versions(root, driver="25.5.1", cann="8.5.0")
    stage_vcann(root, "cann-8-910b")
    share_state(h)


def host_910a():
    h = fresh("ascend-8x-910a-npu-smi24")
    root = os.path.join(h, "root")
    info = fixture("npu-smi/gpustack__atlas800-9010-8x910a-npu-smi24.1.RC2-info-procs-warning.txt")
    command(h, "info", ["npu-smi", "info"], info)
    command(h, "info-m", ["npu-smi", "info", "-m"], fixture("npu-smi/gpustack__atlas800-9010-8x910a-info-m.txt"))
    buses = ["C1", "81", "41", "01", "C2", "82", "42", "02"]
    for npu, b in enumerate(buses):
        bdf = f"0000:{b.lower()}:00.0"
        pci_function(root, bdf, 0xD801, numa=[3, 2, 1, 0, 3, 2, 1, 0][npu])
        die = f"{0x3A10C1F0 + npu * 0x101:X} 8107{npu}2C 9D22E3A1 0 1243{npu}0B5"
        board(h, npu, 0, die)
        command(h, f"phyid-{npu}-0", ["npu-smi", "info", "-t", "phyid-remap", "-i", str(npu), "-c", "0"],
                "", status=255, stderr="Error: invalid type phyid-remap.\n")
        common(h, npu, [0], cores=32)
        ecc(h, npu)
    dev_nodes(root, range(8))
    versions(root, driver="24.1.rc2", cann="8.0.0")
    share_state(h)


def table_310p(rows):
    out = ["+--------------------------------------------------------------------------------------------------------+",
           "| npu-smi 25.5.1                                   Version: 25.5.1                                       |",
           "+-------------------------------+-----------------+------------------------------------------------------+",
           "| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |",
           "| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |",
           "+===============================+=================+======================================================+"]
    for i, (npu, chip, device, bus, used) in enumerate(rows):
        out.append(f"| {npu:<7} 310P3                 | OK              | NA           {40 + i:<17} 0     / 0             |")
        mem = f"{used} / 21525"
        out.append(f"| {chip:<7} {device:<21} | {bus:<15} | 0            {mem:<40}|")
        last = i + 1 == len(rows) or rows[i + 1][0] != npu
        out.append("+===============================+=================+======================================================+"
                   if last else
                   "+-------------------------------+-----------------+------------------------------------------------------+")
    return "\n".join(out) + "\n"


def host_310p():
    h = fresh("ascend-310p-2chips-gapped")
    root = os.path.join(h, "root")
    # NPU IDs 1, 2, 4, 5 (the real -m capture); physical ids 2n, 2n+1 per NPU n: not 0..N-1.
    rows = []
    for npu, bus in [(1, "81"), (2, "85"), (4, "89"), (5, "8D")]:
        for chip in (0, 1):
            phy = 2 * npu + chip
            b = f"0000:{int(bus, 16) + chip:02X}:00.0"
            rows.append((npu, chip, phy, b, 1848 + chip))
            pci_function(root, b.lower(), 0xD500, numa=0 if npu < 4 else 1)
            die = f"{0x51A0C3E0 + phy:X} 7C3{npu}{chip}E1 44D0A2B7 {0x9C0 + phy:X} 10F301E3"
            board(h, npu, chip, die, name="310P3")
            ecc(h, npu, chip, memory="DDR")
        command(h, f"common-{npu}", ["npu-smi", "info", "-t", "common", "-i", str(npu)],
                fixture("npu-smi/gpustack-test__310p-info-t-common-npu1-2chips.txt").replace(
                    "NPU ID                         : 1", f"NPU ID                         : {npu}"))
    command(h, "info", ["npu-smi", "info"], table_310p(rows))
    command(h, "info-m", ["npu-smi", "info", "-m"],
            fixture("npu-smi/gpustack-test__310p-info-m-2chips-gapped-npu-ids.txt"))
    dev_nodes(root, [r[2] for r in rows])
    versions(root, driver="25.5.1", cann="9.1.0")
    stage_vcann(root, "cann-9-310p")
    share_state(h)


def host_a3():
    h = fresh("ascend-a3-2dies")
    root = os.path.join(h, "root")
    real = fixture("npu-smi/vllmascend-12980__a3-ascend910-npu-smi26.0.rc2-phy-id-2dies-excerpt.txt")
    rule = "+------------------------------------------------------------------------------------------------------------------+\n"
    npu1 = (
        "+===========================+===============+======================================================================+\n"
        "| 1     Ascend910           | OK            | 170.2                35                      0    / 0                |\n"
        "| 0     2                   | 0000:99:00.0  | 0                    0    / 0                3415 / 65536            |\n"
        + rule +
        "| 1     Ascend910           | OK            | -                    35                      0    / 0                |\n"
        "| 1     3                   | 0000:9B:00.0  | 0                    0    / 0                3190 / 65536            |\n"
        "+===========================+===============+======================================================================+\n")
    command(h, "info", ["npu-smi", "info"], real + npu1)
    mapping = "NPU ID                         Chip ID                        Chip Logic ID                  Chip Name\n"
    for npu, chip, logic in [(0, 0, 0), (0, 1, 1), (0, 2, "-"), (1, 0, 2), (1, 1, 3), (1, 2, "-")]:
        name = "Mcu" if logic == "-" else "Ascend 910"
        mapping += f"{npu:<31}{chip:<31}{str(logic):<31}{name}\n"
    command(h, "info-m", ["npu-smi", "info", "-m"], mapping)
    for npu, chip, bus in [(0, 0, "9d"), (0, 1, "9f"), (1, 0, "99"), (1, 1, "9b")]:
        pci_function(root, f"0000:{bus}:00.0", 0xD803, numa=1)
        die = f"{0x6B20F1A0 + npu * 16 + chip:X} 2A{npu}{chip}C3D1 7E10B2C4 {0x3000 + chip:X} 11230A19"
        board(h, npu, chip, die)
        ecc(h, npu, chip)
    for npu in (0, 1):
        common(h, npu, [0, 1], cores=24)
    dev_nodes(root, range(4))
    versions(root, driver="25.3.rc1", cann="8.3.0")
    stage_vcann(root, "cann-8-910c")
    share_state(h)


def host_950():
    h = fresh("ascend-950pr-v2")
    root = os.path.join(h, "root")
    real = fixture("npu-smi/gpustack-6148__ascend950pr-npu-smi25.7.rc1.6-new-layout-excerpt.txt")
    sep = "+========+==================+===============+=====================================================+\n"
    more = (
        "|        |                  | 0000:01:00.0  | 0           0    / 0          5225  / 131072        |\n" + sep +
        "| 1      | Ascend950PR      | OK            | 198.7       54                0     / 0             |\n"
        "|        |                  | 0000:02:00.0  | 0           0    / 0          5219  / 131072        |\n" + sep)
    command(h, "info", ["npu-smi", "info"], real + more)
    for npu, bus in [(0, "01"), (1, "02")]:
        pci_function(root, f"0000:{bus}:00.0", 0xD806, numa=0)
        die = f"{0x7D30A2B0 + npu:X} 5E1{npu}03C2 0 0 9A2041F7"
        board(h, npu, 0, die, name="Ascend950PR", v2=True)
        phyid(h, npu, 0, npu, v2=True)
        common(h, npu, [0], cores=32)
        ecc(h, npu)
    dev_nodes(root, range(2), control=("davinci_manager", "hisi_hdc"))
    versions(root, driver="25.7.rc1.6", cann="9.0.0")
    stage_vcann(root, "cann-9-950")


A3_SDID_CAPTURES = {  # device -> the real `-t spod-info` capture of server 40 (MindCluster's log)
    0: "npu-smi/mindcluster-faultdiag__a3-server40-info-t-spod-info-dev0-from-log-L11.txt",
    1: "npu-smi/mindcluster-faultdiag__a3-server40-info-t-spod-info-dev1-from-log-L13.txt",
    10: "npu-smi/mindcluster-faultdiag__a3-server40-info-t-spod-info-dev10-from-log-L15.txt",
    11: "npu-smi/mindcluster-faultdiag__a3-server40-info-t-spod-info-dev11-from-log-L17.txt",
    12: "npu-smi/mindcluster-faultdiag__a3-server40-info-t-spod-info-dev12-from-log-L19.txt",
}


def table_a3(version, rows):
    """An A3 `npu-smi info` table in the widths of the 26.0.rc2 capture: rows are
    (npu, chip, phy, bus, power, hbm_used)."""
    out = ["+------------------------------------------------------------------------------------------------------------------+",
           f"| npu-smi {version:<35} Version: {version:<61}|",
           "+---------------------------+---------------+----------------------------------------------------------------------+",
           "| NPU   Name                | Health        | Power(W)             Temp(C)                 Hugepages-Usage(page)   |",
           "| Chip  Phy-ID              | Bus-Id        | AICore(%)            Memory-Usage(MB)        HBM-Usage(MB)           |",
           "+===========================+===============+======================================================================+"]
    for npu, chip, phy, bus, power, used in rows:
        out.append(f"| {npu:<5} Ascend910           | OK            | {power:<20} 34                      0    / 0                |")
        hbm = f"{used} / 65536"
        out.append(f"| {chip:<5} {phy:<19} | {bus:<13} | 0                    0    / 0                {hbm:<24}|")
        out.append("+------------------------------------------------------------------------------------------------------------------+"
                   if chip == 0 else
                   "+===========================+===============+======================================================================+")
    return "\n".join(out) + "\n"


def host_a3_spod():
    """Server 40 of an A3 super-pod of 384 NPUs: eight cards of two dies, every die's spod-info."""
    h = fresh("ascend-a3-server40-spod")
    root = os.path.join(h, "root")
    real = fixture("npu-smi/vllmascend-12980__a3-ascend910-npu-smi26.0.rc2-phy-id-2dies-excerpt.txt")
    rows = []
    buses = ["9D", "9F", "99", "9B", "1D", "1F", "19", "1B", "5D", "5F", "59", "5B", "DD", "DF", "D9", "DB"]
    for npu in range(8):
        for chip in (0, 1):
            device = 2 * npu + chip
            rows.append((npu, chip, device, f"0000:{buses[device]}:00.0", "-" if chip else "161.4", 3100 + device))
    # NPU 0 is the capture's (its two dies, byte for byte); NPUs 1-7 follow in its widths.
    body = table_a3("26.0.rc2", rows[2:]).split("\n")[6:]
    rule = "+===========================+===============+======================================================================+"
    text = real + "\n".join([rule] + body)
    command(h, "info", ["npu-smi", "info"], text)
    mapping = "NPU ID                         Chip ID                        Chip Logic ID                  Chip Name\n"
    for npu in range(8):
        for chip, logic in [(0, 2 * npu), (1, 2 * npu + 1), (2, "-")]:
            name = "Mcu" if logic == "-" else "Ascend 910"
            mapping += f"{npu:<31}{chip:<31}{str(logic):<31}{name}\n"
    command(h, "info-m", ["npu-smi", "info", "-m"], mapping)
    for npu, chip, device, bus, _, _ in rows:
        pci_function(root, bus.lower(), 0xD803, numa=npu // 4)
        die = f"{0x6B40F1A0 + device:X} 3A{npu}{chip}C3D1 7E10B2C4 {0x3000 + chip:X} 11230A19"
        board(h, npu, chip, die)
        ecc(h, npu, chip)
        health_ok(h, npu, chip)
        if device in A3_SDID_CAPTURES:
            spod(h, npu, chip, fixture(A3_SDID_CAPTURES[device]))
        else:
            sdid = (40 << 22) | (npu << 18) | (chip << 16) | device
            spod(h, npu, chip, spod_lines([("SDID", sdid), ("Super Pod Size", 384), ("Super Pod ID", 0),
                                           ("Server Index", 40)]))
    for npu in range(8):
        common(h, npu, [0, 1], cores=24)
    dev_nodes(root, range(16))
    versions(root, driver="25.3.rc1", cann="8.3.0")
    stage_vcann(root, "cann-8-910c")
    share_state(h)


def table_950(version, rows):
    """A 950 `npu-smi info` table in the widths of the 25.7.rc1.6 capture: rows are (npu, bus)."""
    sep = "+========+==================+===============+=====================================================+"
    out = []
    for npu, bus, power, used in rows:
        out.append(f"| {npu:<6} | Ascend950PR      | OK            | {power:<11} 54                0     / 0             |")
        hbm = f"{used}  / 131072"
        out.append(f"|        |                  | {bus:<13} | 0           0    / 0          {hbm:<22}|")
        out.append(sep)
    return "\n".join(out) + "\n"


def host_950_server():
    """A 16-NPU 950 server on an A+K mainboard (0x23) whose spod-info says Super Pod Type 3 (16P
    server): product form server-16p, topology file atlas_850_2.json."""
    h = fresh("ascend-950-server-16p")
    root = os.path.join(h, "root")
    real = fixture("npu-smi/gpustack-6148__ascend950pr-npu-smi25.7.rc1.6-new-layout-excerpt.txt")
    sep = "+========+==================+===============+=====================================================+\n"
    rows = [(npu, f"0000:{0x01 + npu:02X}:00.0", f"{198.0 + npu / 10:.1f}", 5200 + npu) for npu in range(16)]
    first = "|        |                  | 0000:01:00.0  | 0           0    / 0          5225  / 131072        |\n" + sep
    command(h, "info", ["npu-smi", "info"], real + first + table_950("25.7.rc1.6", rows[1:]))
    mapping = "NPU ID          Slot ID          Chip ID          Chip Phy-ID          Chip Name                    \n"
    for npu in range(16):
        mapping += f"{npu:<16}{npu:<17}{0:<17}{npu:<21}Ascend950PR\n"
    command(h, "info-m", ["npu-smi", "info", "-m"], mapping)
    for npu, bus, _, _ in rows:
        pci_function(root, bus.lower(), 0xD806, numa=npu // 8)
        die = f"{0x8704A0E3 + npu:X} 2120D5{npu:02X} 77936EE6 80B40A0A D4100003"
        board_950(h, npu, die, "Ascend950PR", bus, main_board="0x23")
        common(h, npu, [0], cores=32)
        ecc(h, npu)
        health_ok(h, npu)
        # The 950 server's print (npu-smi's source, addendum A4): no SDID; Super Pod Size, Super
        # Pod ID, Server Index (the mainboard is no POD board), Super Pod Type.
        spod(h, npu, None, spod_lines([("Super Pod Size", 16), ("Super Pod ID", 0), ("Server Index", 0),
                                       ("Super Pod Type", 3)]))
    dev_nodes(root, range(16), control=("davinci_manager", "hisi_hdc"))
    versions(root, driver="25.7.rc1.6", cann="9.0.0")
    stage_vcann(root, "cann-9-950")


def host_init_failed():
    h = fresh("ascend-driver-not-initialised")
    root = os.path.join(h, "root")
    text = fixture("npu-smi/canncontainer-46__npu-smi-in-container-dcmi-init-failed-8020.txt")
    command(h, "info", ["npu-smi", "info"], text, status=255)
    for n, bus in enumerate(["c1", "01", "c2", "02", "81", "41", "82", "42"]):
        pci_function(root, f"0000:{bus}:00.0", 0xD802, numa=0)
    dev_nodes(root, range(8))
    versions(root, driver="25.2.0", cann="8.2.0")


if __name__ == "__main__":
    host_910b2()
    host_910a()
    host_310p()
    host_a3()
    host_950()
    host_a3_spod()
    host_950_server()
    host_init_failed()
