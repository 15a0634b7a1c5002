//! Helpers the binary's integration tests share: a stand-in `nvidia-smi` answering from a
//! recorded host, and copies of recorded hosts (as recordings, or as live-looking roots).
#![allow(dead_code)] // each test file uses its own subset

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The recorded hosts the project ships.
pub fn hosts() -> PathBuf {
    accel_testkit::recorded_hosts()
}

/// Writes an `nvidia-smi` script into `bin` that prints, for each argv recorded under
/// `host/commands`, what the recording says (stdout, stderr, status), and fails loudly on any
/// other query.
pub fn stand_in_nvidia_smi(host: &Path, bin: &Path) {
    stand_in(host, bin, "nvidia-smi");
}

/// A stand-in `program` in `bin` answering every argv of it the recorded host `host` recorded
/// (other programs' commands are left out).
pub fn stand_in(host: &Path, bin: &Path, program: &str) {
    let mut script = String::from("#!/bin/sh\ncase \"$*\" in\n");
    for entry in std::fs::read_dir(host.join("commands")).unwrap() {
        let dir = entry.unwrap().path();
        let argv = std::fs::read_to_string(dir.join("argv")).unwrap();
        if argv.lines().next() != Some(program) {
            continue;
        }
        let args: Vec<&str> = argv.lines().skip(1).collect();
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_else(|_| "0".into());
        script.push_str(&format!(
            "  '{}') cat '{}' 2>/dev/null; cat '{}' >&2 2>/dev/null; exit {} ;;\n",
            args.join(" "),
            dir.join("stdout").display(),
            dir.join("stderr").display(),
            status.trim()
        ));
    }
    script.push_str("  *) echo \"unknown query: $*\" >&2; exit 2 ;;\nesac\n");
    let path = bin.join(program);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `PATH` with `bin` first.
pub fn path_with(bin: &Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Copies a tree, links as links ([`accel_testkit::copy_tree`]).
pub fn copy_tree(from: &Path, to: &Path) {
    accel_testkit::copy_tree(from, to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
}

/// The image's `PATH` (Debian's, as the Dockerfile's runtime stage has it): what the daemon in
/// its DaemonSet runs with.
pub const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A live-looking root made from a recorded host's files ([`accel_testkit::live_root`]).
pub fn live_root_from(recorded: &Path, into: &Path) {
    accel_testkit::live_root::live_root_from(recorded, into);
}

/// A fresh work folder holding `live`, a live-looking root made from `recorded` with a shell and,
/// for each `(program, host path)` of `tools`, a stand-in at that path answering what the
/// recording recorded: a node as the daemon in its image sees it at `HOST_ROOT`.
pub fn live_host(recorded: &Path, tools: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let live = work.path().join("live");
    accel_testkit::live_root::live_root_from(recorded, &live);
    accel_testkit::live_root::install_shell(&live);
    for (program, host_path) in tools {
        accel_testkit::live_root::stand_in_tool(&live, recorded, program, host_path);
    }
    (work, live)
}
