//! A device plugin that does nothing but answer: the floor of Allocate's latency through the
//! transport the daemon uses (tonic over a unix socket, the daemon's runtime), with no ledger, no
//! journal, no identification and no notification behind it.
//!
//!     null_plugin SOCKET [DEVICES]
//!
//! It serves the kubelet's device plugin API (v1beta1) on SOCKET with DEVICES (8) healthy
//! devices `GPU-<i>`; Allocate answers `NVIDIA_VISIBLE_DEVICES=<the IDs>`, as NVIDIA's plugin
//! does under its envvar strategy. It registers with no kubelet: a client dials the socket
//! directly (the rig's `dp-bench`). `scripts/rig-floor.sh` sets it beside NVIDIA's plugin to
//! show what part of Allocate's tail no server can take away (BENCHMARKS.md).

use std::path::PathBuf;
use std::pin::Pin;

use accel_plugin::api::deviceplugin as dp;
use accel_plugin::api::deviceplugin::device_plugin_server::{DevicePlugin, DevicePluginServer};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

struct Null {
    devices: Vec<dp::Device>,
}

type Devices = Pin<Box<dyn Stream<Item = Result<dp::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for Null {
    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(dp::DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream = Devices;

    async fn list_and_watch(&self, _: Request<dp::Empty>) -> Result<Response<Devices>, Status> {
        let first = dp::ListAndWatchResponse {
            devices: self.devices.clone(),
        };
        let stream =
            tokio_stream::StreamExt::chain(tokio_stream::once(Ok(first)), tokio_stream::pending());
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        let container_responses = request
            .into_inner()
            .container_requests
            .into_iter()
            .map(|r| {
                let size = usize::try_from(r.allocation_size).unwrap_or(0);
                dp::ContainerPreferredAllocationResponse {
                    device_i_ds: r.available_device_i_ds.into_iter().take(size).collect(),
                }
            })
            .collect();
        Ok(Response::new(dp::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let container_responses = request
            .into_inner()
            .container_requests
            .into_iter()
            .map(|r| dp::ContainerAllocateResponse {
                envs: [(
                    "NVIDIA_VISIBLE_DEVICES".to_string(),
                    r.devices_ids.join(","),
                )]
                .into(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(dp::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let socket = PathBuf::from(args.next().ok_or("usage: null_plugin SOCKET [DEVICES]")?);
    let count: u32 = match args.next() {
        Some(n) => n
            .parse()
            .map_err(|e| format!("DEVICES {n:?} is not a count: {e}"))?,
        None => 8,
    };
    let devices = (0..count)
        .map(|i| dp::Device {
            id: format!("GPU-{i}"),
            health: "Healthy".to_string(),
            topology: None,
        })
        .collect();
    // As `serve` runs: a multi-thread runtime of two workers.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    runtime.block_on(async move {
        match std::fs::remove_file(&socket) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("removing {}: {e}", socket.display()));
            }
            _ => {}
        }
        let listener = tokio::net::UnixListener::bind(&socket)
            .map_err(|e| format!("binding {}: {e}", socket.display()))?;
        tonic::transport::Server::builder()
            .add_service(DevicePluginServer::new(Null { devices }))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
            .await
            .map_err(|e| format!("serving {}: {e}", socket.display()))
    })
}
