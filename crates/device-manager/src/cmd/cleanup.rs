//! `device-manager cleanup`: what an uninstall must take away that Helm never created (the
//! NodeFeatures, the NodeFeatureRule, the worker's Lease, the `Devices` objects, the Nodes'
//! accelerator budget keys), once the release's Pods are gone. The chart's post-delete hook runs
//! it; accel-kube's `cleanup` does the work. Exit 0 when every step succeeded or had nothing to
//! do, 1 when any failed (the hook's Job then retries), 2 without a cluster.

use std::process::ExitCode;
use std::time::Duration;

use accel_kube::cleanup::{self, CleanupConfig};
use anyhow::Context as _;

use crate::settings::Settings;

/// Arguments of `cleanup`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The release's namespace (its NodeFeatures, the worker's Lease, its Pods); the cluster
    /// configuration's default when unset.
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// The Helm release whose daemon and worker Pods are waited for.
    #[arg(long, env = "RELEASE")]
    release: String,
    /// The worker's leader-election Lease.
    #[arg(
        long,
        env = "LEASE_NAME",
        default_value = "gpustack-device-manager-worker"
    )]
    lease_name: String,
    /// Seconds to wait for the release's Pods to be gone before deleting anyway.
    #[arg(long, env = "WAIT_SECONDS", default_value_t = 120)]
    wait_seconds: u64,
}

/// The capacity keys that are ours follow the settings' resource names.
pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let grammar = settings.grammar();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(async {
        let client = kube::Client::try_default()
            .await
            .context("cannot reach the API server (in-cluster config or KUBECONFIG)")?;
        let config = CleanupConfig {
            namespace: args
                .namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string()),
            release: args.release.clone(),
            lease_name: args.lease_name.clone(),
            wait: Duration::from_secs(args.wait_seconds),
            poll: Duration::from_secs(2),
            grammar,
        };
        anyhow::Ok(cleanup::cleanup(&client, &config).await)
    })?;
    for line in &report.lines {
        println!("{line}");
    }
    Ok(if report.failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
