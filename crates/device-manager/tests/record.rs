//! `device-manager record` round trip: a live-looking node whose vendor tool is a stand-in
//! answering from a recorded host (at its host path, run inside the root as the daemon runs it)
//! is recorded, and `detect` on the recording says exactly what `detect` on the original says.
//! Entering the root needs root (CI runs as root); elsewhere those tests say SKIPPED.

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;
use accel_testkit::live_root::skip_unless_chroot;
use support::{IMAGE_PATH, hosts, live_host};

fn run(args: &[&str], path: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(args)
        .env("PATH", path)
        .env_remove("HOST_ROOT")
        .env_remove("DATA_DIR")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Records the recorded host `original` as a live node whose `program` is a stand-in at
/// `host_path` answering from the recording; the folder (kept alive by the guard), the live
/// root and the recording.
fn record_with_stand_in(
    original: &Path,
    program: &str,
    host_path: &str,
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (out, root) = live_host(original, &[(program, host_path)]);
    let recording = out.path().join("node");
    let (status, _, stderr) = run(
        &[
            "record",
            recording.to_str().unwrap(),
            "--host-root",
            root.to_str().unwrap(),
        ],
        IMAGE_PATH,
    );
    assert_eq!(status, 0, "record failed: {stderr}");
    (out, root, recording)
}

#[test]
fn a_recorded_node_detects_like_the_original() {
    if !skip_unless_chroot("a_recorded_node_detects_like_the_original") {
        return;
    }
    let original = hosts().join("hgx-h100-8gpu");
    let (_out, root, recording) =
        record_with_stand_in(&original, "nvidia-smi", "/usr/bin/nvidia-smi");
    assert!(recording.join("commands").is_dir());
    let mark: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(recording.join("recorded-host.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(mark["format"], 1, "{mark}");
    assert_eq!(mark["hostRoot"], root.to_str().unwrap(), "{mark}");
    assert!(recording.join("root/proc/driver/nvidia/version").is_file());

    let detect = |dir: &Path| {
        let (status, stdout, stderr) = run(
            &["detect", "--host-root", dir.to_str().unwrap(), "-o", "json"],
            "/nonexistent",
        );
        assert_eq!(status, 0, "{}: {stderr}", dir.display());
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap()
    };
    let want = detect(&original);
    let got = detect(&recording);
    assert_eq!(got, want);
    assert_eq!(
        got["manufacturers"][0]["accelerators"]
            .as_array()
            .unwrap()
            .len(),
        8
    );
}

/// An operator on an AMD node sends us a recorded host: `record` captures AMD's part through
/// its backend's plan (the KFD topology, the DRM cards, `/dev/kfd` and the DRM nodes, every
/// amd-smi query), and `detect` and `monitor` on the recording answer as on the original.
#[test]
fn an_amd_node_is_recorded_through_its_backends_plan() {
    if !skip_unless_chroot("an_amd_node_is_recorded_through_its_backends_plan") {
        return;
    }
    let original = hosts().join("amd-8x-mi300x");
    let (_out, _root, recording) =
        record_with_stand_in(&original, "amd-smi", "/opt/rocm/bin/amd-smi");
    assert!(
        recording
            .join("root/sys/class/kfd/kfd/topology/nodes")
            .is_dir()
    );
    assert!(recording.join("root/dev/kfd").exists());
    assert!(recording.join("root/dev/dri/renderD128").exists());
    for argv in [
        "amd-smi\nstatic\n--json\n",
        "amd-smi\nversion\n--json\n",
        "amd-smi\nmetric\n--json\n",
    ] {
        let recorded = std::fs::read_dir(recording.join("commands"))
            .unwrap()
            .any(|d| std::fs::read_to_string(d.unwrap().path().join("argv")).unwrap() == argv);
        assert!(recorded, "{argv:?} recorded");
    }

    let answer = |args: &[&str], dir: &Path| {
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["--host-root", dir.to_str().unwrap(), "-o", "json"]);
        let (status, stdout, stderr) = run(&full, "/nonexistent");
        assert_eq!(status, 0, "{}: {stderr}", dir.display());
        stdout
    };
    let detect =
        |dir: &Path| serde_json::from_str::<serde_json::Value>(&answer(&["detect"], dir)).unwrap();
    let want = detect(&original);
    assert_eq!(detect(&recording), want);
    assert_eq!(want["manufacturers"][0]["name"], "amd", "{want}");
    assert_eq!(
        want["manufacturers"][0]["accelerators"]
            .as_array()
            .unwrap()
            .len(),
        8
    );
    let monitor = |dir: &Path| {
        let text = answer(&["monitor", "--manufacturer", "amd"], dir);
        let mut sample: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        sample["time"] = serde_json::Value::Null;
        sample
    };
    assert_eq!(monitor(&recording), monitor(&original));
}

#[test]
fn record_refuses_a_folder_that_is_not_empty() {
    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("x"), "").unwrap();
    let root = hosts().join("no-driver/root");
    let (status, _, stderr) = run(
        &[
            "record",
            out.path().to_str().unwrap(),
            "--host-root",
            root.to_str().unwrap(),
        ],
        "/nonexistent",
    );
    assert_eq!(status, 2);
    assert!(stderr.contains(out.path().to_str().unwrap()), "{stderr}");
}
