//! What the node daemon shows the cluster, built from what it knows: the detection the loop last
//! decided to publish, the plugins' ledger and this node's Pods, folded into accel-kube's
//! [`Desired`] (the NodeFeature's labels, the `Devices` spec and status with their conditions
//! and faults, the Node's capacity keys, each Pod's `device.gpustack.ai/accelerator.allocated`
//! annotation, a Warning Event on the Node per hardware-class fault).
//!
//! [`desired`] is a pure function of those inputs; [`Feed`] recomputes it whenever one of them
//! changes and hands it to the publisher's `watch` channel, which never blocks: Allocate never
//! waits on the API server (DESIGN.md, "Restart"; issue 5). Before the first detection nothing is
//! sent, so nothing is published. How the cluster is written is accel-kube's `publish`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use accel_core::Manufacturer;
use accel_core::capacity::node_capacity;
use accel_core::devices::{
    AcceleratorFault, Condition, DetectionReport, DevicesSpec, DevicesStatus, FaultClass,
    allocations, settle_conditions,
};
use accel_core::interfaces::{DeviceInterface, PciPlace};
use accel_core::inventory::{Inventory, ManufacturerInventory};
use accel_core::ledger::units::slices_per_accelerator;
use accel_core::ledger::{Ledger, Policy, partitions};
use accel_core::resources::KeyGrammar;
use accel_kube::publish::{Desired, NodeEvent, pod_annotations};
use accel_plugin::PluginHandle;
use accel_plugin::pods::{Pod, PodSource};
use k8s_openapi::chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::watch;

use crate::daemon::{Published, seats_with};
use crate::network::Network;

/// One moment's inputs of [`desired`].
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// The manufacturer this daemon serves.
    pub manufacturer: Manufacturer,
    /// The inventory as last detected, health applied (carried forward over a failed pass).
    pub inventory: &'a Inventory,
    /// Why the last pass could not measure, when it could not.
    pub failure: Option<&'a str>,
    /// When the last pass that measured ran.
    pub detected_at: SystemTime,
    /// The plugins' ledger, once they serve.
    pub ledger: Option<&'a Ledger>,
    /// This node's Pods as the watch last saw them.
    pub pods: &'a [Pod],
    /// Whether logical slices are offered here (the preload library for the node's CUDA major
    /// is present).
    pub slices: bool,
    /// The faults raised this boot, per accelerator.
    pub faults: &'a [AcceleratorFault],
    /// The node's network interfaces as last published (`None`: never enumerated).
    pub interfaces: Option<&'a [DeviceInterface]>,
    /// Where the accelerators sit on the bus, for `rdma.distance`.
    pub accelerator_places: &'a [PciPlace],
}

/// RFC 3339, to the second, in UTC: the form Kubernetes writes its own times in.
pub fn rfc3339(time: SystemTime) -> String {
    DateTime::<Utc>::from(time).to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The whole state the cluster should show for `snapshot`. `previous` (what was sent last) keeps
/// the conditions' transition times and says which Pods had an annotation to remove.
pub fn desired(
    snapshot: &Snapshot<'_>,
    previous: Option<&Desired>,
    grammar: &KeyGrammar,
    now: SystemTime,
) -> Desired {
    let slices = |m: Manufacturer| {
        if snapshot.slices {
            slices_per_accelerator(m)
        } else {
            None
        }
    };
    let mut spec =
        DevicesSpec::from_inventory_with(snapshot.inventory, slices, grammar.group_naming());
    spec.interfaces = snapshot.interfaces.map(<[DeviceInterface]>::to_vec);
    let mut report = DetectionReport {
        last_detected_at: Some(rfc3339(snapshot.detected_at)),
        failures: BTreeMap::new(),
    };
    if let Some(why) = snapshot.failure {
        report
            .failures
            .insert(snapshot.manufacturer, why.to_string());
    }
    let conditions = settle_conditions(
        previous.map_or(&[][..], |p| &p.devices_status.conditions[..]),
        [Condition::detection(&report), Condition::health(&spec)],
        &rfc3339(now),
    );
    // Capacity follows what was detected, whether or not the plugins serve yet: the scheduler
    // needs the budget keys as soon as the tokens appear.
    let seats = seats_with(
        snapshot.inventory,
        snapshot.manufacturer,
        slices(snapshot.manufacturer).unwrap_or(0),
    );
    // Partition profiles: each partitioned accelerator's allocated and placeable instances, from
    // the ledger's grants; before the plugins serve, an empty ledger over the detected seats
    // (every profile at its static ceiling, never 0).
    let unserved;
    let ledger_now = match snapshot.ledger {
        Some(ledger) => ledger,
        None => {
            unserved = Ledger::new(seats.clone(), Policy::default());
            &unserved
        }
    };
    let partition_occupancy = partitions::occupancies(ledger_now);
    let capacity = node_capacity(
        grammar,
        snapshot.manufacturer,
        &seats,
        &partitions::node_profiles(&partition_occupancy),
    );
    let empty = BTreeMap::new();
    let previous_annotations = previous.map_or(&empty, |p| &p.annotations);
    let (accelerators, annotations) = match snapshot.ledger {
        Some(ledger) => (
            allocations(snapshot.manufacturer, ledger, &partition_occupancy),
            pod_annotations(snapshot.pods, ledger.grants(), previous_annotations),
        ),
        None => (Vec::new(), BTreeMap::new()),
    };
    let node_feature_labels = crate::network::node_feature_labels(
        snapshot.inventory,
        grammar.group_naming(),
        snapshot.interfaces,
        snapshot.accelerator_places,
    );
    Desired {
        node_feature_labels,
        devices_spec: spec,
        devices_status: DevicesStatus {
            accelerators,
            conditions,
            faults: snapshot.faults.to_vec(),
        },
        capacity,
        annotations,
        node_events: {
            let mut events = fault_events(snapshot.faults);
            events.extend(health_events(
                snapshot.inventory,
                &rfc3339(snapshot.detected_at),
            ));
            events
        },
    }
}

/// One Warning Event on the Node per hardware-class fault (seed 002: the GPU leaves service),
/// named by the accelerator, the condition and when it was first seen, so it is created once per
/// fault and boot even across daemon restarts.
pub fn fault_events(faults: &[AcceleratorFault]) -> BTreeMap<String, NodeEvent> {
    faults
        .iter()
        .filter(|f| f.class == FaultClass::Hardware)
        .map(|f| {
            let time = f.time.clone().unwrap_or_default();
            let stamp: String = time.chars().filter(char::is_ascii_digit).collect();
            let name = event_name(&format!("{}.{}.{stamp}", f.uuid, f.type_));
            let gpu = match f.index {
                Some(index) => format!("{} GPU {index} ({})", f.manufacturer, f.uuid),
                None => format!("{} GPU {}", f.manufacturer, f.uuid),
            };
            let event = NodeEvent {
                name: name.clone(),
                type_: "Warning".to_string(),
                reason: f.type_.clone(),
                message: format!(
                    "{gpu} is out of service (hardware-class fault {}): {}",
                    f.type_, f.message
                ),
                time,
            };
            (name, event)
        })
        .collect()
}

/// The reason of the Warning Event an accelerator that detection finds sick raises.
pub const UNHEALTHY_EVENT_REASON: &str = "AcceleratorUnhealthy";

/// One Warning Event on the Node per accelerator whose own readings fail the health rule (the
/// vendor tool's ECC counters, row remaps, a health state it prints: `health::counter_reasons`),
/// as a hardware-class kernel-log fault raises one ([`fault_events`], which covers those): the
/// accelerator leaves service, and the operator is told which and why. Named by the
/// accelerator and its reasons, so one sickness is told once, also across daemon restarts, and a
/// different reading is told again. `time` is when the reading was taken.
pub fn health_events(inventory: &Inventory, time: &str) -> BTreeMap<String, NodeEvent> {
    let mut events = BTreeMap::new();
    for section in &inventory.manufacturers {
        for a in &section.accelerators {
            let reasons = accel_core::health::counter_reasons(a);
            let Some(uuid) = a.uuid.as_deref().filter(|_| !reasons.is_empty()) else {
                continue;
            };
            let said = reasons.join("; ");
            let name = event_name(&format!("{uuid}.unhealthy.{:016x}", fnv1a(said.as_bytes())));
            let event = NodeEvent {
                name: name.clone(),
                type_: "Warning".to_string(),
                reason: UNHEALTHY_EVENT_REASON.to_string(),
                message: format!(
                    "{} accelerator {} ({uuid}) is out of service: {said}",
                    section.name, a.index
                ),
                time: time.to_string(),
            };
            events.insert(name, event);
        }
    }
    events
}

/// FNV-1a, 64 bits: a name part that is the same on every build and every run (the standard
/// library's hasher promises neither).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A DNS-subdomain Event name from free text: lower case, `[a-z0-9.-]` kept, others to `-`.
fn event_name(text: &str) -> String {
    let name: String = text
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(253)
        .collect();
    name.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// How long the feed lets a burst of changes settle before it recomputes what to publish. On
/// a real kubelet, computing and publishing beside an admission cost each Allocate about 1 ms
/// (two cores shared with the kubelet and the API server: issue 10's rig runs); the publisher
/// is asynchronous anyway, and a tenth of a second is nothing to the cluster's readers.
pub const FEED_SETTLE: Duration = Duration::from_millis(100);

/// Recomputes [`desired`] whenever the detection, the ledger or the Pods change (a burst of
/// changes once, [`FEED_SETTLE`] after it began), and sends it to the publisher.
pub struct Feed {
    /// The resource names and the group ids in force ([`KeyGrammar::group_naming`]).
    pub grammar: KeyGrammar,
    /// Whether logical slices are offered for a detected section (the preload library for its
    /// CUDA major is present); asked at each update, as the section may change.
    pub slices: Arc<dyn Fn(&ManufacturerInventory) -> bool + Send + Sync>,
    pub pods: Arc<dyn PodSource>,
    pub detected: watch::Receiver<Option<Published>>,
    /// The running plugins, once they serve.
    pub plugins: watch::Receiver<Option<PluginHandle>>,
    pub out: watch::Sender<Option<Desired>>,
    /// The node's network watch (`None`: no interfaces published by this feed).
    pub network: Option<Arc<Network>>,
}

impl Feed {
    /// Sends the state for what is known now; returns whether it differed from the last one.
    pub fn update(&self) -> bool {
        let Some(detected) = self.detected.borrow().clone() else {
            return false;
        };
        let ledger = self.plugins.borrow().as_ref().map(PluginHandle::ledger);
        let pods = self.pods.pods().unwrap_or_default();
        let interfaces = self.network.as_ref().and_then(|n| n.current());
        let places = match (&self.network, &interfaces) {
            (Some(network), Some(_)) => network.accelerator_places(&detected.inventory),
            _ => Vec::new(),
        };
        let snapshot = Snapshot {
            manufacturer: detected.manufacturer,
            inventory: &detected.inventory,
            failure: detected.failure.as_deref(),
            detected_at: detected.detected_at,
            ledger: ledger.as_ref(),
            pods: &pods,
            slices: detected
                .inventory
                .manufacturer(detected.manufacturer)
                .is_some_and(|section| (self.slices)(section)),
            faults: &detected.faults,
            interfaces: interfaces.as_deref().map(Vec::as_slice),
            accelerator_places: &places,
        };
        let previous = self.out.borrow().clone();
        let next = desired(
            &snapshot,
            previous.as_ref(),
            &self.grammar,
            SystemTime::now(),
        );
        self.out.send_if_modified(|current| {
            if current.as_ref() == Some(&next) {
                false
            } else {
                *current = Some(next);
                true
            }
        })
    }

    /// Runs until the detection channel closes.
    pub async fn run(mut self) {
        let mut pod_changes = self.pods.changes();
        let mut network_changes = match &self.network {
            Some(network) => network.published(),
            None => watch::channel(None).1,
        };
        let has_network = self.network.is_some();
        let mut ledger_changes: Option<watch::Receiver<u64>> = None;
        loop {
            if ledger_changes.is_none() {
                ledger_changes = self.plugins.borrow().as_ref().map(PluginHandle::changes);
            }
            self.update();
            let ledger_changed = async {
                match ledger_changes.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = self.detected.changed() => if changed.is_err() { return },
                changed = self.plugins.changed() => {
                    if changed.is_err() { return }
                    ledger_changes = None;
                }
                changed = pod_changes.changed() => if changed.is_err() { return },
                changed = network_changes.changed(), if has_network => if changed.is_err() { return },
                alive = ledger_changed => if !alive { ledger_changes = None },
            }
            // One update for a burst (a grant, then its Pod's status changes), computed after
            // the burst's Allocate answers are out rather than beside them.
            tokio::time::sleep(FEED_SETTLE).await;
            pod_changes.borrow_and_update();
            if let Some(rx) = ledger_changes.as_mut() {
                rx.borrow_and_update();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::time::SystemTime;

    use accel_core::Manufacturer;
    use accel_host::pci::PciClassPrefixes;
    use accel_nvidia::detector::Deadlines;

    use super::{Snapshot, desired};
    use crate::node::Node;
    use crate::settings::Settings;

    /// The capacity the node publishes follows the resource name setting, as the plugins'
    /// resources do (one grammar from one settings value).
    #[test]
    fn published_capacity_follows_the_resource_name_setting() {
        let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts/hgx-h100-8gpu");
        let node = Node::open(&host).unwrap();
        let (inventory, _) = node
            .collect(None, &PciClassPrefixes::default(), Deadlines::default())
            .unwrap();
        let settings = Settings::from_vars(&BTreeMap::from([(
            "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME".to_string(),
            "example.com/gpu".to_string(),
        )]))
        .unwrap();
        let snapshot = Snapshot {
            manufacturer: Manufacturer::Nvidia,
            inventory: &inventory,
            failure: None,
            detected_at: SystemTime::UNIX_EPOCH,
            ledger: None,
            pods: &[],
            slices: true,
            faults: &[],
            interfaces: None,
            accelerator_places: &[],
        };
        let wanted = desired(&snapshot, None, &settings.grammar(), SystemTime::UNIX_EPOCH);
        let keys: Vec<&String> = wanted.capacity.keys().collect();
        assert!(!keys.is_empty());
        assert!(
            keys.iter().all(|k| k.starts_with("example.com/gpu.")),
            "{keys:?}"
        );
        assert_eq!(
            wanted.capacity["example.com/gpu.sliced.units"],
            8 * 1_600_000
        );
        let default = desired(
            &snapshot,
            None,
            &Settings::default().grammar(),
            SystemTime::UNIX_EPOCH,
        );
        assert!(default.capacity.contains_key("nvidia.com/gpu.sliced.units"));
    }
}

#[cfg(test)]
mod health_event_tests {
    use accel_core::Manufacturer;
    use accel_core::inventory::{
        Accelerator, Ecc, Inventory, ManufacturerInventory, RemappedRows, Source,
    };

    use super::{UNHEALTHY_EVENT_REASON, health_events};

    fn card(index: u32, uuid: &str) -> Accelerator {
        let mut a = Accelerator::new(index, Source::Driver);
        a.uuid = Some(uuid.to_string());
        a
    }

    fn node(cards: Vec<Accelerator>) -> Inventory {
        Inventory {
            manufacturers: vec![ManufacturerInventory {
                accelerators: cards,
                ..ManufacturerInventory::empty(Manufacturer::Cambricon)
            }],
        }
    }

    /// Issue 43: a card its own readings take out of service raises one Warning Event naming
    /// it and why, whatever the manufacturer; a healthy card and one out only for a kernel-log
    /// fault (told by `fault_events`) raise none here.
    #[test]
    fn a_card_its_readings_take_out_of_service_raises_one_warning_event() {
        let mut sick = card(3, "MLU-3");
        sick.reported_faults = Some(vec![
            "cnmon reports Health State \"In Problem\" for card 3 (0000:73:00.0)".into(),
        ]);
        let mut ecc = card(1, "MLU-1");
        ecc.ecc = Some(Ecc {
            volatile_uncorrected: Some(2),
            ..Ecc::default()
        });
        let mut kernel_only = card(2, "MLU-2");
        kernel_only.healthy = false;
        kernel_only.health_reasons = vec!["Xid79: GPU has fallen off the bus".into()];
        let inventory = node(vec![card(0, "MLU-0"), ecc, kernel_only, sick]);
        let events = health_events(&inventory, "2026-12-04T20:00:00Z");
        let told: Vec<(&str, &str, &str)> = events
            .values()
            .map(|e| (e.type_.as_str(), e.reason.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(
            told,
            [
                (
                    "Warning",
                    UNHEALTHY_EVENT_REASON,
                    "cambricon accelerator 1 (MLU-1) is out of service: 2 uncorrectable volatile ECC errors"
                ),
                (
                    "Warning",
                    UNHEALTHY_EVENT_REASON,
                    "cambricon accelerator 3 (MLU-3) is out of service: cnmon reports Health State \"In Problem\" for card 3 (0000:73:00.0)"
                ),
            ]
        );
        // The same reading later (another pass, a restarted daemon) is the same Event; a
        // different reading is another.
        assert_eq!(
            health_events(&inventory, "2026-12-04T21:00:00Z")
                .keys()
                .collect::<Vec<_>>(),
            events.keys().collect::<Vec<_>>()
        );
        let mut worse = inventory.clone();
        worse.manufacturers[0].accelerators[1].ecc = Some(Ecc {
            volatile_uncorrected: Some(5),
            ..Ecc::default()
        });
        let again = health_events(&worse, "2026-12-04T21:00:00Z");
        assert_eq!(again.len(), 2);
        assert_ne!(
            again.keys().collect::<Vec<_>>(),
            events.keys().collect::<Vec<_>>()
        );
        // Recovered: no Event wanted (the one sent expires on its own).
        let mut well = inventory;
        well.manufacturers[0].accelerators[1].ecc = None;
        well.manufacturers[0].accelerators[3].reported_faults = Some(Vec::new());
        well.manufacturers[0].accelerators[3].remapped_rows = Some(RemappedRows::default());
        assert!(health_events(&well, "2026-12-04T22:00:00Z").is_empty());
        for name in events.keys() {
            assert!(
                name.len() <= 253
                    && name.chars().all(|c| c.is_ascii_lowercase()
                        || c.is_ascii_digit()
                        || c == '.'
                        || c == '-'),
                "{name}"
            );
        }
    }
}
