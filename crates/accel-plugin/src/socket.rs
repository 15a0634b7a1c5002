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
