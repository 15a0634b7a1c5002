//! `device-manager preflight` through the real binary, on recorded hosts assembled from a base
//! host of `testdata/hosts/` and the layers of `testdata/preflight/` (a recorded container CLI,
//! the host's own `nvidia-smi -L` through chroot, the kubelet's command line and
//! configuration): each case's YAML is a snapshot, and the states the issue names are asserted
//! on too: every row ok on a docker node, a probe that sees the whole GPU, a runtime that cannot
//! pass devices, a failed sweep, a MIG GPU (read and unreadable), a container that sees fewer
//! GPUs than the host, a host root without the host's process table, `--dry-run` (writes
//! nothing) and a lock already held.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

fn preflight_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/preflight")
}

/// Copies `from` over `to`: a recorded command's folder replaces the one of the same name.
fn overlay(from: &Path, to: &Path) {
    for sub in ["commands", "root"] {
        let src = from.join(sub);
        if !src.is_dir() {
            continue;
        }
        if sub == "commands" {
            for entry in std::fs::read_dir(&src).unwrap() {
                let entry = entry.unwrap();
                let target = to.join("commands").join(entry.file_name());
                if target.exists() {
                    std::fs::remove_dir_all(&target).unwrap();
                }
                support::copy_tree(&entry.path(), &target);
            }
        } else {
            support::copy_tree(&src, &to.join(sub));
        }
    }
}

/// Assembles a case into a fresh recorded host: its `layers` file names the base host first,
/// then the layers, applied in order, then the case's own files.
fn assemble(case: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let case_dir = preflight_dir().join("cases").join(case);
    let layers = std::fs::read_to_string(case_dir.join("layers")).unwrap();
    let mut lines = layers.lines().map(str::trim).filter(|l| !l.is_empty());
    let base = lines.next().expect("a base host");
    support::copy_tree(&support::hosts().join(base), dir.path());
    std::fs::create_dir_all(dir.path().join("commands")).unwrap();
    for layer in lines {
        overlay(&preflight_dir().join("layers").join(layer), dir.path());
    }
    overlay(&case_dir, dir.path());
    dir
}

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn preflight(host: &Path, extra: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .arg("preflight")
        .arg("--host-root")
        .arg(host)
        .args(["--nvidia-smi-timeout", "2"])
        .args(extra)
        .env_remove("HOST_ROOT")
        .env_remove("GPUSTACK_DATA_DIR")
        .env_remove("GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY")
        .env_remove("GPUSTACK_PCI_CLASS_PREFIXES")
        .output()
        .expect("device-manager runs");
    Run {
        status: output.status.code().unwrap_or(-1),
        stdout: redact(&String::from_utf8_lossy(&output.stdout)),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Timestamps and the temporary host's directory are what change between runs.
fn redact(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("timestamp: ") {
            Some(at) => format!("{}timestamp: '[time]'", &l[..at]),
            None => redact_temp_dirs(l),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// `/tmp/.tmpAbC123/root/sys` → `[temp]/root/sys`.
fn redact_temp_dirs(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("/tmp/.tmp") {
        out.push_str(&rest[..at]);
        out.push_str("[temp]");
        let after = &rest[at + "/tmp/.tmp".len()..];
        rest = &after[after.find('/').unwrap_or(after.len())..];
    }
    out.push_str(rest);
    out
}

fn yaml(run: &Run) -> serde_yaml::Value {
    serde_yaml::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// The first group's printed steps, one command a step.
fn steps(doc: &serde_yaml::Value) -> Vec<&str> {
    doc["accelerators"][0]["steps"]
        .as_sequence()
        .unwrap_or_else(|| panic!("no steps: {doc:?}"))
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

/// `(capability, state, depth)` of every row of the first group, for one accelerator.
fn rows(doc: &serde_yaml::Value, accelerator: &str) -> Vec<(String, String, String)> {
    doc["accelerators"][0]["checks"]
        .as_sequence()
        .map(|s| s.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|r| r["accelerator"].as_str() == Some(accelerator))
        .map(|r| {
            (
                r["capability"].as_str().unwrap().to_string(),
                r["state"].as_str().unwrap().to_string(),
                r["depth"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn row(c: &str, s: &str, d: &str) -> (String, String, String) {
    (c.into(), s.into(), d.into())
}

const GPU0: &str = "GPU-12345678-aaaa-bbbb-cccc-0123456789ab";
const GPU1: &str = "GPU-12345678-aaaa-bbbb-cccc-0123456789cd";
const H100: &str = "GPU-00000000-0000-0000-0000-000000000000";

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries {
            let entry = entry.unwrap();
            let path = entry.path();
            // Links as links: sysfs links lead in circles.
            if entry.file_type().unwrap().is_dir() {
                out.extend(files_under(&path));
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_row_answers_ok_on_a_docker_node() {
    let host = assemble("ok-docker");
    let run = preflight(host.path(), &[]);
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    let doc = yaml(&run);
    assert_eq!(
        doc["accelerators"][0]["detection"]["state"].as_str(),
        Some("ok")
    );
    assert_eq!(
        doc["accelerators"][0]["detection"]["depth"].as_str(),
        Some("measured")
    );
    for gpu in [GPU0, GPU1] {
        assert_eq!(
            rows(&doc, gpu),
            vec![
                row("mig-partitioning", "not-declared", "declared"),
                row("sidecar-visibility", "ok", "simulated"),
                row("sliced-runtime-loaded", "ok", "measured"),
                row("sliced-quota-in-force", "ok", "measured"),
                row("co-tenancy", "ok", "measured"),
            ]
        );
    }
    assert_eq!(doc["topology"]["policy"].as_str(), Some("single-numa-node"));
    assert_eq!(
        doc["topology"]["source"].as_str(),
        Some("/var/lib/kubelet/config.yaml")
    );
    // The rendered files are gone; the lock file stays.
    let preflight = host.path().join("root/var/lib/gpustack/operator/preflight");
    assert_eq!(files_under(&preflight), vec![preflight.join("lock")]);
    insta::assert_snapshot!("preflight-ok-docker", run.stdout);
}

#[test]
fn a_probe_that_sees_the_whole_gpu_is_unavailable() {
    let host = assemble("whole-gpu");
    let run = preflight(host.path(), &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    let doc = yaml(&run);
    let gpu0 = rows(&doc, GPU0);
    assert!(
        gpu0.contains(&row("sliced-quota-in-force", "unavailable", "measured")),
        "{gpu0:?}"
    );
    assert!(
        gpu0.contains(&row("sliced-runtime-loaded", "unavailable", "measured")),
        "{gpu0:?}"
    );
    assert!(run.stdout.contains(
        "the probe sees the whole accelerator (24564 MiB) instead of its quota (12282 MiB)"
    ));
    // The other GPU is unaffected.
    assert!(rows(&doc, GPU1).contains(&row("sliced-quota-in-force", "ok", "measured")));
    insta::assert_snapshot!("preflight-whole-gpu", run.stdout);
}

#[test]
fn a_runtime_that_cannot_pass_devices_leaves_the_probes_unavailable() {
    let host = assemble("no-nvidia-runtime");
    let run = preflight(host.path(), &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    let doc = yaml(&run);
    for gpu in [GPU0, GPU1] {
        let r = rows(&doc, gpu);
        for c in [
            "sliced-runtime-loaded",
            "sliced-quota-in-force",
            "co-tenancy",
        ] {
            assert!(r.contains(&row(c, "unavailable", "measured")), "{c}: {r:?}");
        }
        // Simulated from the responder alone, it still holds.
        assert!(r.contains(&row("sidecar-visibility", "ok", "simulated")));
    }
    assert!(
        run.stdout
            .contains("unknown or invalid runtime name: nvidia")
    );
    insta::assert_snapshot!("preflight-no-nvidia-runtime", run.stdout);
}

#[test]
fn a_failed_sweep_is_a_stale_container_sweep_row_per_accelerator() {
    let host = assemble("sweep-fails");
    let run = preflight(host.path(), &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    let doc = yaml(&run);
    for gpu in [GPU0, GPU1] {
        let sweeps: Vec<_> = rows(&doc, gpu)
            .into_iter()
            .filter(|r| r.0 == "stale-container-sweep")
            .collect();
        assert_eq!(sweeps.len(), 2, "before and after: {sweeps:?}");
        assert!(sweeps.iter().all(|r| r.1 == "unavailable"));
    }
    insta::assert_snapshot!("preflight-sweep-fails", run.stdout);
}

#[test]
fn a_mig_gpu_answers_its_management_rows_at_declared_and_has_no_sliced_rows() {
    let host = assemble("mig");
    let run = preflight(host.path(), &[]);
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    let doc = yaml(&run);
    assert_eq!(
        rows(&doc, H100),
        vec![
            row("mig-partitioning", "ok", "declared"),
            row("sidecar-visibility", "ok", "declared"),
            row("co-tenancy", "ok", "declared"),
        ]
    );
    // No probe ran and no partition was made: the only commands recorded are the listing,
    // the CLI's version and the sweep.
    assert!(doc["accelerators"][0]["steps"].is_null());
    insta::assert_snapshot!("preflight-mig", run.stdout);
}

#[test]
fn a_mig_gpu_whose_profiles_cannot_be_read_is_unavailable() {
    let host = assemble("mig-unreadable");
    let run = preflight(host.path(), &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    let doc = yaml(&run);
    assert_eq!(
        rows(&doc, H100),
        vec![
            row("mig-partitioning", "unavailable", "declared"),
            row("sidecar-visibility", "unavailable", "declared"),
            row("co-tenancy", "unavailable", "declared"),
        ]
    );
    insta::assert_snapshot!("preflight-mig-unreadable", run.stdout);
}

#[test]
fn a_container_that_sees_fewer_gpus_than_the_host_fails_detection() {
    let host = assemble("container-blind");
    let run = preflight(host.path(), &["--no-pci-check"]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    let doc = yaml(&run);
    let detection = &doc["accelerators"][0]["detection"];
    assert_eq!(detection["state"].as_str(), Some("unavailable"));
    assert_eq!(detection["accelerators"].as_u64(), Some(0));
    assert_eq!(detection["host"].as_u64(), Some(1));
    assert!(doc["accelerators"][0]["checks"].is_null());
    assert!(
        doc["accelerators"][0]["note"]
            .as_str()
            .unwrap()
            .contains("nothing else")
    );
    insta::assert_snapshot!("preflight-container-blind", run.stdout);
}

#[test]
fn without_the_hosts_process_table_every_step_is_printed_and_topology_is_unknown() {
    let host = assemble("no-host-proc");
    let run = preflight(host.path(), &[]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    let doc = yaml(&run);
    let r = rows(&doc, GPU0);
    assert!(
        r.contains(&row("sliced-quota-in-force", "ok", "simulated")),
        "{r:?}"
    );
    assert!(r.contains(&row("co-tenancy", "ok", "simulated")), "{r:?}");
    assert_eq!(
        doc["accelerators"][0]["steps"].as_sequence().unwrap().len(),
        6
    );
    assert_eq!(doc["topology"]["policy"].as_str(), Some("unknown"));
    assert!(doc["topology"]["depth"].is_null());
    insta::assert_snapshot!("preflight-no-host-proc", run.stdout);
}

#[test]
fn dry_run_prints_every_container_step_and_writes_nothing() {
    let host = assemble("ok-docker");
    let before = files_under(host.path());
    let run = preflight(host.path(), &["--dry-run"]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    assert_eq!(
        files_under(host.path()),
        before,
        "--dry-run wrote under the host"
    );
    let doc = yaml(&run);
    let steps = steps(&doc);
    // The sweep before, three probes per GPU, the sweep after.
    assert_eq!(steps.len(), 8, "{steps:?}");
    assert!(steps[0].ends_with("docker ps -aq --filter label=gpustack.ai/preflight=true"));
    assert!(steps[1].starts_with("chroot /host docker run --rm --name gpustack-preflight-nvidia-0-quota --label gpustack.ai/preflight=true --runtime nvidia -e CUDA_DEVICE_MEMORY_LIMIT_0=12282m"));
    let r = rows(&doc, GPU0);
    assert!(
        r.contains(&row("sliced-runtime-loaded", "ok", "simulated")),
        "{r:?}"
    );
    insta::assert_snapshot!("preflight-dry-run", run.stdout);
}

#[test]
fn a_lock_already_held_refuses_every_manufacturer() {
    let host = assemble("ok-docker");
    let dir = host.path().join("root/var/lib/gpustack/operator/preflight");
    std::fs::create_dir_all(&dir).unwrap();
    let file = std::fs::File::create(dir.join("lock")).unwrap();
    let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .unwrap();
    let run = preflight(host.path(), &[]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    let doc = yaml(&run);
    let detection = &doc["accelerators"][0]["detection"];
    assert_eq!(detection["state"].as_str(), Some("unavailable"));
    assert!(
        detection["reason"]
            .as_str()
            .unwrap()
            .contains("another preflight holds the lock")
    );
    assert!(doc["accelerators"][0]["checks"].is_null());
    // --dry-run is exempt.
    assert_eq!(preflight(host.path(), &["--dry-run"]).status, 0);
    drop(held);
    insta::assert_snapshot!(
        "preflight-lock-held",
        run.stdout
            .replace(&host.path().display().to_string(), "[host]")
    );
}

#[test]
fn a_runtime_flag_outside_the_three_is_a_usage_error() {
    let host = assemble("ok-docker");
    let run = preflight(host.path(), &["--runtime", "runc"]);
    assert_eq!(run.status, 2);
    assert!(run.stdout.trim().is_empty(), "{}", run.stdout);
    assert!(run.stderr.contains("runc"), "{}", run.stderr);
    let run = preflight(host.path(), &["--manufacturer", "nvidai"]);
    assert_eq!(run.status, 2);
    assert!(
        run.stderr
            .contains("--manufacturer \"nvidai\": not a manufacturer"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_containerd_node_runs_its_probes_with_nerdctl_in_the_preflight_namespace() {
    let host = assemble("nerdctl-node");
    let run = preflight(host.path(), &[]);
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    let doc = yaml(&run);
    for gpu in [GPU0, GPU1] {
        let r = rows(&doc, gpu);
        assert!(
            r.contains(&row("sliced-quota-in-force", "ok", "measured")),
            "{r:?}"
        );
        assert!(r.contains(&row("co-tenancy", "ok", "measured")), "{r:?}");
    }
    assert!(run.stdout.contains(
        "chroot /host nerdctl --address /run/containerd/containerd.sock --namespace gpustack-preflight run --rm"
    ));
    // The drop-in directory the kubelet names overrides its configuration file.
    assert_eq!(doc["topology"]["policy"].as_str(), Some("restricted"));
    assert_eq!(
        doc["topology"]["source"].as_str(),
        Some("/etc/kubernetes/kubelet.conf.d/50-topology.conf")
    );
    insta::assert_snapshot!("preflight-nerdctl-node", run.stdout);
}

#[test]
fn ctr_never_starts_a_probe_and_prints_the_steps_instead() {
    let host = assemble("ctr-only");
    let run = preflight(host.path(), &[]);
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    let doc = yaml(&run);
    let r = rows(&doc, GPU0);
    assert!(
        r.contains(&row("sliced-quota-in-force", "ok", "simulated")),
        "{r:?}"
    );
    assert!(
        run.stdout
            .contains("not run: ctr has no flag that hands a container its devices")
    );
    let steps = doc["accelerators"][0]["steps"].as_sequence().unwrap();
    assert_eq!(steps.len(), 6);
    // Printed in a dialect that can pass the devices: nerdctl's, on the kubelet's socket.
    assert!(steps.iter().all(|s| s.as_str().unwrap().starts_with(
        "chroot /host nerdctl --address /run/containerd/containerd.sock --namespace gpustack-preflight run --rm"
    )));
    insta::assert_snapshot!("preflight-ctr-only", run.stdout);
}

/// Iluvatar and Moore Threads are "injection only" (their specs' §5): no host cross-check, no
/// driver-read row, no probe container; every GPU's four rows are the responder's own answers,
/// `simulated`, and the group's note says why there is no driver row. Iluvatar's slices wait for
/// HAMi-core to be staged; Moore Threads' need nothing on the host.
#[test]
fn the_injection_only_manufacturers_answer_from_their_responder_alone() {
    for (manufacturer, base, gpus, note) in [
        (
            "iluvatar",
            "iluvatar-16x-bi-v150",
            16,
            "the iluvatar allocator reads no driver at allocation time",
        ),
        (
            "mthreads",
            "mthreads-8x-s4000",
            8,
            "the mthreads allocator reads no driver at allocation time",
        ),
    ] {
        let host = tempfile::tempdir().unwrap();
        support::copy_tree(&support::hosts().join(base), host.path());
        let library = host
            .path()
            .join("root/var/lib/gpustack/operator/lib/iluvatar");
        if manufacturer == "iluvatar" {
            // Not staged yet: the sliced rows say so, declared.
            let run = preflight(host.path(), &["--manufacturer", manufacturer]);
            let doc = yaml(&run);
            let checks = doc["accelerators"][0]["checks"].as_sequence().unwrap();
            let loaded = checks
                .iter()
                .find(|r| r["capability"] == "sliced-runtime-loaded")
                .unwrap();
            assert_eq!(loaded["state"], "unavailable", "{loaded:?}");
            assert_eq!(loaded["depth"], "declared", "{loaded:?}");
            assert!(
                loaded["reason"]
                    .as_str()
                    .unwrap()
                    .contains("lib/iluvatar/libvgpu.so is not on the host"),
                "{loaded:?}"
            );
            std::fs::create_dir_all(&library).unwrap();
            std::fs::write(library.join("libvgpu.so"), b"\x7fELF").unwrap();
        }
        let run = preflight(host.path(), &["--manufacturer", manufacturer]);
        assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
        let doc = yaml(&run);
        let group = &doc["accelerators"][0];
        assert_eq!(group["manufacturer"].as_str(), Some(manufacturer));
        assert_eq!(group["detection"]["state"].as_str(), Some("ok"));
        assert_eq!(group["detection"]["accelerators"].as_u64(), Some(gpus));
        assert_eq!(
            group["detection"]["command"].as_str(),
            None,
            "no host listing"
        );
        assert!(
            group["note"].as_str().unwrap_or_default().starts_with(note),
            "{:?}",
            group["note"]
        );
        assert!(group["steps"].as_sequence().is_none_or(|s| s.is_empty()));
        let checks = group["checks"].as_sequence().unwrap();
        assert_eq!(
            checks.len() as u64,
            gpus * 4,
            "four rows a GPU, no driver row"
        );
        for check in checks {
            assert_eq!(check["state"], "ok", "{check:?}");
            assert_eq!(check["depth"], "simulated", "{check:?}");
            assert!(check.get("command").is_none(), "{check:?}");
        }
        let quota = checks
            .iter()
            .find(|r| r["capability"] == "sliced-quota-in-force")
            .unwrap();
        // Half of the first GPU: 32768 MiB on the BI-V150, 49152 on the S4000.
        let half = if manufacturer == "iluvatar" {
            16384
        } else {
            24576
        };
        assert!(
            quota["reason"]
                .as_str()
                .unwrap()
                .starts_with(&format!("the responder sets the quota to {half} MiB")),
            "{quota:?}"
        );
        // Nothing rendered stays behind; only the lock file.
        let preflight_dir = host.path().join("root/var/lib/gpustack/operator/preflight");
        assert_eq!(
            files_under(&preflight_dir),
            vec![preflight_dir.join("lock")]
        );
    }
}

/// A copy of an Ascend recorded host; with `listing`, the host's own `npu-smi info -l` through
/// chroot answers the base host's own listing.
fn ascend_host(base: &str, listing: bool) -> tempfile::TempDir {
    let host = tempfile::tempdir().unwrap();
    support::copy_tree(&support::hosts().join(base), host.path());
    if listing {
        let dir = host.path().join("commands/host-info-l");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("argv"), "chroot\n/host\nnpu-smi\ninfo\n-l\n").unwrap();
        std::fs::copy(
            host.path().join("commands/info-l/stdout"),
            dir.join("stdout"),
        )
        .unwrap();
    }
    host
}

/// The share flags of a recorded Ascend host.
fn share_state(host: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(host.join("share-state.json")).unwrap()).unwrap()
}

fn set_share_state(host: &Path, state: serde_json::Value) {
    std::fs::write(host.join("share-state.json"), state.to_string()).unwrap();
}

/// Every check of the first group with `capability`, as (state, reason).
fn checks_of(doc: &serde_yaml::Value, capability: &str) -> Vec<(String, String)> {
    doc["accelerators"][0]["checks"]
        .as_sequence()
        .map(|s| s.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|r| r["capability"].as_str() == Some(capability))
        .map(|r| {
            (
                r["state"].as_str().unwrap().to_string(),
                r["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// spec/ascend.md §8 on a V1 host: the host's own npu-smi agrees on 8; each chip's
/// container-share flag is established — found off, asked on, read back and put straight back
/// off (the driver's flags are as they were) — found on, left alone; a refused write and a
/// refused restore are unavailable with what it means; `--dry-run` writes nothing.
#[test]
fn ascend_establishes_each_chips_container_share_flag_and_puts_it_back() {
    let host = ascend_host("ascend-8x-910b2", true);
    let run = preflight(host.path(), &["--manufacturer", "ascend"]);
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    let doc = yaml(&run);
    let detection = &doc["accelerators"][0]["detection"];
    assert_eq!(detection["state"], "ok", "{detection:?}");
    assert_eq!(detection["depth"], "measured");
    assert_eq!(detection["host"].as_u64(), Some(8));
    assert_eq!(
        detection["command"].as_str(),
        Some("chroot /host npu-smi info -l")
    );
    let share = checks_of(&doc, "container-share");
    assert_eq!(share.len(), 8);
    for (state, reason) in &share {
        assert_eq!(state, "ok");
        assert_eq!(
            reason,
            "container-share was off; it was asked on, read back on, and put straight back off"
        );
    }
    let state = share_state(host.path());
    assert_eq!(state["on"], serde_json::json!([]), "every flag back off");
    assert_eq!(state["writes"], 16, "one on and one off a chip");
    // The slices are checked as the responder answers them, never writing the flag.
    for (state, reason) in checks_of(&doc, "sliced-quota-in-force") {
        assert_eq!(state, "ok");
        assert!(
            reason.starts_with("the responder sets the quota to 32768 MiB"),
            "{reason}"
        );
    }
    assert!(
        doc["accelerators"][0]["note"]
            .as_str()
            .unwrap()
            .contains("enpu-monitor"),
        "{:?}",
        doc["accelerators"][0]["note"]
    );

    set_share_state(
        host.path(),
        serde_json::json!({"on": ["0:0"], "refuse": ["2:0"], "refuseOff": ["1:0"], "writes": 0}),
    );
    let doc = yaml(&preflight(host.path(), &["--manufacturer", "ascend"]));
    let share = checks_of(&doc, "container-share");
    assert_eq!(share[0], ("ok".into(), "container-share is enabled".into()));
    assert_eq!(share[1].0, "unavailable");
    assert!(
        share[1]
            .1
            .starts_with("container-share was off and was asked on; putting it back failed, so it is ON now (turn it off with `npu-smi set -t device-share -i 1 -c 0 -d 0`)"),
        "{}",
        share[1].1
    );
    assert_eq!(share[2].0, "unavailable");
    assert!(
        share[2]
            .1
            .starts_with("container-share is off and asking it on failed, so shared, sliced and visibility grants of card 2 device 0 will be refused"),
        "{}",
        share[2].1
    );
    let state = share_state(host.path());
    assert_eq!(state["on"], serde_json::json!(["0:0", "1:0"]));

    let before = share_state(host.path());
    let doc = yaml(&preflight(
        host.path(),
        &["--manufacturer", "ascend", "--dry-run"],
    ));
    let share = checks_of(&doc, "container-share");
    assert_eq!(
        share[3],
        (
            "ok".into(),
            "container-share is off and was left that way: asking it on (`npu-smi set -t device-share -i 3 -c 0 -d 1`) is a write, and this is a dry run".into()
        )
    );
    assert_eq!(share_state(host.path()), before, "a dry run writes no flag");
}

/// spec/ascend.md §8's cross-check: a container that detects fewer NPUs than the host's own
/// npu-smi lists is unavailable, naming what it lacks (only what is absent); a host without
/// npu-smi cannot be asked, which is no failure.
#[test]
fn an_ascend_container_that_sees_fewer_npus_than_the_host_names_what_it_lacks() {
    let host = ascend_host("ascend-8x-910b2", true);
    // Chip 3's board answers without its die id: the chip has no identity here, so this
    // container detects 7 (a board query that fails outright is a pass not measured).
    let board = host.path().join("commands/board-3-0/stdout");
    let answered = std::fs::read_to_string(&board).unwrap();
    let without_die: String = answered
        .lines()
        .filter(|l| !l.starts_with("VDie ID"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(answered, without_die);
    std::fs::write(&board, without_die).unwrap();
    for node in ["davinci_manager", "hisi_hdc"] {
        std::fs::remove_file(host.path().join("root/dev").join(node)).unwrap();
    }
    let doc = yaml(&preflight(host.path(), &["--manufacturer", "ascend"]));
    let detection = &doc["accelerators"][0]["detection"];
    assert_eq!(detection["state"], "unavailable", "{detection:?}");
    let reason = detection["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "the host's own npu-smi reports 8 accelerator(s) where this container detected 7, so what is missing is this container's access to them rather than the hardware; not in this container: /dev/davinci_manager, /dev/hisi_hdc ("
        ),
        "{reason}"
    );

    let host = ascend_host("ascend-8x-910b2", false);
    let doc = yaml(&preflight(host.path(), &["--manufacturer", "ascend"]));
    let detection = &doc["accelerators"][0]["detection"];
    assert_eq!(detection["state"], "ok");
    assert_eq!(detection["depth"], "declared");
    assert!(
        detection["reason"]
            .as_str()
            .unwrap()
            .starts_with("the detect pass found 8; the host carries no npu-smi, so it cannot be asked what it sees"),
        "{detection:?}"
    );
}

/// spec/ascend.md §8 on the 950 (V2): no container-share flag to establish, and the two A5
/// host-state rows — the Ascend Docker Runtime's installed major (26 or later) and HCCL's
/// root-info file (absent or version 2.0; a symlink is never followed).
#[test]
fn the_950_declares_no_share_flag_and_checks_its_runtime_and_rank_table() {
    let host = ascend_host("ascend-950pr-v2", false);
    let root = host.path().join("root");
    let doc = yaml(&preflight(host.path(), &["--manufacturer", "ascend"]));
    for (state, reason) in checks_of(&doc, "container-share") {
        assert_eq!(state, "not-declared");
        assert!(reason.starts_with("a V2 (950) driver declares no container-share flag"));
    }
    let runtime = checks_of(&doc, "ascend-docker-runtime");
    assert_eq!(runtime.len(), 2, "one a chip");
    assert_eq!(
        runtime[0],
        (
            "unavailable".into(),
            "/usr/local/Ascend/Ascend-Docker-Runtime/ascend_docker_runtime_install.info is absent: the 950 needs the Ascend Docker Runtime 26.0.0 or later, installed".into()
        )
    );
    assert_eq!(
        checks_of(&doc, "hccl-ranktable")[0],
        (
            "ok".into(),
            "/etc/hccl_rootinfo.json is absent: HCCL builds its own rank table".into()
        )
    );

    let info = root.join("usr/local/Ascend/Ascend-Docker-Runtime");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(
        info.join("ascend_docker_runtime_install.info"),
        "version=v7.3.0\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/hccl_rootinfo.json"), r#"{"version": "1.0"}"#).unwrap();
    let doc = yaml(&preflight(host.path(), &["--manufacturer", "ascend"]));
    let runtime = &checks_of(&doc, "ascend-docker-runtime")[0];
    assert_eq!(runtime.0, "unavailable");
    assert!(
        runtime.1.starts_with("the Ascend Docker Runtime is 7.x"),
        "{}",
        runtime.1
    );
    let table = &checks_of(&doc, "hccl-ranktable")[0];
    assert_eq!(table.0, "unavailable");
    assert!(table.1.contains("is version 1.0"), "{}", table.1);

    std::fs::write(
        info.join("ascend_docker_runtime_install.info"),
        "install_path=/usr/local/Ascend\nversion=v26.0.0\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/hccl_rootinfo.json"), r#"{"version": "2.0"}"#).unwrap();
    let doc = yaml(&preflight(host.path(), &["--manufacturer", "ascend"]));
    assert_eq!(checks_of(&doc, "ascend-docker-runtime")[0].0, "ok");
    assert_eq!(checks_of(&doc, "hccl-ranktable")[0].0, "ok");

    std::fs::write(root.join("etc/real.json"), r#"{"version": "2.0"}"#).unwrap();
    std::fs::remove_file(root.join("etc/hccl_rootinfo.json")).unwrap();
    std::os::unix::fs::symlink("real.json", root.join("etc/hccl_rootinfo.json")).unwrap();
    let doc = yaml(&preflight(host.path(), &["--manufacturer", "ascend"]));
    assert_eq!(
        checks_of(&doc, "hccl-ranktable")[0],
        (
            "unavailable".into(),
            "/etc/hccl_rootinfo.json is a symlink: it is not followed".into()
        )
    );
}

/// spec/metax.md §5: the read-only `sgpu-mode` row per card, and simulated slices whose sgpu
/// writes are recorded, never made — the cards' sysfs is unchanged after the pass.
#[test]
fn metax_reads_sgpu_mode_and_simulates_its_slices_without_writing_sysfs() {
    let host = tempfile::tempdir().unwrap();
    support::copy_tree(&support::hosts().join("metax-8x-c500"), host.path());
    let card = host.path().join("root/sys/bus/pci/devices/0000:0f:00.0");
    // The second card already hosts a subdevice.
    std::fs::create_dir_all(card.join("sgpu/sgpu0")).unwrap();
    let before = files_under(&host.path().join("root/sys/devices"));
    let run = preflight(host.path(), &["--manufacturer", "metax"]);
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    let doc = yaml(&run);
    let modes = checks_of(&doc, "sgpu-mode");
    assert_eq!(modes.len(), 8);
    assert_eq!(
        modes[0],
        (
            "ok".into(),
            "the accelerator is not yet in sgpu mode; the allocator puts it there when the first slice lands".into()
        )
    );
    assert_eq!(
        modes[1],
        (
            "ok".into(),
            "the accelerator already hosts an sgpu subdevice and is in sgpu mode".into()
        )
    );
    for (state, reason) in checks_of(&doc, "sliced-quota-in-force") {
        assert_eq!(state, "ok");
        assert!(
            reason.starts_with("the responder sets the quota to 32768 MiB"),
            "{reason}"
        );
    }
    for (state, reason) in checks_of(&doc, "sliced-runtime-loaded") {
        assert_eq!(state, "ok", "{reason}");
    }
    assert_eq!(
        files_under(&host.path().join("root/sys/devices")),
        before,
        "no sgpu write was made"
    );
    assert!(
        !host
            .path()
            .join("root/var/lib/gpustack/operator/pods")
            .exists()
    );
}

/// spec/cambricon.md §5 on the sMLU host (`cambricon-8x-mlu370-smlu`, its cnmon and listing
/// the recording's stateful replay) with card 0's mode off: card 0's `smlu-mode` row asks the
/// mode on and puts it straight back off in the spelling `cnmon set -h` names, the other cards'
/// (on) are left alone, the simulated slices run no cnmon, and the driver ends as it was found;
/// `--dry-run` writes nothing.
#[test]
fn cambricon_turns_an_off_smlu_mode_on_and_straight_back_off() {
    let host = tempfile::tempdir().unwrap();
    support::copy_tree(
        &support::hosts().join("cambricon-8x-mlu370-smlu"),
        host.path(),
    );
    let state_path = host.path().join("smlu-state.json");
    let state = |path: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let mut off = state(&state_path);
    off["cards"][0]["enabled"] = false.into();
    std::fs::write(&state_path, off.to_string()).unwrap();
    let listing = host
        .path()
        .join("root/proc/driver/cambricon/mlus/0000:4f:00.0/smlu");
    let text = std::fs::read_to_string(&listing).unwrap();
    std::fs::write(&listing, text.replacen("smlu_enable:1", "smlu_enable:0", 1)).unwrap();
    let before = state(&state_path);

    let dry = preflight(host.path(), &["--manufacturer", "cambricon", "--dry-run"]);
    assert_eq!(dry.status, 0, "{}\n{}", dry.stdout, dry.stderr);
    let modes = checks_of(&yaml(&dry), "smlu-mode");
    assert_eq!(modes[0].0, "ok");
    assert!(modes[0].1.contains("this is a dry run"), "{}", modes[0].1);
    assert_eq!(state(&state_path), before, "a dry run writes nothing");

    let run = preflight(host.path(), &["--manufacturer", "cambricon"]);
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    let doc = yaml(&run);
    let modes = checks_of(&doc, "smlu-mode");
    assert_eq!(modes.len(), 8);
    assert_eq!(
        modes[0],
        (
            "ok".into(),
            "sMLU mode is off, and this driver accepted being asked to turn it on, so the allocator will manage to when a slice lands on this accelerator; it was put back the way it was found".into()
        )
    );
    for (state, reason) in &modes[1..] {
        assert_eq!((state.as_str(), reason.as_str()), ("ok", "sMLU mode is on"));
    }
    for (state, reason) in checks_of(&doc, "sliced-runtime-loaded") {
        assert_eq!(state, "ok");
        assert!(
            reason.contains("(its cnmon calls recorded, not made)"),
            "{reason}"
        );
    }
    let after = state(&state_path);
    assert_eq!(after["cards"][0]["enabled"], false, "put back off");
    assert_eq!(after["writes"], 2, "on, then off: nothing else was written");
    assert_eq!(
        (&after["instances"], &after["profiles"]),
        (&before["instances"], &before["profiles"]),
        "the simulated slices made nothing"
    );
    assert!(
        std::fs::read_to_string(&listing)
            .unwrap()
            .starts_with("smlu_support:1 smlu_enable:0"),
        "the driver's listing reads off again"
    );
    assert!(
        !host
            .path()
            .join("root/var/lib/gpustack/operator/pods")
            .exists()
    );
}

/// spec/thead.md §8 on the mixed recorded host (cards 14 and 15 in MIG mode): no host
/// cross-check; `mig-partitioning` ok on the MIG cards, whose management rows stop at declared
/// with no sliced rows, and not-declared on the whole cards; the probe needs `--probe-image`
/// (no default) and, given one, gets the devices as the injection's own `--device` nodes (no
/// vendor runtime) and the shim's debug level.
#[test]
fn thead_reads_mig_partitioning_per_card_and_probes_with_the_given_image() {
    let host = tempfile::tempdir().unwrap();
    support::copy_tree(&support::hosts().join("thead-16x-zw810e-mig2"), host.path());
    overlay(&preflight_dir().join("layers/docker-node"), host.path());
    let library = host.path().join("root/var/lib/gpustack/operator/lib/thead");
    std::fs::create_dir_all(&library).unwrap();
    for shim in ["hgml_dlsym_hook.so", "hggc_quota.so", "ppu-monitor"] {
        std::fs::write(library.join(shim), b"\x7fELF").unwrap();
    }
    std::fs::write(
        library.join("ld.so.preload"),
        "/usr/local/vppu/hgml_dlsym_hook.so\n/usr/local/vppu/hggc_quota.so\n",
    )
    .unwrap();

    let run = preflight(host.path(), &["--manufacturer", "thead"]);
    let doc = yaml(&run);
    let group = &doc["accelerators"][0];
    assert_eq!(
        group["manufacturer"].as_str(),
        Some("thead"),
        "{}",
        run.stdout
    );
    assert_eq!(group["detection"]["state"].as_str(), Some("ok"));
    assert_eq!(group["detection"]["accelerators"].as_u64(), Some(16));
    assert_eq!(
        group["detection"]["command"].as_str(),
        None,
        "no host listing"
    );
    let modes = checks_of(&doc, "mig-partitioning");
    assert_eq!(modes.len(), 16);
    for (i, (state, reason)) in modes.iter().enumerate() {
        if i >= 14 {
            assert_eq!(state, "ok", "card {i}: {reason}");
            assert!(reason.starts_with("MIG mode is on; profiles "), "{reason}");
            assert!(reason.contains("4g.48gb"), "{reason}");
        } else {
            assert_eq!(
                (state.as_str(), reason.as_str()),
                ("not-declared", "MIG mode is off"),
                "card {i}"
            );
        }
    }
    let checks = group["checks"].as_sequence().unwrap();
    let of = |card: &str| -> Vec<(String, String, String)> {
        let name = checks
            .iter()
            .filter(|r| r["capability"] == "mig-partitioning")
            .nth(card.parse().unwrap())
            .unwrap()["accelerator"]
            .as_str()
            .unwrap()
            .to_string();
        rows(&doc, &name)
    };
    assert_eq!(
        of("15"),
        vec![
            row("mig-partitioning", "ok", "declared"),
            row("sidecar-visibility", "ok", "declared"),
            row("co-tenancy", "ok", "declared"),
        ]
    );
    // A whole card: no image given, so the probe is printed, not run, and says what it needs.
    let loaded = checks
        .iter()
        .find(|r| r["capability"] == "sliced-runtime-loaded")
        .unwrap();
    assert_eq!(loaded["depth"], "simulated", "{loaded:?}");
    assert!(
        loaded["reason"].as_str().unwrap().contains(
            "not run: thead has no default probe image (the workload image brings the runtime); give --probe-image"
        ),
        "{loaded:?}"
    );
    assert!(of("0").contains(&row("mig-partitioning", "not-declared", "declared")));

    // Given an image, each probe's command is the injection alone plus the debug level.
    let run = preflight(
        host.path(),
        &[
            "--manufacturer",
            "thead",
            "--dry-run",
            "--probe-image",
            "registry.example/ppu-workload:1",
        ],
    );
    let doc = yaml(&run);
    let steps = steps(&doc);
    let quota = steps
        .iter()
        .find(|s| s.contains("--name gpustack-preflight-thead-0-quota"))
        .unwrap_or_else(|| panic!("{steps:?}"));
    assert!(!quota.contains("--runtime"), "{quota}");
    for part in [
        "-e HGGC_DEVICE_MEMORY_LIMIT_0=",
        "-e HGGC_DEVICE_SM_LIMIT=",
        "-e LIBHGGC_LOG_LEVEL=2",
        "--device /dev/alixpu:/dev/alixpu:rw",
        "--device /dev/alixpu_ppu0:/dev/alixpu_ppu0:rw",
        "/usr/local/vppu/hggc_quota.so:ro",
        "registry.example/ppu-workload:1 sh -c",
        "/usr/local/vppu/ppu-monitor",
    ] {
        assert!(quota.contains(part), "{part} missing from {quota}");
    }
    // No probe of a MIG card: three probes for each of the 14 whole cards, a sweep each side.
    assert_eq!(steps.len(), 14 * 3 + 2, "{steps:?}");
    assert!(!steps.iter().any(|s| s.contains("thead-14-")), "{steps:?}");
}

/// Hygon (spec §8): tier "container probe, no driver read", the group's note, no host
/// cross-check, a probe that needs `--probe-image` and gets the injection's own nodes and the
/// slice's vdev.conf directory; a MIG node's cards stop at `declared`.
#[test]
fn hygon_probes_a_slice_with_the_given_image_and_reads_no_driver() {
    let host = tempfile::tempdir().unwrap();
    support::copy_tree(&support::hosts().join("hygon-4x-k100ai"), host.path());
    overlay(&preflight_dir().join("layers/docker-node"), host.path());
    let run = preflight(host.path(), &["--manufacturer", "hygon"]);
    let doc = yaml(&run);
    let group = &doc["accelerators"][0];
    assert_eq!(
        group["manufacturer"].as_str(),
        Some("hygon"),
        "{}",
        run.stdout
    );
    assert!(
        group["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("no driver-read row")),
        "{group:?}"
    );
    assert_eq!(group["detection"]["accelerators"].as_u64(), Some(4));
    assert_eq!(
        group["detection"]["command"].as_str(),
        None,
        "no host listing"
    );
    let checks = group["checks"].as_sequence().unwrap();
    let loaded = checks
        .iter()
        .find(|r| r["capability"] == "sliced-runtime-loaded")
        .unwrap();
    assert!(
        loaded["reason"]
            .as_str()
            .unwrap()
            .contains("not run: hygon has no default probe image (any image with sh, cat, grep, awk, sleep and kill: the DTK is the host's, mounted at /opt/hygondriver); give --probe-image"),
        "{loaded:?}"
    );

    let run = preflight(
        host.path(),
        &[
            "--manufacturer",
            "hygon",
            "--dry-run",
            "--probe-image",
            "registry.example/dcu-tools:1",
        ],
    );
    let doc = yaml(&run);
    let steps = steps(&doc);
    let quota = steps
        .iter()
        .find(|s| s.contains("--name gpustack-preflight-hygon-0-quota"))
        .unwrap_or_else(|| panic!("{steps:?}"));
    for part in [
        "--device /dev/kfd:/dev/kfd:rwm",
        "--device /dev/dri/card1:/dev/dri/card1:rw",
        ":/etc/vdev/docker:ro",
        "registry.example/dcu-tools:1 sh -c",
        "/opt/hygondriver/bin/BandwidthTest",
        "/sys/devices/virtual/kfd/kfd/vgpu/0x",
    ] {
        assert!(quota.contains(part), "{part} missing from {quota}");
    }

    // A MIG node: partition-backed cards, management rows at declared, no probe.
    let mig = tempfile::tempdir().unwrap();
    support::copy_tree(&support::hosts().join("hygon-8x-bw150-mig"), mig.path());
    overlay(&preflight_dir().join("layers/docker-node"), mig.path());
    let run = preflight(
        mig.path(),
        &[
            "--manufacturer",
            "hygon",
            "--dry-run",
            "--probe-image",
            "registry.example/dcu-tools:1",
        ],
    );
    let doc = yaml(&run);
    let checks = doc["accelerators"][0]["checks"].as_sequence().unwrap();
    assert_eq!(
        checks
            .iter()
            .filter(|r| r["capability"] == "sidecar-visibility")
            .count(),
        8,
        "a management row per card: {}",
        run.stdout
    );
    assert!(
        !checks
            .iter()
            .any(|r| r["capability"] == "sliced-runtime-loaded"),
        "{}",
        run.stdout
    );
    assert!(
        checks.iter().all(|r| r["depth"] == "declared"),
        "{}",
        run.stdout
    );
}
