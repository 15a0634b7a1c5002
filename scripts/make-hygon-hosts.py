#!/usr/bin/env python3
"""Assembles the Hygon recorded hosts under testdata/hosts/ from ../shared/fixtures/hygon.

Run from the repository root: python3 scripts/make-hygon-hosts.py. What each host takes from a
capture and what is assembled is written in its NOTES.md (kept by hand, not generated). The
file helpers are make-amd-hosts.py's, loaded from it rather than copied.
"""
import importlib.util
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("amd_hosts", os.path.join(HERE, "make-amd-hosts.py"))
amd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(amd)

REPO = amd.REPO
FIX = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "hygon")
write, fresh, command, kfd_node, location = amd.write, amd.fresh, amd.command, amd.kfd_node, amd.location

VENDOR = 0x1d94
JSON_ARGS = ["--showid", "--showmeminfo", "vram", "--showpower", "--showserial", "--showuse",
             "--showtemp", "--showproductname", "--showuniqueid", "--json"]
CPU_NODE = [("cpu_cores_count", "32"), ("simd_count", "0"), ("mem_banks_count", "1"),
            ("vendor_id", "0"), ("device_id", "0"), ("location_id", "0"), ("domain", "0")]


def fixture(*parts):
    return open(os.path.join(FIX, *parts)).read()


def hygon_card(root, driver, bdf, device, card, render, cls=0x038000, numa=None):
    """One DCU: the PCI function bound to `driver`, the module's drm listing of it, its nodes."""
    amd.pci_function(root, bdf, VENDOR, device, cls, driver, numa, card, render)
    drm = os.path.join(root, "sys", "module", driver, "drivers", f"pci:{driver}", bdf, "drm")
    os.makedirs(os.path.join(drm, f"card{card}"), exist_ok=True)
    write(os.path.join(drm, f"card{card}", "dev"), f"226:{card}\n")
    if render is not None:
        os.makedirs(os.path.join(drm, f"renderD{render}"), exist_ok=True)
        write(os.path.join(drm, f"renderD{render}", "dev"), f"226:{render}\n")


def gpu_node(root, n, bdf, device, cus, gfx_version, unique, render):
    kfd_node(root, n, [
        ("cpu_cores_count", "0"), ("simd_count", str(cus * 4)), ("simd_per_cu", "4"),
        ("array_count", "8"), ("simd_arrays_per_engine", "1"),
        ("gfx_target_version", str(gfx_version)), ("vendor_id", str(VENDOR)),
        ("device_id", str(device)), ("location_id", str(location(bdf))), ("domain", "0"),
        ("drm_render_minor", str(render)), ("unique_id", str(unique))])


def control_nodes(root, mkfd=True):
    write(os.path.join(root, "dev", "kfd"), "")
    if mkfd:
        write(os.path.join(root, "dev", "mkfd"), "")
    write(os.path.join(root, "sys", "class", "kfd", "kfd", "dev"), "235:0\n")


def smi_card(series, serial, unique, vendor="Chengdu Haiguang IC Design Co., Ltd.", device="0x6210"):
    return {"Device ID": device, "Card Series": series, "Card Vendor": vendor,
            "Serial Number": serial, "Unique ID": unique,
            "Average Graphics Package Power (W)": "75.0",
            "Temperature (Sensor edge) (C)": "37.0", "Temperature (Sensor junction) (C)": "35.0",
            "Temperature (Sensor mem) (C)": "38.0", "Temperature (Sensor core) (C)": "35.0",
            "HCU use (%)": "0.0", "vram Total Memory (MiB)": "65520",
            "vram Total Used Memory (MiB)": "2"}


def complete(excerpt, cut_key, tail):
    """The excerpt up to the start of `cut_key`'s object, with `tail` (JSON text of the cards
    from there on) appended and the document closed."""
    at = excerpt.index(f'"{cut_key}"')
    return excerpt[:at] + tail + "}\n"


K100_BDFS = ["0000:09:00.0", "0000:0c:00.0", "0000:8a:00.0", "0000:8d:00.0"]


def k100_4x():
    host = fresh("hygon-4x-k100ai")
    root = os.path.join(host, "root")
    excerpt = fixture("hy-smi", "gpustack-2032__k100ai-hy-smi-json-truncated-excerpt.txt").rstrip("\n")
    # card2: the excerpt's fields up to its cut, the rest filled in; card3 made up.
    card2 = smi_card("K100_AI", "TRCW340014110601", "7137d9debedc58c1")
    card2["Average Graphics Package Power (W)"] = "74.0"
    card3 = smi_card("K100_AI", "TRCW340014110602", "7137d9debedc58c2")
    tail = '"card2": ' + json.dumps(card2) + ', "card3": ' + json.dumps(card3)
    doc = complete(excerpt, "card2", tail)
    command(host, "hy-smi-json", ["hy-smi"] + JSON_ARGS, doc)
    command(host, "hy-smi", ["hy-smi"], fixture("hy-smi", "paddlenlp__4x-k100ai-dtk24.04.1-hy-smi-mode-column.txt"))
    uniques = [json.loads(doc)[f"card{i}"]["Unique ID"] for i in range(4)]
    kfd_node(root, 0, CPU_NODE)
    for i, bdf in enumerate(K100_BDFS):
        card, render = i + 1, 128 + i
        hygon_card(root, "hycu", bdf, 0x6210, card, render, numa=0 if i < 2 else 1)
        gpu_node(root, i + 1, bdf, 0x6210, 120, 90208, int(uniques[i], 16), render)
    control_nodes(root)
    write(os.path.join(root, "opt", "hyhal", "bin", "hy-smi"), "")
    write(os.path.join(root, "opt", "dtk", "bin", "hipcc"), "")


BW_BDFS = ["0000:0f:00.0", "0000:34:00.0", "0000:48:00.0", "0000:5a:00.0",
           "0000:87:00.0", "0000:9a:00.0", "0000:b1:00.0", "0000:c5:00.0"]


def bw_8x_mig(name="hygon-8x-bw150-mig"):
    host = fresh(name)
    root = os.path.join(host, "root")
    cards = {}
    kfd_node(root, 0, CPU_NODE)
    for i, bdf in enumerate(BW_BDFS):
        unique = f"5a1c{i:02x}3e9b40{i:02x}a1"
        cards[f"card{i}"] = smi_card("BW150", f"TRBW5100{i:02d}0001", unique,
                                     vendor="Chengdu C-3000 IC Design Co., Ltd.", device="0x6320")
        card, render = i + 1, 128 + i
        hygon_card(root, "hycu", bdf, 0x6320, card, render, numa=0 if i < 4 else 1)
        gpu_node(root, i + 1, bdf, 0x6320, 80, 90306, int(unique, 16), render)
        write(os.path.join(root, "etc", "dmi_mig_config", f"dev{i}"), bdf + "\n")
    command(host, "hy-smi-json", ["hy-smi"] + JSON_ARGS, json.dumps(cards) + "\n")
    command(host, "mig-lgip", ["hy-smi", "mig", "-lgip"], lgip(range(len(BW_BDFS))))
    command(host, "mig-lgipp", ["hy-smi", "mig", "-lgipp"], lgipp(range(len(BW_BDFS))))
    write(os.path.join(host, "mig-state.json"), '{\n  "serial": 0,\n  "instances": []\n}\n')
    os.makedirs(os.path.join(root, "etc", "dmi_mig_config", "gi"), exist_ok=True)
    os.makedirs(os.path.join(root, "etc", "dmi_mig_config", "ci"), exist_ok=True)
    write(os.path.join(root, "etc", "dmi_mig_config", "gi", ".keep"), "")
    write(os.path.join(root, "etc", "dmi_mig_config", "ci", ".keep"), "")
    write(os.path.join(host, "mig-profiles.json"), json.dumps({"profiles": [
        {"id": pid, "giCountMax": count, "cuCount": cu, "gpuSliceCount": size, "memorySizeMB": mib}
        for pid, _, count, _, cu, size, _, mib in MIG_PROFILES]}, indent=2) + "\n")
    control_nodes(root)
    write(os.path.join(root, "opt", "hyhal", "bin", "hy-smi"), "")
    return host


# Live instances of the second BW host: (card, GI id, profile id, start, CI id, create serial).
LIVE = [(0, 3, 3, 0, 0, 1), (0, 4, 3, 1, 0, 2), (1, 3, 1, 0, 0, 3), (2, 3, 0, 0, 0, 4)]


def mig_uuid(card, gi, serial):
    """The replay's MIG UUID shape (accel-backend's mig_cli::replay::mig_uuid, Hygon's tag)."""
    return (f"MIG-{0x68796700 | card:08x}-{gi:04x}-{(serial >> 48) & 0xffff:04x}-"
            f"{(serial >> 32) & 0xffff:04x}-{serial & 0xffffffffffff:012x}")


def bits(start, count, line):
    lo, hi = line * 64, line * 64 + 64
    value = 0
    for bit in range(max(start, lo), min(start + count, hi)):
        value |= 1 << (bit - lo)
    return f"0x{value:016x}"


def hygon_conf(bdf, gi, pid, start, ci, uuid):
    """A compute-instance file in Hygon's grammar (spec/hygon.md addendum H2): the GI block's 13
    lines, then the CI block's 14, each in the order Hygon's reader (hcu-dcgm's
    parseSingleConfFile) lists its keys, `key: value` a line, `mig_uuid` last. Written here, apart
    from the Rust replay's writer, so the reader is checked against a second writer."""
    _, _, count, _, cu, size, _, mib = next(p for p in MIG_PROFILES if p[0] == pid)
    slices = f"{bits(start, size, 0)}"
    cus = [bits(start * (cu // size), cu, line) for line in (0, 1)]
    gi_block = [("pci", bdf), ("id", gi), ("pipe_mask", slices), ("gpu_slice_mask", slices),
                ("cu_mask", cus[0]), ("cu_mask", cus[1]), ("profile_id", pid), ("gi_count_max", count),
                ("cu_count", cu), ("gpu_slice_count", size), ("memory_size_MB", mib),
                ("placement_start", start), ("placement_size", size)]
    ci_block = [("pci", bdf), ("gi_id", gi), ("id", ci), ("pipe_mask", slices), ("gpu_slice_mask", slices),
                ("cu_mask", cus[0]), ("cu_mask", cus[1]), ("profile_id", size - 1), ("ci_count_max", 1),
                ("cu_count", cu), ("gpu_slice_count", size), ("placement_start", 0), ("placement_size", size),
                ("mig_uuid", uuid[len("MIG-"):])]
    return "".join(f"{k}: {v}\n" for k, v in gi_block + ci_block), "".join(f"{k}: {v}\n" for k, v in gi_block)


def bw_8x_mig_live():
    """The BW host holding four live partitions: card 0 two 2g.15gb (slices 0 and 1), card 1 one
    4g.31gb, card 2 one 8g.63gb; the registry's files in Hygon's grammar, the replay's state
    naming the same instances."""
    host = bw_8x_mig("hygon-8x-bw150-mig-4-live")
    root = os.path.join(host, "root")
    state = {"serial": len(LIVE), "instances": []}
    for card, gi, pid, start, ci, serial in LIVE:
        _, name, _, _, _, size, _, _ = next(p for p in MIG_PROFILES if p[0] == pid)
        uuid = mig_uuid(card, gi, serial)
        state["instances"].append({
            "gpu": card, "gpuInstance": gi, "profileId": pid, "profile": name, "start": start,
            "size": size, "computeInstances": [{"id": ci, "uuid": uuid}], "busy": False})
        conf, gi_file = hygon_conf(BW_BDFS[card], gi, pid, start, ci, uuid)
        write(os.path.join(root, "etc", "dmi_mig_config", "ci", f"dev{card}gi{gi}ci{ci}.conf"), conf)
        write(os.path.join(root, "etc", "dmi_mig_config", "gi", f"dev{card}gi{gi}.conf"), gi_file)
    write(os.path.join(host, "mig-state.json"), json.dumps(state, indent=2) + "\n")


# The measured BW card's profiles (spec/hygon.md §6.1, HSPEC C8): id, name, instances, the
# memory in GiB as nvidia-smi prints it (two decimals of the MiB figure: 16380, 32760, 65520),
# CUs, memory slices, placements. No `hy-smi mig` capture exists: the tables are nvidia-smi's
# -lgip/-lgipp shape (hy-smi mig mirrors nvidia-smi mig flag for flag) with `DCU` and a CU column.
MIG_PROFILES = [(3, "2g.15gb", 4, "16.00", 20, 1, [0, 1, 2, 3], 16380),
                (1, "4g.31gb", 2, "31.99", 40, 2, [0, 2], 32760),
                (0, "8g.63gb", 1, "63.98", 80, 4, [0], 65520)]
LGIP_RULE = "+" + "-" * 81 + "+"


def lgip(indexes):
    out = [LGIP_RULE,
           "| GPU instance profiles:                                                          |",
           "| DCU  Name                 Profile  Instances   Memory  P2P  CU      DEC   ENC   |",
           "|                             ID     Free/Total   GiB         CpyEng  JPEG  OFA   |",
           "+" + "=" * 81 + "+"]
    for i in indexes:
        for pid, name, count, gib, cu, _, _, _ in MIG_PROFILES:
            out.append(f"| {i:<4} MIG {name:<16} {pid:>3}        {count}/{count}      {gib}   No   {cu:<7} 0     0     |")
            out.append("|" + " " * 61 + "0       0     0     |")
            out.append(LGIP_RULE)
    return "\n".join(out) + "\n"


def lgipp(indexes):
    return "".join(
        f"DCU {i} profile ID {pid} placements: {{{','.join(map(str, starts))}}}:{size}\n"
        for i in indexes for pid, _, _, _, _, size, starts, _ in MIG_PROFILES)


def rocm_smi_fork():
    host = fresh("hygon-rocm-smi-fork-k100ai")
    root = os.path.join(host, "root")
    excerpt = fixture("rocm-smi", "gpustack-3257__k100ai-rocm-smi-json-c3000-vendor-truncated-excerpt.txt").rstrip("\n")
    card1 = smi_card("K100_AI", "TRCW340009020301", "7137d9debed21061",
                     vendor="Chengdu C-3000 IC Design Co., Ltd.")
    card1["Average Graphics Package Power (W)"] = "80.0"
    doc = complete(excerpt, "card1", '"card1": ' + json.dumps(card1))
    command(host, "rocm-smi-json", ["rocm-smi"] + JSON_ARGS, doc)
    uniques = [json.loads(doc)[f"card{i}"]["Unique ID"] for i in range(2)]
    kfd_node(root, 0, CPU_NODE)
    for i, bdf in enumerate(K100_BDFS[:2]):
        hygon_card(root, "hycu", bdf, 0x6210, i, 128 + i)
        gpu_node(root, i + 1, bdf, 0x6210, 120, 90208, int(uniques[i], 16), 128 + i)
    write(os.path.join(root, "sys", "module", "hycu", "version"), "rock-6.3.13-V1.12.0\n")
    control_nodes(root, mkfd=False)


def driver_silent():
    host = fresh("hygon-driver-silent")
    root = os.path.join(host, "root")
    for i, bdf in enumerate(K100_BDFS):
        hygon_card(root, "hydcu", bdf, 0x6210, i + 1, 128 + i)
    write(os.path.join(root, "sys", "module", "hydcu", "version"), "6.2.31-V1.5.2\n")
    kfd_node(root, 0, CPU_NODE)
    base = os.path.join(host, "commands", "hy-smi-json")
    command(host, "hy-smi-json", ["hy-smi"] + JSON_ARGS, "", status=1)
    write(os.path.join(base, "stderr"), "ERROR:root:Driver not initialized (hydcu not found in modules)\n")
    control_nodes(root)


def keep_empty_folders():
    """git keeps no empty folder: every empty one of a Hygon host holds a `.keep`."""
    hosts = os.path.join(REPO, "testdata", "hosts")
    for name in sorted(os.listdir(hosts)):
        if not name.startswith("hygon-"):
            continue
        for folder, dirs, files in os.walk(os.path.join(hosts, name)):
            if not dirs and not files:
                write(os.path.join(folder, ".keep"), "")


if __name__ == "__main__":
    k100_4x()
    bw_8x_mig()
    bw_8x_mig_live()
    rocm_smi_fork()
    driver_silent()
    keep_empty_folders()
