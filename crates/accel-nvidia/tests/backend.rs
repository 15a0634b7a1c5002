//! NVIDIA behind the seam: the detector recognises its functions on the bus by the configured
//! vendor ids (the PCI gate, GPUs passed through to VMs), as `serve` hands them over.

use std::path::{Path, PathBuf};

use accel_backend::detect::{DetectRequest, Detector};
use accel_core::Manufacturer;
use accel_core::manufacturer::{ManufacturerTable, PciVendorId};
use accel_host::pci::PciClassPrefixes;
use accel_host::{FsHost, RecordedCommands};
use accel_nvidia::backend::NvidiaDetector;

fn host(name: &str) -> PathBuf {
    accel_testkit::recorded_host(name)
}

/// The number of GPUs one pass lists, and its notes.
fn detect(
    name: &str,
    ids: &[PciVendorId],
    gate: bool,
    state: Option<&Path>,
) -> (usize, Vec<String>) {
    let dir = host(name);
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(&dir).unwrap();
    let request = DetectRequest {
        host: &files,
        commands: &commands,
        deadlines: Default::default(),
        state_dir: state,
        pci_classes: &PciClassPrefixes::default(),
        vendor_ids: ids,
        pci_gate: gate,
    };
    let section = NvidiaDetector.detect(&request).unwrap().unwrap();
    (section.accelerators.len(), section.notes)
}

fn nvidia_ids() -> Vec<PciVendorId> {
    ManufacturerTable::default()
        .get(Manufacturer::Nvidia)
        .pci_vendor_ids
        .clone()
}

fn other_ids() -> Vec<PciVendorId> {
    vec![PciVendorId {
        class: None,
        vendor: 0x1234,
    }]
}

#[test]
fn the_pci_gate_asks_the_driver_only_when_a_configured_vendor_is_on_the_bus() {
    assert_eq!(detect("hgx-h100-8gpu", &nvidia_ids(), true, None).0, 8);
    let (found, notes) = detect("hgx-h100-8gpu", &other_ids(), true, None);
    assert_eq!(found, 0);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("no PCI device of vendor 1234")),
        "{notes:?}"
    );
    // --no-pci-check: the driver is asked whatever the bus shows.
    assert_eq!(detect("hgx-h100-8gpu", &other_ids(), false, None).0, 8);
    // A WSL 2 guest's GPU is on no bus it can see: never gated.
    assert_eq!(detect("wsl2-rtx2080super", &nvidia_ids(), true, None).0, 1);
}

#[test]
fn gpus_passed_through_are_recognised_by_the_configured_vendor_ids() {
    let copy = |dir: &Path| {
        std::fs::copy(
            host("passthrough-l4").join("data/gpus-seen.json"),
            dir.join("gpus-seen.json"),
        )
        .unwrap();
    };
    let state = tempfile::tempdir().unwrap();
    copy(state.path());
    let (with_default, _) = detect("passthrough-l4", &nvidia_ids(), false, Some(state.path()));
    let state = tempfile::tempdir().unwrap();
    copy(state.path());
    let (with_other, _) = detect("passthrough-l4", &other_ids(), false, Some(state.path()));
    assert!(
        with_default > with_other,
        "the vfio-pci GPU counts only under its configured vendor id ({with_default} vs {with_other})"
    );
}
