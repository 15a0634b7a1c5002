//! Ascend over real unix sockets: the plugin with accel-ascend's responder against the kubelet
//! emulator, on the recorded 310P host whose physical ids are not 0..N-1 (NPU IDs 1, 2, 4, 5
//! with two chips each, physical ids 2–5 and 8–11). Exclusive names the driver's ids in
//! `ASCEND_VISIBLE_DEVICES` and touches no flag; shared turns the container-share flag on with
//! one recorded `npu-smi set` and reads it back; a refused write fails the allocation with
//! spec §4.2's message; a slice's `npu_info.config` is exact; a two-NPU slice is refused.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use accel_ascend::detector::{self, DetectOptions};
use accel_ascend::responder::AscendResponder;
use accel_ascend::share::{self, ShareState};
use accel_backend::respond::{EngineFacts, InjectionStrategy, ResponderSetup};
use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_core::ledger::Seat;
use accel_host::{Commands, FsHost, RecordedCommands};
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::Offer;
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, Kubelet};
use accel_plugin::{Config, DevicePlugins};
use tonic::Code;

const NPU: &str = "huawei.com/npu";
const SHARED: &str = "huawei.com/npu.shared";
const SLICED: &str = "huawei.com/npu.sliced";
const VISIBILITY: &str = "device.gpustack.ai/ascend.visibility";
const HOST: &str = "ascend-310p-2chips-gapped";

struct Rig {
    dir: tempfile::TempDir,
    host: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: DevicePlugins,
}

/// The recorded host's chips, as the detector reads them.
fn accelerators(host: &Path) -> Vec<Accelerator> {
    let files = FsHost::new(host.join("root"));
    let commands = RecordedCommands::load(host).unwrap();
    detector::detect(&files, &commands, DetectOptions::default())
        .unwrap()
        .accelerators
}

impl Rig {
    /// The plugins on a copy of the 310P host; `refuse`: chips whose flag write fails.
    async fn new(refuse: &[&str]) -> Rig {
        Rig::on(HOST, 8, refuse).await
    }

    /// The plugins on a copy of the recorded host `name`, which has `chips` chips.
    async fn on(name: &str, chips: usize, refuse: &[&str]) -> Rig {
        Rig::on_edited(name, chips, refuse, |_| {}).await
    }

    /// [`Rig::on`], the copy edited by `edit` before the plugins read it.
    async fn on_edited(name: &str, chips: usize, refuse: &[&str], edit: impl FnOnce(&Path)) -> Rig {
        let host = accel_testkit::copy_recorded(name);
        edit(host.path());
        let state = ShareState {
            refuse: refuse.iter().map(|s| s.to_string()).collect(),
            ..ShareState::default()
        };
        std::fs::write(
            host.path().join(share::STATE_FILE),
            serde_json::to_string(&state).unwrap(),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let accelerators = accelerators(host.path());
        assert_eq!(accelerators.len(), chips);
        let seats: Vec<Seat> = accelerators
            .iter()
            .map(|a| Seat::from_accelerator(a, 63))
            .collect();
        let commands: Arc<dyn Commands> = Arc::from(share::wrap(
            host.path(),
            Box::new(RecordedCommands::load(host.path()).unwrap()),
        ));
        let responder = Arc::new(AscendResponder::from_setup(ResponderSetup {
            scratch: None,
            strategy: InjectionStrategy::Envvar,
            runtime_major: Some(9),
            pod_dir_root: dir.path().join("data/pods"),
            preload_dir: dir.path().join("data/preload"),
            library_dir: "/var/lib/gpustack/operator/lib".into(),
            engine: Arc::new(EngineFacts::default()),
            accelerators,
            host: None,
            commands: Some(commands),
            runtime_class: None,
            writes: None,
        }));
        let config = Config {
            kubelet_dir: dir.path().join("kubelet"),
            data_dir: dir.path().join("data"),
            settings: Settings::default(),
            offer: Offer::of(Manufacturer::Ascend),
            seats,
            responder,
            poll_interval: Duration::from_millis(20),
            metrics: Default::default(),
            partitions: None,
        };
        let plugins = DevicePlugins::start(config, Arc::new(kubelet.pods().clone()))
            .await
            .unwrap();
        let resources = plugins.resources();
        let names: Vec<&str> = resources.iter().map(String::as_str).collect();
        kubelet.wait_for(&names).await;
        Rig {
            dir,
            host,
            kubelet,
            plugins,
        }
    }

    /// How many flag writes the replay saw (none recorded: none).
    fn flags_written(&self) -> u32 {
        std::fs::read_to_string(self.host.path().join(share::STATE_FILE))
            .ok()
            .and_then(|t| serde_json::from_str::<ShareState>(&t).ok())
            .map_or(0, |s| s.writes)
    }

    fn flags(&self) -> ShareState {
        let text = std::fs::read_to_string(self.host.path().join(share::STATE_FILE)).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

fn pod(uid: &str, containers: &[(&str, &[(&str, &str)])]) -> Pod {
    testing::pod(uid, 1, containers)
}

fn envs(admission: &Admission, container: &str, resource: &str) -> BTreeMap<String, String> {
    admission[container][resource]
        .envs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn mounts(admission: &Admission, container: &str, resource: &str) -> Vec<(String, String, bool)> {
    admission[container][resource]
        .mounts
        .iter()
        .map(|m| (m.container_path.clone(), m.host_path.clone(), m.read_only))
        .collect()
}

fn visible(value: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("ASCEND_VISIBLE_DEVICES".to_string(), value.to_string())])
}

#[tokio::test]
async fn exclusive_names_the_drivers_physical_ids_and_leaves_the_flag_alone() {
    let rig = Rig::new(&[]).await;
    rig.kubelet.create(pod("a", &[("main", &[(NPU, "3")])]));
    let admission = rig.kubelet.admit("a").await.unwrap();
    // Indexes 0, 1, 2 are NPU 1 chips 0 and 1 and NPU 2 chip 0: physical ids 2, 3, 4.
    assert_eq!(envs(&admission, "main", NPU), visible("2,3,4"));
    assert!(
        admission["main"][NPU].devices.is_empty(),
        "the runtime injects the nodes"
    );
    assert!(mounts(&admission, "main", NPU).is_empty());
    assert_eq!(rig.flags().writes, 0, "exclusive never touches the flag");
    assert!(rig.flags().on.is_empty());
}

#[tokio::test]
async fn shared_turns_the_flag_on_once_and_reads_it_back() {
    let rig = Rig::new(&[]).await;
    rig.kubelet.create(pod("a", &[("main", &[(SHARED, "1")])]));
    let a = rig.kubelet.admit("a").await.unwrap();
    let first = envs(&a, "main", SHARED)["ASCEND_VISIBLE_DEVICES"].clone();
    assert_eq!(
        rig.flags().writes,
        1,
        "one `npu-smi set -t device-share … -d 1`"
    );
    assert_eq!(rig.flags().on.len(), 1);
    rig.kubelet.create(pod("b", &[("main", &[(SHARED, "1")])]));
    let b = rig.kubelet.admit("b").await.unwrap();
    let second = envs(&b, "main", SHARED)["ASCEND_VISIBLE_DEVICES"].clone();
    let writes = if first == second { 1 } else { 2 };
    assert_eq!(
        rig.flags().writes,
        writes,
        "a chip whose flag reads on is not written again ({first} then {second})"
    );
}

#[tokio::test]
async fn a_refused_flag_write_fails_the_allocation_with_the_remedy() {
    let all: Vec<String> = [
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
        (4, 0),
        (4, 1),
        (5, 0),
        (5, 1),
    ]
    .iter()
    .map(|(c, d)| format!("{c}:{d}"))
    .collect();
    let refuse: Vec<&str> = all.iter().map(String::as_str).collect();
    let rig = Rig::new(&refuse).await;
    rig.kubelet.create(pod("a", &[("main", &[(SHARED, "1")])]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let message = err.message();
    let card = |c: &str| message.contains(c);
    assert!(
        card(
            "enable container-share mode of card 1 device 0: npu-smi set -t device-share -i 1 -c 0 -d 1: exited with status 255: Error: the device-share of the chip cannot be set (error code 8); enable it on the host with `npu-smi set -t device-share -i 1 -c 0 -d 1`"
        ),
        "{message}"
    );
    assert!(
        rig.plugins.ledger().grants().is_empty(),
        "the grant is given back"
    );
}

const SLICE: &[(&str, &str)] = &[
    (SLICED, "1"),
    ("huawei.com/npu.sliced.memory-percentage", "25"),
    ("huawei.com/npu.sliced.cores-percentage", "30"),
];

#[tokio::test]
async fn a_slice_writes_npu_info_config_byte_for_byte() {
    let rig = Rig::new(&[]).await;
    rig.kubelet.create(pod("a", &[("main", SLICE)]));
    rig.kubelet.create(pod("b", &[("main", SLICE)]));
    let a = rig.kubelet.admit("a").await.unwrap();
    let b = rig.kubelet.admit("b").await.unwrap();
    let uuid = accelerators(rig.host.path())[0].uuid.clone().unwrap();
    let shm = uuid.replace(' ', "-");
    let pods = rig.dir.path().join("data/pods");
    let config = |pod: &str| {
        std::fs::read_to_string(
            pods.join(pod)
                .join("c-main/etc/enpu/vcann-rt/npu_info.config"),
        )
        .unwrap()
    };
    // 25% of 21525 MiB, floored; both slices on physical chip 2, virtual ids 0 and 1.
    assert_eq!(
        config("a"),
        format!(
            "physical-npu-id=2\nvirtual-npu-id=0\naicore-quota=30\nmemory-quota=5381\nshm-id={shm}\nscheduling-policy=2\n"
        )
    );
    assert_eq!(
        config("b"),
        format!(
            "physical-npu-id=2\nvirtual-npu-id=1\naicore-quota=30\nmemory-quota=5381\nshm-id={shm}\nscheduling-policy=2\n"
        )
    );
    let mut expected = visible("2");
    expected.insert("ENPU_LOG_LEVEL".into(), "1".into());
    expected.insert("ENPU_DSMI_HOOK".into(), "1".into());
    assert_eq!(envs(&a, "main", SLICED), expected);
    let build = "/var/lib/gpustack/operator/lib/ascend/cann-9-310p";
    assert_eq!(
        mounts(&a, "main", SLICED),
        vec![
            (
                "/etc/ld.so.preload".to_string(),
                rig.dir
                    .path()
                    .join("data/preload/ascend/ld.so.preload")
                    .display()
                    .to_string(),
                true
            ),
            (
                "/opt/enpu/vcann-rt/lib/libvruntime.so".into(),
                format!("{build}/lib/libvruntime.so"),
                true
            ),
            (
                "/opt/enpu/vcann-rt/tools/enpu-monitor".into(),
                format!("{build}/tools/enpu-monitor"),
                true
            ),
            (
                "/etc/enpu/vcann-rt/npu_info.config".into(),
                pods.join("a/c-main/etc/enpu/vcann-rt/npu_info.config")
                    .display()
                    .to_string(),
                true
            ),
            ("/dev/shm".into(), "/dev/shm".into(), false),
        ]
    );
    let preload =
        std::fs::read_to_string(rig.dir.path().join("data/preload/ascend/ld.so.preload")).unwrap();
    assert_eq!(
        preload,
        "/usr/local/dcmi/libdcmi.so\n/usr/local/Ascend/driver/lib64/driver/libdcmi.so\n/opt/enpu/vcann-rt/lib/libvruntime.so\n"
    );
    assert_eq!(envs(&b, "main", SLICED)["ASCEND_VISIBLE_DEVICES"], "2");
    assert!(
        rig.flags().on.contains(&"1:0".to_string()),
        "slices need the flag too"
    );
}

/// spec §5.3: a retried Allocate of a slice reuses the virtual id in the container's own
/// `npu_info.config` (when it names the same physical chip), even where a lower one has come
/// free meanwhile; a new container takes the lowest free.
#[tokio::test]
async fn a_retried_slice_keeps_its_virtual_id() {
    let rig = Rig::new(&[]).await;
    let pods = rig.dir.path().join("data/pods");
    let config = |pod: &str| {
        std::fs::read_to_string(
            pods.join(pod)
                .join("c-main/etc/enpu/vcann-rt/npu_info.config"),
        )
        .unwrap_or_default()
    };
    let virtual_id = |pod: &str| {
        config(pod)
            .lines()
            .find_map(|l| l.strip_prefix("virtual-npu-id=").map(str::to_string))
    };
    for uid in ["a", "b", "c"] {
        rig.kubelet.create(pod(uid, &[("main", SLICE)]));
    }
    rig.kubelet.admit("a").await.unwrap();
    rig.kubelet.admit("b").await.unwrap();
    let c = rig.kubelet.admit("c").await.unwrap();
    for (uid, id) in [("a", "0"), ("b", "1"), ("c", "2")] {
        assert!(
            config(uid).starts_with("physical-npu-id=2\n"),
            "{uid}: {}",
            config(uid)
        );
        assert_eq!(virtual_id(uid).as_deref(), Some(id), "{uid}");
    }
    // a goes: its file with it, so 0 is free on the chip again.
    rig.kubelet.delete("a");
    let wait = async {
        while pods.join("a").exists() || rig.plugins.ledger().grants().len() != 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("a's grant and working directory are reclaimed");
    // The kubelet retries c's Allocate: the same answer, the same virtual id (not the free 0).
    let held = rig.kubelet.held("c", "main", SLICED);
    let again = rig.kubelet.allocate_raw(SLICED, held).await.unwrap();
    assert_eq!(again.container_responses[0], c["main"][SLICED]);
    assert_eq!(virtual_id("c").as_deref(), Some("2"), "{}", config("c"));
    assert_eq!(virtual_id("b").as_deref(), Some("1"));
    assert_eq!(rig.plugins.ledger().grants().len(), 2, "charged once");
    // A new slice takes the lowest free id.
    rig.kubelet.create(pod("d", &[("main", SLICE)]));
    rig.kubelet.admit("d").await.unwrap();
    assert_eq!(virtual_id("d").as_deref(), Some("0"), "{}", config("d"));
}

/// On the 950 (V2) generation `ASCEND_VISIBLE_DEVICES` names the dcmi logic id (the card id,
/// `physicalIndexes[1]`), never the physical id, in every family; a slice's `npu_info.config`
/// still keys on the physical id (spec §4.1, §5.3). The host's physical ids are 4 and 5, its
/// logic ids 0 and 1.
#[tokio::test]
async fn the_950_names_its_logic_ids_and_its_slice_config_the_physical_id() {
    let rig = Rig::on("ascend-950pr-v2-remapped", 2, &[]).await;
    let chips = accelerators(rig.host.path());
    assert_eq!(
        chips
            .iter()
            .map(|a| a.physical_indexes.clone())
            .collect::<Vec<_>>(),
        [[4, 0, 0], [5, 1, 0]]
    );
    rig.kubelet.create(pod("a", &[("main", &[(NPU, "2")])]));
    let a = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(envs(&a, "main", NPU), visible("0,1"));
    // A slice, on a rig of its own (the exclusive grant holds both chips).
    let rig = Rig::on("ascend-950pr-v2-remapped", 2, &[]).await;
    rig.kubelet.create(pod("c", &[("main", SLICE)]));
    let c = rig.kubelet.admit("c").await.unwrap();
    let logic = envs(&c, "main", SLICED)["ASCEND_VISIBLE_DEVICES"].clone();
    let physical = if logic == "0" { 4 } else { 5 };
    assert!(logic == "0" || logic == "1", "{logic}");
    let config = std::fs::read_to_string(
        rig.dir
            .path()
            .join("data/pods/c/c-main/etc/enpu/vcann-rt/npu_info.config"),
    )
    .unwrap();
    assert!(
        config.starts_with(&format!("physical-npu-id={physical}\nvirtual-npu-id=0\n")),
        "{config}"
    );
    assert_eq!(
        rig.flags_written(),
        0,
        "a V2 driver declares no flag to write"
    );
}

#[tokio::test]
async fn a_slice_keeps_the_containers_own_enpu_variables() {
    let rig = Rig::new(&[]).await;
    let mut p = pod("a", &[("main", SLICE)]);
    p.containers[0]
        .env
        .insert("ENPU_LOG_LEVEL".into(), "3".into());
    rig.kubelet.create(p);
    let a = rig.kubelet.admit("a").await.unwrap();
    let env = envs(&a, "main", SLICED);
    assert!(!env.contains_key("ENPU_LOG_LEVEL"), "{env:?}");
    assert_eq!(env["ENPU_DSMI_HOOK"], "1");
}

#[tokio::test]
async fn the_sidecar_gets_the_owners_ids_and_the_flag() {
    let rig = Rig::new(&[]).await;
    rig.kubelet.create(pod(
        "a",
        &[("main", &[(NPU, "1")]), ("sshd", &[(VISIBILITY, "1")])],
    ));
    let admission = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(envs(&admission, "main", NPU), visible("2"));
    assert_eq!(envs(&admission, "sshd", VISIBILITY), visible("2"));
    assert!(mounts(&admission, "sshd", VISIBILITY).is_empty());
    assert_eq!(rig.flags().on, ["1:0"], "the sidecar is a second tenant");
}

const TOPO: &str = "HCCL_TOPO_FILE_PATH";

/// Spec §4.4 through the kubelet: the 950 server whose board (`Main Board ID : 0x23`, an A+K
/// board) and `-t spod-info` (`Super Pod Type : 3`) make it a 16P server answers every grant
/// of its NPUs — exclusive, shared, a slice — with `HCCL_TOPO_FILE_PATH` naming
/// `atlas_850_2.json`.
#[tokio::test]
async fn a_950_server_grant_names_its_hccl_topology_file() {
    let rig = Rig::on("ascend-950-server-16p", 16, &[]).await;
    rig.kubelet.create(pod("a", &[("main", &[(NPU, "2")])]));
    rig.kubelet.create(pod("b", &[("main", &[(SHARED, "1")])]));
    rig.kubelet.create(pod("c", &[("main", SLICE)]));
    let file = "/usr/local/Ascend/driver/topo/950/atlas_850_2.json";
    for (uid, resource) in [("a", NPU), ("b", SHARED), ("c", SLICED)] {
        let admission = rig.kubelet.admit(uid).await.unwrap();
        let envs = envs(&admission, "main", resource);
        assert_eq!(
            envs.get(TOPO).map(String::as_str),
            Some(file),
            "{uid}: {envs:?}"
        );
    }
}

/// A reading that does not resolve to one form — super-pod type 0 (an 8P server, or
/// MindCluster's "abnormal" default), or a 2P card's mainboard — gives no topology file: the
/// grant goes through without the variable, and `detect` says why.
#[tokio::test]
async fn a_950_whose_form_does_not_resolve_is_granted_without_a_topology_file() {
    let rewrite_all = |dir: &Path, command: &str, from: &str, to: &str| {
        for npu in 0..16 {
            let path = dir.join(format!("commands/{command}-{npu}/stdout"));
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.contains(from), "{}", path.display());
            std::fs::write(&path, text.replace(from, to)).unwrap();
        }
    };
    let zero = |dir: &Path| {
        rewrite_all(
            dir,
            "spod",
            "Super Pod Type                 : 3",
            "Super Pod Type                 : 0",
        )
    };
    let two_p = |dir: &Path| rewrite_all(dir, "board", "0x23", "0x6a(2P)");
    for (case, edit) in [("type 0", &zero as &dyn Fn(&Path)), ("2P card", &two_p)] {
        let rig = Rig::on_edited("ascend-950-server-16p", 16, &[], edit).await;
        let notes = {
            let files = FsHost::new(rig.host.path().join("root"));
            let commands = RecordedCommands::load(rig.host.path()).unwrap();
            detector::detect(&files, &commands, DetectOptions::default())
                .unwrap()
                .notes
        };
        assert!(
            notes
                .iter()
                .any(|n| n
                    .starts_with("HCCL_TOPO_FILE_PATH: no HCCL topology file for 16 950 NPU(s)")),
            "{case}: {notes:?}"
        );
        rig.kubelet.create(pod("a", &[("main", &[(NPU, "2")])]));
        let admission = rig.kubelet.admit("a").await.unwrap();
        let envs = envs(&admission, "main", NPU);
        assert_eq!(envs.get(TOPO), None, "{case}: {envs:?}");
        assert!(envs.contains_key("ASCEND_VISIBLE_DEVICES"), "{case}");
    }
}
