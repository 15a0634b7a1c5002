#!/usr/bin/env python3
"""make-live-host.py - a live-looking host root made from a recorded host folder.

  scripts/make-live-host.py testdata/hosts/ascend-8x-910b2 /tmp/live \\
      --tool npu-smi=/usr/local/Ascend/driver/tools/npu-smi \\
      [--file SRC:HOSTPATH ...] [--answers DIR ...]

What a node shows the daemon in its image (the host's `/` mounted at HOST_ROOT), as
crates/accel-testkit/src/live_root.rs makes it for the tests:

- RECORDED/root/ copied to OUT (symbolic links kept as links), and an empty OUT/root/ as every
  Linux `/` has; no recorded-host.json and no commands/ (nothing marks it a recording);
- a static shell: this machine's /bin/busybox (static) at OUT/bin/busybox, with OUT/bin/sh and
  the few applets a stand-in may call (printf, echo, [, test, cat) linked to it: the daemon runs
  a vendor tool inside the host root (chroot), where nothing of this machine exists;
- for each --tool PROGRAM=HOSTPATH, a stand-in executable at OUT/HOSTPATH: a `#!/bin/sh` script
  of shell built-ins that answers every argv of PROGRAM the recording holds
  (RECORDED/commands/*/argv, first line PROGRAM) with the recorded standard output, standard
  error and exit status, byte for byte, and anything else with an error on standard error and
  status 2 (accel-testkit's `stand_in_tool`). The answers are in the script itself;
- --answers DIR: more answers of the same layout (DIR/<name>/{argv,stdout,stderr,status}),
  answered after the recording's: what a live host answers that the recording did not capture
  (Ascend's `npu-smi info -t device-share …` on a host whose chips already share);
- --file SRC:HOSTPATH places a file (a stand-in library, a staged build) at OUT/HOSTPATH.

OUT must not exist (or be an empty directory). Prints one line per stand-in: how many argvs it
answers.
"""
import argparse
import os
import shutil
import sys


def quoted(data: bytes) -> bytes:
    """`data` as one single-quoted shell word, every byte kept."""
    if b"\0" in data:
        raise SystemExit("a recorded answer with a NUL byte cannot be a shell word")
    return b"'" + data.replace(b"'", b"'\\''") + b"'"


def answers_of(folders, program):
    """(folder, argv) of every answer of `program` in the command folders `folders`."""
    found = []
    for commands in folders:
        if not os.path.isdir(commands):
            continue
        batch = []
        for name in sorted(os.listdir(commands)):
            folder = os.path.join(commands, name)
            try:
                with open(os.path.join(folder, "argv"), "rb") as f:
                    argv = f.read().decode("utf-8").splitlines()
            except (FileNotFoundError, NotADirectoryError):
                continue
            if argv and argv[0] == program:
                batch.append((folder, argv))
        found.extend(batch)
    return found


def read(folder, name):
    try:
        with open(os.path.join(folder, name), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def stand_in(out, recorded, program, host_path, extra):
    answers = answers_of([os.path.join(recorded, "commands")] + extra, program)
    if not answers:
        raise SystemExit(f"{recorded} records no command of {program}: a stand-in would answer nothing")
    script = [b"#!/bin/sh\n",
              f"# A stand-in {program}, answering what {os.path.basename(recorded.rstrip('/'))} recorded "
              f"(scripts/make-live-host.py).\n".encode()]
    for folder, argv in answers:
        status = read(folder, "status").strip() or b"0"
        if not status.isdigit():
            raise SystemExit(f"{folder}/status: {status!r} is not an exit status")
        args = argv[1:]
        test = [f'[ "$#" = {len(args)} ]'.encode()]
        for i, arg in enumerate(args, 1):
            test.append(f'[ "${{{i}}}" = '.encode() + quoted(arg.encode()) + b" ]")
        script.append(b"if " + b" && ".join(test) + b"; then\n")
        script.append(b"  printf '%s' " + quoted(read(folder, "stdout")) + b"\n")
        script.append(b"  printf '%s' " + quoted(read(folder, "stderr")) + b" >&2\n")
        script.append(b"  exit " + status + b"\n")
        script.append(b"fi\n")
    script.append(f'echo "{program} (stand-in): no recorded answer for: $*" >&2\nexit 2\n'.encode())
    path = os.path.join(out, host_path.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.remove(path)  # a recording's marker file at the tool's place
    with open(path, "wb") as f:
        f.write(b"".join(script))
    os.chmod(path, 0o755)
    return len(answers)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recorded", help="a recorded host folder (testdata/hosts/<name>)")
    ap.add_argument("out", help="the live-looking root to make")
    ap.add_argument("--tool", action="append", default=[], metavar="PROGRAM=HOSTPATH")
    ap.add_argument("--file", action="append", default=[], metavar="SRC:HOSTPATH")
    ap.add_argument("--answers", action="append", default=[], metavar="DIR")
    ap.add_argument("--busybox", default="/bin/busybox", help="a static busybox (default /bin/busybox)")
    a = ap.parse_args()

    recorded = os.path.abspath(a.recorded)
    root = os.path.join(recorded, "root")
    if not os.path.isdir(root):
        raise SystemExit(f"{recorded}: no root/ (not a recorded host folder)")
    out = os.path.abspath(a.out)
    if os.path.exists(out) and os.listdir(out):
        raise SystemExit(f"{out}: exists and is not empty")
    if os.path.exists(out):
        os.rmdir(out)
    shutil.copytree(root, out, symlinks=True)
    os.chmod(out, 0o755)
    os.makedirs(os.path.join(out, "root"), exist_ok=True)

    # A static shell, as every Linux host has one (the stand-ins run inside the root).
    bin_dir = os.path.join(out, "bin")
    if os.path.islink(bin_dir):
        raise SystemExit(f"{out}/bin is a link in the recording; not placing a shell through it")
    os.makedirs(bin_dir, exist_ok=True)
    shutil.copyfile(a.busybox, os.path.join(bin_dir, "busybox"))
    os.chmod(os.path.join(bin_dir, "busybox"), 0o755)
    for applet in ("sh", "printf", "echo", "[", "test", "cat"):
        link = os.path.join(bin_dir, applet)
        if not os.path.lexists(link):
            os.symlink("busybox", link)

    for spec in a.tool:
        program, sep, host_path = spec.partition("=")
        if not sep or not program or not host_path.startswith("/"):
            raise SystemExit(f"--tool {spec!r}: want PROGRAM=/HOST/PATH")
        n = stand_in(out, recorded, program, host_path, [os.path.abspath(d) for d in a.answers])
        print(f"stand-in {program} at {host_path}: answers {n} argv(s)")

    for spec in a.file:
        src, sep, host_path = spec.rpartition(":")
        if not sep or not host_path.startswith("/"):
            raise SystemExit(f"--file {spec!r}: want SRC:/HOST/PATH")
        dest = os.path.join(out, host_path.lstrip("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(src, dest)
        os.chmod(dest, os.stat(src).st_mode & 0o777 | 0o444)

    for mark in ("recorded-host.json", "commands"):
        if os.path.lexists(os.path.join(out, mark)):
            raise SystemExit(f"{out}/{mark}: the live root must carry no recording mark")


if __name__ == "__main__":
    sys.exit(main())
