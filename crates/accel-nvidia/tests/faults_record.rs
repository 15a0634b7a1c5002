//! The fault record (accel-backend's, re-exported here) fed NVIDIA's XIDs: one condition per
//! code and GPU, hardware faults fail the rule and application faults do not, a reset clears
//! only a GPU whose counters pass, the file survives a restart in the same boot only, a torn
//! file is kept aside, and the watch over a fed kernel log.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_backend::health::KernelFault;
use accel_core::inventory::{Accelerator, Ecc, Inventory, Source};
use accel_core::{Manufacturer, ManufacturerInventory};
use accel_nvidia::faults::{
    BOOT_ID_PATH, COLLECTION_DELAY, CollectionDebounce, FILE_NAME, Fault, FaultError, FaultRecord,
    FaultWatch, Recorded, WatchOutcome, read_boot_id,
};
use accel_nvidia::xid::{XidClass, XidClasses, parse_message};

const BOOT: &str = "4c1f7c5e-0a0b-4c77-9a53-5d1b3c0f2e11";

fn inventory() -> Inventory {
    let mut section = ManufacturerInventory::empty(Manufacturer::Nvidia);
    for (index, bus) in [(0, "00000000:18:00.0"), (1, "00000000:2A:00.0")] {
        let mut a = Accelerator::new(index, Source::Driver);
        a.uuid = Some(format!("GPU-{index}"));
        a.bus_id = Some(bus.parse().unwrap());
        section.accelerators.push(a);
    }
    Inventory {
        manufacturers: vec![section],
    }
}

fn event(line: &str) -> KernelFault {
    XidClasses::default().fault(&parse_message(line).unwrap())
}

fn gpu(inventory: &Inventory, index: usize) -> &Accelerator {
    &inventory.manufacturers[0].accelerators[index]
}

#[test]
fn one_condition_per_code_and_gpu() {
    let inventory = inventory();
    let mut record = FaultRecord::new(BOOT);
    let e79 = event("NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=a, GPU has fallen off the bus.");
    assert_eq!(
        record.record(&e79, &inventory),
        Recorded::New {
            uuid: "GPU-0".into(),
            condition: "Xid79".into()
        }
    );
    assert!(matches!(
        record.record(&e79, &inventory),
        Recorded::Repeated { .. }
    ));
    let e13 = event(
        "NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception",
    );
    assert!(matches!(
        record.record(&e13, &inventory),
        Recorded::New { .. }
    ));
    let unknown = event("NVRM: Xid (PCI:0000:99:00): 79, GPU has fallen off the bus");
    assert_eq!(
        record.record(&unknown, &inventory),
        Recorded::UnknownBus(Some("0000:99:00.0".parse().unwrap()))
    );
    let faults: Vec<&Fault> = record.faults().collect();
    assert_eq!(faults.len(), 2);
    let xid79 = faults.iter().find(|f| f.condition == "Xid79").unwrap();
    assert_eq!(
        (xid79.status, xid79.device_id.as_str(), xid79.count),
        (true, "GPU-0", 2)
    );
    assert_eq!(xid79.message, "GPU has fallen off the bus.");
    assert_eq!(xid79.class, XidClass::Hardware);
    assert_eq!(record.faults_of("GPU-1").count(), 0);
}

#[test]
fn hardware_faults_fail_the_rule_application_faults_do_not() {
    let mut inventory = inventory();
    let mut record = FaultRecord::new(BOOT);
    record.record(
        &event("NVRM: Xid (PCI:0000:2a:00): 13, pid=5, name=python, Graphics SM Warp Exception"),
        &inventory,
    );
    record.apply(&mut inventory);
    assert!(
        gpu(&inventory, 1).healthy,
        "application-class: condition only"
    );
    assert_eq!(record.faults_of("GPU-1").count(), 1);

    record.record(&event("NVRM: Xid (PCI:0000:2a:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error"), &inventory);
    let fallen = "NVRM: The NVIDIA GPU 0000:18:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.";
    record.record(&event(fallen), &inventory);
    record.apply(&mut inventory);
    assert!(!gpu(&inventory, 1).healthy);
    assert_eq!(
        gpu(&inventory, 1).health_reasons,
        vec!["Xid 48: An uncorrectable double bit error"]
    );
    assert!(!gpu(&inventory, 0).healthy);
    assert!(gpu(&inventory, 0).health_reasons[0].starts_with("fallen off the bus: The NVIDIA GPU"));

    // The settings may move a code between classes across a restart.
    record.reclassify(&XidClasses::from_settings(Some("13,48"), None).unwrap());
    record.apply(&mut inventory);
    assert!(gpu(&inventory, 1).healthy);
}

#[test]
fn a_reset_clears_only_a_gpu_whose_counters_pass() {
    let mut inventory = inventory();
    let mut record = FaultRecord::new(BOOT);
    for bus in ["18", "2a"] {
        record.record(
            &event(&format!(
                "NVRM: Xid (PCI:0000:{bus}:00): 79, GPU has fallen off the bus"
            )),
            &inventory,
        );
    }
    inventory.manufacturers[0].accelerators[1].ecc = Some(Ecc {
        volatile_uncorrected: Some(3),
        ..Ecc::default()
    });
    assert!(record.clear_after_reset(gpu(&inventory, 0)));
    assert!(!record.clear_after_reset(gpu(&inventory, 1)));
    record.apply(&mut inventory);
    assert!(gpu(&inventory, 0).healthy);
    assert!(!gpu(&inventory, 1).healthy);
    assert_eq!(record.faults().count(), 1);
    assert_eq!(record.clear_gpu("GPU-1"), 1);
}

#[test]
fn survives_a_restart_in_the_same_boot_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let inventory = inventory();
    let mut record = FaultRecord::new(BOOT);
    record.record(
        &event("NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus"),
        &inventory,
    );
    record.save(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let same = FaultRecord::load(&path, BOOT);
    assert_eq!(same.record, record);
    assert!(same.notes.is_empty());

    let next = FaultRecord::load(&path, "another-boot");
    assert_eq!(next.record.faults().count(), 0);
    assert_eq!(next.record.boot_id(), "another-boot");
    assert!(
        next.notes[0].contains("from boot 4c1f7c5e"),
        "{:?}",
        next.notes
    );

    let missing = FaultRecord::load(&dir.path().join("none.json"), BOOT);
    assert_eq!(
        (missing.record.faults().count(), missing.notes.len()),
        (0, 0)
    );
}

#[test]
fn a_torn_file_is_kept_aside_and_the_record_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let mut full = FaultRecord::new(BOOT);
    full.record(
        &event("NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus"),
        &inventory(),
    );
    let json = full.to_json();
    for (n, torn) in [&json[..json.len() / 2], "\u{0}\u{1}garbage"]
        .iter()
        .enumerate()
    {
        std::fs::write(&path, torn).unwrap();
        let loaded = FaultRecord::load(&path, BOOT);
        assert_eq!(loaded.record.faults().count(), 0);
        let aside = dir.path().join(format!("faults.json.corrupt-{}", n + 1));
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), *torn);
        assert!(!path.exists());
        assert!(
            loaded.notes[0].contains("kept aside as"),
            "{:?}",
            loaded.notes
        );
    }
}

#[test]
fn read_only_reading_changes_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    assert_eq!(FaultRecord::read(&path, BOOT).unwrap(), None);
    let mut record = FaultRecord::new(BOOT);
    record.record(
        &event("NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus"),
        &inventory(),
    );
    record.save(&path).unwrap();
    assert_eq!(FaultRecord::read(&path, BOOT).unwrap(), Some(record));
    assert_eq!(FaultRecord::read(&path, "other").unwrap(), None);
    std::fs::write(&path, "{torn").unwrap();
    let e = FaultRecord::read(&path, BOOT).unwrap_err();
    assert!(e.to_string().contains("faults.json"), "{e}");
    assert!(
        path.exists(),
        "a read-only reader keeps the torn file where it is"
    );
}

#[test]
fn reads_the_boot_id_from_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let host = accel_host::FsHost::new(dir.path());
    assert!(matches!(read_boot_id(&host), Err(FaultError::BootId(_))));
    std::fs::create_dir_all(dir.path().join("proc/sys/kernel/random")).unwrap();
    std::fs::write(dir.path().join(BOOT_ID_PATH), "\n").unwrap();
    assert!(
        read_boot_id(&host)
            .unwrap_err()
            .to_string()
            .ends_with("empty boot id")
    );
    std::fs::write(dir.path().join(BOOT_ID_PATH), format!("{BOOT}\n")).unwrap();
    assert_eq!(read_boot_id(&host).unwrap(), BOOT);
}

#[test]
fn a_burst_asks_for_one_collection_two_seconds_after_it_starts() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut debounce = CollectionDebounce::default();
    assert!(!debounce.poll(at(0)));
    debounce.event(at(0));
    debounce.event(at(300));
    debounce.event(at(1900));
    assert_eq!(debounce.due(), Some(at(2000)));
    assert!(!debounce.poll(at(1999)));
    assert!(debounce.poll(at(2000)));
    assert!(!debounce.poll(at(2500)), "once per burst");
    debounce.event(at(2600));
    assert_eq!(debounce.due(), Some(at(4600)));
}

fn kmsg(sequence: u64, message: &str) -> accel_host::KernelLogEntry {
    accel_host::KernelLogEntry::Record(accel_host::KmsgRecord {
        priority: 4,
        sequence,
        timestamp_us: sequence,
        flag: '-',
        message: message.to_string(),
    })
}

#[test]
fn the_watch_over_a_fed_kernel_log() {
    use accel_host::{ChannelKernelLog, KernelLog, KernelLogEntry};
    let dir = tempfile::tempdir().unwrap();
    let mut inventory = inventory();
    let start = Instant::now();
    let (mut watch, notes) =
        FaultWatch::start(Some(dir.path()), BOOT, Arc::new(XidClasses::default()));
    assert!(notes.is_empty());

    let (sender, mut log) = ChannelKernelLog::new();
    sender
        .send(kmsg(
            1,
            "NVRM: Xid (PCI:0000:2a:00): 13, pid=9, name=python, Graphics Exception",
        ))
        .unwrap();
    sender
        .send(KernelLogEntry::Overrun { lost: Some(12) })
        .unwrap();
    sender.send(kmsg(14, "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")).unwrap();
    sender
        .send(kmsg(
            15,
            "NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
        ))
        .unwrap();
    sender.send(kmsg(16, "usb 1-1: new device")).unwrap();
    drop(sender);
    let mut outcomes = Vec::new();
    let mut ms = 0;
    while let Some(entry) = log.next_entry().unwrap() {
        outcomes.push(watch.on_entry(&entry, &inventory, start + Duration::from_millis(ms)));
        ms += 100;
    }
    assert_eq!(outcomes[0].changed.as_deref(), Some("GPU-1"));
    assert_eq!(outcomes[1].overrun, Some(Some(12)));
    assert_eq!(outcomes[2].changed.as_deref(), Some("GPU-0"));
    assert!(matches!(
        outcomes[3].recorded,
        Some(Recorded::Repeated { .. })
    ));
    assert_eq!(outcomes[3].changed, None);
    assert_eq!(outcomes[4], WatchOutcome::default());
    assert!(outcomes.iter().all(|o| o.save_error.is_none()));

    watch.apply(&mut inventory);
    assert!(gpu(&inventory, 1).healthy, "Xid 13 is the workload's");
    assert!(!gpu(&inventory, 0).healthy);
    // One collection for the burst, two seconds after its first line.
    assert_eq!(watch.next_collection(), Some(start + COLLECTION_DELAY));
    assert!(!watch.collection_due(start + Duration::from_millis(1999)));
    assert!(watch.collection_due(start + COLLECTION_DELAY));
    assert!(!watch.collection_due(start + Duration::from_secs(5)));

    // A restart in the same boot keeps both faults; a new boot drops them.
    let (again, _) = FaultWatch::start(Some(dir.path()), BOOT, Arc::new(XidClasses::default()));
    assert_eq!(again.record().faults().count(), 2);
    let (mut restarted, _) =
        FaultWatch::start(Some(dir.path()), BOOT, Arc::new(XidClasses::default()));
    let mut fresh = self::inventory();
    restarted.apply(&mut fresh);
    assert!(!gpu(&fresh, 0).healthy);
    // A reset that leaves GPU 0 clean recovers it, and the file forgets it.
    assert!(restarted.after_reset(gpu(&fresh, 0)).unwrap());
    restarted.apply(&mut fresh);
    assert!(gpu(&fresh, 0).healthy);
    let (reloaded, _) = FaultWatch::start(Some(dir.path()), BOOT, Arc::new(XidClasses::default()));
    assert_eq!(reloaded.record().faults_of("GPU-0").count(), 0);
    let (rebooted, notes) = FaultWatch::start(
        Some(dir.path()),
        "next-boot",
        Arc::new(XidClasses::default()),
    );
    assert_eq!(rebooted.record().faults().count(), 0);
    assert_eq!(notes.len(), 1);
}

#[test]
fn a_failed_save_is_reported_and_the_fault_still_counts() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent");
    let (mut watch, _) = FaultWatch::start(Some(&missing), BOOT, Arc::new(XidClasses::default()));
    let mut inventory = inventory();
    let outcome = watch.on_entry(
        &kmsg(
            1,
            "NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, DBE",
        ),
        &inventory,
        Instant::now(),
    );
    assert!(outcome.save_error.unwrap().contains("faults.json"));
    watch.apply(&mut inventory);
    assert!(!gpu(&inventory, 0).healthy);
}
