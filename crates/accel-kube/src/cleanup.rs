//! What an uninstall must take away that Helm never created: the objects the node daemons and
//! the worker write at run time. The chart's post-delete hook runs it (`device-manager cleanup`),
//! after Helm has deleted the release's own objects.
//!
//! In order:
//! 1. wait (up to a bound) until the release's daemon and worker Pods are gone, since one still
//!    running would write its objects again;
//! 2. the NodeFeatures `<node>-gpustack-device-manager` in the release's namespace (NFD then
//!    removes the nodes' `acceleratable.*` labels);
//! 3. the `gpustack-cpu-info` NodeFeatureRule;
//! 4. the worker's leader-election Lease;
//! 5. every `Devices` object (they are owned by their Nodes, so otherwise they stay as long as
//!    the Node does);
//! 6. the accelerator budget keys the daemons patched onto each Node's `status.capacity` and
//!    `status.allocatable` ([`accel_core::capacity::capacity_key_manufacturer`]); the kubelet
//!    drops the device plugins' own resources itself once their plugins are gone.
//!
//! An object already gone, or an API that is not served (NFD or the CRD not installed), is
//! nothing to do; any other failure is reported and counted, and the other steps still run. The
//! `Devices` CRD is not deleted (Helm never deletes what it installed from `crds/`), nor are the
//! Pods' `accelerator.allocated` annotations (they go with their Pods).

use std::collections::BTreeSet;
use std::time::Duration;

use accel_core::capacity::capacity_key_manufacturer;
use accel_core::resources::KeyGrammar;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::crd::{NODE_FEATURE_SUFFIX, NodeFeature};
use crate::nfr;
use crate::worker::devices_resource;

/// The Pods the cleanup waits for: the release's node daemons and workers (the chart labels
/// them with the release).
pub fn release_pods_selector(release: &str) -> String {
    format!(
        "app.kubernetes.io/instance={release},app.kubernetes.io/component in (device-manager,worker)"
    )
}

/// What to clean up and how long to wait.
#[derive(Debug, Clone)]
pub struct CleanupConfig {
    /// The release's namespace: its NodeFeatures, the Lease, its Pods.
    pub namespace: String,
    /// The Helm release, whose Pods are waited for.
    pub release: String,
    /// The worker's leader-election Lease.
    pub lease_name: String,
    /// How long to wait for the release's Pods to be gone.
    pub wait: Duration,
    /// How often to look again while waiting.
    pub poll: Duration,
    /// The resource bases in use: they say which capacity keys are ours.
    pub grammar: KeyGrammar,
}

/// What the cleanup did, one line per step or object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupReport {
    pub lines: Vec<String>,
    /// Steps that failed (each also a line).
    pub failures: usize,
}

impl CleanupReport {
    fn did(&mut self, line: String) {
        self.lines.push(line);
    }

    fn failed(&mut self, line: String) {
        self.lines.push(line);
        self.failures += 1;
    }
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(response) if response.code == 404)
}

/// Runs every step; see the module documentation.
pub async fn cleanup(client: &Client, config: &CleanupConfig) -> CleanupReport {
    let mut report = CleanupReport::default();
    wait_for_pods(client, config, &mut report).await;
    node_features(client, config, &mut report).await;
    node_feature_rule(client, &mut report).await;
    lease(client, config, &mut report).await;
    devices(client, &mut report).await;
    capacity(client, config, &mut report).await;
    report
}

async fn wait_for_pods(client: &Client, config: &CleanupConfig, report: &mut CleanupReport) {
    let api = Api::<Pod>::namespaced(client.clone(), &config.namespace);
    let params = ListParams::default().labels(&release_pods_selector(&config.release));
    let started = Instant::now();
    loop {
        match api.list_metadata(&params).await {
            Ok(list) if list.items.is_empty() => {
                report.did(format!(
                    "the release's daemon and worker Pods are gone (waited {}s)",
                    started.elapsed().as_secs()
                ));
                return;
            }
            Ok(list) => {
                if started.elapsed() >= config.wait {
                    let names: Vec<String> = list
                        .items
                        .iter()
                        .filter_map(|p| p.metadata.name.clone())
                        .collect();
                    report.did(format!(
                        "{} of the release's Pods still exist after {}s ({}); cleaning up anyway: one still running may write its objects again",
                        names.len(),
                        config.wait.as_secs(),
                        names.join(", ")
                    ));
                    return;
                }
            }
            Err(e) => {
                if started.elapsed() >= config.wait {
                    report.failed(format!(
                        "cannot list the release's Pods in {}: {e}; cleaning up anyway",
                        config.namespace
                    ));
                    return;
                }
                tracing::warn!(error = %e, "cannot list the release's Pods; retrying");
            }
        }
        tokio::time::sleep(config.poll).await;
    }
}

async fn node_features(client: &Client, config: &CleanupConfig, report: &mut CleanupReport) {
    let api = Api::<NodeFeature>::namespaced(client.clone(), &config.namespace);
    let list = match api.list_metadata(&ListParams::default()).await {
        Ok(list) => list,
        Err(e) if not_found(&e) => {
            report.did("NodeFeatures: NFD's API is not served, nothing to delete".to_string());
            return;
        }
        Err(e) => {
            report.failed(format!(
                "cannot list the NodeFeatures in {}: {e}",
                config.namespace
            ));
            return;
        }
    };
    let ours: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|f| f.metadata.name)
        .filter(|name| name.ends_with(NODE_FEATURE_SUFFIX))
        .collect();
    if ours.is_empty() {
        report.did(format!(
            "NodeFeatures: none of ours in {}",
            config.namespace
        ));
    }
    for name in ours {
        delete(
            api.delete(&name, &DeleteParams::default()).await.map(drop),
            &format!("NodeFeature {}/{name}", config.namespace),
            report,
        );
    }
}

async fn node_feature_rule(client: &Client, report: &mut CleanupReport) {
    let api = Api::<DynamicObject>::all_with(client.clone(), &nfr::api_resource());
    delete(
        api.delete(nfr::NAME, &DeleteParams::default())
            .await
            .map(drop),
        &format!("NodeFeatureRule {}", nfr::NAME),
        report,
    );
}

async fn lease(client: &Client, config: &CleanupConfig, report: &mut CleanupReport) {
    let api = Api::<Lease>::namespaced(client.clone(), &config.namespace);
    delete(
        api.delete(&config.lease_name, &DeleteParams::default())
            .await
            .map(drop),
        &format!("Lease {}/{}", config.namespace, config.lease_name),
        report,
    );
}

async fn devices(client: &Client, report: &mut CleanupReport) {
    let api = Api::<DynamicObject>::all_with(client.clone(), &devices_resource());
    let list = match api.list_metadata(&ListParams::default()).await {
        Ok(list) => list,
        Err(e) if not_found(&e) => {
            report.did("Devices: the CRD is not installed, nothing to delete".to_string());
            return;
        }
        Err(e) => {
            report.failed(format!("cannot list the Devices objects: {e}"));
            return;
        }
    };
    if list.items.is_empty() {
        report.did("Devices: none".to_string());
    }
    for name in list.items.into_iter().filter_map(|d| d.metadata.name) {
        delete(
            api.delete(&name, &DeleteParams::default()).await.map(drop),
            &format!("Devices {name}"),
            report,
        );
    }
}

async fn capacity(client: &Client, config: &CleanupConfig, report: &mut CleanupReport) {
    let api = Api::<Node>::all(client.clone());
    let nodes = match api.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(e) => {
            report.failed(format!("cannot list the Nodes: {e}"));
            return;
        }
    };
    let mut carried = 0;
    for node in nodes.items {
        let name = node.metadata.name.clone().unwrap_or_default();
        let status = node.status.as_ref();
        let keys: BTreeSet<&String> = status
            .and_then(|s| s.capacity.as_ref())
            .into_iter()
            .chain(status.and_then(|s| s.allocatable.as_ref()))
            .flat_map(|m| m.keys())
            .filter(|key| capacity_key_manufacturer(&config.grammar, key).is_some())
            .collect();
        if keys.is_empty() {
            continue;
        }
        carried += 1;
        let removed: Map<String, Value> =
            keys.iter().map(|k| ((*k).clone(), Value::Null)).collect();
        let body = json!({"status": {"capacity": removed, "allocatable": removed}});
        let list: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => report.did(format!(
                "Node {name}: removed the capacity keys {}",
                list.join(", ")
            )),
            Err(e) if not_found(&e) => {}
            Err(e) => report.failed(format!(
                "Node {name}: cannot remove the capacity keys {}: {e}",
                list.join(", ")
            )),
        }
    }
    if carried == 0 {
        report.did("Nodes: no accelerator budget key in any capacity".to_string());
    }
}

/// Reports one delete: done, already gone, or failed.
fn delete(result: Result<(), kube::Error>, what: &str, report: &mut CleanupReport) {
    match result {
        Ok(()) => report.did(format!("{what}: deleted")),
        Err(e) if not_found(&e) => report.did(format!("{what}: already gone")),
        Err(e) => report.failed(format!("{what}: cannot delete: {e}")),
    }
}
