//! Iluvatar and Moore Threads over real unix sockets: the plugin with accel-iluvatar's and
//! accel-mthreads' responders against the kubelet emulator. Their runtimes do the injecting, so
//! every family's answer is environment only — exactly `IX_VISIBLE_DEVICES=<UUIDs>` or
//! `MTHREADS_VISIBLE_DEVICES=<IDs>`, no device node, no mount — and a slice adds, byte for byte
//! as the specs' examples (§4.3 of each), HAMi-core's budgets and five mounts, or the two QoS
//! variables. A sliced Iluvatar Pod without `runtimeClassName: iluvatar` is refused, saying why
//! (and that the webhook attaches the class where it exists); a Moore Threads slice without a
//! memory dimension is refused with the spec's "derive sliced memory limit".

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use accel_backend::chores::PodDirs;
use accel_backend::respond::Responder;
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use accel_core::inventory::{Accelerator, Source};
use accel_core::ledger::Seat;
use accel_iluvatar::responder::IluvatarResponder;
use accel_mthreads::responder::MthreadsResponder;
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::Offer;
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, Kubelet};
use accel_plugin::{Config, DevicePlugins};
use tonic::Code;

/// Two cards of `vram` MiB of `m`, named as their detector names them.
fn accelerators(m: Manufacturer, vram: u64) -> Vec<Accelerator> {
    let ids: [(&str, &str); 2] = match m {
        Manufacturer::Iluvatar => [
            ("GPU-1e3e0000-0000-4000-8000-000000013000", "0000:13:00.0"),
            ("GPU-1e3e0001-0000-4000-8000-000000016000", "0000:16:00.0"),
        ],
        _ => [
            ("1ed50000-0000-4000-8000-00000000f000", "0000:0f:00.0"),
            ("1ed50001-0000-4000-8000-000000010000", "0000:10:00.0"),
        ],
    };
    ids.iter()
        .enumerate()
        .map(|(i, (uuid, bus))| {
            let mut a = Accelerator::new(i as u32, Source::Driver);
            a.uuid = Some(uuid.to_string());
            a.bus_id = Some(bus.parse::<BusId>().unwrap());
            a.memory_mib = Some(vram);
            a
        })
        .collect()
}

struct Rig {
    dir: tempfile::TempDir,
    kubelet: Kubelet,
    plugins: DevicePlugins,
}

impl Rig {
    async fn new(m: Manufacturer, vram: u64) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let responder: Arc<dyn Responder> = match m {
            Manufacturer::Iluvatar => Arc::new(IluvatarResponder {
                pod_dirs: PodDirs::new(dir.path().join("data/pods")),
                library_dir: "/var/lib/gpustack/operator/lib".into(),
                lock_dir: dir.path().join("vgpulock"),
                lock_made_at: dir.path().join("vgpulock"),
                runtime_class: Some("iluvatar".into()),
            }),
            _ => Arc::new(MthreadsResponder),
        };
        let accelerators = accelerators(m, vram);
        let slices = m.default_constants().slice_count.unwrap();
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let config = Config {
            kubelet_dir: dir.path().join("kubelet"),
            data_dir: dir.path().join("data"),
            settings: Settings::default(),
            offer: Offer {
                partitioned: false,
                partition_kind: None,
                ..Offer::of(m)
            },
            seats: accelerators
                .iter()
                .map(|a| Seat::from_accelerator(a, slices))
                .collect(),
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
            kubelet,
            plugins,
        }
    }
}

fn pod(uid: &str, runtime_class: Option<&str>, containers: &[(&str, &[(&str, &str)])]) -> Pod {
    Pod {
        runtime_class: runtime_class.map(String::from),
        ..testing::pod(uid, 1, containers)
    }
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

fn only(variable: &str, value: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(variable.to_string(), value.to_string())])
}

/// Exactly the one variable: no device node, no mount, no annotation.
fn assert_only_the_variable(
    admission: &Admission,
    container: &str,
    resource: &str,
    variable: &str,
    value: &str,
) {
    assert_eq!(
        envs(admission, container, resource),
        only(variable, value),
        "{resource}"
    );
    let answer = &admission[container][resource];
    assert!(
        answer.devices.is_empty(),
        "{resource}: {:?}",
        answer.devices
    );
    assert!(answer.mounts.is_empty(), "{resource}: {:?}", answer.mounts);
    assert!(answer.annotations.is_empty(), "{resource}");
}

const IX: &str = "IX_VISIBLE_DEVICES";
const IX_BOTH: &str =
    "GPU-1e3e0000-0000-4000-8000-000000013000,GPU-1e3e0001-0000-4000-8000-000000016000";
const IX_FIRST: &str = "GPU-1e3e0000-0000-4000-8000-000000013000";
const MT: &str = "MTHREADS_VISIBLE_DEVICES";
const MT_BOTH: &str = "1ed50000-0000-4000-8000-00000000f000,1ed50001-0000-4000-8000-000000010000";
const MT_FIRST: &str = "1ed50000-0000-4000-8000-00000000f000";

#[tokio::test]
async fn iluvatar_exclusive_and_shared_are_exactly_ix_visible_devices() {
    let rig = Rig::new(Manufacturer::Iluvatar, 32_768).await;
    rig.kubelet
        .create(pod("a", None, &[("main", &[("iluvatar.com/gpu", "2")])]));
    let a = rig.kubelet.admit("a").await.unwrap();
    assert_only_the_variable(&a, "main", "iluvatar.com/gpu", IX, IX_BOTH);
    // The exclusive Pod holds both cards; the shared grant is asked of a fresh node.
    let rig = Rig::new(Manufacturer::Iluvatar, 32_768).await;
    rig.kubelet.create(pod(
        "b",
        None,
        &[("main", &[("iluvatar.com/gpu.shared", "2")])],
    ));
    let b = rig.kubelet.admit("b").await.unwrap();
    assert_only_the_variable(&b, "main", "iluvatar.com/gpu.shared", IX, IX_BOTH);
}

const IX_HALF: &[(&str, &str)] = &[
    ("iluvatar.com/gpu.sliced", "1"),
    ("iluvatar.com/gpu.sliced.memory-percentage", "50"),
    ("iluvatar.com/gpu.sliced.cores-percentage", "25"),
];

#[tokio::test]
async fn iluvatar_slice_is_the_specs_example_byte_for_byte() {
    // Spec §4.3: a 32768 MiB card, cores 25 %, memory 50 %.
    let rig = Rig::new(Manufacturer::Iluvatar, 32_768).await;
    rig.kubelet
        .create(pod("a", Some("iluvatar"), &[("main", IX_HALF)]));
    let a = rig.kubelet.admit("a").await.unwrap();
    let sliced = "iluvatar.com/gpu.sliced";
    assert_eq!(
        envs(&a, "main", sliced),
        BTreeMap::from([
            (IX.to_string(), IX_FIRST.to_string()),
            ("CUDA_DEVICE_SM_LIMIT".into(), "25".into()),
            ("CUDA_DEVICE_MEMORY_LIMIT_0".into(), "16384m".into()),
            (
                "CUDA_DEVICE_MEMORY_SHARED_CACHE".into(),
                "/tmp/vgpu/cudevshr.cache".into()
            ),
            ("LIBCUDA_LOG_LEVEL".into(), "0".into()),
        ])
    );
    let lock = rig.dir.path().join("vgpulock");
    let cache = rig.dir.path().join("data/pods/a/c-main/tmp/vgpu");
    let lib = "/var/lib/gpustack/operator/lib/iluvatar";
    assert_eq!(
        mounts(&a, "main", sliced),
        vec![
            ("/tmp/vgpulock".into(), lock.display().to_string(), false),
            (
                "/etc/ld.so.preload".into(),
                format!("{lib}/ld.so.preload"),
                true
            ),
            (
                "/usr/local/vgpu/libvgpu.so".into(),
                format!("{lib}/libvgpu.so"),
                true
            ),
            ("/tmp/vgpu".into(), cache.display().to_string(), false),
            ("/dev/shm".into(), "/dev/shm".into(), false),
        ]
    );
    assert!(a["main"][sliced].devices.is_empty());
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for dir in [
        lock.as_path(),
        cache.as_path(),
        &rig.dir.path().join("data/pods/a/c-main"),
    ] {
        assert_eq!(mode(dir), 0o777, "{}", dir.display());
    }
}

#[tokio::test]
async fn iluvatar_slice_defaults_cores_to_100_and_keeps_the_containers_log_level() {
    let rig = Rig::new(Manufacturer::Iluvatar, 32_768).await;
    let mut p = pod(
        "a",
        Some("iluvatar"),
        &[(
            "main",
            &[
                ("iluvatar.com/gpu.sliced", "1"),
                ("iluvatar.com/gpu.sliced.memory-percentage", "50"),
            ],
        )],
    );
    p.containers[0]
        .env
        .insert("LIBCUDA_LOG_LEVEL".into(), "3".into());
    rig.kubelet.create(p);
    let a = rig.kubelet.admit("a").await.unwrap();
    let env = envs(&a, "main", "iluvatar.com/gpu.sliced");
    assert_eq!(env["CUDA_DEVICE_SM_LIMIT"], "100");
    assert!(
        !env.contains_key("LIBCUDA_LOG_LEVEL"),
        "never overwritten: {env:?}"
    );
    assert!(!env.contains_key("CUDA_DEVICE_MEMORY_LIMIT_1"));
    assert!(!env.contains_key("CUDA_DEVICE_ORDER"), "NVIDIA's only");
}

#[tokio::test]
async fn a_sliced_iluvatar_pod_without_its_runtime_class_is_refused_saying_why() {
    let rig = Rig::new(Manufacturer::Iluvatar, 32_768).await;
    rig.kubelet.create(pod("a", None, &[("main", IX_HALF)]));
    let err = rig.kubelet.admit("a").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().ends_with(
            "a sliced Iluvatar Pod must run with runtimeClassName: iluvatar: the slice's libvgpu.so hooks corex's libcuda.so.1, which only ix-container-runtime puts in the container (Pod ns/pod-a runs under no runtimeClassName; the webhook attaches iluvatar to a queued Pod only when a RuntimeClass iluvatar exists)"
        ),
        "{}",
        err.message()
    );
    assert!(
        rig.plugins.ledger().grants().is_empty(),
        "the grant is given back"
    );
    // Under another class too; the whole-card families need none (the class may be the
    // engine's default runtime).
    rig.kubelet
        .create(pod("b", Some("runc"), &[("main", IX_HALF)]));
    assert!(
        rig.kubelet
            .admit("b")
            .await
            .unwrap_err()
            .message()
            .ends_with("runs under \"runc\")")
    );
}

/// The class the worker's mutating webhook leaves on the sliced Pod, given the RuntimeClasses
/// that exist (seed 000's Pod, queued, naming none).
fn class_after_the_webhook(existing: &[&str]) -> Option<String> {
    let limits: serde_json::Map<String, serde_json::Value> = IX_HALF
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    let submitted = serde_json::json!({"kind": "Pod", "metadata": {"name": "pod-a", "namespace": "ns",
        "labels": {"kueue.x-k8s.io/queue-name": "corex"}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}});
    let verdict = accel_core::admission::admit(
        &submitted,
        &accel_core::pool::Pool::unknown("not needed by a percentage budget"),
        &existing.iter().copied().collect(),
        &accel_core::resources::KeyGrammar::default(),
        accel_core::admission::Phase::Both,
    )
    .unwrap();
    assert!(verdict.allowed, "{:?}", verdict.message);
    verdict.pod["spec"]["runtimeClassName"]
        .as_str()
        .map(str::to_string)
}

#[tokio::test]
async fn a_sliced_iluvatar_pod_is_served_once_the_webhook_gave_it_the_existing_class() {
    let rig = Rig::new(Manufacturer::Iluvatar, 32_768).await;
    // The RuntimeClass exists: the webhook attaches it, and Allocate serves the slice.
    let class = class_after_the_webhook(&["iluvatar"]);
    assert_eq!(class.as_deref(), Some("iluvatar"));
    rig.kubelet
        .create(pod("a", class.as_deref(), &[("main", IX_HALF)]));
    let a = rig.kubelet.admit("a").await.unwrap();
    assert_eq!(
        envs(&a, "main", "iluvatar.com/gpu.sliced")["CUDA_DEVICE_MEMORY_LIMIT_0"],
        "16384m"
    );
    // It does not: nothing attached, and Allocate refuses as before, saying what was missing.
    let class = class_after_the_webhook(&[]);
    assert_eq!(class, None);
    rig.kubelet
        .create(pod("b", class.as_deref(), &[("main", IX_HALF)]));
    let err = rig.kubelet.admit("b").await.unwrap_err();
    assert!(
        err.message().contains(
            "the webhook attaches iluvatar to a queued Pod only when a RuntimeClass iluvatar exists"
        ),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn iluvatar_visibility_of_a_sliced_owner_names_its_card_and_nothing_else() {
    let rig = Rig::new(Manufacturer::Iluvatar, 32_768).await;
    rig.kubelet.create(pod(
        "a",
        Some("iluvatar"),
        &[
            ("main", IX_HALF),
            ("sshd", &[("device.gpustack.ai/iluvatar.visibility", "1")]),
        ],
    ));
    let a = rig.kubelet.admit("a").await.unwrap();
    assert_only_the_variable(
        &a,
        "sshd",
        "device.gpustack.ai/iluvatar.visibility",
        IX,
        IX_FIRST,
    );
}

#[tokio::test]
async fn mthreads_exclusive_shared_and_visibility_are_exactly_the_variable() {
    let rig = Rig::new(Manufacturer::Mthreads, 49_152).await;
    rig.kubelet.create(pod(
        "a",
        None,
        &[
            ("main", &[("mthreads.com/gpu", "2")]),
            ("sshd", &[("device.gpustack.ai/mthreads.visibility", "1")]),
        ],
    ));
    let a = rig.kubelet.admit("a").await.unwrap();
    assert_only_the_variable(&a, "main", "mthreads.com/gpu", MT, MT_BOTH);
    assert_only_the_variable(
        &a,
        "sshd",
        "device.gpustack.ai/mthreads.visibility",
        MT,
        MT_BOTH,
    );
    rig.kubelet.delete("a");
    // The release lands a moment later (the Pod watch, the kubelet's confirmation of a grant
    // made from it, then ListAndWatch turning the shared tokens Healthy): wait for it.
    testing::wait_released(&rig.plugins, "a").await;
    rig.kubelet.wait_free("mthreads.com/gpu.shared", 1).await;
    rig.kubelet.create(pod(
        "b",
        None,
        &[("main", &[("mthreads.com/gpu.shared", "1")])],
    ));
    let b = rig.kubelet.admit("b").await.unwrap();
    assert_only_the_variable(&b, "main", "mthreads.com/gpu.shared", MT, MT_FIRST);
}

#[tokio::test]
async fn mthreads_slices_are_the_specs_examples_byte_for_byte() {
    // Spec §4.3 (49152 MiB card): cores 8, memory 50 % → 25769803776 bytes and weight 8; cores
    // absent, memory 25 % → 12884901888 and 100. Nothing mounted, nothing staged.
    let rig = Rig::new(Manufacturer::Mthreads, 49_152).await;
    let sliced = "mthreads.com/gpu.sliced";
    rig.kubelet.create(pod(
        "a",
        None,
        &[(
            "main",
            &[
                (sliced, "1"),
                ("mthreads.com/gpu.sliced.memory-percentage", "50"),
                ("mthreads.com/gpu.sliced.cores-percentage", "8"),
            ],
        )],
    ));
    rig.kubelet.create(pod(
        "b",
        None,
        &[(
            "main",
            &[
                (sliced, "1"),
                ("mthreads.com/gpu.sliced.memory-percentage", "25"),
            ],
        )],
    ));
    let a = rig.kubelet.admit("a").await.unwrap();
    let b = rig.kubelet.admit("b").await.unwrap();
    let expect = |card: &str, bytes: &str, weight: &str| {
        BTreeMap::from([
            (MT.to_string(), card.to_string()),
            ("MTHREADS_QOS_MEMORY_LIMIT".into(), bytes.into()),
            ("MTHREADS_QOS_COMPUTING_POWER_WEIGHT".into(), weight.into()),
        ])
    };
    assert_eq!(
        envs(&a, "main", sliced),
        expect(MT_FIRST, "25769803776", "8")
    );
    // Cores absent count 100, and a card's compute is not over-committed (spec §2.4): beside
    // a's 8 the first card has no room for it, so it goes to the second.
    let second = "1ed50001-0000-4000-8000-000000010000";
    assert_eq!(
        envs(&b, "main", sliced),
        expect(second, "12884901888", "100")
    );
    for admission in [&a, &b] {
        assert!(admission["main"][sliced].mounts.is_empty());
        assert!(admission["main"][sliced].devices.is_empty());
    }
    assert!(
        !rig.dir.path().join("data/pods").exists(),
        "nothing kept on the host"
    );
}

#[tokio::test]
async fn a_mthreads_slice_without_a_memory_dimension_is_refused_saying_so() {
    // Spec §4.3: the QoS memory cap comes from `.sliced.memory-percentage` or
    // `.sliced.memory-mib`; neither → "derive sliced memory limit: %w". A Pod that bypassed the
    // webhook (which requires one of them) reaches Allocate as the kubelet sends it: the slice
    // token and its cores, no memory; or `.units` alone, which the webhook only ever writes
    // beside one of them. Refused, the grant given back, never a cap the Pod did not ask for.
    let rig = Rig::new(Manufacturer::Mthreads, 49_152).await;
    let sliced = "mthreads.com/gpu.sliced";
    let cores = "mthreads.com/gpu.sliced.cores-percentage";
    let units = "mthreads.com/gpu.sliced.units";
    let why = "derive sliced memory limit: container \"main\" has no \
               mthreads.com/gpu.sliced.memory-percentage or mthreads.com/gpu.sliced.memory-mib \
               request";
    rig.kubelet
        .create(pod("a", None, &[("main", &[(sliced, "1"), (cores, "8")])]));
    rig.kubelet.create(pod(
        "b",
        None,
        &[("main", &[(sliced, "1"), (units, "800000")])],
    ));
    for uid in ["a", "b"] {
        let err = rig.kubelet.admit(uid).await.unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{uid}");
        assert!(err.message().ends_with(why), "{uid}: {}", err.message());
        assert!(
            rig.plugins.ledger().grants().is_empty(),
            "{uid}: the grant is given back"
        );
    }
    // A MiB budget is a memory dimension: served, its cap in bytes.
    rig.kubelet.create(pod(
        "c",
        None,
        &[(
            "main",
            &[
                (sliced, "1"),
                ("mthreads.com/gpu.sliced.memory-mib", "1024"),
            ],
        )],
    ));
    let c = rig.kubelet.admit("c").await.unwrap();
    assert_eq!(
        envs(&c, "main", sliced)["MTHREADS_QOS_MEMORY_LIMIT"],
        "1073741824"
    );
}
