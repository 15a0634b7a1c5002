//! Issue 43, through the daemon, for Ascend, Hygon and T-Head: each manufacturer's sick recorded
//! host, read by its own crate on every pass (Ascend: `npu-smi info -t health`; Hygon: the
//! kernel's `ras/umc_err_count` and `hy-smi --healthcheck`; T-Head: `ppu-smi`'s `Volatile
//! Uncorr. ECC`), served by the
//! daemon to the kubelet emulator over real unix sockets with its own responder. A Pod holds
//! every accelerator; the tool then reads one sick: that accelerator's token turns Unhealthy in
//! ListAndWatch (the others stay Healthy), the `Devices` Healthy condition and the health metric
//! name it, and the running Pod keeps its grant. A reading that stops answering keeps the
//! accelerator out (no reading is never "healthy"); one that clears brings it back. Each of these
//! is state the driver holds until a reset (an alarm, a counter since the driver loaded), so a
//! daemon restarted in the same boot reads it sick again with nothing of it in `faults.json`,
//! and after a reboot the tool's fresh reading is all there is.

use std::path::Path;
use std::sync::Arc;

use accel_core::Manufacturer;
use accel_core::devices::ConditionStatus;
use accel_plugin::testing;

use super::metrics::DaemonMetrics;
use super::test_support::{
    Rereading, Rig, SETTLE, backend_plugin_config, copy_host, data_dir, faults_file,
    healthy_condition, refresh, scrape, set_boot, whole_resource,
};
use super::*;

const BOOT: &str = "8d3f21c4-5a6e-4b07-9c18-2e4f6a7b9d01";

/// How a reading is written: the recorded file replaced whole, or a part of it replaced.
#[derive(Clone, Copy)]
enum Reading {
    /// As recorded.
    Recorded,
    /// The file holds this text.
    Text(&'static str),
    /// The recorded file with `from` replaced by `to`.
    Replace(&'static str, &'static str),
    /// The file's contents are another recorded file's (relative to the host).
    CopyOf(&'static str),
}

/// A recorded host where one accelerator is sick, and how its source reads otherwise.
struct Case {
    manufacturer: Manufacturer,
    host: &'static str,
    /// Edits made to the copied host before anything runs (another source made healthy).
    setup: &'static [(&'static str, Reading)],
    /// The file (relative to the host) that carries the sick reading.
    source: &'static str,
    /// How it reads sick (`None`: as recorded).
    sick: Option<Reading>,
    /// The same source reading healthy, and reading nothing the crate can judge by.
    healthy: Reading,
    unread: Reading,
    cards: usize,
    sick_index: u32,
    sick_uuid: &'static str,
    /// The start of the sick accelerator's one health reason.
    reason: &'static str,
}

const CASES: [Case; 4] = [
    Case {
        manufacturer: Manufacturer::Ascend,
        host: "ascend-8x-910a-npu0-health-alarm",
        setup: &[],
        source: "commands/health-0-0/stdout",
        sick: None,
        healthy: Reading::CopyOf("commands/health-1-0/stdout"),
        // What npu-smi prints for a card id the driver lost (HAZARDS 23).
        unread: Reading::Text(
            "Invalid card id.\nError parameter of -i\nUsage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n",
        ),
        cards: 8,
        sick_index: 0,
        sick_uuid: "3A10C1F0 810702C 9D22E3A1 0 124300B5",
        reason: "npu-smi reports Health Alarm for NPU 0 chip 0 (error codes A4025021 8C03A000 8C084E00: ascend_monitor adda heart beat lost error; ",
    },
    Case {
        manufacturer: Manufacturer::Hygon,
        host: "hygon-4x-k100ai-dcu2-umc-uncorrectable",
        setup: &[],
        source: "root/sys/devices/pci0000:8a/0000:8a:00.0/ras/umc_err_count",
        sick: None,
        healthy: Reading::Replace("ue: 2", "ue: 0"),
        unread: Reading::Text(""),
        cards: 4,
        sick_index: 2,
        sick_uuid: "GPU-7137d9debedc58c1",
        reason: "2 uncorrectable volatile ECC errors",
    },
    // The same host's health check reading DCU 1 as anything but `Healthy` (`Warning` is made
    // up: no other status has been seen), its UMC counters all clear.
    Case {
        manufacturer: Manufacturer::Hygon,
        host: "hygon-4x-k100ai-dcu2-umc-uncorrectable",
        setup: &[(
            "root/sys/devices/pci0000:8a/0000:8a:00.0/ras/umc_err_count",
            Reading::Replace("ue: 2", "ue: 0"),
        )],
        source: "commands/hy-smi-healthcheck/stdout",
        sick: Some(Reading::Replace(
            "0000:0c:00.0         : Healthy",
            "0000:0c:00.0         : Warning",
        )),
        healthy: Reading::Recorded,
        // A health check that names no line for the DCU.
        unread: Reading::Replace(
            "HCU[1]          : Bus Id : 0000:0c:00.0         : Healthy\n",
            "",
        ),
        cards: 4,
        sick_index: 1,
        sick_uuid: "GPU-7137d9debec858c1",
        reason: "hy-smi --healthcheck reports \"Warning\" for DCU 0000:0c:00.0: drain the node",
    },
    Case {
        manufacturer: Manufacturer::Thead,
        host: "thead-16x-zw810e-ppu3-ecc-uncorrected",
        setup: &[],
        source: "commands/table/stdout",
        sick: None,
        healthy: Reading::Replace(
            "| 00000000:AA:00.0     |                    2 |",
            "| 00000000:AA:00.0     |                    0 |",
        ),
        unread: Reading::Replace(
            "| 00000000:AA:00.0     |                    2 |",
            "| 00000000:AA:00.0     |                  N/A |",
        ),
        cards: 16,
        sick_index: 3,
        sick_uuid: "GPU-019e2226-8261-0222-0000-0000a0490d60",
        reason: "2 uncorrectable volatile ECC errors",
    },
];

impl Case {
    /// Copies the recorded host with `boot` as its boot id, then makes the setup's edits.
    fn copy(&self, boot: &str) -> tempfile::TempDir {
        let host = copy_host(self.host, boot);
        for (file, reading) in self.setup {
            write_reading(self.host, host.path(), file, Some(*reading));
        }
        host
    }

    /// Makes the host's source read sick (`None`) or as `reading`.
    fn read(&self, host: &Path, reading: Option<Reading>) {
        write_reading(self.host, host, self.source, reading.or(self.sick));
    }

    fn whole(&self) -> &'static str {
        whole_resource(self.manufacturer)
    }
}

/// Writes `file` of the copied `host` as recorded in `recorded` (`None`) or as `reading`.
fn write_reading(recorded: &str, host: &Path, file: &str, reading: Option<Reading>) {
    let recorded = accel_testkit::recorded_host(recorded);
    let original = std::fs::read_to_string(recorded.join(file)).unwrap();
    let text = match reading {
        None | Some(Reading::Recorded) => original,
        Some(Reading::Text(text)) => text.to_string(),
        Some(Reading::Replace(from, to)) => {
            assert!(original.contains(from), "{file}: {from}");
            original.replace(from, to)
        }
        Some(Reading::CopyOf(other)) => std::fs::read_to_string(recorded.join(other)).unwrap(),
    };
    std::fs::write(host.join(file), text).unwrap();
}

async fn start(case: &Case, host: &Path, options: DaemonOptions) -> Rig {
    let data = options.data_dir.clone();
    let mut node = Node::open(host).unwrap();
    node.commands = Box::new(Rereading(host.to_path_buf()));
    let daemon = Arc::new(Daemon::prepare(node, options).unwrap());
    Rig::start(daemon, &data, backend_plugin_config, &[case.whole()]).await
}

/// The sick accelerator's health reasons in the daemon's inventory.
fn reasons(daemon: &Daemon, uuid: &str) -> Vec<String> {
    daemon
        .inventory()
        .manufacturers
        .iter()
        .flat_map(|s| s.accelerators.iter())
        .find(|a| a.uuid.as_deref() == Some(uuid))
        .map(|a| a.health_reasons.clone())
        .unwrap_or_else(|| panic!("{uuid} is not in the inventory"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sick_reading_takes_the_accelerator_out_until_it_clears_and_stands_for_the_boot() {
    for case in &CASES {
        let m = case.manufacturer;
        let host = case.copy(BOOT);
        case.read(host.path(), Some(case.healthy));
        let data = tempfile::tempdir().unwrap();
        let data = data_dir(&data);
        let mut registry = prometheus_client::registry::Registry::with_prefix("device_manager");
        let mut options = super::test_support::options(m, &data);
        options.metrics = DaemonMetrics::register(&mut registry);
        let rig = start(case, host.path(), options).await;
        registry.register_collector(Box::new(rig.daemon.accelerator_metrics(Default::default())));
        let whole = case.whole();
        assert_eq!(rig.count(whole, "Healthy"), case.cards, "{m}");

        // A Pod holds every accelerator, the one that falls sick among them.
        let count = case.cards.to_string();
        rig.kubelet.create(testing::pod(
            "uid-a",
            1_700_000_000,
            &[("main", &[(whole, count.as_str())])],
        ));
        tokio::time::timeout(SETTLE, rig.kubelet.admit("uid-a"))
            .await
            .unwrap_or_else(|_| panic!("{m}: admitting a Pod hung"))
            .unwrap_or_else(|e| panic!("{m}: every card is granted: {e}"));
        let grant = || {
            let ledger = rig.plugins.as_ref().unwrap().ledger();
            let grants: Vec<Vec<u32>> = ledger
                .grants()
                .values()
                .map(|g| g.accelerators.clone())
                .collect();
            grants
        };
        let all: Vec<u32> = (0..case.cards as u32).collect();
        assert_eq!(grant(), std::slice::from_ref(&all), "{m}");

        // The source reads the accelerator sick: out of service, named everywhere, grant kept.
        case.read(host.path(), None);
        refresh(&rig.daemon).await;
        rig.wait_health(case.sick_uuid, "Unhealthy", SETTLE).await;
        assert_eq!(rig.count(whole, "Healthy"), case.cards - 1, "{m}");
        let sick = reasons(&rig.daemon, case.sick_uuid);
        assert!(
            sick.len() == 1 && sick[0].starts_with(case.reason),
            "{m}: {sick:?}"
        );
        let condition = healthy_condition(&rig.daemon);
        assert_eq!(condition.status, ConditionStatus::False, "{m}");
        assert!(
            condition.message.contains(case.sick_uuid) && condition.message.contains(case.reason),
            "{m}: {}",
            condition.message
        );
        let samples = scrape(&registry);
        let index = case.sick_index.to_string();
        assert_eq!(
            samples.get(
                "device_manager_accelerator_healthy",
                &[
                    ("manufacturer", m.name()),
                    ("index", index.as_str()),
                    ("uuid", case.sick_uuid)
                ]
            ),
            Some(0.0),
            "{m}"
        );
        let healthy = samples
            .all("device_manager_accelerator_healthy")
            .into_iter()
            .filter(|(_, v)| *v == 1.0)
            .count();
        assert_eq!(healthy, case.cards - 1, "{m}");
        assert_eq!(
            grant(),
            std::slice::from_ref(&all),
            "{m}: the running Pod keeps its grant"
        );
        assert!(
            !faults_file(&data).contains(case.sick_uuid),
            "{m}: the driver holds the state; nothing is recorded for it"
        );

        // The source stops giving a reading: no reading is not "healthy", the accelerator stays
        // out on its last one.
        case.read(host.path(), Some(case.unread));
        refresh(&rig.daemon).await;
        assert_eq!(rig.health(case.sick_uuid), "Unhealthy", "{m}: unread");
        assert_eq!(reasons(&rig.daemon, case.sick_uuid), sick, "{m}");

        // The reading clears: back in service, the grant as it was.
        case.read(host.path(), Some(case.healthy));
        refresh(&rig.daemon).await;
        rig.wait_health(case.sick_uuid, "Healthy", SETTLE).await;
        assert_eq!(rig.count(whole, "Healthy"), case.cards, "{m}");
        assert_eq!(
            healthy_condition(&rig.daemon).status,
            ConditionStatus::True,
            "{m}"
        );
        assert_eq!(grant(), [all], "{m}");

        // Sick again, then a restart in the same boot: the driver still says so.
        case.read(host.path(), None);
        refresh(&rig.daemon).await;
        rig.wait_health(case.sick_uuid, "Unhealthy", SETTLE).await;
        rig.stop().await;
        let rig = start(case, host.path(), super::test_support::options(m, &data)).await;
        assert_eq!(
            rig.health(case.sick_uuid),
            "Unhealthy",
            "{m}: after a restart"
        );
        assert_eq!(rig.count(whole, "Healthy"), case.cards - 1, "{m}");
        rig.stop().await;

        // A reboot: the driver's state and counters start afresh, and nothing of ours stands.
        set_boot(host.path(), "a-new-boot");
        case.read(host.path(), Some(case.healthy));
        let rig = start(case, host.path(), super::test_support::options(m, &data)).await;
        assert_eq!(rig.health(case.sick_uuid), "Healthy", "{m}: after a reboot");
        assert!(rig.daemon.conditions().is_empty(), "{m}");
        rig.stop().await;
    }
}
