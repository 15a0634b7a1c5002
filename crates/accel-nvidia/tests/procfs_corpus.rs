//! Every file in `../shared/fixtures/nvidia/procfs/` read by the procfs readers, with the facts
//! each holds; and "never panics" over arbitrary and mutated bytes.

use std::collections::BTreeMap;

use accel_nvidia::procfs::{parse_driver_version, parse_information};
use proptest::prelude::*;

/// What each capture holds: a driver version (version files) or a GPU's model and UUID
/// (information files), or nothing the readers take (the MIG capability file).
enum Expect {
    Version(&'static str),
    Information {
        model: &'static str,
        uuid: &'static str,
        bus: &'static str,
    },
    Nothing,
}

fn expectations() -> BTreeMap<&'static str, Expect> {
    BTreeMap::from([
        (
            "neofetch-876__version-proprietary-384.98.txt",
            Expect::Version("384.98"),
        ),
        (
            "nixgl-121__version-open-525.60.11-x86_64.txt",
            Expect::Version("525.60.11"),
        ),
        (
            "nixgl-139__version-open-jetson-aarch64-35.3.1.txt",
            Expect::Version("35.3.1"),
        ),
        (
            "nixgl-186__version-open-565.57.01-x86_64.txt",
            Expect::Version("565.57.01"),
        ),
        (
            "snapd-pr14893__capabilities-mig-monitor.txt",
            Expect::Nothing,
        ),
        (
            "snapd-pr14893__l4__information.txt",
            Expect::Information {
                model: "NVIDIA L4",
                uuid: "GPU-3291dfa4-fcc4-0110-615b-c894a0d7c689",
                bus: "00000000:70:00.0",
            },
        ),
    ])
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = accel_testkit::shared_fixture_folder("nvidia", "procfs");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_procfs_capture_reads_to_its_facts() {
    let expect = expectations();
    let files = corpus();
    accel_testkit::assert_same_files(
        "nvidia/procfs",
        files.iter().map(|(name, _)| name),
        expect.keys(),
    );
    for (name, bytes) in &files {
        let text = String::from_utf8_lossy(bytes);
        match expect.get(name.as_str()) {
            Some(Expect::Version(v)) => {
                assert_eq!(parse_driver_version(&text).as_deref(), Some(*v), "{name}");
                assert_eq!(parse_information(&text).uuid, None, "{name}");
            }
            Some(Expect::Information { model, uuid, bus }) => {
                let info = parse_information(&text);
                assert_eq!(info.model.as_deref(), Some(*model), "{name}");
                assert_eq!(info.uuid.as_deref(), Some(*uuid), "{name}");
                assert_eq!(
                    info.bus_location.map(|b| b.nvml()).as_deref(),
                    Some(*bus),
                    "{name}"
                );
                assert_eq!(parse_driver_version(&text), None, "{name}");
            }
            Some(Expect::Nothing) => {
                assert_eq!(parse_driver_version(&text), None, "{name}");
                assert_eq!(parse_information(&text).uuid, None, "{name}");
            }
            None => unreachable!("every capture has an expectation"),
        }
    }
}

proptest! {
    #[test]
    fn readers_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_information(&text);
        let _ = parse_driver_version(&text);
    }

    #[test]
    fn readers_never_panic_on_mutated_captures(
        pick in any::<prop::sample::Index>(),
        mutation in accel_testkit::mutate::mutation(),
    ) {
        let files = corpus();
        let (_, original) = pick.get(&files);
        let bytes = mutation.apply(original);
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_information(&text);
        let _ = parse_driver_version(&text);
    }
}
