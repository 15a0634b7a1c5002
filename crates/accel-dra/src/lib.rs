//! The kubelet's side of Dynamic Resource Allocation (issue 46): the DRA kubelet plugin API `v1`
//! and plugin registration `v1` served on the kubelet's unix sockets, and one CDI spec per
//! prepared claim built from the backend's manufacturer-neutral `Injection`.
//!
//! What a claim holds is behind [`plugin::ClaimResolver`]: this crate asks it and writes what it
//! answers; [`claims::ApiClaimResolver`] reads it from the ResourceClaim's allocation status and
//! grants it through a [`claims::ClaimLedger`] (the daemon's is the device plugins' one ledger,
//! `device-manager serve --dra`). The node's accelerators become one ResourceSlice per
//! manufacturer ([`slices`], pure), which [`publish`] writes through the API server. Creating
//! partitions at prepare time and consumable capacity are not built yet (docs/ARCHITECTURE.md,
//! "DRA").
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod api;
pub mod authority;
pub mod cdi;
pub mod claims;
pub mod health;
pub mod plugin;
pub mod publish;
pub mod registration;
pub mod slices;
pub mod socket;

use std::path::Path;

use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;

pub use registration::{DriverName, RegistrationOutcome};

use plugin::{ClaimResolver, DraService};
use registration::RegistrationService;
use socket::{PluginSockets, SocketError};

/// A driver served to the kubelet: its sockets, the kubelet's registration reports, and the
/// task that ends once both servers have shut down.
#[derive(Debug)]
pub struct ServedDriver {
    pub sockets: PluginSockets,
    pub registration: watch::Receiver<RegistrationOutcome>,
    pub task: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

/// Serves `driver`'s DRA service (with its device health stream when given one) and its
/// registration under `kubelet_dir` until `stop` turns true. The DRA socket listens before the registration socket appears, so the endpoint
/// `GetInfo` names answers as soon as the kubelet's plugin watcher finds the driver; on stop the
/// registration socket is removed, which is how the kubelet learns the driver is gone.
/// Called inside the daemon's tokio runtime (it binds the sockets and spawns the servers there).
pub fn serve<R: ClaimResolver>(
    kubelet_dir: &Path,
    driver: DriverName,
    service: DraService<R>,
    health: Option<health::HealthService>,
    stop: watch::Receiver<bool>,
) -> Result<ServedDriver, SocketError> {
    let sockets = PluginSockets::new(kubelet_dir, &driver);
    let dra_listener = socket::bind(&sockets.dra)?;
    let (registration, outcome) = RegistrationService::new(driver, sockets.dra.clone());
    let registration_listener = socket::bind(&sockets.registration)?;
    let until_stopped = |mut stop: watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let dra_server = tonic::transport::Server::builder()
        .add_service(api::dra::dra_plugin_server::DraPluginServer::new(service))
        .add_optional_service(
            health.map(api::health::dra_resource_health_server::DraResourceHealthServer::new),
        )
        .serve_with_incoming_shutdown(
            UnixListenerStream::new(dra_listener),
            until_stopped(stop.clone()),
        );
    let registration_server = tonic::transport::Server::builder()
        .add_service(api::registration::registration_server::RegistrationServer::new(registration))
        .serve_with_incoming_shutdown(
            // The kubelet's plugin watcher sends the socket's path as `:authority`.
            tokio_stream::StreamExt::map(
                UnixListenerStream::new(registration_listener),
                |connection| connection.map(authority::AuthorityRewrite::new),
            ),
            until_stopped(stop),
        );
    let registration_socket = sockets.registration.clone();
    let task = tokio::spawn(async move {
        let (dra, registration) = tokio::join!(dra_server, registration_server);
        if let Err(e) = std::fs::remove_file(&registration_socket) {
            tracing::warn!(socket = %registration_socket.display(), error = %e, "cannot remove the registration socket");
        }
        dra.and(registration)
    });
    Ok(ServedDriver {
        sockets,
        registration: outcome,
        task,
    })
}
