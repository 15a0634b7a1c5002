//! Device health streamed to the kubelet (DRA device health `v1alpha1`, service
//! `DRAResourceHealth`): the kubelet opens `NodeWatchResources` on the driver's socket and shows
//! each device's health in the status of the Pods whose claims hold it. The stream answers the
//! pool's current health at once and then every change, from a [`HealthFeed`] the daemon sets
//! after each detection pass ([`device_health`] reads it off the published section).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::{SystemTime, UNIX_EPOCH};

use accel_core::inventory::ManufacturerInventory;
use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::api::health::{
    self as api, DeviceHealth, DeviceIdentifier, HealthStatus, NodeWatchResourcesResponse,
};
use crate::slices;

/// The most characters of a health message the kubelet keeps.
const MESSAGE_MAX: usize = 1024;

/// One device's health as last determined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceState {
    pub healthy: bool,
    /// Why it is not healthy (the health rule's reasons), empty when it is.
    pub message: String,
    /// Unix seconds of the detection that determined it.
    pub updated: i64,
}

/// The pool's devices' health, by device name.
pub type PoolHealth = BTreeMap<String, DeviceState>;

/// The health of every device of `section` as the slice names them, determined at `at`.
pub fn device_health(section: &ManufacturerInventory, at: SystemTime) -> PoolHealth {
    let updated = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    section
        .accelerators
        .iter()
        .map(|a| {
            let mut message = a.health_reasons.join("; ");
            if message.chars().count() > MESSAGE_MAX {
                message = message.chars().take(MESSAGE_MAX - 3).collect::<String>() + "...";
            }
            (
                slices::device_name(section.name, a.index),
                DeviceState {
                    healthy: a.healthy,
                    message,
                    updated,
                },
            )
        })
        .collect()
}

/// Where the daemon sets the health the streams send.
#[derive(Debug)]
pub struct HealthFeed {
    tx: watch::Sender<PoolHealth>,
}

impl HealthFeed {
    /// A feed with no device known yet.
    pub fn new() -> HealthFeed {
        HealthFeed {
            tx: watch::channel(PoolHealth::new()).0,
        }
    }

    /// Sets the pool's health; the streams send it only when it differs from what they sent
    /// (a detection time alone is no change).
    pub fn set(&self, health: PoolHealth) {
        self.tx.send_if_modified(|current| {
            let differs = current.len() != health.len()
                || current.iter().zip(&health).any(|((a, x), (b, y))| {
                    a != b || x.healthy != y.healthy || x.message != y.message
                });
            if differs {
                *current = health;
            }
            differs
        });
    }

    /// The service streaming this feed for `pool`.
    pub fn service(&self, pool: &str) -> HealthService {
        HealthService {
            pool: pool.to_string(),
            health: self.tx.subscribe(),
        }
    }
}

impl Default for HealthFeed {
    fn default() -> Self {
        HealthFeed::new()
    }
}

/// The `DRAResourceHealth` service over one pool's feed.
#[derive(Debug)]
pub struct HealthService {
    pool: String,
    health: watch::Receiver<PoolHealth>,
}

/// What one message of the stream says of the pool.
pub fn response(pool: &str, health: &PoolHealth) -> NodeWatchResourcesResponse {
    NodeWatchResourcesResponse {
        devices: health
            .iter()
            .map(|(name, state)| DeviceHealth {
                device: Some(DeviceIdentifier {
                    pool_name: pool.to_string(),
                    device_name: name.clone(),
                }),
                health: if state.healthy {
                    HealthStatus::Healthy
                } else {
                    HealthStatus::Unhealthy
                } as i32,
                last_updated_time: state.updated,
                health_check_timeout_seconds: 0,
                message: state.message.clone(),
            })
            .collect(),
    }
}

type HealthStream =
    Pin<Box<dyn Stream<Item = Result<NodeWatchResourcesResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl api::dra_resource_health_server::DraResourceHealth for HealthService {
    type NodeWatchResourcesStream = HealthStream;

    async fn node_watch_resources(
        &self,
        _request: Request<api::NodeWatchResourcesRequest>,
    ) -> Result<Response<HealthStream>, Status> {
        let pool = self.pool.clone();
        // The current health first, then each change; an empty pool (before the first
        // detection) sends nothing.
        let stream = tokio_stream::wrappers::WatchStream::new(self.health.clone())
            .filter(|health| !health.is_empty())
            .map(move |health| Ok(response(&pool, &health)));
        Ok(Response::new(Box::pin(stream)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(healthy: bool, message: &str, updated: i64) -> DeviceState {
        DeviceState {
            healthy,
            message: message.into(),
            updated,
        }
    }

    #[test]
    fn a_new_detection_time_alone_is_no_change_and_a_health_flip_is() {
        let feed = HealthFeed::new();
        let mut rx = feed.tx.subscribe();
        feed.set(PoolHealth::from([("gpu-0".into(), state(true, "", 1))]));
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        feed.set(PoolHealth::from([("gpu-0".into(), state(true, "", 2))]));
        assert!(!rx.has_changed().unwrap());
        feed.set(PoolHealth::from([(
            "gpu-0".into(),
            state(false, "XID 79", 3),
        )]));
        assert!(rx.has_changed().unwrap());
        let response = response("node-1", &rx.borrow_and_update());
        assert_eq!(response.devices.len(), 1);
        let d = &response.devices[0];
        assert_eq!(d.device.as_ref().unwrap().pool_name, "node-1");
        assert_eq!(d.device.as_ref().unwrap().device_name, "gpu-0");
        assert_eq!(d.health, HealthStatus::Unhealthy as i32);
        assert_eq!((d.last_updated_time, d.message.as_str()), (3, "XID 79"));
    }
}
