//! The kubelet plugin's sockets: where they live under the kubelet's directory, binding them
//! (a stale socket from an earlier run replaced), serving a tonic service on one, and dialing one
//! as the kubelet does. Nothing here knows the APIs' messages or accelerators.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tonic::transport::{Channel, Endpoint, Uri};

/// The kubelet's plugin watcher's directory, under the kubelet's root directory: a socket made
/// here is found, asked `GetInfo`, and registered.
pub const PLUGINS_REGISTRY_DIR: &str = "plugins_registry";
/// Where plugins keep their own service sockets, one directory per driver.
pub const PLUGINS_DIR: &str = "plugins";
/// The DRA service's socket name in the driver's directory (the kubelet takes any path the
/// registration names; this is the one its DRA helper library uses).
pub const DRA_SOCKET: &str = "dra.sock";

/// Why a socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The socket's directory could not be made.
    #[error("cannot create the socket directory {path}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Something other than a socket sits at the path; it is not ours to remove.
    #[error("{path} exists and is not a socket; remove it or pick another kubelet directory")]
    NotASocket { path: PathBuf },
    /// A stale socket could not be removed, or the new one not bound.
    #[error("cannot bind the socket {path}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A driver's two sockets under the kubelet's root directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSockets {
    /// `<kubelet-dir>/plugins_registry/<driver>-reg.sock`: the registration service.
    pub registration: PathBuf,
    /// `<kubelet-dir>/plugins/<driver>/dra.sock`: the DRA service the registration names.
    pub dra: PathBuf,
}

impl PluginSockets {
    /// The sockets of `driver` under `kubelet_dir` (`/var/lib/kubelet` on most nodes).
    pub fn new(kubelet_dir: &Path, driver: &crate::DriverName) -> PluginSockets {
        PluginSockets {
            registration: kubelet_dir
                .join(PLUGINS_REGISTRY_DIR)
                .join(format!("{driver}-reg.sock")),
            dra: kubelet_dir
                .join(PLUGINS_DIR)
                .join(driver.as_str())
                .join(DRA_SOCKET),
        }
    }
}

/// Binds a unix socket at `path`, making its directory and replacing a socket left by an
/// earlier run (nothing listens on it any more once that run is gone).
pub fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| SocketError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(|source| SocketError::Bind {
                path: path.to_path_buf(),
                source,
            })?;
        }
        Ok(_) => {
            return Err(SocketError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        Err(_) => {}
    }
    UnixListener::bind(path).map_err(|source| SocketError::Bind {
        path: path.to_path_buf(),
        source,
    })
}

/// A channel to the gRPC server on `path`, connected now: the kubelet's end, for tests and
/// checks. The URI is a placeholder; the socket is what is dialed.
pub async fn connect(path: PathBuf) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
}
