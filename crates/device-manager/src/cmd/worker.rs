//! `device-manager worker --tls-cert FILE --tls-key FILE [--listen ADDR]`: the cluster-level
//! process. Every replica serves the Pod admission webhooks, learning each queue's pool from watch
//! caches; the replica elected on a coordination.k8s.io Lease also runs the cluster-level
//! controllers (accel-kube's `worker`: the NodeFeatureRule, the managed mark, the CPU node key,
//! Devices clean-up), and stops them the moment it stops leading. On SIGTERM the controllers stop
//! and the Lease is released at once (another replica leads at its next try, so a rolling upgrade
//! does not pause the controllers for the lease duration), while the webhooks serve on for
//! `--shutdown-delay-seconds` as the Service's endpoints drain.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use accel_core::manufacturer::ManufacturerTable;
use accel_kube::PoolCache;
use accel_kube::lease::{self, ElectionConfig, Elector, KubeLeases};
use accel_kube::worker::{self as controllers, LoopConfig};
use accel_webhook::metrics::Metrics;
use accel_webhook::{CertReloader, ServerConfig};
use anyhow::Context as _;

use crate::settings::Settings;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The serving certificate (PEM), re-read when it changes on disk.
    #[arg(long, env = "TLS_CERT", value_name = "FILE")]
    tls_cert: PathBuf,
    /// The serving certificate's private key (PEM).
    #[arg(long, env = "TLS_KEY", value_name = "FILE")]
    tls_key: PathBuf,
    /// Where to listen for HTTPS.
    #[arg(long, env = "LISTEN", default_value = "0.0.0.0:9443")]
    listen: SocketAddr,
    /// How often to look for a rotated certificate, in seconds.
    #[arg(long, env = "TLS_RELOAD_SECONDS", default_value_t = 10)]
    tls_reload_seconds: u64,
    /// Largest AdmissionReview body accepted, in bytes.
    #[arg(long, env = "WEBHOOK_BODY_LIMIT", default_value_t = 4 * 1024 * 1024)]
    body_limit: usize,
    /// How long to keep serving after SIGTERM, while the Service's endpoints drop this replica
    /// (the webhooks fail closed, so a review in flight must not meet a closed port), in seconds.
    #[arg(long, env = "SHUTDOWN_DELAY_SECONDS", default_value_t = 5)]
    shutdown_delay_seconds: u64,
    /// Longest one review may take, body read included, in milliseconds.
    #[arg(long, env = "WEBHOOK_REQUEST_TIMEOUT_MS", default_value_t = 10_000)]
    request_timeout_ms: u64,
    /// This replica's identity in the leader election (the Pod name, from the downward API;
    /// when unset, the host name and a random suffix, as Kubernetes' own controllers do).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// The namespace of the election's Lease (the Pod's, from the downward API; the client's
    /// default namespace when unset).
    #[arg(long, env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    /// The election's Lease.
    #[arg(
        long,
        env = "LEASE_NAME",
        default_value = "gpustack-device-manager-worker"
    )]
    lease_name: String,
    /// How long a leader's claim lasts without renewal, in seconds.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15)]
    lease_duration_seconds: u64,
    /// How long a leader keeps leading without a successful renewal, in seconds (less than the
    /// lease duration).
    #[arg(long, env = "LEASE_RENEW_DEADLINE_SECONDS", default_value_t = 10)]
    renew_deadline_seconds: u64,
    /// How often to try to acquire or renew the Lease, in seconds.
    #[arg(long, env = "LEASE_RETRY_PERIOD_SECONDS", default_value_t = 2)]
    retry_period_seconds: u64,
    /// How often the controllers look at every Devices again, events or not, in seconds.
    #[arg(long, env = "WORKER_RESYNC_SECONDS", default_value_t = 300)]
    resync_seconds: u64,
}

pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(args, settings.clone()))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(args: Args, settings: Settings) -> anyhow::Result<()> {
    let grammar = settings.grammar();
    let reloader = CertReloader::load(&args.tls_cert, &args.tls_key)
        .context("cannot load the serving certificate")?;
    let tls = reloader.server_config()?;
    let election_config = election(&args)?;
    tokio::spawn(reloader.watch(Duration::from_secs(args.tls_reload_seconds.max(1))));

    let client = kube::Client::try_default()
        .await
        .context("cannot reach the API server (in-cluster config or KUBECONFIG)")?;
    let (pools, fill) = PoolCache::new(client.clone());
    tokio::spawn(fill);

    // SIGTERM (or Ctrl-C) is seen once and told to both the election and the server.
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop_signal().await;
        stopping_tx.send_replace(true);
    });
    let release_bound = election_config.renew_deadline;
    let election = tokio::spawn(elect_and_control(
        client,
        election_config,
        &args,
        settings.manufacturers.clone(),
        stopped(stopping.clone()),
    ));

    let config = ServerConfig {
        body_limit: args.body_limit,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        ..ServerConfig::default()
    };
    let app = accel_webhook::router(pools, grammar, Arc::new(Metrics::default()), &config);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %args.listen, "serving the Pod admission webhooks");
    let delay = Duration::from_secs(args.shutdown_delay_seconds);
    accel_webhook::serve(listener, tls, app, config, async move {
        stopped(stopping).await;
        tracing::info!(
            delay_s = delay.as_secs(),
            "stopping: serving on while endpoints drain"
        );
        tokio::time::sleep(delay).await;
    })
    .await?;
    // The release normally finished during the delay; never exit in the middle of it.
    if tokio::time::timeout(release_bound, election).await.is_err() {
        tracing::warn!("stopping: the lease release did not finish");
    }
    Ok(())
}

fn election(args: &Args) -> anyhow::Result<ElectionConfig> {
    let identity = match args.identity.clone().filter(|i| !i.is_empty()) {
        Some(identity) => identity,
        None => {
            let identity = default_identity(&host_name(), &random_suffix());
            tracing::warn!(
                %identity,
                "no POD_NAME or --identity: the leader-election identity is the host name and a random suffix"
            );
            identity
        }
    };
    let secs = |s: u64| Duration::from_secs(s.max(1));
    let config = ElectionConfig {
        identity,
        lease_duration: secs(args.lease_duration_seconds),
        renew_deadline: secs(args.renew_deadline_seconds),
        retry_period: secs(args.retry_period_seconds),
    };
    if config.renew_deadline >= config.lease_duration {
        anyhow::bail!(
            "--renew-deadline-seconds ({}) must be less than --lease-duration-seconds ({})",
            args.renew_deadline_seconds,
            args.lease_duration_seconds
        );
    }
    Ok(config)
}

/// The identity of a replica outside a Pod: `<host name>_<suffix>`, the shape client-go's
/// leader election gives its own controllers (the suffix keeps two processes on one host apart).
fn default_identity(host_name: &str, suffix: &str) -> String {
    let host = host_name.trim();
    let host = if host.is_empty() {
        "device-manager"
    } else {
        host
    };
    format!("{host}_{suffix}")
}

/// This machine's host name: `HOSTNAME` where the shell exported it, else the kernel's.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .map(|h| h.to_string_lossy().into_owned())
        })
        .unwrap_or_default()
}

/// 16 hex digits that differ between processes: the standard library seeds each `RandomState`
/// from the operating system's randomness.
fn random_suffix() -> String {
    use std::hash::BuildHasher;
    let seed = (
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!(
        "{:016x}",
        std::collections::hash_map::RandomState::new().hash_one(seed)
    )
}

/// Campaign on the Lease and run the controllers while this replica leads, until `stop`; then
/// stop the controllers and release the Lease.
fn elect_and_control(
    client: kube::Client,
    config: ElectionConfig,
    args: &Args,
    table: ManufacturerTable,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let namespace = args
        .lease_namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let leases = KubeLeases::new(client.clone(), &namespace, &args.lease_name);
    tracing::info!(identity = %config.identity, lease = %args.lease_name, %namespace, "campaigning for the controllers' lease");
    let loop_config = LoopConfig {
        resync: Duration::from_secs(args.resync_seconds.max(1)),
        ..LoopConfig::default()
    };
    let (leading_tx, leading_rx) = tokio::sync::watch::channel(false);
    async move {
        // The controllers stop as soon as `leading` turns false, and for good once the election
        // has ended (its sender dropped).
        tokio::spawn(lease::while_leading(leading_rx, move || {
            controllers::run_with(client.clone(), loop_config.clone(), table.clone())
        }));
        Elector::new(leases, config)
            .run_until(leading_tx, stop)
            .await;
    }
}

/// Completes once `stopping` turns true (or its sender is gone).
async fn stopped(mut stopping: tokio::sync::watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}

/// SIGTERM (the kubelet stopping the Pod) or Ctrl-C.
async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_identity_is_the_host_name_and_a_random_suffix() {
        assert_eq!(default_identity("node-a\n", "00ff"), "node-a_00ff");
        assert_eq!(default_identity("", "00ff"), "device-manager_00ff");
        let (a, b) = (random_suffix(), random_suffix());
        assert_eq!(a.len(), 16);
        assert_ne!(a, b, "two suffixes in one process differ");
    }
}
