//! The detector contract over small recorded hosts built in temp dirs: `Ok(empty)` when there is
//! nothing to manage, `Ok(list)` when either layer enumerated, `Err` only when a driver is
//! evidently there and nothing could be enumerated (DESIGN.md, "Detector answers").

use std::path::Path;
use std::time::Duration;

use accel_core::inventory::{DetectError, Source};
use accel_host::{FsHost, RecordedCommands};
use accel_nvidia::detector::{self, Deadlines, DetectOptions};
use accel_testkit::failing_tool::{ToolFailure, copy_with_failing_tool};

/// A real `information` file (an NVIDIA L4), from the shared corpus.
fn l4_information() -> String {
    let path = accel_testkit::shared_fixture_folder("nvidia", "procfs")
        .join("snapd-pr14893__l4__information.txt");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn command(
    dir: &Path,
    name: &str,
    argv: &[&str],
    stdout: &str,
    status: i32,
    delay_ms: Option<u64>,
) {
    let cmd = dir.join("commands").join(name);
    std::fs::create_dir_all(&cmd).unwrap();
    std::fs::write(cmd.join("argv"), argv.join("\n") + "\n").unwrap();
    std::fs::write(cmd.join("stdout"), stdout).unwrap();
    std::fs::write(cmd.join("status"), status.to_string()).unwrap();
    if let Some(ms) = delay_ms {
        std::fs::write(cmd.join("delay-ms"), ms.to_string()).unwrap();
    }
}

fn fast() -> DetectOptions {
    DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_millis(200),
            snapshot: Duration::from_millis(400),
        },
        ..DetectOptions::default()
    }
}

fn detect(dir: &Path) -> accel_core::inventory::Detection {
    std::fs::create_dir_all(dir.join("root")).unwrap();
    let host = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    detector::detect(&host, &commands, fast()).detection
}

#[test]
fn no_driver_no_tool_is_an_empty_answer() {
    let dir = tempfile::tempdir().unwrap();
    let section = detect(dir.path()).expect("absent driver is a measured empty list");
    assert!(section.accelerators.is_empty());
    assert!(
        section.notes.iter().any(|n| n == detector::NO_NVIDIA_SMI),
        "{:?}",
        section.notes
    );
}

#[test]
fn tool_without_driver_is_an_empty_answer() {
    let dir = tempfile::tempdir().unwrap();
    command(
        dir.path(),
        "q-x",
        detector::QUERY_XML,
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        9,
        None,
    );
    let section = detect(dir.path()).expect("no driver loaded: nothing to manage");
    assert!(section.accelerators.is_empty());
}

#[test]
fn procfs_answers_when_nvidia_smi_is_absent() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "root/proc/driver/nvidia/gpus/0000:70:00.0/information",
        &l4_information(),
    );
    let section = detect(dir.path()).expect("procfs enumerated");
    assert_eq!(section.accelerators.len(), 1);
    let gpu = &section.accelerators[0];
    assert_eq!(
        gpu.uuid.as_deref(),
        Some("GPU-3291dfa4-fcc4-0110-615b-c894a0d7c689")
    );
    assert_eq!(gpu.product.as_deref(), Some("NVIDIA L4"));
    assert_eq!(gpu.architecture.as_deref(), Some("Ada Lovelace"));
    assert!(section.notes.iter().any(|n| n == detector::NO_NVIDIA_SMI));
    assert_eq!(
        section.runtime_version, None,
        "only nvidia-smi fills the CUDA version"
    );
}

#[test]
fn driver_present_but_nothing_enumerated_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // The driver's folder exists but its GPU list is a file, so it cannot be listed, and
    // nvidia-smi hangs past its deadline.
    write(
        dir.path(),
        "root/proc/driver/nvidia/gpus",
        "not a directory",
    );
    command(dir.path(), "q-x", detector::QUERY_XML, "", 0, Some(60_000));
    match detect(dir.path()) {
        Err(DetectError::NotMeasured { reason, .. }) => {
            assert!(reason.contains("gpus"), "{reason}");
            assert!(reason.contains("no answer within"), "{reason}");
        }
        other => panic!("expected NotMeasured, got {other:?}"),
    }
}

#[test]
fn paravirtual_gpu_with_a_hung_tool_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "root/dev/dxg", "");
    command(dir.path(), "q-x", detector::QUERY_XML, "", 0, Some(60_000));
    assert!(matches!(
        detect(dir.path()),
        Err(DetectError::NotMeasured { .. })
    ));
}

#[test]
fn an_unreadable_information_file_is_no_crash_and_without_nvidia_smi_no_measure() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "root/proc/driver/nvidia/gpus/0000:70:00.0/information",
        &l4_information(),
    );
    // A directory where a file should be: reading it fails.
    std::fs::create_dir_all(
        dir.path()
            .join("root/proc/driver/nvidia/gpus/0000:71:00.0/information"),
    )
    .unwrap();
    // Without nvidia-smi, procfs cannot name the second GPU: the pass is not measured rather
    // than a GPU dropped (issue 42 item 3), and the reason says both why.
    match detect(dir.path()) {
        Err(DetectError::NotMeasured { reason, .. }) => {
            assert!(reason.starts_with(detector::NO_NVIDIA_SMI), "{reason}");
            assert!(reason.contains("0000:71:00.0/information"), "{reason}");
        }
        other => panic!("expected NotMeasured, got {other:?}"),
    }
}

#[test]
fn wsl_gpu_only_nvidia_smi_knows_is_paravirtual() {
    let dir = accel_testkit::recorded_host("wsl2-rtx2080super");
    let host = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(&dir).unwrap();
    assert!(detector::is_paravirtual(&host));
    let section = detector::detect(&host, &commands, fast())
        .detection
        .unwrap();
    assert_eq!(section.accelerators.len(), 1);
    assert_eq!(section.accelerators[0].source, Source::Paravirtual);
    assert_eq!(section.accelerators[0].index, 0);
}

#[test]
fn hash_is_stable_across_runs_and_ignores_usage() {
    let dir = accel_testkit::recorded_host("hgx-h100-8gpu");
    let host = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(&dir).unwrap();
    let inventory = |section| accel_core::Inventory {
        manufacturers: vec![section],
    };
    let a = inventory(
        detector::detect(&host, &commands, fast())
            .detection
            .unwrap(),
    );
    let b = inventory(
        detector::detect(&host, &commands, fast())
            .detection
            .unwrap(),
    );
    assert_eq!(a.hash(), b.hash());
    assert_eq!(a.manufacturers[0].accelerators.len(), 8);
}

/// The recorded hosts of `testdata/hosts/`.
fn recorded_host(name: &str) -> std::path::PathBuf {
    accel_testkit::recorded_host(name)
}

/// Replays a recorded host and keeps every argv it was asked to run.
struct CountingCommands {
    inner: RecordedCommands,
    calls: std::sync::Mutex<Vec<String>>,
}

impl accel_host::Commands for CountingCommands {
    fn run(
        &self,
        argv: &[&str],
        deadline: Duration,
    ) -> Result<accel_host::CommandOutput, accel_host::CommandError> {
        self.calls.lock().unwrap().push(argv.join(" "));
        self.inner.run(argv, deadline)
    }

    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }
}

fn snapshot_runs(host: &str) -> Vec<String> {
    let commands = CountingCommands {
        inner: RecordedCommands::load(&recorded_host(host)).unwrap(),
        calls: std::sync::Mutex::new(Vec::new()),
    };
    detector::snapshot(&commands, Deadlines::default()).expect("the recorded host answers");
    commands.calls.into_inner().unwrap()
}

#[test]
fn a_snapshot_runs_nvidia_smi_at_most_six_times_and_mig_queries_only_for_mig() {
    // Seed 002: "A full snapshot runs nvidia-smi up to six times".
    assert!(detector::SNAPSHOT_QUERIES.len() <= 6);
    // No GPU in MIG mode: no `mig` query at all.
    let plain = snapshot_runs("hgx-h100-8gpu");
    assert_eq!(
        plain,
        [
            "nvidia-smi -q -x",
            "nvidia-smi -L",
            "nvidia-smi topo -m",
            "nvidia-smi --query-gpu=uuid,compute_cap --format=csv,noheader",
        ]
    );
    // A GPU in MIG mode: the profiles and their placements, never -lgi or -lci, which nothing
    // reads (GPU and compute instance ids come with the report's MIG devices).
    let mig = snapshot_runs("h100-mig");
    assert!(mig.len() <= 6, "{mig:?}");
    assert!(mig.contains(&"nvidia-smi mig -lgip".to_string()), "{mig:?}");
    assert!(
        mig.contains(&"nvidia-smi mig -lgipp".to_string()),
        "{mig:?}"
    );
    assert!(
        !mig.iter()
            .any(|c| c.ends_with("-lgi") || c.ends_with("-lci")),
        "{mig:?}"
    );
}

#[test]
fn the_passthrough_memory_is_written_only_after_an_enriched_collection() {
    use accel_nvidia::passthrough::{GpuMemory, SeenGpu};
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "root/proc/driver/nvidia/gpus/0000:70:00.0/information",
        &l4_information(),
    );
    // nvidia-smi fails: the pass is procfs-only (no VRAM, serial, part number, capability).
    command(
        dir.path(),
        "q-x",
        detector::QUERY_XML,
        "Unable to determine the device handle for GPU0000:70:00.0: Unknown Error\n",
        15,
        None,
    );
    let bus: accel_core::BusId = "00000000:70:00.0".parse().unwrap();
    let known = SeenGpu {
        uuid: "GPU-3291dfa4-fcc4-0110-615b-c894a0d7c689".into(),
        name: Some("NVIDIA L4".into()),
        architecture: Some("Ada Lovelace".into()),
        memory_mib: Some(23034),
        serial: Some("1321123456789".into()),
        vbios_version: Some("95.04.65.00.13".into()),
        board_part_number: Some("900-2G193-0000-000".into()),
        compute_capability: Some("8.9".into()),
    };
    let mut memory = GpuMemory::default();
    memory.gpus.insert(bus, known.clone());

    let host = FsHost::new(dir.path().join("root"));
    let commands = RecordedCommands::load(dir.path()).unwrap();
    let outcome = detector::detect(
        &host,
        &commands,
        DetectOptions {
            memory: Some(memory.clone()),
            ..fast()
        },
    );
    let section = outcome.detection.expect("procfs enumerated");
    assert_eq!(section.accelerators.len(), 1);
    assert_eq!(section.accelerators[0].memory_mib, None, "procfs-only pass");
    assert_eq!(
        outcome.memory.as_ref().and_then(|m| m.gpus.get(&bus)),
        Some(&known),
        "a procfs-only pass must not overwrite what was remembered"
    );
}

/// Deadlines short enough that a hanging tool costs the test a fraction of a second.
fn short() -> DetectOptions {
    DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_millis(300),
            snapshot: Duration::from_millis(600),
        },
        ..DetectOptions::default()
    }
}

fn detect_recorded(dir: &Path, options: DetectOptions) -> accel_core::inventory::Detection {
    let host = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    detector::detect(&host, &commands, options).detection
}

/// Each accelerator's index and identity: the seats a grant names.
fn seats(section: &accel_core::ManufacturerInventory) -> Vec<(u32, Option<String>)> {
    section
        .accelerators
        .iter()
        .map(|a| (a.index, a.uuid.clone()))
        .collect()
}

/// What the note says of each failure (seed 002's wording for a missing tool; else the
/// `RunFailure` or parse error, naming the argv).
fn says(failure: ToolFailure) -> &'static str {
    match failure {
        ToolFailure::Missing => detector::NO_NVIDIA_SMI,
        ToolFailure::Hangs => "nvidia-smi -q -x: no answer within",
        ToolFailure::ExitsNonZero => "nvidia-smi -q -x: exited with status 1: Error: failed",
        ToolFailure::Unreadable => "nvidia-smi -q -x output is not XML",
    }
}

/// Issue 42 item 3, where the kernel names every card (DESIGN.md, "Detector answers"): procfs'
/// `information` files carry each GPU's UUID, so a failing nvidia-smi leaves every GPU at its
/// index with its UUID, as the good pass had them, and the note says why.
#[test]
fn a_failing_nvidia_smi_leaves_the_seats_of_the_good_pass_and_names_the_tool() {
    let good = detect_recorded(&recorded_host("hgx-h100-8gpu"), DetectOptions::default()).unwrap();
    assert_eq!(good.accelerators.len(), 8);
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool("hgx-h100-8gpu", "nvidia-smi", failure);
        let section = match detect_recorded(dir.path(), short()) {
            Ok(section) => section,
            Err(e) => panic!("{failure}: {e}"),
        };
        assert_eq!(seats(&section), seats(&good), "{failure}");
        assert!(
            section.notes.iter().any(|n| n.starts_with(says(failure))),
            "{failure}: {:?}",
            section.notes
        );
    }
}

/// Where procfs does not name every GPU (an `information` file without its UUID), nvidia-smi
/// is the only identity: a failing nvidia-smi is then a pass not measured, never a GPU without
/// an identity in place of the one the good pass named.
#[test]
fn without_procfs_uuids_a_failing_nvidia_smi_is_a_pass_not_measured() {
    let strip = |dir: &Path| {
        let gpus = dir.join("root/proc/driver/nvidia/gpus");
        let first = std::fs::read_dir(&gpus).unwrap().next().unwrap().unwrap();
        let path = first.path().join("information");
        let text = std::fs::read_to_string(&path).unwrap();
        let kept: String = text
            .lines()
            .filter(|l| !l.starts_with("GPU UUID"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&path, kept).unwrap();
    };
    let dir = accel_testkit::copy_recorded("hgx-h100-8gpu");
    strip(dir.path());
    let good = detect_recorded(dir.path(), DetectOptions::default()).unwrap();
    assert!(
        good.accelerators.iter().all(|a| a.uuid.is_some()),
        "nvidia-smi names them"
    );
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool("hgx-h100-8gpu", "nvidia-smi", failure);
        strip(dir.path());
        let detection = detect_recorded(dir.path(), short());
        let Err(DetectError::NotMeasured { reason, .. }) = detection else {
            panic!("{failure}: {detection:?}");
        };
        assert!(reason.contains(says(failure)), "{failure}: {reason}");
        assert!(!reason.contains('\n'), "{failure}: one line: {reason}");
    }
}
