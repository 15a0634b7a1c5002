//! The scripted scenario, from the seeds' own examples (seed 003's worked example per family
//! and its rejected requests, seed 000's packing of slices and the partitioned family, seed
//! 002's XIDs): each step submits Pods through the webhook to a node's kubelet, or makes the
//! node do something (an XID, a restart), and reads back what happened. The script is
//! NVIDIA's; [`one_pod_each`] is the breadth of a cluster of several manufacturers: one Pod on
//! each node, asking for one of its accelerators, so each manufacturer's injection shows.

use accel_core::pool::QUEUE_LABEL;
use accel_core::resources::KeyGrammar;
use serde_json::{Map, Value, json};

use super::report::{GpuRef, Reclaim, Restart, Step, XidOutcome, ledger_state};
use super::{Demo, MAIN_NODE};

/// The base resource the script asks for (NVIDIA's default name).
pub const GPU: &str = "nvidia.com/gpu";
const SHARED: &str = "nvidia.com/gpu.shared";
const SLICED: &str = "nvidia.com/gpu.sliced";
const PARTITIONED: &str = "nvidia.com/gpu.partitioned";
const VISIBILITY: &str = "device.gpustack.ai/nvidia.visibility";

/// A Pod on the demo's queue with one container per `(name, limits)`, in NVIDIA's CUDA image.
pub fn pod(name: &str, containers: &[(&str, &[(&str, &str)])]) -> Value {
    pod_in(
        "nvcr.io/nvidia/cuda:13.0.0-base-ubuntu24.04",
        super::cluster::QUEUE,
        name,
        containers,
    )
}

/// A Pod on `queue` with one container per `(name, limits)`, each running `image`.
pub fn pod_in(
    image: &str,
    queue: &str,
    name: &str,
    containers: &[(&str, &[(&str, &str)])],
) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(container, limits)| {
            let limits: Map<String, Value> = limits
                .iter()
                .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                .collect();
            json!({
                "name": container,
                "image": image,
                "resources": {"limits": limits},
            })
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": super::podfile::DEFAULT_NAMESPACE,
            "labels": {QUEUE_LABEL: queue},
        },
        "spec": {"containers": containers},
    })
}

/// A step that submits Pods on `node` and shows that node's ledger.
async fn submit_step(
    demo: &mut Demo,
    number: usize,
    name: &str,
    title: &str,
    pods: Vec<Value>,
) -> anyhow::Result<Step> {
    let mut step = Step {
        number,
        name: name.into(),
        title: title.into(),
        ..Step::default()
    };
    for pod in pods {
        step.pods.push(demo.submit(pod).await?);
    }
    let node = step
        .pods
        .iter()
        .find_map(|p| p.node.clone())
        .unwrap_or_else(|| MAIN_NODE.to_string());
    step.ledger = demo.ledger_view(&node);
    Ok(step)
}

/// Runs every step in order.
pub async fn run(demo: &mut Demo) -> anyhow::Result<Vec<Step>> {
    let mut steps = Vec::new();
    let mut n = 0;
    let mut next = || {
        n += 1;
        n
    };
    steps.push(
        submit_step(
            demo,
            next(),
            "exclusive",
            "an exclusive Pod of two whole GPUs",
            vec![pod("trainer", &[("main", &[(GPU, "2")])])],
        )
        .await?,
    );
    steps.push(
        submit_step(
            demo,
            next(),
            "shared",
            "a shared Pod: one of ten shares on each of two GPUs, pinned to nodes with two",
            vec![pod("notebook", &[("main", &[(SHARED, "2")])])],
        )
        .await?,
    );
    steps.push(
        submit_step(
            demo,
            next(),
            "slices-pack",
            "two logical slices (50 % capped at 40 % compute, then 30 %) packed onto one GPU",
            vec![
                pod(
                    "slice-a",
                    &[(
                        "main",
                        &[
                            (SLICED, "1"),
                            ("nvidia.com/gpu.sliced.memory-percentage", "50"),
                            ("nvidia.com/gpu.sliced.cores-percentage", "40"),
                        ],
                    )],
                ),
                pod(
                    "slice-b",
                    &[(
                        "main",
                        &[
                            (SLICED, "1"),
                            ("nvidia.com/gpu.sliced.memory-percentage", "30"),
                        ],
                    )],
                ),
            ],
        )
        .await?,
    );
    steps.push(
        submit_step(
            demo,
            next(),
            "slice-elsewhere",
            "a 60 % slice that does not fit beside them goes to another GPU",
            vec![pod(
                "slice-c",
                &[(
                    "main",
                    &[
                        (SLICED, "1"),
                        ("nvidia.com/gpu.sliced.memory-percentage", "60"),
                    ],
                )],
            )],
        )
        .await?,
    );
    steps.push(partition(demo, next()).await?);
    steps.push(
        submit_step(
            demo,
            next(),
            "sidecar",
            "an SSH sidecar sees its workload container's GPU",
            vec![pod(
                "ssh-workload",
                &[("main", &[(GPU, "1")]), ("sshd", &[(VISIBILITY, "1")])],
            )],
        )
        .await?,
    );
    steps.push(
        submit_step(
            demo,
            next(),
            "rejected",
            "a slice of two GPUs, refused by the webhook with its rule's message",
            vec![pod(
                "bad-slice",
                &[(
                    "main",
                    &[
                        (SLICED, "2"),
                        ("nvidia.com/gpu.sliced.memory-percentage", "50"),
                    ],
                )],
            )],
        )
        .await?,
    );
    steps.push(xid(demo, next()).await?);
    steps.push(restart(demo, next()).await?);
    Ok(steps)
}

/// One step per node, in the nodes' order: a Pod (`<manufacturer>-pod`, on the node's own
/// queue `demo-<node>`) asking for one whole accelerator of the node's manufacturer (its base
/// resource under `grammar`) or, on a node whose accelerators are all partitioned, one
/// partition of the first profile offered, through the webhook to the node's kubelet; the step
/// shows the grant — what that manufacturer injects — and the node's ledger. A node that
/// serves neither is a step with a note.
pub async fn one_pod_each(demo: &mut Demo, grammar: &KeyGrammar) -> anyhow::Result<Vec<Step>> {
    let nodes: Vec<(String, accel_core::Manufacturer)> = demo
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.manufacturer))
        .collect();
    let mut steps = Vec::new();
    for (number, (node, manufacturer)) in nodes.into_iter().enumerate() {
        let mut step = Step {
            number: number + 1,
            name: manufacturer.to_string(),
            ..Step::default()
        };
        let mut at = node.clone();
        match demo.node(&node).and_then(|n| request_of(n, grammar)) {
            Some((what, limits)) => {
                step.title = format!("{node} ({}): a Pod of {what}", super::brand(manufacturer));
                let limits: Vec<(&str, &str)> = limits
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let name = format!("{manufacturer}-pod");
                // On its node's own queue: the webhook folds it against that node's pool.
                let queue = super::cluster::node_queue(&node);
                let outcome = demo
                    .submit(pod_in("ubuntu:24.04", &queue, &name, &[("main", &limits)]))
                    .await?;
                at = outcome.node.clone().unwrap_or(at);
                step.pods.push(outcome);
            }
            None => {
                step.title = format!("{node} ({})", super::brand(manufacturer));
                step.notes.push(format!(
                    "skipped: {node} serves no healthy {} token, whole or partitioned",
                    grammar.base(manufacturer)
                ));
            }
        }
        step.ledger = demo.ledger_view(&at);
        steps.push(step);
    }
    Ok(steps)
}

/// What a node's Pod asks for, in words and as limits: one whole accelerator when the node has
/// a healthy whole-accelerator token, else one partition of the first profile its first
/// partitioned accelerator offers when it has a healthy partition token; `None` when neither.
fn request_of(node: &super::cluster::Node, grammar: &KeyGrammar) -> Option<(String, Limits)> {
    let m = node.manufacturer;
    let base = grammar.base(m).to_string();
    let healthy = |resource: &str| {
        node.kubelet
            .devices(resource)
            .iter()
            .any(|d| d.health == "Healthy")
    };
    if healthy(&base) {
        let what = format!("one whole accelerator, {base}");
        return Some((what, vec![(base, "1".to_string())]));
    }
    let partitioned = format!("{base}.partitioned");
    let kind = grammar.partition_kind(m)?;
    if !healthy(&partitioned) {
        return None;
    }
    let profile = node
        .accelerators()
        .iter()
        .find_map(|a| a.partition_profiles.first().map(|p| p.name.clone()))?;
    let what = format!("one {profile} partition, {partitioned}");
    let limits = vec![
        (partitioned.clone(), "1".to_string()),
        (format!("{partitioned}.{kind}-{profile}"), "1".to_string()),
    ];
    Some((what, limits))
}

/// A Pod's limits, key and quantity.
type Limits = Vec<(String, String)>;

/// A MIG `3g.40gb` partition on the MIG node, then its Pod deleted and the instance reclaimed.
async fn partition(demo: &mut Demo, number: usize) -> anyhow::Result<Step> {
    let mut step = Step {
        number,
        name: "partition".into(),
        title: "a MIG 3g.40gb partition, then its Pod deleted and the instance reclaimed".into(),
        ..Step::default()
    };
    let Some(node) = demo
        .nodes
        .iter()
        .find(|n| n.resources().iter().any(|r| r == PARTITIONED))
        .map(|n| n.name.clone())
    else {
        step.notes.push(format!(
            "skipped: no node serves {PARTITIONED} (no GPU in MIG mode)"
        ));
        return Ok(step);
    };
    let healthy = |demo: &Demo| {
        demo.node(&node).map_or(0, |n| {
            n.kubelet
                .devices(PARTITIONED)
                .iter()
                .filter(|d| d.health == "Healthy")
                .count()
        })
    };
    let before = healthy(demo);
    let outcome = demo
        .submit(pod(
            "mig-pod",
            &[(
                "main",
                &[
                    (PARTITIONED, "1"),
                    ("nvidia.com/gpu.partitioned.mig-3g.40gb", "1"),
                ],
            )],
        ))
        .await?;
    step.ledger = demo.ledger_view(&node);
    let held = outcome.node.is_some() && outcome.error.is_none() && outcome.allowed;
    let mig_uuid = outcome
        .grants
        .first()
        .and_then(|g| g.env.get("NVIDIA_VISIBLE_DEVICES").cloned());
    let (pod_name, namespace, uid) = (
        outcome.pod.clone(),
        outcome.namespace.clone(),
        outcome.uid.clone(),
    );
    step.pods.push(outcome);
    if !held {
        return Ok(step);
    }
    let Some(mig_node) = demo.node(&node) else {
        return Ok(step);
    };
    // The partition pool's health follows the room left (a node-level count).
    let while_target = before.saturating_sub(3);
    mig_node
        .until_tokens(PARTITIONED, |d| {
            d.iter().filter(|t| t.health == "Healthy").count() <= while_target
        })
        .await;
    let while_held = healthy(demo);
    demo.delete(&node, &namespace, &pod_name, &uid);
    let Some(mig_node) = demo.node(&node) else {
        return Ok(step);
    };
    let released = mig_node
        .until_ledger("the reclaim", |l| !l.pod_uids().contains(&uid))
        .await
        .is_ok();
    mig_node
        .until_tokens(PARTITIONED, |d| {
            d.iter().filter(|t| t.health == "Healthy").count() >= before
        })
        .await;
    step.notes.push(format!(
        "deleted {namespace}/{pod_name}: its instance was destroyed and the grant released"
    ));
    step.reclaim = Some(Reclaim {
        pod: format!("{namespace}/{pod_name}"),
        mig_uuid,
        released,
        tokens_before: before,
        tokens_while_held: while_held,
        tokens_after: healthy(demo),
    });
    Ok(step)
}

/// A hardware XID (79, fallen off the bus) on the highest-numbered free GPU of the main node.
async fn xid(demo: &mut Demo, number: usize) -> anyhow::Result<Step> {
    let mut step = Step {
        number,
        name: "xid".into(),
        title: "a GPU raises a hardware XID (79) and leaves service".into(),
        ..Step::default()
    };
    let Some(node) = demo.node(MAIN_NODE) else {
        return Ok(step);
    };
    let ledger = node.ledger()?;
    let free = ledger
        .seats()
        .filter(|s| {
            ledger
                .occupancy(s.index)
                .is_none_or(|o| o.mode == accel_core::ledger::Mode::Free)
        })
        .map(|s| s.index)
        .max();
    let accelerators = node.accelerators();
    let Some(gpu) = free
        .and_then(|i| accelerators.iter().find(|a| a.index == i))
        .or_else(|| accelerators.last())
        .cloned()
    else {
        step.notes.push("skipped: the node has no GPU".into());
        return Ok(step);
    };
    let (Some(bus), Some(uuid)) = (gpu.bus_id, gpu.uuid.clone()) else {
        step.notes.push(format!(
            "skipped: GPU {} has no bus address or UUID",
            gpu.index
        ));
        return Ok(step);
    };
    let line = format!(
        "NVRM: Xid (PCI:{:04x}:{:02x}:{:02x}): 79, pid=4242, name=python3, GPU has fallen off the bus.",
        bus.domain, bus.bus, bus.device
    );
    let Some(node) = demo.node_mut(MAIN_NODE) else {
        return Ok(step);
    };
    node.kernel_line(&line)?;
    node.until_tokens(GPU, |d| {
        d.iter().any(|t| t.id == uuid && t.health == "Unhealthy")
    })
    .await;
    let health = node
        .token_health(GPU, &uuid)
        .unwrap_or_else(|| "not advertised".into());
    let healthy_tokens = node
        .kubelet
        .devices(GPU)
        .iter()
        .filter(|d| d.health == "Healthy")
        .count();
    step.notes.push(format!(
        "the kernel log said: {line}\nGPU {} ({uuid}) is {health} to the kubelet; {healthy_tokens} whole-GPU tokens stay Healthy",
        gpu.index
    ));
    step.xid = Some(XidOutcome {
        gpu: GpuRef {
            index: gpu.index,
            uuid: Some(uuid),
        },
        line,
        health,
        healthy_tokens,
    });
    step.ledger = demo.ledger_view(MAIN_NODE);
    Ok(step)
}

/// The main node's daemon restarts on the same data directory: nothing is lost.
async fn restart(demo: &mut Demo, number: usize) -> anyhow::Result<Step> {
    let mut step = Step {
        number,
        name: "restart".into(),
        title: "the daemon restarts: every grant, and this boot's faults, are still there".into(),
        ..Step::default()
    };
    let Some(node) = demo.node_mut(MAIN_NODE) else {
        return Ok(step);
    };
    node.attributed().await?;
    let before = ledger_state(&node.ledger()?);
    node.restart().await?;
    node.attributed().await?;
    let after = ledger_state(&node.ledger()?);
    let unhealthy_after = node
        .ledger()?
        .seats()
        .filter(|s| !s.healthy)
        .filter_map(|s| s.uuid.clone())
        .collect();
    let equal = before == after;
    step.notes.push(if equal {
        "the ledger after the restart equals the ledger before it (rebuilt from the journal)".into()
    } else {
        "THE LEDGER CHANGED ACROSS THE RESTART".into()
    });
    step.restart = Some(Restart {
        node: MAIN_NODE.into(),
        before,
        after,
        equal,
        unhealthy_after,
    });
    step.ledger = demo.ledger_view(MAIN_NODE);
    Ok(step)
}
