//! The `Devices` spec and the node capacity keys of each recorded host (testdata/hosts/), from
//! the real detector over the recorded files and command outputs, as snapshots: what a node of
//! that kind would publish.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use accel_core::capacity::node_capacity;
use accel_core::devices::DevicesSpec;
use accel_core::inventory::Inventory;
use accel_core::ledger::Seat;
use accel_core::ledger::units::slices_per_accelerator;
use accel_core::manufacturer::Manufacturer;
use accel_core::resources::KeyGrammar;
use accel_host::{FsHost, RecordedCommands};
use accel_nvidia::detector::{self, Deadlines, DetectOptions};

const HOSTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/hosts");

fn inventory(dir: &Path) -> Inventory {
    let host = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir)
        .unwrap_or_else(|e| panic!("recorded host {}: {e}", dir.display()));
    let options = DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_secs(2),
            snapshot: Duration::from_secs(4),
        },
        ..DetectOptions::default()
    };
    let section = detector::detect(&host, &commands, options)
        .detection
        .unwrap_or_else(|e| panic!("recorded host {}: {e}", dir.display()));
    Inventory {
        manufacturers: vec![section],
    }
}

#[test]
fn each_recorded_host_publishes_its_spec_and_capacity() {
    let mut seen = 0;
    for name in [
        "azure-4x-k80",
        "dual-rtx-a5000",
        "h100-mig",
        "hgx-h100-8gpu",
        "passthrough-l4",
        "wsl2-rtx2080super",
    ] {
        let dir = Path::new(HOSTS).join(name);
        assert!(dir.is_dir(), "recorded host {} is missing", dir.display());
        let inventory = inventory(&dir);
        let spec = DevicesSpec::from_inventory(&inventory, slices_per_accelerator);
        let mut capacity = BTreeMap::new();
        for section in &inventory.manufacturers {
            let slices = slices_per_accelerator(section.name).unwrap_or(0);
            let seats: Vec<Seat> = section
                .accelerators
                .iter()
                .map(|a| {
                    Seat::from_accelerator(
                        a,
                        if a.grantable == accel_core::inventory::Grantable::Whole {
                            slices
                        } else {
                            0
                        },
                    )
                })
                .collect();
            capacity.extend(node_capacity(
                &KeyGrammar::default(),
                section.name,
                &seats,
                &BTreeMap::new(),
            ));
        }
        assert!(
            spec.groups
                .iter()
                .all(|g| g.manufacturer == Manufacturer::Nvidia),
            "{name}: only NVIDIA groups"
        );
        insta::assert_json_snapshot!(
            name,
            serde_json::json!({"spec": spec, "capacity": capacity})
        );
        seen += 1;
    }
    assert_eq!(seen, 6);
}
