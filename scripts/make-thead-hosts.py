#!/usr/bin/env python3
"""Assembles the T-Head recorded hosts under testdata/hosts/ from ../shared/fixtures/thead.

Run from the repository root: python3 scripts/make-thead-hosts.py. What each host takes from a
capture and what is assembled is written in its NOTES.md (kept by hand, not generated).

The 16-PPU hosts take every card fact the GPUStack runtime's sample of a 16x PPU-ZW810E host
gives (UUID, bus id, minor number, NUMA node, VRAM, memory in use, temperature, power, driver
version) and print them in the row shape of the one real ppu-smi 1.17 table; `-L` follows the
real `-L` capture's shape; `-q` has no capture at all and is assembled in nvidia-smi's `-q`
shape with the keys the spec names (`MIG Mode` / `Current` / `Pending`, `Minor Number`).
"""
import json
import os
import shutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "thead")
HOSTS = os.path.join(REPO, "testdata", "hosts")

# The alixpu character-device majors: no /dev/alixpu* listing was captured, so these are made
# up (dynamic majors count down from 511). /dev/alixpu holds minor 0 of the cards' major
# (spec/thead.md section 3, the runtime sample's README), so card minors are ordinal + 1.
CARD_MAJOR = 509
CTL_MAJOR = 508


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


def pci_function(root, bdf, numa=None, driver="alixpu"):
    """A PPU: vendor 1ded, device 6001, class 0302 (the lspci capture)."""
    dom_bus = bdf.rsplit(":", 1)[0]
    dev = os.path.join(root, "sys", "devices", f"pci{dom_bus}", bdf)
    write(os.path.join(dev, "vendor"), "0x1ded\n")
    write(os.path.join(dev, "device"), "0x6001\n")
    write(os.path.join(dev, "class"), "0x030200\n")
    write(os.path.join(dev, "revision"), "0x01\n")
    if numa is not None:
        write(os.path.join(dev, "numa_node"), f"{numa}\n")
    link(os.path.join(root, "sys", "bus", "pci", "devices", bdf),
         f"../../../devices/pci{dom_bus}/{bdf}")
    if driver:
        # git keeps no empty folder: the driver's folder holds a `.keep`.
        write(os.path.join(root, "sys", "bus", "pci", "drivers", driver, ".keep"), "")
        link(os.path.join(dev, "driver"), f"../../../bus/pci/drivers/{driver}")


def node(root, name, major, minor):
    """A /dev marker carrying its device number, as `record` writes one."""
    write(os.path.join(root, "dev", name), f"c {major}:{minor}\n")


def runtime_cards():
    with open(os.path.join(FIX, "gpustack-runtime-detect",
                           "gpustackruntime__16x-ppu-zw810e-detect-json.json")) as f:
        return json.load(f)


def smi_bus(bdf):
    """0000:a8:00.0 -> 00000000:A8:00.0 (ppu-smi prints nvidia-smi's form)."""
    dom, bus, rest = bdf.split(":")
    dev, fn = rest.split(".")
    return f"{int(dom, 16):08X}:{bus.upper()}:{dev.upper()}.{fn}"


RULE = "+---------------------------------+----------------------+----------------------+"


def table(cards, driver, mig):
    """The ppu-smi 1.17 device table (81 wide), one three-line record per card."""
    banner = f"PPU-SMI 1.17          Driver Version: {driver}  HGGC Version: N/A"
    out = [
        "Fri Apr 24 17:12:12 2026",
        "+-------------------------------------------------------------------------------+",
        f"| {banner.ljust(77)} |",
        RULE,
        "| PPU  Name        Persistence M. | Bus-Id               | Volatile Uncorr. ECC |",
        "| Fan  Temp  Perf   Pwr:Usage/Cap | Memory-Usage         | PPU-Util  Compute M. |",
        "|                                 |                      |               MIG M. |",
        "+=================================+======================+======================+",
    ]
    for c in cards:
        i = c["index"]
        # The capture's ` 0  PPU-ZW810E        N/A`: a two-digit index keeps its two blanks
        # and the `Persistence M.` value its column.
        first = (f" {i}  PPU-ZW810E".ljust(22) + "N/A").ljust(33)
        power = f"{c['power_used']}W / {c['power']}W"
        second = f" N/A  {c['temperature']}C   N/A".ljust(33 - len(power) - 1) + power + " "
        memory = f" {c['memory_used']}MiB / {c['memory']}MiB".ljust(22)
        mode = "Enabled" if i in mig else "Disabled"
        out += [
            f"|{first}| {smi_bus(c['appendix']['bdf']).ljust(21)}|{'0'.rjust(21)} |",
            f"|{second}|{memory}|   0%        Default  |",
            f"|{' ' * 33}|{' ' * 22}|{mode.rjust(21)} |",
            RULE,
        ]
    out += [
        "",
        "+-------------------------------------------------------------------------------+",
        "| Processes:                                                                    |",
        "| PPU    GI   CI   PID      Type  Process name                       PPU Memory |",
        "|        ID   ID                                                     Usage      |",
        "+===============================================================================+",
        "| No running processes found                                                    |",
        "+-------------------------------------------------------------------------------+",
    ]
    return "\n".join(out) + "\n"


def listing(cards, children):
    out = []
    for c in cards:
        out.append(f"PPU {c['index']}: PPU (UUID: {c['uuid']})")
        out += children.get(c["index"], [])
    return "\n".join(out) + "\n"


def query(cards, driver, mig, pending):
    out = [
        "",
        "==============PPU-SMI LOG==============",
        "",
        "Timestamp                                 : Fri Apr 24 17:12:12 2026",
        f"Driver Version                            : {driver}",
        "HGGC Version                              : N/A",
        "",
        f"Attached PPUs                             : {len(cards)}",
    ]
    for c in cards:
        i = c["index"]
        current = "Enabled" if i in mig else "Disabled"
        then = "Enabled" if (i in mig or i in pending) else "Disabled"
        out += [
            f"PPU {smi_bus(c['appendix']['bdf'])}",
            f"    Product Name                          : {c['name']}",
            "    MIG Mode",
            f"        Current                           : {current}",
            f"        Pending                           : {then}",
            f"    PPU UUID                              : {c['uuid']}",
            f"    Minor Number                          : {c['appendix']['minor_number']}",
            "",
        ]
    return "\n".join(out)


def sixteen(name, mig=(), pending=()):
    host = fresh(name)
    root = os.path.join(host, "root")
    cards = runtime_cards()
    driver = cards[0]["driver_version"]
    for c in cards:
        pci_function(root, c["appendix"]["bdf"], numa=int(c["appendix"]["numa"]))
        node(root, f"alixpu_ppu{c['index']}", CARD_MAJOR, c["appendix"]["minor_number"])
    node(root, "alixpu", CARD_MAJOR, 0)
    node(root, "alixpu_ctl", CTL_MAJOR, 0)
    command(host, "table", ["ppu-smi"], table(cards, driver, set(mig)))
    command(host, "list", ["ppu-smi", "-L"], listing(cards, {}))
    command(host, "query", ["ppu-smi", "-q"], query(cards, driver, set(mig), set(pending)))
    if mig:
        command(host, "mig-lgip", ["ppu-smi", "mig", "-lgip"], lgip(sorted(mig)))
        command(host, "mig-lgipp", ["ppu-smi", "mig", "-lgipp"], lgipp(sorted(mig)))
        # The MIG instances live here, replayed (crates/accel-thead/src/mig_replay.rs).
        write(os.path.join(host, "mig-state.json"), '{\n  "serial": 0,\n  "instances": []\n}\n')


# The GPU instance profiles of a PPU-ZW810E in MIG mode: spec/thead.md section 6.1's observed
# pair (4g48gb id 5, two instances of 4 memory slices; 8g96gb id 3, one of 8), plus a graphics
# variant the detector must leave out. No `ppu-smi mig -lgip` capture exists: the table is
# nvidia-smi's -lgip shape with `PPU` and a CU column (HAZARDS.md item 4).
MIG_PROFILES = [(3, "8g96gb", 1, "96.00", 64, 8, [0]),
                (5, "4g48gb", 2, "48.00", 32, 4, [0, 4]),
                (6, "4g48gb+gfx", 2, "48.00", 32, 4, [0, 4])]
LGIP_RULE = "+" + "-" * 81 + "+"


def lgip(indexes):
    out = [LGIP_RULE,
           "| GPU instance profiles:                                                          |",
           "| PPU  Name                 Profile  Instances   Memory  P2P  CU      DEC   ENC   |",
           "|                             ID     Free/Total   GiB         CpyEng  JPEG  OFA   |",
           "+" + "=" * 81 + "+"]
    for i in indexes:
        for pid, name, count, gib, cu, _, _ in MIG_PROFILES:
            first = f"| {i:<4} MIG {name:<16} {pid:>3}        {count}/{count}      {gib}   No   {cu:<7} 2     2     |"
            out.append(first)
            out.append("|" + " " * 61 + "2       2     0     |")
            out.append(LGIP_RULE)
    return "\n".join(out) + "\n"


def lgipp(indexes):
    return "".join(
        f"PPU {i} profile ID {pid} placements: {{{','.join(map(str, starts))}}}:{size}\n"
        for i in indexes for pid, _, _, _, _, size, starts in MIG_PROFILES)


def driver_not_loaded():
    host = fresh("thead-driver-not-loaded")
    root = os.path.join(host, "root")
    for line in open(os.path.join(FIX, "pci",
                                  "theadkmddoc__lspci-alibaba-3d-controller-6001-elided.txt")):
        bdf = line.split(" ", 1)[0]
        if bdf.count(":") == 2:
            pci_function(root, bdf, driver=None)
    said = open(os.path.join(FIX, "ppu-smi", "theadkmddoc__ppu-smi-driver-not-loaded.txt")).read()
    for name, argv in (("table", ["ppu-smi"]), ("list", ["ppu-smi", "-L"]),
                       ("query", ["ppu-smi", "-q"])):
        command(host, name, argv, said, status=1)


if __name__ == "__main__":
    sixteen("thead-16x-zw810e")
    sixteen("thead-16x-zw810e-mig2", mig=(14, 15), pending=(13,))
    driver_not_loaded()
