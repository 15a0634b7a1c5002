//! The DRA driver driven over its real unix sockets as the kubelet drives it: the plugin
//! watcher's GetInfo and NotifyRegistrationStatus on the registration socket, then
//! NodePrepareResources / NodeUnprepareResources on the endpoint GetInfo named. Claims resolve
//! from memory (the API server's allocation is the next step of issue 46).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use accel_backend::respond::{DeviceNode, Injection, Mount};
use accel_core::manufacturer::Manufacturer;
use accel_dra::api::dra::{self, dra_plugin_client::DraPluginClient};
use accel_dra::api::registration::{self as reg, registration_client::RegistrationClient};
use accel_dra::cdi::CdiSpecs;
use accel_dra::plugin::{
    AllocatedDevice, ClaimRef, ClaimResolver, DraService, ResolveError, ResolvedClaim,
};
use accel_dra::{DriverName, RegistrationOutcome, ServedDriver};
use tokio::sync::watch;

const DRIVER: &str = "nvidia.gpustack.ai";
const HELD: &str = "3b0c7f52-4d1e-4a8b-9c61-0e2f5a7d9b13";
const UNKNOWN: &str = "9e4d1c2b-7a6f-4e3d-8b21-5c0a9f8e7d65";

/// Claims by uid; any other claim is not allocated here.
/// Claims by uid, and the uids it was asked to release.
struct MemoryResolver(
    BTreeMap<String, ResolvedClaim>,
    Arc<std::sync::Mutex<Vec<String>>>,
);

impl ClaimResolver for MemoryResolver {
    async fn resolve(&self, claim: &ClaimRef) -> Result<ResolvedClaim, ResolveError> {
        self.0
            .get(&claim.uid)
            .cloned()
            .ok_or_else(|| ResolveError::NotAllocated {
                namespace: claim.namespace.clone(),
                name: claim.name.clone(),
                uid: claim.uid.clone(),
            })
    }

    async fn release(&self, claim: &ClaimRef) {
        self.1.lock().unwrap().push(claim.uid.clone());
    }
}

fn two_gpus() -> ResolvedClaim {
    let device = |name: &str, request: &str| AllocatedDevice {
        request_names: vec![request.to_string()],
        pool_name: "node-a".to_string(),
        device_name: name.to_string(),
    };
    ResolvedClaim {
        devices: vec![device("gpu-0", "train"), device("gpu-1", "train")],
        injection: Injection {
            envs: BTreeMap::from([(
                "NVIDIA_VISIBLE_DEVICES".to_string(),
                "GPU-0a,GPU-1b".to_string(),
            )]),
            mounts: vec![Mount {
                container_path: "/etc/ld.so.preload".into(),
                host_path: "/var/lib/gpustack/preload/ld.so.preload".into(),
                read_only: true,
            }],
            devices: vec![DeviceNode {
                container_path: "/dev/nvidia0".into(),
                host_path: "/dev/nvidia0".into(),
                permissions: "rw".into(),
            }],
            ..Injection::default()
        },
    }
}

fn claim(uid: &str) -> dra::Claim {
    dra::Claim {
        namespace: "ml".to_string(),
        uid: uid.to_string(),
        name: format!("claim-{}", &uid[..uid.len().min(4)]),
    }
}

/// Fails the test with what it was waiting for instead of hanging.
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("deadlocked waiting for {what}"))
}

struct Rig {
    kubelet_dir: PathBuf,
    health: accel_dra::health::HealthFeed,
    released: Arc<std::sync::Mutex<Vec<String>>>,
    cdi_dir: PathBuf,
    stop: watch::Sender<bool>,
    served: ServedDriver,
    _temp: tempfile::TempDir,
}

fn start() -> Rig {
    let temp = tempfile::tempdir().unwrap();
    let kubelet_dir = temp.path().join("var/lib/kubelet");
    let cdi_dir = temp.path().join("var/run/cdi");
    let released = Arc::default();
    let resolver = MemoryResolver(
        BTreeMap::from([(HELD.to_string(), two_gpus())]),
        Arc::clone(&released),
    );
    let service = DraService::new(
        Arc::new(resolver),
        CdiSpecs::new(&cdi_dir, Manufacturer::Nvidia),
    );
    let (stop, stopped) = watch::channel(false);
    let health = accel_dra::health::HealthFeed::new();
    let served = accel_dra::serve(
        &kubelet_dir,
        DriverName::parse(DRIVER).unwrap(),
        service,
        Some(health.service("node-a")),
        stopped,
    )
    .unwrap();
    Rig {
        kubelet_dir,
        health,
        released,
        cdi_dir,
        stop,
        served,
        _temp: temp,
    }
}

/// The registration socket where the kubelet's plugin watcher looks for it.
fn registration_socket(kubelet_dir: &Path) -> PathBuf {
    kubelet_dir.join(format!("plugins_registry/{DRIVER}-reg.sock"))
}

#[tokio::test]
async fn the_kubelet_registers_the_driver_prepares_and_unprepares_claims() {
    let mut rig = start();
    let channel = within(
        "the registration socket",
        accel_dra::socket::connect(registration_socket(&rig.kubelet_dir)),
    )
    .await
    .unwrap();
    let mut registration = RegistrationClient::new(channel);
    let info = within("GetInfo", registration.get_info(reg::InfoRequest {}))
        .await
        .unwrap()
        .into_inner();
    let endpoint = rig.kubelet_dir.join(format!("plugins/{DRIVER}/dra.sock"));
    assert_eq!(
        info,
        reg::PluginInfo {
            r#type: "DRAPlugin".to_string(),
            name: DRIVER.to_string(),
            endpoint: endpoint.display().to_string(),
            supported_versions: vec!["v1.DRAPlugin".to_string()],
        }
    );
    assert_eq!(
        *rig.served.registration.borrow(),
        RegistrationOutcome::Pending
    );
    within(
        "NotifyRegistrationStatus",
        registration.notify_registration_status(reg::RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        }),
    )
    .await
    .unwrap();
    within(
        "the registration outcome",
        rig.served
            .registration
            .wait_for(|o| *o == RegistrationOutcome::Registered),
    )
    .await
    .unwrap();

    // The kubelet dials the endpoint GetInfo named.
    let channel = within(
        "the DRA socket",
        accel_dra::socket::connect(PathBuf::from(&info.endpoint)),
    )
    .await
    .unwrap();
    let mut plugin = DraPluginClient::new(channel);
    let prepared = within(
        "NodePrepareResources",
        plugin.node_prepare_resources(dra::NodePrepareResourcesRequest {
            claims: vec![claim(HELD), claim(UNKNOWN), claim("../escape")],
        }),
    )
    .await
    .expect("per-claim failures are not a gRPC failure")
    .into_inner()
    .claims;
    assert_eq!(
        prepared.keys().collect::<Vec<_>>(),
        ["../escape", HELD, UNKNOWN],
        "every claim of the request is answered"
    );

    let held = &prepared[HELD];
    assert_eq!(held.error, "");
    let id = format!("gpustack.ai/nvidia={HELD}");
    let device = |name: &str| dra::Device {
        request_names: vec!["train".to_string()],
        pool_name: "node-a".to_string(),
        device_name: name.to_string(),
        cdi_device_ids: vec![id.clone()],
    };
    assert_eq!(held.devices, [device("gpu-0"), device("gpu-1")]);
    let spec_path = rig.cdi_dir.join(format!("gpustack-nvidia-{HELD}.json"));
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&spec_path).unwrap()).unwrap();
    assert_eq!(spec["kind"], "gpustack.ai/nvidia");
    assert_eq!(spec["devices"][0]["name"], HELD);
    assert_eq!(
        spec["devices"][0]["containerEdits"]["env"],
        serde_json::json!(["NVIDIA_VISIBLE_DEVICES=GPU-0a,GPU-1b"])
    );

    let unknown = &prepared[UNKNOWN];
    assert!(unknown.devices.is_empty());
    assert_eq!(
        unknown.error,
        format!("claim ml/claim-9e4d ({UNKNOWN}) has no device of this driver on this node")
    );
    let escape = &prepared["../escape"];
    assert!(escape.devices.is_empty());
    assert!(
        escape
            .error
            .starts_with("claim uid \"../escape\" is not a CDI device name"),
        "{}",
        escape.error
    );
    let specs: Vec<_> = std::fs::read_dir(&rig.cdi_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        specs,
        [spec_path.file_name().unwrap()],
        "one spec, the held claim's"
    );

    let unprepared = within(
        "NodeUnprepareResources",
        plugin.node_unprepare_resources(dra::NodeUnprepareResourcesRequest {
            claims: vec![claim(HELD), claim("a/b")],
        }),
    )
    .await
    .unwrap()
    .into_inner()
    .claims;
    assert_eq!(unprepared[HELD].error, "");
    assert!(!spec_path.exists(), "unprepare removes the claim's spec");
    assert_eq!(
        *rig.released.lock().unwrap(),
        [HELD.to_string()],
        "the claim whose spec went is released; nothing else is"
    );
    assert!(
        unprepared["a/b"]
            .error
            .starts_with("claim uid \"a/b\" is not a CDI device name"),
        "{}",
        unprepared["a/b"].error
    );

    rig.stop.send_replace(true);
    within("the servers' shutdown", &mut rig.served.task)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !registration_socket(&rig.kubelet_dir).exists(),
        "the kubelet learns the driver is gone from its socket's removal"
    );
}

#[tokio::test]
async fn a_refusal_by_the_kubelet_is_reported_and_a_stale_socket_is_replaced() {
    let rig = start();
    rig.stop.send_replace(true);
    let mut served = rig.served;
    within("the first servers' shutdown", &mut served.task)
        .await
        .unwrap()
        .unwrap();
    // A socket left behind by a run that died is replaced, not an error.
    let stale =
        std::os::unix::net::UnixListener::bind(registration_socket(&rig.kubelet_dir)).unwrap();
    drop(stale);

    let resolver = MemoryResolver(BTreeMap::new(), Arc::default());
    let service = DraService::new(
        Arc::new(resolver),
        CdiSpecs::new(&rig.cdi_dir, Manufacturer::Nvidia),
    );
    let (_stop, stopped) = watch::channel(false);
    let mut served = accel_dra::serve(
        &rig.kubelet_dir,
        DriverName::parse(DRIVER).unwrap(),
        service,
        None,
        stopped,
    )
    .unwrap();
    let channel = within(
        "the registration socket",
        accel_dra::socket::connect(registration_socket(&rig.kubelet_dir)),
    )
    .await
    .unwrap();
    within(
        "NotifyRegistrationStatus",
        RegistrationClient::new(channel).notify_registration_status(reg::RegistrationStatus {
            plugin_registered: false,
            error: "driver name already registered".to_string(),
        }),
    )
    .await
    .unwrap();
    let outcome = within(
        "the registration outcome",
        served
            .registration
            .wait_for(|o| *o != RegistrationOutcome::Pending),
    )
    .await
    .unwrap()
    .clone();
    assert_eq!(
        outcome,
        RegistrationOutcome::Refused("driver name already registered".to_string())
    );
}

#[tokio::test]
async fn a_spec_that_cannot_be_written_fails_its_claim_alone() {
    use accel_dra::api::dra::dra_plugin_server::DraPlugin;
    let temp = tempfile::tempdir().unwrap();
    // The CDI directory's place is taken by a file.
    let cdi_dir = temp.path().join("cdi");
    std::fs::write(&cdi_dir, "").unwrap();
    let released = Arc::default();
    let resolver = MemoryResolver(
        BTreeMap::from([(HELD.to_string(), two_gpus())]),
        Arc::clone(&released),
    );
    let service = DraService::new(
        Arc::new(resolver),
        CdiSpecs::new(&cdi_dir, Manufacturer::Nvidia),
    );
    let answer = service
        .node_prepare_resources(tonic::Request::new(dra::NodePrepareResourcesRequest {
            claims: vec![claim(HELD)],
        }))
        .await
        .expect("a claim's failure is not a gRPC failure")
        .into_inner();
    let held = &answer.claims[HELD];
    assert!(held.devices.is_empty());
    assert!(
        held.error.starts_with(&format!(
            "cannot create the CDI directory {}: ",
            cdi_dir.display()
        )),
        "{}",
        held.error
    );
    assert_eq!(
        *released.lock().unwrap(),
        [HELD.to_string()],
        "what resolving took goes back when no spec could be written"
    );
}

/// One HTTP/2 frame (RFC 9113 §4.1).
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK literal with incremental indexing and an indexed name (6-bit prefix; every index
/// here is below 63 and every value shorter than 127), plain value.
fn hpack_literal(name_index: u8, value: &[u8]) -> Vec<u8> {
    let mut b = vec![0x40 | name_index, value.len() as u8];
    b.extend_from_slice(value);
    b
}

/// GetInfo as the kubelet's plugin watcher sends it: grpc-go dialled with the socket's bare
/// path, so its `:authority` is that path (v1.36 `operationexecutor.dial`), which an HTTP/2
/// server built on `h2` refuses unless the driver rewrites it. Answers whether a PluginInfo
/// came back, or the frame that refused it.
async fn get_info_as_the_kubelet_dials(socket: &Path) -> Result<Vec<u8>, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| e.to_string())?;
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    block.extend(hpack_literal(
        4,
        b"/pluginregistration.Registration/GetInfo",
    ));
    block.extend(hpack_literal(1, socket.display().to_string().as_bytes()));
    block.extend(hpack_literal(31, b"application/grpc"));
    block.extend_from_slice(&[0x40, 0x02]);
    block.extend_from_slice(b"te");
    block.extend_from_slice(&[0x08]);
    block.extend_from_slice(b"trailers");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    out.extend(h2_frame(0x1, 0x4, 1, &block));
    // An empty InfoRequest: the gRPC message prefix, uncompressed, length 0.
    out.extend(h2_frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0]));
    stream.write_all(&out).await.map_err(|e| e.to_string())?;
    let mut data = Vec::new();
    loop {
        let mut header = [0u8; 9];
        stream
            .read_exact(&mut header)
            .await
            .map_err(|e| format!("the server closed the connection: {e}"))?;
        let len =
            (usize::from(header[0]) << 16) | (usize::from(header[1]) << 8) | usize::from(header[2]);
        let mut payload = vec![0u8; len];
        stream
            .read_exact(&mut payload)
            .await
            .map_err(|e| e.to_string())?;
        match header[3] {
            0x4 if header[4] & 0x1 == 0 => {
                stream
                    .write_all(&h2_frame(0x4, 0x1, 0, &[]))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            0x3 => return Err(format!("RST_STREAM, error code {payload:?}")),
            0x7 => return Err(format!("GOAWAY {payload:?}")),
            0x0 => {
                data.extend_from_slice(&payload);
                if header[4] & 0x1 != 0 || data.len() > 5 {
                    return Ok(data);
                }
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn the_kubelets_plugin_watcher_gets_the_info_though_it_sends_the_socket_path_as_authority() {
    let rig = start();
    let socket = registration_socket(&rig.kubelet_dir);
    let info = within(
        "GetInfo as the kubelet dials",
        get_info_as_the_kubelet_dials(&socket),
    )
    .await
    .unwrap_or_else(|e| panic!("the kubelet's GetInfo was refused: {e}"));
    let text = String::from_utf8_lossy(&info);
    assert!(
        text.contains("DRAPlugin") && text.contains(DRIVER),
        "{text:?}"
    );
    assert!(text.contains("v1.DRAPlugin"), "{text:?}");
}

#[tokio::test]
async fn the_kubelet_watches_device_health_on_the_driver_socket() {
    use accel_dra::api::health::{self as h, dra_resource_health_client::DraResourceHealthClient};
    use accel_dra::health::DeviceState;
    let rig = start();
    let state = |healthy: bool, message: &str| DeviceState {
        healthy,
        message: message.into(),
        updated: 1_764_900_000,
    };
    rig.health.set(
        [
            ("gpu-0".to_string(), state(true, "")),
            ("gpu-1".to_string(), state(true, "")),
        ]
        .into(),
    );
    // The kubelet dials the DRA socket as `unix:<endpoint>` and opens the stream there.
    let channel = within(
        "the DRA socket",
        accel_dra::socket::connect(rig.kubelet_dir.join(format!("plugins/{DRIVER}/dra.sock"))),
    )
    .await
    .unwrap();
    let mut stream = within(
        "NodeWatchResources",
        DraResourceHealthClient::new(channel).node_watch_resources(h::NodeWatchResourcesRequest {}),
    )
    .await
    .unwrap()
    .into_inner();
    let first = within("the current health", stream.message())
        .await
        .unwrap()
        .unwrap();
    let seen = |r: &h::NodeWatchResourcesResponse| -> Vec<(String, String, i32, String)> {
        r.devices
            .iter()
            .map(|d| {
                let id = d.device.clone().unwrap();
                (id.pool_name, id.device_name, d.health, d.message.clone())
            })
            .collect()
    };
    let healthy = h::HealthStatus::Healthy as i32;
    assert_eq!(
        seen(&first),
        [
            ("node-a".into(), "gpu-0".into(), healthy, String::new()),
            ("node-a".into(), "gpu-1".into(), healthy, String::new())
        ]
    );
    rig.health.set(
        [
            ("gpu-0".to_string(), state(true, "")),
            (
                "gpu-1".to_string(),
                state(false, "Xid 79: fallen off the bus"),
            ),
        ]
        .into(),
    );
    let change = within("the change", stream.message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        seen(&change)[1],
        (
            "node-a".into(),
            "gpu-1".into(),
            h::HealthStatus::Unhealthy as i32,
            "Xid 79: fallen off the bus".into()
        )
    );
}
