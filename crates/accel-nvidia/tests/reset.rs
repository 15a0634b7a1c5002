//! The reset operation (seed 002, "gpu.reset") over recorded hosts: refusals of the whole
//! command (busy by a grant, a pending release, a MIG instance's grant, passthrough; unknown
//! GPU) that run no reset at all, and the outcomes after a reset: healthy (faults cleared),
//! unhealthy by fresh counters (faults kept), a failed or hung nvidia-smi, a failed collection.
//!
//! The hosts are copies of `testdata/hosts/*` in temp dirs with the `--gpu-reset` argv recorded.
//! No real `--gpu-reset` output was captured, so the recorded texts below are illustrative: the
//! operation reads only the exit status and echoes the text in a failure.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use accel_core::inventory::{Accelerator, Inventory, Source};
use accel_host::{CommandError, CommandOutput, Commands, FsHost, RecordedCommands};
use accel_nvidia::detector::{self, Deadlines, DetectOptions};
use accel_nvidia::faults::{FaultRecord, FaultWatch};
use accel_nvidia::passthrough::{GpuMemory, PciCandidate};
use accel_nvidia::reset::{self, GrantView, MemoryGrants, ResetError, ResetOutcome, reset_argv};
use accel_nvidia::xid::{XidClasses, parse_message};

const BOOT: &str = "0b0e7a53-1c55-4a3c-8d9f-6f1f0f7b2d10";

/// A copy of a recorded host (symlinks kept) that a test may add recordings to.
fn copy_host(name: &str) -> tempfile::TempDir {
    accel_testkit::copy_recorded(name)
}

/// Records `nvidia-smi --gpu-reset -i <uuid>` on the host.
fn record_reset(dir: &Path, uuid: &str, stdout: &str, status: i32, delay_ms: Option<u64>) {
    let folder = dir.join("commands").join(format!("gpu-reset-{uuid}"));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("argv"), reset_argv(uuid).join("\n") + "\n").unwrap();
    std::fs::write(folder.join("stdout"), stdout).unwrap();
    std::fs::write(folder.join("status"), status.to_string()).unwrap();
    if let Some(ms) = delay_ms {
        std::fs::write(folder.join("delay-ms"), ms.to_string()).unwrap();
    }
}

fn ok_reset(dir: &Path, uuid: &str) {
    record_reset(
        dir,
        uuid,
        &format!("GPU {uuid} was successfully reset.\nAll done.\n"),
        0,
        None,
    );
}

fn fast() -> Deadlines {
    Deadlines {
        per_query: Duration::from_secs(5),
        snapshot: Duration::from_secs(10),
    }
}

/// The host's inventory as the daemon collects it; `data` holds the passthrough memory.
fn collect(dir: &Path, data: Option<&Path>) -> Result<Inventory, String> {
    let host = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).map_err(|e| e.to_string())?;
    let mut options = DetectOptions {
        deadlines: fast(),
        ..DetectOptions::default()
    };
    if let Some(data) = data {
        let text = std::fs::read_to_string(data.join("gpus-seen.json")).unwrap();
        options.memory = Some(GpuMemory::from_json("gpus-seen.json", &text).unwrap());
        let scan = accel_host::pci::scan_pci(&host, &accel_host::pci::PciClassPrefixes::default())
            .unwrap();
        options.pci = scan
            .functions
            .into_iter()
            .map(|f| PciCandidate {
                bus_id: f.bus_id,
                vendor: f.vendor_id,
                class: f.class,
                driver: f.driver,
                numa_node: f.numa_node,
            })
            .collect();
    }
    let section = detector::detect(&host, &commands, options)
        .detection
        .map_err(|e| e.to_string())?;
    let mut inventory = Inventory {
        manufacturers: vec![section],
    };
    inventory.canonicalize();
    Ok(inventory)
}

fn gpus(inventory: &Inventory) -> &[Accelerator] {
    &inventory.manufacturers[0].accelerators
}

fn uuid(inventory: &Inventory, index: usize) -> String {
    gpus(inventory)[index].uuid.clone().unwrap()
}

/// A `Commands` that records every argv it is asked to run, around a recorded host.
struct Spy {
    inner: RecordedCommands,
    calls: Mutex<Vec<Vec<String>>>,
}

impl Spy {
    fn new(dir: &Path) -> Self {
        Spy {
            inner: RecordedCommands::load(dir).unwrap(),
            calls: Mutex::new(Vec::new()),
        }
    }

    fn calls(&self) -> Vec<Vec<String>> {
        self.calls.lock().unwrap().clone()
    }
}

impl Commands for Spy {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        self.calls
            .lock()
            .unwrap()
            .push(argv.iter().map(|a| a.to_string()).collect());
        self.inner.run(argv, deadline)
    }

    fn is_installed(&self, program: &str) -> bool {
        self.inner.is_installed(program)
    }
}

/// A fault record with `Xid 79` on each GPU given.
fn faults_on(inventory: &Inventory, uuids: &[&str]) -> FaultRecord {
    let mut record = FaultRecord::new(BOOT);
    for gpu in gpus(inventory) {
        if uuids.contains(&gpu.uuid.as_deref().unwrap()) {
            let bus = gpu.bus_id.unwrap().to_string();
            // NVRM's short form: domain:bus:device without the function.
            let short = &bus[4..bus.len() - 2];
            let line = format!("NVRM: Xid (PCI:{short}): 79, GPU has fallen off the bus.");
            let event = parse_message(&line).unwrap();
            record.record(&XidClasses::default().fault(&event), inventory);
        }
    }
    record
}

/// Runs a reset that must be refused, and checks that nothing ran and nothing was collected.
fn refused(
    dir: &Path,
    inventory: &Inventory,
    asked: &[String],
    grants: &dyn GrantView,
) -> ResetError {
    let spy = Spy::new(dir);
    let mut record = FaultRecord::new(BOOT);
    let mut collected = 0;
    let mut collect = || {
        collected += 1;
        Err("not expected".to_string())
    };
    let error = reset::reset(
        inventory,
        asked,
        grants,
        &spy,
        reset::RESET_DEADLINE,
        &mut collect,
        &mut record,
    )
    .unwrap_err();
    assert_eq!(
        spy.calls(),
        Vec::<Vec<String>>::new(),
        "a refusal runs no reset"
    );
    assert_eq!(collected, 0, "a refusal collects nothing");
    error
}

#[test]
fn a_grant_on_one_listed_gpu_refuses_the_whole_command() {
    let dir = copy_host("hgx-h100-8gpu");
    let inventory = collect(dir.path(), None).unwrap();
    let (a, b) = (uuid(&inventory, 0), uuid(&inventory, 3));
    ok_reset(dir.path(), &a);
    ok_reset(dir.path(), &b);
    let mut grants = MemoryGrants::new();
    grants.grant(&b, "default/trainer-0");
    let error = refused(dir.path(), &inventory, &[a.clone(), b.clone()], &grants);
    assert!(matches!(&error, ResetError::Busy(busy) if busy.len() == 1 && busy[0].uuid == b));
    let message = error.to_string();
    assert!(message.starts_with("gpu-busy: "), "{message}");
    assert!(
        message.contains(&format!("{b} (granted to default/trainer-0)")),
        "{message}"
    );
    assert!(message.ends_with("nothing was reset"), "{message}");
}

#[test]
fn a_pending_release_refuses_the_whole_command() {
    let dir = copy_host("dual-rtx-a5000");
    let inventory = collect(dir.path(), None).unwrap();
    let a = uuid(&inventory, 0);
    ok_reset(dir.path(), &a);
    let mut grants = MemoryGrants::new();
    grants.pending_release(&a, "ml/job-7");
    let error = refused(dir.path(), &inventory, std::slice::from_ref(&a), &grants);
    assert_eq!(
        error.to_string(),
        format!("gpu-busy: {a} (release by ml/job-7 pending); nothing was reset")
    );
}

#[test]
fn a_grant_on_a_mig_instance_refuses_its_gpu() {
    let dir = copy_host("h100-mig");
    let inventory = collect(dir.path(), None).unwrap();
    let gpu = &gpus(&inventory)[0];
    let mig = gpu.mig_devices[1].uuid.clone().unwrap();
    let parent = gpu.uuid.clone().unwrap();
    ok_reset(dir.path(), &parent);
    let mut grants = MemoryGrants::new();
    grants.grant(&mig, "default/infer-2");
    let error = refused(
        dir.path(),
        &inventory,
        std::slice::from_ref(&parent),
        &grants,
    );
    assert_eq!(
        error.to_string(),
        format!(
            "gpu-busy: {parent} (MIG instance {mig} granted to default/infer-2); nothing was reset"
        )
    );
    // Asking for the MIG instance itself is no GPU of the inventory.
    let error = refused(
        dir.path(),
        &inventory,
        std::slice::from_ref(&mig),
        &MemoryGrants::new(),
    );
    assert_eq!(
        error.to_string(),
        format!("unknown GPU {mig}: it is a MIG instance of {parent}; reset the GPU itself")
    );
}

#[test]
fn a_gpu_passed_through_to_a_vm_refuses_the_whole_command() {
    let dir = copy_host("passthrough-l4");
    let data = dir.path().join("data");
    let inventory = collect(dir.path(), Some(&data)).unwrap();
    let vm_gpu = gpus(&inventory)
        .iter()
        .find(|g| g.source == Source::Passthrough)
        .expect("the recorded host remembers one GPU bound to vfio-pci");
    let vm_uuid = vm_gpu.uuid.clone().unwrap();
    let driver_uuid = uuid(&inventory, 0);
    assert_ne!(vm_uuid, driver_uuid);
    ok_reset(dir.path(), &driver_uuid);
    ok_reset(dir.path(), &vm_uuid);
    let error = refused(
        dir.path(),
        &inventory,
        &[driver_uuid, vm_uuid.clone()],
        &MemoryGrants::new(),
    );
    assert_eq!(
        error.to_string(),
        format!("gpu-busy: {vm_uuid} (passed through to a VM); nothing was reset")
    );
}

#[test]
fn an_unknown_uuid_refuses_the_whole_command() {
    let dir = copy_host("dual-rtx-a5000");
    let inventory = collect(dir.path(), None).unwrap();
    let a = uuid(&inventory, 0);
    ok_reset(dir.path(), &a);
    let stranger = "GPU-ffffffff-0000-0000-0000-000000000000".to_string();
    let error = refused(
        dir.path(),
        &inventory,
        &[a, stranger.clone()],
        &MemoryGrants::new(),
    );
    assert_eq!(
        error,
        ResetError::UnknownGpu {
            uuid: stranger.clone(),
            hint: "the node's inventory lists no NVIDIA GPU with this UUID".into()
        }
    );
    assert!(
        error
            .to_string()
            .starts_with(&format!("unknown GPU {stranger}: "))
    );
    let none = refused(dir.path(), &inventory, &[" ".into()], &MemoryGrants::new());
    assert_eq!(none, ResetError::NoGpus);
}

#[test]
fn reset_gpus_that_come_back_clean_are_healthy_and_lose_their_faults() {
    let dir = copy_host("hgx-h100-8gpu");
    let inventory = collect(dir.path(), None).unwrap();
    let (a, b, c) = (
        uuid(&inventory, 0),
        uuid(&inventory, 1),
        uuid(&inventory, 2),
    );
    ok_reset(dir.path(), &a);
    ok_reset(dir.path(), &b);
    let mut record = faults_on(&inventory, &[&a, &c]);
    let mut before = inventory.clone();
    record.apply(&mut before);
    assert!(!gpus(&before)[0].healthy && !gpus(&before)[2].healthy);

    let spy = Spy::new(dir.path());
    let host = dir.path().to_path_buf();
    let mut collect_again = || collect(&host, None);
    let report = reset::reset(
        &inventory,
        &[a.clone(), b.clone(), a.clone()],
        &MemoryGrants::new(),
        &spy,
        reset::RESET_DEADLINE,
        &mut collect_again,
        &mut record,
    )
    .unwrap();
    // One reset per GPU, duplicates dropped, in the order asked.
    let resets: Vec<Vec<String>> = spy
        .calls()
        .into_iter()
        .filter(|argv| argv.get(1).map(String::as_str) == Some("--gpu-reset"))
        .collect();
    assert_eq!(
        resets,
        vec![
            reset_argv(&a).map(String::from).to_vec(),
            reset_argv(&b).map(String::from).to_vec()
        ]
    );
    assert_eq!(report.gpus.len(), 2);
    assert_eq!(
        report.gpus[0].outcome,
        ResetOutcome::Healthy { faults_cleared: 1 }
    );
    assert_eq!(
        report.gpus[1].outcome,
        ResetOutcome::Healthy { faults_cleared: 0 },
        "GPU b had no faults to clear"
    );
    assert!(report.all_healthy() && report.notes.is_empty());
    // The GPU that was not reset keeps its fault; the fresh inventory carries the rule.
    assert_eq!(record.faults_of(&a).count(), 0);
    assert_eq!(record.faults_of(&c).count(), 1);
    let fresh = report.inventory.unwrap();
    assert!(gpus(&fresh)[0].healthy);
    assert!(!gpus(&fresh)[2].healthy);
    let json = serde_json::to_value(&report.gpus).unwrap();
    assert_eq!(
        json[0],
        serde_json::json!({"uuid": a, "result": "healthy", "faultsCleared": 1})
    );
}

/// Splits nvidia-smi's XML into its `<gpu …>` blocks, edits block `index` with `edit`, and
/// returns the block's UUID.
fn edit_gpu_xml(dir: &Path, index: usize, edit: impl Fn(&str) -> String) -> String {
    let path = dir.join("commands/q-x/stdout");
    let xml = std::fs::read_to_string(&path).unwrap();
    let mut blocks: Vec<String> = xml.split("<gpu id=").map(String::from).collect();
    let block = &mut blocks[index + 1];
    let edited = edit(block);
    assert_ne!(&edited, block, "the edit must change the XML");
    *block = edited;
    let uuid = block
        .split("<uuid>")
        .nth(1)
        .and_then(|rest| rest.split("</uuid>").next())
        .unwrap()
        .to_string();
    std::fs::write(&path, blocks.join("<gpu id=")).unwrap();
    uuid
}

#[test]
fn reset_gpus_whose_fresh_counters_fail_stay_unhealthy_and_keep_their_faults() {
    let before_dir = copy_host("hgx-h100-8gpu");
    let inventory = collect(before_dir.path(), None).unwrap();
    // The state after the reset: one GPU still shows uncorrectable volatile ECC errors, another
    // a pending row remap, a third came back clean.
    let after_dir = copy_host("hgx-h100-8gpu");
    let ecc = edit_gpu_xml(after_dir.path(), 0, |b| {
        b.replacen(
            "<dram_uncorrectable>0</dram_uncorrectable>",
            "<dram_uncorrectable>2</dram_uncorrectable>",
            1,
        )
    });
    let remap = edit_gpu_xml(after_dir.path(), 1, |b| {
        b.replacen(
            "<remapped_row_pending>No</remapped_row_pending>",
            "<remapped_row_pending>Yes</remapped_row_pending>",
            1,
        )
    });
    let clean = uuid(&inventory, 5);
    assert!(![&ecc, &remap].contains(&&clean));
    for gpu in [&ecc, &remap, &clean] {
        ok_reset(before_dir.path(), gpu);
    }
    let mut record = faults_on(&inventory, &[&ecc, &remap, &clean]);
    let mut collect_after = || collect(after_dir.path(), None);
    let report = reset::reset(
        &inventory,
        &[ecc.clone(), remap.clone(), clean.clone()],
        &MemoryGrants::new(),
        &RecordedCommands::load(before_dir.path()).unwrap(),
        reset::RESET_DEADLINE,
        &mut collect_after,
        &mut record,
    )
    .unwrap();
    assert_eq!(
        report.gpus[0].outcome,
        ResetOutcome::Unhealthy {
            reasons: vec!["2 uncorrectable volatile ECC errors".into()]
        }
    );
    assert_eq!(
        report.gpus[1].outcome,
        ResetOutcome::Unhealthy {
            reasons: vec!["row remap pending (reset the GPU)".into()]
        }
    );
    assert_eq!(
        report.gpus[2].outcome,
        ResetOutcome::Healthy { faults_cleared: 1 }
    );
    assert!(!report.all_healthy());
    assert_eq!(record.faults_of(&ecc).count(), 1);
    assert_eq!(record.faults_of(&remap).count(), 1);
    assert_eq!(record.faults_of(&clean).count(), 0);
    let fresh = report.inventory.unwrap();
    let health = |u: &str| {
        gpus(&fresh)
            .iter()
            .find(|g| g.uuid.as_deref() == Some(u))
            .unwrap()
            .healthy
    };
    assert!(!health(&ecc) && !health(&remap) && health(&clean));
}

#[test]
fn a_failed_or_hung_reset_keeps_the_faults_and_the_others_still_run() {
    let dir = copy_host("dual-rtx-a5000");
    let inventory = collect(dir.path(), None).unwrap();
    let (a, b) = (uuid(&inventory, 0), uuid(&inventory, 1));
    record_reset(
        dir.path(),
        &a,
        "The following GPUs could not be reset:\n  GPU 00000000:01:00.0: In use by another client\n\n1 device is currently being used by one or more other processes.\n",
        255,
        None,
    );
    ok_reset(dir.path(), &b);
    let mut record = faults_on(&inventory, &[&a, &b]);
    let host = dir.path().to_path_buf();
    let mut collect_again = || collect(&host, None);
    let report = reset::reset(
        &inventory,
        &[a.clone(), b.clone()],
        &MemoryGrants::new(),
        &RecordedCommands::load(dir.path()).unwrap(),
        reset::RESET_DEADLINE,
        &mut collect_again,
        &mut record,
    )
    .unwrap();
    let ResetOutcome::Failed { error } = &report.gpus[0].outcome else {
        panic!("{:?}", report.gpus[0]);
    };
    assert!(
        error.starts_with(&format!("nvidia-smi --gpu-reset -i {a}: exited with status 255: The following GPUs could not be reset: GPU 00000000:01:00.0: In use by another client")),
        "{error}"
    );
    assert!(!error.contains('\n'));
    assert_eq!(record.faults_of(&a).count(), 1, "not reset: faults kept");
    assert_eq!(
        report.gpus[1].outcome,
        ResetOutcome::Healthy { faults_cleared: 1 }
    );

    // A reset that hangs past its deadline, and one on a host without nvidia-smi's reset.
    record_reset(dir.path(), &b, "", 0, Some(5_000));
    let mut record = faults_on(&inventory, &[&b]);
    let mut collect_again = || collect(&host, None);
    let report = reset::reset(
        &inventory,
        std::slice::from_ref(&b),
        &MemoryGrants::new(),
        &RecordedCommands::load(dir.path()).unwrap(),
        Duration::from_millis(100),
        &mut collect_again,
        &mut record,
    )
    .unwrap();
    assert!(
        matches!(&report.gpus[0].outcome, ResetOutcome::Failed { error } if error.contains("no answer within")),
        "{:?}",
        report.gpus
    );
    let report = reset::reset(
        &inventory,
        std::slice::from_ref(&b),
        &MemoryGrants::new(),
        &RecordedCommands::empty(),
        reset::RESET_DEADLINE,
        &mut || Err("no driver".to_string()),
        &mut record,
    )
    .unwrap();
    assert_eq!(
        report.gpus[0].outcome,
        ResetOutcome::Failed {
            error: "nvidia-smi not found (no NVIDIA driver on this host)".into()
        }
    );
    assert_eq!(record.faults_of(&b).count(), 1);
}

#[test]
fn a_failed_collection_leaves_the_reset_unconfirmed_and_the_faults_kept() {
    let dir = copy_host("dual-rtx-a5000");
    let inventory = collect(dir.path(), None).unwrap();
    let a = uuid(&inventory, 0);
    ok_reset(dir.path(), &a);
    let mut record = faults_on(&inventory, &[&a]);
    let report = reset::reset(
        &inventory,
        std::slice::from_ref(&a),
        &MemoryGrants::new(),
        &RecordedCommands::load(dir.path()).unwrap(),
        reset::RESET_DEADLINE,
        &mut || Err("nvidia-smi -q -x: no answer within 60s, killed".to_string()),
        &mut record,
    )
    .unwrap();
    assert!(matches!(
        report.gpus[0].outcome,
        ResetOutcome::Unconfirmed { .. }
    ));
    assert!(report.inventory.is_none());
    assert_eq!(
        report.notes,
        vec![
            "collecting the inventory after the reset: nvidia-smi -q -x: no answer within 60s, killed"
        ]
    );
    assert_eq!(record.faults_of(&a).count(), 1);
}

#[test]
fn the_daemons_fault_watch_saves_the_cleared_record() {
    let dir = copy_host("dual-rtx-a5000");
    let data = tempfile::tempdir().unwrap();
    let inventory = collect(dir.path(), None).unwrap();
    let (a, b) = (uuid(&inventory, 0), uuid(&inventory, 1));
    ok_reset(dir.path(), &a);
    faults_on(&inventory, &[&a, &b])
        .save(&data.path().join(accel_nvidia::faults::FILE_NAME))
        .unwrap();
    let (mut watch, _) = FaultWatch::start(
        Some(data.path()),
        BOOT,
        std::sync::Arc::new(XidClasses::default()),
    );
    assert_eq!(watch.record().faults().count(), 2);
    let host = dir.path().to_path_buf();
    let report = reset::reset(
        &inventory,
        std::slice::from_ref(&a),
        &MemoryGrants::new(),
        &RecordedCommands::load(dir.path()).unwrap(),
        reset::RESET_DEADLINE,
        &mut || collect(&host, None),
        &mut watch,
    )
    .unwrap();
    assert!(report.all_healthy());
    let (reloaded, _) = FaultWatch::start(
        Some(data.path()),
        BOOT,
        std::sync::Arc::new(XidClasses::default()),
    );
    assert_eq!(reloaded.record().faults_of(&a).count(), 0);
    assert_eq!(reloaded.record().faults_of(&b).count(), 1);
}
