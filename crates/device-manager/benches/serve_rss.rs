//! Steady-state RSS of the real `device-manager serve` binary on the largest recorded host
//! (`testdata/hosts/hgx-h100-8gpu`, 8 H100) after thousands of allocations.
//!
//! The bench plays the rest of the node: a tiny API server on loopback (plain HTTP) answering
//! this node's Pod list and watch the way kube-rs's watcher asks, a kubeconfig pointing at it,
//! and the kubelet emulator (accel-plugin's `testing` feature) on a temporary kubelet
//! directory. It then drives `BENCH_ALLOCATIONS` admissions (3,000 by default): create a Pod,
//! the kubelet admits it (GetPreferredAllocation + Allocate over the plugin's socket), it runs,
//! and a few Pods later it finishes and is deleted; VmRSS and VmHWM are read from
//! `/proc/<pid>/status` along the way. Prints one line per reading.
//! Run: `cargo bench -p device-manager --bench serve_rss`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accel_plugin::pods::{Container, MemoryPods, Phase, Pod};
use accel_plugin::testing::Kubelet;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Bytes, Frame};
use hyper::{Request, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast;

const NODE: &str = "bench-node";
const GPU: &str = "nvidia.com/gpu";
const SHARED: &str = "nvidia.com/gpu.shared";

/// The fake API server's Pods, their resource versions and the watch events.
struct Cluster {
    state: Mutex<ClusterState>,
    events: broadcast::Sender<(u64, Value)>,
}

struct ClusterState {
    version: u64,
    pods: BTreeMap<String, Value>,
    /// Every event so far, so a watch from an older version replays what it missed.
    log: Vec<(u64, Value)>,
}

impl Cluster {
    fn new() -> Arc<Cluster> {
        Arc::new(Cluster {
            state: Mutex::new(ClusterState {
                version: 1,
                pods: BTreeMap::new(),
                log: Vec::new(),
            }),
            events: broadcast::channel(65_536).0,
        })
    }

    fn publish(&self, kind: &str, uid: &str, mut object: Value) {
        let mut state = self.state.lock().unwrap();
        state.version += 1;
        let version = state.version;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        let event = json!({ "type": kind, "object": object.clone() });
        if kind == "DELETED" {
            state.pods.remove(uid);
        } else {
            state.pods.insert(uid.to_string(), object);
        }
        state.log.push((version, event.clone()));
        // Keep the replay log bounded: watches here never lag by thousands.
        if state.log.len() > 4096 {
            state.log.drain(..2048);
        }
        let _ = self.events.send((version, event));
    }

    fn list(&self) -> Value {
        let state = self.state.lock().unwrap();
        json!({
            "apiVersion": "v1",
            "kind": "PodList",
            "metadata": { "resourceVersion": state.version.to_string() },
            "items": state.pods.values().cloned().collect::<Vec<_>>(),
        })
    }
}

fn pod_json(pod: &Pod) -> Value {
    let phase = match pod.phase {
        Phase::Pending => "Pending",
        Phase::Running => "Running",
        Phase::Succeeded => "Succeeded",
        Phase::Failed => "Failed",
        Phase::Unknown => "Unknown",
    };
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "image": "bench",
                "resources": { "limits": c.limits, "requests": c.limits },
            })
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
            "creationTimestamp": format!("2026-11-29T00:{:02}:{:02}Z", (pod.created / 60) % 60, pod.created % 60),
        },
        "spec": { "nodeName": NODE, "containers": containers },
        "status": { "phase": phase },
    })
}

type Body = BoxBody<Bytes, Infallible>;

fn full(status: u16, value: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(value.to_string())).boxed())
        .unwrap()
}

async fn answer(cluster: Arc<Cluster>, request: Request<hyper::body::Incoming>) -> Response<Body> {
    let path = request.uri().path().to_string();
    let query: BTreeMap<String, String> = request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if path != "/api/v1/pods" {
        return full(
            404,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
        );
    }
    if query.get("watch").map(String::as_str) != Some("true") {
        return full(200, &cluster.list());
    }
    let since: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut receiver = cluster.events.subscribe();
    let missed: Vec<Value> = {
        let state = cluster.state.lock().unwrap();
        state
            .log
            .iter()
            .filter(|(v, _)| *v > since)
            .map(|(_, e)| e.clone())
            .collect()
    };
    let last_missed = since.max(
        missed
            .last()
            .and_then(|e| e["object"]["metadata"]["resourceVersion"].as_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    let stream = async_stream::stream! {
        for event in missed {
            yield Ok::<_, Infallible>(Frame::data(Bytes::from(format!("{event}\n"))));
        }
        loop {
            match receiver.recv().await {
                Ok((version, event)) if version > last_missed => {
                    yield Ok(Frame::data(Bytes::from(format!("{event}\n"))));
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    };
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap()
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts/hgx-h100-8gpu");
    assert!(root.is_dir(), "missing recorded host {}", root.display());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(&root));
}

fn status(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The resident set split: anonymous (heap, stacks), file-backed (the binary's pages), shmem.
fn split(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    ["RssAnon:", "RssFile:", "RssShmem:", "Threads:"]
        .iter()
        .filter_map(|name| text.lines().find(|l| l.starts_with(name)))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn run(root: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let cluster = cluster.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |r| {
                        let cluster = cluster.clone();
                        async move { Ok::<_, Infallible>(answer(cluster, r).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: http://{address}\ncontexts:\n- name: bench\n  context:\n    cluster: bench\n    user: bench\ncurrent-context: bench\nusers:\n- name: bench\n  user:\n    token: bench\n"
        ),
    )
    .unwrap();
    let kubelet_dir = dir.path().join("kubelet");
    let pods = MemoryPods::new();
    let kubelet = Kubelet::start(&kubelet_dir, pods.clone()).await;
    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .arg("serve")
        .args(["--node-name", NODE])
        .arg("--host-root")
        .arg(root)
        .arg("--kubelet-dir")
        .arg(&kubelet_dir)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let serve = Serve(child);
    let pid = serve.0.id();
    kubelet.wait_for(&[GPU, SHARED]).await;
    let (rss, hwm) = status(pid);
    println!("after start and registration: VmRSS {rss} kB, VmHWM {hwm} kB");
    let total: u32 = std::env::var("BENCH_ALLOCATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let started = Instant::now();
    let mut live: std::collections::VecDeque<Pod> = Default::default();
    let set = |pod: &Pod, kind: &str| cluster.publish(kind, &pod.uid, pod_json(pod));
    let mut refused = 0u32;
    for n in 0..total {
        let resource = if n % 2 == 0 { GPU } else { SHARED };
        let uid = format!("pod-{n}");
        let mut pod = Pod {
            uid: uid.clone(),
            namespace: "bench".into(),
            name: uid.clone(),
            created: i64::from(n),
            phase: Phase::Pending,
            runtime_class: None,
            allocated: None,
            containers: vec![Container {
                name: "main".into(),
                limits: BTreeMap::from([(resource.to_string(), "1".to_string())]),
                env: BTreeMap::new(),
            }],
        };
        kubelet.create(pod.clone());
        set(&pod, "ADDED");
        // The daemon learns the Pod from its watch; the kubelet admits it once it is bound.
        let mut admitted = false;
        for _ in 0..200 {
            match kubelet.admit(&uid).await {
                Ok(_) => {
                    admitted = true;
                    break;
                }
                Err(s)
                    if s.code() == tonic::Code::Unavailable
                        || s.code() == tonic::Code::FailedPrecondition =>
                {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(s) => panic!("{uid}: {s}"),
            }
        }
        if !admitted {
            refused += 1;
        }
        pod.phase = Phase::Running;
        set(&pod, "MODIFIED");
        live.push_back(pod);
        // Four Pods run at a time (exclusive and shared mixed on 8 GPUs): the oldest
        // finishes, then is deleted.
        if live.len() > 4 {
            let mut finished = live.pop_front().unwrap();
            kubelet.finish(&finished.uid);
            finished.phase = Phase::Succeeded;
            set(&finished, "MODIFIED");
            kubelet.delete(&finished.uid);
            set(&finished, "DELETED");
        }
        if (n + 1) % 500 == 0 {
            let (rss, hwm) = status(pid);
            println!(
                "after {:>5} allocations ({:.1} s): VmRSS {rss} kB, VmHWM {hwm} kB",
                n + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss, hwm) = status(pid);
    println!(
        "steady state, {total} allocations ({refused} never admitted): VmRSS {rss} kB ({:.1} MiB), VmHWM {hwm} kB ({:.1} MiB)",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    println!("  {}", split(pid));
    if std::env::var_os("BENCH_SHOW_LOG").is_some() {
        let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
        println!("{log}");
    }
    drop(serve);
}
