//! The ResourceSlice spec of recorded hosts (testdata/hosts/), from the real detectors over the
//! recorded files and command outputs: what a node of that kind would publish, field by field.

use std::path::Path;
use std::time::Duration;

use accel_core::inventory::ManufacturerInventory;
use accel_core::labels::GroupNaming;
use accel_dra::slices::{self, ResourceSliceSpec};
use accel_host::{FsHost, RecordedCommands};
use serde_json::{Value, json};

const HOSTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/hosts");

fn recorded(name: &str) -> (FsHost, RecordedCommands) {
    let dir = Path::new(HOSTS).join(name);
    assert!(dir.is_dir(), "recorded host {} is missing", dir.display());
    let commands = RecordedCommands::load(&dir)
        .unwrap_or_else(|e| panic!("recorded host {}: {e}", dir.display()));
    (FsHost::new(dir.join("root")), commands)
}

fn nvidia(name: &str) -> ManufacturerInventory {
    use accel_nvidia::detector::{self, Deadlines, DetectOptions};
    let (host, commands) = recorded(name);
    let options = DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_secs(2),
            snapshot: Duration::from_secs(4),
        },
        ..DetectOptions::default()
    };
    detector::detect(&host, &commands, options)
        .detection
        .unwrap_or_else(|e| panic!("recorded host {name}: {e}"))
}

fn amd(name: &str) -> ManufacturerInventory {
    use accel_amd::detector::{self, DetectOptions};
    let (host, commands) = recorded(name);
    detector::detect(&host, &commands, DetectOptions::default())
        .unwrap_or_else(|e| panic!("recorded host {name}: {e}"))
}

fn spec(section: &ManufacturerInventory) -> ResourceSliceSpec {
    let driver = slices::driver_for(section.name).unwrap();
    slices::slice_spec(&driver, "node-1", section, GroupNaming::default(), 1).unwrap()
}

fn json_of(section: &ManufacturerInventory) -> Value {
    serde_json::to_value(spec(section)).unwrap()
}

#[test]
fn two_nvidia_cards_are_one_pool_of_two_devices() {
    let gpu = |index: u32, bus: &str, uuid: &str| {
        json!({
            "name": format!("gpu-{index}"),
            "attributes": {
                // 590.44.01 is no semantic version (a leading zero), so it stays a string.
                "gpustack.ai/driverVersion": {"string": "590.44.01"},
                "gpustack.ai/groupId": {"string": "nvidia-rtx-a5000"},
                "gpustack.ai/healthy": {"bool": true},
                "gpustack.ai/index": {"int": index},
                "gpustack.ai/manufacturer": {"string": "nvidia"},
                "gpustack.ai/partition": {"bool": false},
                "gpustack.ai/pciBusId": {"string": bus},
                "gpustack.ai/product": {"string": "NVIDIA RTX A5000"},
                "gpustack.ai/uuid": {"string": uuid},
            },
            "capacity": {"gpustack.ai/memory": {"value": "24564Mi"}},
        })
    };
    assert_eq!(
        json_of(&nvidia("dual-rtx-a5000")),
        json!({
            "driver": "nvidia.gpustack.ai",
            "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "node-1",
            // Highest index first: the order the scheduler tries them in.
            "devices": [
                gpu(1, "00000000:C1:00.0", "GPU-12345678-aaaa-bbbb-cccc-0123456789cd"),
                gpu(0, "00000000:81:00.0", "GPU-12345678-aaaa-bbbb-cccc-0123456789ab"),
            ],
        })
    );
}

#[test]
fn amd_cards_carry_a_semver_driver_cores_and_numa() {
    let json = json_of(&amd("amd-8x-mi300x"));
    assert_eq!(json["driver"], "amd.gpustack.ai");
    let devices = json["devices"].as_array().unwrap();
    let names: Vec<&str> = devices
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "gpu-7", "gpu-6", "gpu-5", "gpu-4", "gpu-3", "gpu-2", "gpu-1", "gpu-0"
        ]
    );
    assert_eq!(
        devices[0],
        json!({
            "name": "gpu-7",
            "attributes": {
                "gpustack.ai/driverVersion": {"version": "6.16.13"},
                "gpustack.ai/groupId": {"string": "amd-instinct-mi300x"},
                "gpustack.ai/healthy": {"bool": true},
                "gpustack.ai/index": {"int": 7},
                "gpustack.ai/manufacturer": {"string": "amd"},
                "gpustack.ai/numaNode": {"int": 1},
                "gpustack.ai/partition": {"bool": false},
                "gpustack.ai/pciBusId": {"string": "00000000:DD:00.0"},
                "gpustack.ai/product": {"string": "AMD Instinct MI300X"},
                "gpustack.ai/uuid": {"string": "GPU-3b933c598fc957e9"},
            },
            "capacity": {
                "gpustack.ai/cores": {"value": "304"},
                "gpustack.ai/memory": {"value": "196592Mi"},
            },
        })
    );
}

/// The daemon applies the health rule to each pass before it publishes; so does this test.
#[test]
fn an_unhealthy_card_is_published_as_unhealthy() {
    let mut section = nvidia("hgx-h100-8gpu-gpu3-remap-pending");
    for accelerator in &mut section.accelerators {
        accel_core::health::assess(accelerator, &[]);
    }
    let json = json_of(&section);
    let devices = json["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 8);
    let unhealthy: Vec<&Value> = devices
        .iter()
        .filter(|d| d["attributes"]["gpustack.ai/healthy"] != json!({"bool": true}))
        .collect();
    assert_eq!(unhealthy.len(), 1);
    assert_eq!(unhealthy[0]["name"], "gpu-3");
    assert_eq!(
        unhealthy[0]["attributes"]["gpustack.ai/healthy"],
        json!({"bool": false})
    );
    assert_eq!(
        unhealthy[0]["attributes"]["gpustack.ai/uuid"],
        json!({"string": "GPU-8e70d727-bd2d-0723-0bf5-015d93cb90e6"})
    );
}

#[test]
fn a_card_in_mig_mode_is_no_whole_device_but_its_partition_placements() {
    let section = nvidia("hgx-h100-8gpu-mig");
    assert_eq!(section.accelerators.len(), 8);
    let driver = slices::driver_for(section.name).unwrap();
    let pool = slices::pool_specs(
        &driver,
        "node-1",
        &section,
        GroupNaming::default(),
        1,
        slices::Sharing::Whole,
    )
    .unwrap();
    // 8 H100s × 18 placements (7g.80gb 1, 4g.40gb 1, 3g.40gb 2, 2g.20gb 3, 1g.20gb 4,
    // 1g.10gb 7): 144 devices in slices of 64, then the 8 counter sets in one slice.
    let shape: Vec<(usize, usize)> = pool
        .iter()
        .map(|s| (s.devices.len(), s.shared_counters.len()))
        .collect();
    assert_eq!(shape, [(64, 0), (64, 0), (16, 0), (0, 8)]);
    let devices: Vec<&slices::Device> = pool.iter().flat_map(|s| &s.devices).collect();
    assert!(
        devices.iter().all(|d| d.name.contains('g')),
        "no whole card"
    );
    let d = devices
        .iter()
        .find(|d| d.name == "gpu-7-3g-40gb-4")
        .expect("gpu-7-3g-40gb-4");
    let json = serde_json::to_value(d).unwrap();
    assert_eq!(
        json["capacity"]["gpustack.ai/memory"],
        json!({"value": "40448Mi"})
    );
    assert_eq!(
        json["attributes"]["gpustack.ai/profile"],
        json!({"string": "3g.40gb"})
    );
    assert_eq!(
        json["attributes"]["gpustack.ai/parentUuid"],
        json!({"string": section.accelerators[7].uuid.clone().unwrap()})
    );
    let consumed: Vec<&str> = json["consumesCounters"][0]["counters"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        consumed,
        [
            "memory-slice-4",
            "memory-slice-5",
            "memory-slice-6",
            "memory-slice-7"
        ]
    );
    assert_eq!(json["consumesCounters"][0]["counterSet"], "gpu-7-slices");
    // The whole GPU's profile takes every slice, so nothing else fits beside it.
    let whole = devices
        .iter()
        .find(|d| d.name == "gpu-0-7g-80gb-0")
        .expect("gpu-0-7g-80gb-0");
    assert_eq!(whole.consumes_counters[0].counters.len(), 8);
    assert_eq!(pool[3].shared_counters[0].counters.len(), 8);
    // Every name maps back to its placement.
    let published = slices::published_devices(&section);
    assert_eq!(published.len(), 144);
    assert_eq!(
        published["gpu-7-3g-40gb-4"],
        slices::DeviceRef::Partition(slices::PartitionRef {
            index: 7,
            profile: "3g.40gb".into(),
            start: 4,
            size: 4
        })
    );
}
