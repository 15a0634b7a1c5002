//! Issue 43, through the daemon, for the manufacturers whose health is what their own tool
//! reads on each pass (Cambricon: `cnmon info`'s Health State; Moore Threads: `mthreads-gmi
//! -q`'s volatile uncorrected DRAM ECC counter; MetaX: `mx-smi --count-ecc`'s DRAM
//! uncorrectable count). On a running node whose tool then reports one
//! accelerator sick, that accelerator's tokens turn Unhealthy in ListAndWatch, the `Devices`
//! Healthy condition and the health metric name it, and the grant of a Pod already running on
//! it stands; a reading that clears brings it back; a daemon restarted in the same boot reads
//! it sick again, with nothing of it in `faults.json` (the tool holds the state, not us); after
//! a reboot the tool's fresh reading is all there is. Each manufacturer's sick recorded host,
//! its own responder from its backend's factory, the kubelet emulator over real unix sockets.

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

const BOOT: &str = "3c0e9a51-7d2b-4f18-a6c4-9b5e1d2f7a80";

/// A recorded host where one accelerator is sick, and how its tool's output reads healthy.
struct Case {
    manufacturer: Manufacturer,
    host: &'static str,
    /// The recorded output that carries the sick reading, relative to the host.
    output: &'static str,
    /// The sick reading and the same reading healthy.
    sick: &'static str,
    healthy: &'static str,
    cards: usize,
    sick_index: u32,
    sick_uuid: &'static str,
    reason: &'static str,
}

const CASES: [Case; 3] = [
    Case {
        manufacturer: Manufacturer::Cambricon,
        host: "cambricon-8x-mlu370-card3-in-problem",
        output: "commands/cnmon-info/stdout",
        sick: ": In Problem",
        healthy: ": Good",
        cards: 8,
        sick_index: 3,
        sick_uuid: "MLU-3f9c03e1-7a52-4c0b-9d1e-5b3a0c7e0003",
        reason: "cnmon reports Health State \"In Problem\" for card 3 (0000:73:00.0): drain the node and check the card with cnmon info",
    },
    Case {
        manufacturer: Manufacturer::Mthreads,
        host: "mthreads-3x-s5000-gpu2-ecc",
        output: "commands/q/stdout",
        sick: "Uncorrectable : 2",
        healthy: "Uncorrectable : 0",
        cards: 3,
        sick_index: 2,
        sick_uuid: "1ed50002-0000-4000-8000-00000004c000",
        reason: "2 uncorrectable volatile ECC errors",
    },
    Case {
        manufacturer: Manufacturer::Metax,
        host: "metax-8x-c500-gpu1-dram-ue",
        output: "commands/mx-smi-count-ecc/stdout",
        sick: "Uncorrectable                        : 2",
        healthy: "Uncorrectable                        : 0",
        cards: 8,
        sick_index: 1,
        sick_uuid: "GPU-3fd4ee01-169c-6d31-f9dc-c2a90a440001",
        reason: "2 uncorrectable volatile ECC errors",
    },
];

impl Case {
    /// Makes the host's tool read as recorded (one accelerator sick) or every one healthy.
    fn read(&self, host: &Path, sick: bool) {
        let recorded = accel_testkit::recorded_host(self.host).join(self.output);
        let text = std::fs::read_to_string(recorded).unwrap();
        assert!(text.contains(self.sick), "{}", self.host);
        let text = if sick {
            text
        } else {
            text.replace(self.sick, self.healthy)
        };
        std::fs::write(host.join(self.output), text).unwrap();
    }

    fn whole(&self) -> &'static str {
        whole_resource(self.manufacturer)
    }
}

async fn start(case: &Case, host: &Path, options: DaemonOptions) -> Rig {
    let data = options.data_dir.clone();
    let mut node = Node::open(host).unwrap();
    node.commands = Box::new(Rereading(host.to_path_buf()));
    let daemon = Arc::new(Daemon::prepare(node, options).unwrap());
    Rig::start(daemon, &data, backend_plugin_config, &[case.whole()]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sick_reading_of_the_tool_takes_the_accelerator_out_until_it_clears() {
    for case in &CASES {
        let m = case.manufacturer;
        let host = copy_host(case.host, BOOT);
        case.read(host.path(), false);
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
        // One grant, of every accelerator.
        let all: Vec<Vec<u32>> = vec![(0..case.cards as u32).collect()];
        assert_eq!(grant(), all, "{m}");

        // The tool reads the accelerator sick: out of service, named everywhere, grant kept.
        case.read(host.path(), true);
        refresh(&rig.daemon).await;
        rig.wait_health(case.sick_uuid, "Unhealthy", SETTLE).await;
        assert_eq!(rig.count(whole, "Healthy"), case.cards - 1, "{m}");
        let sick = rig
            .daemon
            .inventory()
            .manufacturers
            .iter()
            .flat_map(|s| s.accelerators.clone())
            .find(|a| a.uuid.as_deref() == Some(case.sick_uuid))
            .unwrap();
        assert_eq!(sick.health_reasons, [case.reason], "{m}");
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
        let healthy: Vec<_> = samples
            .all("device_manager_accelerator_healthy")
            .into_iter()
            .filter(|(_, v)| *v == 1.0)
            .collect();
        assert_eq!(healthy.len(), case.cards - 1, "{m}");
        assert_eq!(grant(), all, "{m}: the running Pod keeps its grant");
        assert!(
            !faults_file(&data).contains(case.sick_uuid),
            "{m}: the tool holds the state; nothing is recorded for it"
        );

        // The reading clears: back in service, the grant as it was.
        case.read(host.path(), false);
        refresh(&rig.daemon).await;
        rig.wait_health(case.sick_uuid, "Healthy", SETTLE).await;
        assert_eq!(rig.count(whole, "Healthy"), case.cards, "{m}");
        assert_eq!(
            healthy_condition(&rig.daemon).status,
            ConditionStatus::True,
            "{m}"
        );
        assert_eq!(grant(), all, "{m}");

        // Sick again, then a restart in the same boot: the tool still says so.
        case.read(host.path(), true);
        refresh(&rig.daemon).await;
        rig.wait_health(case.sick_uuid, "Unhealthy", SETTLE).await;
        rig.stop().await;
        let options = super::test_support::options(m, &data);
        let rig = start(case, host.path(), options).await;
        assert_eq!(
            rig.health(case.sick_uuid),
            "Unhealthy",
            "{m}: after a restart"
        );
        assert_eq!(rig.count(whole, "Healthy"), case.cards - 1, "{m}");
        rig.stop().await;

        // A reboot: the driver's state and counters start afresh, and nothing of ours stands.
        set_boot(host.path(), "a-new-boot");
        case.read(host.path(), false);
        let rig = start(case, host.path(), super::test_support::options(m, &data)).await;
        assert_eq!(rig.health(case.sick_uuid), "Healthy", "{m}: after a reboot");
        assert!(rig.daemon.conditions().is_empty(), "{m}");
        rig.stop().await;
    }
}
