//! The daemon's admin socket: `<data-dir>/admin.sock`, root only, one JSON request a line
//! (`{"op":"refresh"}`, `{"op":"reset","gpus":["GPU-…"]}`) answered by one JSON line
//! (`{"ok":true,…}` or `{"ok":false,"error":"…"}`). The server ([`server`]) is generic over
//! [`AdminHandler`], which `serve` implements over its daemon state; the client ([`client`]) is
//! what `device-manager refresh` and `reset` use. This module owns the wire shapes and the
//! peer check; it decides nothing about GPUs (that is the backend's reset, `accel_backend::reset`).

use std::path::{Path, PathBuf};

use accel_backend::reset::{ResetError, ResetReport};
use accel_core::inventory::Inventory;
use serde::{Deserialize, Serialize};

pub mod client;
pub mod server;

/// The socket's file name in `--data-dir`.
pub const SOCKET_NAME: &str = "admin.sock";

/// The daemon's default data directory (DESIGN.md, "Node-local state").
pub const DEFAULT_DATA_DIR: &str = "/var/lib/gpustack/operator/device-manager";

/// The admin socket of the daemon whose data directory is `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET_NAME)
}

/// One request on the admin socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Request {
    /// Collect the inventory now.
    Refresh,
    /// Reset these GPUs (UUIDs), refused as a whole when any is busy or unknown.
    Reset { gpus: Vec<String> },
}

/// One GPU's health after a refresh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuHealth {
    pub index: u32,
    pub uuid: Option<String>,
    pub healthy: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_reasons: Vec<String>,
}

/// What a refresh answers: every accelerator's health in the fresh inventory.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refreshed {
    pub gpus: Vec<GpuHealth>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Refreshed {
    /// The summary of an inventory (health already applied).
    pub fn from_inventory(inventory: &Inventory, notes: Vec<String>) -> Self {
        let gpus = inventory
            .manufacturers
            .iter()
            .flat_map(|s| s.accelerators.iter())
            .map(|a| GpuHealth {
                index: a.index,
                uuid: a.uuid.clone(),
                healthy: a.healthy,
                health_reasons: a.health_reasons.clone(),
            })
            .collect();
        Refreshed { gpus, notes }
    }
}

/// What the daemon does for the admin socket. Calls come one at a time (the server holds one
/// lock around them), from the server's connection threads.
pub trait AdminHandler: Send + Sync + 'static {
    /// Collects the inventory now and answers its health; `Err` is the one-line reason.
    fn refresh(&self) -> Result<Refreshed, String>;
    /// Runs the backend's reset over the daemon's inventory, ledger and fault watch,
    /// keeping the ledger from granting the GPUs until it returns.
    fn reset(&self, gpus: &[String]) -> Result<ResetReport, ResetError>;
}

/// Errors of the admin socket, server and client side.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The peer is not allowed (not root).
    #[error("refused a connection from uid {uid}: the admin socket is for root only")]
    NotRoot { uid: u32 },
    /// The peer's credentials could not be read.
    #[error("cannot read the peer's credentials: {0}")]
    PeerCredentials(#[source] nix::Error),
    /// Another daemon already serves the socket.
    #[error("{0}: another daemon already serves this admin socket")]
    InUse(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{0}: exists and is not a socket; remove it or choose another --data-dir")]
    NotASocket(PathBuf),
    /// Binding, listening or setting the mode failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Whether a peer with user id `uid` may use the admin socket: root, or the daemon's own user
/// (`allowed`), since a daemon that is not root has no more rights than its own user.
pub fn check_peer(uid: u32, allowed: &[u32]) -> Result<(), AdminError> {
    if uid == 0 || allowed.contains(&uid) {
        Ok(())
    } else {
        Err(AdminError::NotRoot { uid })
    }
}

#[cfg(test)]
mod tests;
