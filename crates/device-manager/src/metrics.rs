//! `serve --metrics-listen ADDR`: the node daemon's `/metrics`, one registry assembled from the
//! crates that record (the plugins, the daemon, the publisher), served over plain HTTP/1 with
//! hyper in the Prometheus text exposition format (0.0.4). Every other path is 404, every method
//! but GET and HEAD 405. This module owns the listener and the encoding of a scrape; the metrics
//! themselves belong to the crates that record them.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The prefix of every metric the daemon exposes.
pub const PREFIX: &str = "device_manager";

/// A scrape can take no longer than this to send its headers (a stalled client holds nothing).
const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Binds `addr`, or says in one line why it cannot.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("--metrics-listen {addr}: cannot listen: {e}"))
}

/// Serves `/metrics` from `registry` on `listener` until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors and the like: say so, and keep accepting.
                tracing::warn!("metrics: accept failed: {e}");
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let registry = registry.clone();
                async move { Ok::<_, Infallible>(answer(&request, &registry)) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!("metrics: connection ended: {e}");
            }
        });
    }
}

/// The answer to one request.
fn answer(request: &Request<Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    if request.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n",
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        response
            .headers_mut()
            .insert(ALLOW, hyper::header::HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let mut text = String::new();
    if let Err(e) = prometheus_text::encode(&mut text, registry) {
        tracing::error!("metrics: cannot encode: {e}");
        return plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode the metrics\n",
        );
    }
    let mut response = Response::new(Full::new(Bytes::from(text)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(prometheus_text::CONTENT_TYPE),
    );
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
