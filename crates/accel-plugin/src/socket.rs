//! Unix-socket plumbing for tonic: a channel that dials a socket path, and a listener stream.
//! Nothing here knows the kubelet's APIs.

use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// A channel to the gRPC server on `path`, connected on first use and again after a failure.
/// The URI is a placeholder: tonic sends `localhost` as the authority, which every kubelet from
/// 1.26 on accepts.
pub fn lazy_channel(path: PathBuf) -> Channel {
    Endpoint::from_static("http://localhost").connect_with_connector_lazy(tower::service_fn(
        move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        },
    ))
}

/// A channel to `path`, connected now.
pub async fn connect(path: PathBuf) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
}

/// Serves one device plugin `service` on `listener` until `stop` turns true; the task ends
/// when the server has shut down. The plugin pools and the RDMA plugin serve through it.
pub fn serve_plugin<S>(
    listener: tokio::net::UnixListener,
    service: S,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>>
where
    S: crate::api::deviceplugin::device_plugin_server::DevicePlugin,
{
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(
                crate::api::deviceplugin::device_plugin_server::DevicePluginServer::new(service),
            )
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                },
            ),
    )
}
