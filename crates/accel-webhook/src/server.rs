//! The HTTPS server: routes, limits and the accept loop.
//!
//! This module owns the HTTP side of the webhook: `/mutate-pods` and `/validate-pods` answer
//! AdmissionReviews, `/healthz` says the process serves, `/readyz` says whether the pool caches
//! have synced (naming what they wait for, or what is missing while ready), `/metrics` is Prometheus text. A body over the limit is refused with 413, a request
//! slower than the timeout with 408, an unreadable review with 400 naming what was wrong; none of
//! them disturbs another connection.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel_core::admission::Phase;
use accel_core::resources::KeyGrammar;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::metrics::{Endpoint, Metrics, Outcome};
use crate::pool::{PoolSource, Readiness};
use crate::review;

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listening socket failed.
    #[error("accepting connections on {addr}: {source}")]
    Accept {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

/// The server's limits.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body accepted (the API server caps objects near 3 MiB).
    pub body_limit: usize,
    /// Longest a request may take, body read included.
    pub request_timeout: Duration,
    /// Longest a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// Longest a client may take to send its request headers.
    pub header_timeout: Duration,
    /// Most connections served at once; further ones wait in the listen backlog.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            body_limit: 4 * 1024 * 1024,
            request_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

#[derive(Clone)]
struct AppState {
    pools: Arc<dyn PoolSource>,
    grammar: Arc<KeyGrammar>,
    metrics: Arc<Metrics>,
}

/// The webhook's routes.
pub fn router(
    pools: Arc<dyn PoolSource>,
    grammar: KeyGrammar,
    metrics: Arc<Metrics>,
    config: &ServerConfig,
) -> Router {
    let state = AppState {
        pools,
        grammar: Arc::new(grammar),
        metrics,
    };
    let timeout = config.request_timeout;
    Router::new()
        .route("/mutate-pods", post(mutate))
        .route("/validate-pods", post(validate))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .layer(DefaultBodyLimit::max(config.body_limit))
        .layer(middleware::from_fn(
            move |req: Request, next: Next| async move {
                match tokio::time::timeout(timeout, next.run(req)).await {
                    Ok(response) => response,
                    Err(_) => (
                        StatusCode::REQUEST_TIMEOUT,
                        "the request took longer than the webhook's timeout\n",
                    )
                        .into_response(),
                }
            },
        ))
        .with_state(state)
}

async fn mutate(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    handle(&state, Endpoint::Mutate, Phase::Mutate, body)
}

async fn validate(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    handle(&state, Endpoint::Validate, Phase::Validate, body)
}

fn handle(
    state: &AppState,
    endpoint: Endpoint,
    phase: Phase,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let start = Instant::now();
    let body = match body {
        Ok(body) => body,
        // Over the limit, or the connection failed mid-body: axum's status (413, 400) and text.
        Err(rejection) => {
            state
                .metrics
                .record(endpoint, Outcome::Error, &[], start.elapsed());
            return rejection.into_response();
        }
    };
    let result = review::answer(&body, phase, state.pools.as_ref(), &state.grammar);
    match result {
        Ok(answer) => {
            state
                .metrics
                .record(endpoint, answer.outcome, &answer.rules, start.elapsed());
            let bytes = serde_json::to_vec(&answer.body).unwrap_or_default();
            ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
        }
        Err(e) => {
            state
                .metrics
                .record(endpoint, Outcome::Error, &[], start.elapsed());
            tracing::debug!(error = %e, "unreadable admission review");
            (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response()
        }
    }
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.pools.readiness() {
        Readiness::Ready(None) => (StatusCode::OK, "ok\n".to_string()).into_response(),
        Readiness::Ready(Some(note)) => (StatusCode::OK, format!("ok: {note}\n")).into_response(),
        Readiness::NotReady(why) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
        }
    }
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// Serve `app` over TLS on `listener` until `shutdown` completes. Each connection runs on its
/// own task; a failed handshake or a broken connection ends that connection only.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let acceptor = TlsAcceptor::from(tls);
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let slots = Arc::new(tokio::sync::Semaphore::new(config.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return Ok(()),
            },
            () = &mut shutdown => return Ok(()),
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                // Out of file descriptors and the like: pause rather than spin, then go on.
                Err(e) if is_transient(&e) => {
                    tracing::warn!(error = %e, "accept failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(source) => return Err(ServerError::Accept { addr, source }),
            },
            () = &mut shutdown => return Ok(()),
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, app, config) = (acceptor.clone(), app.clone(), config.clone());
        tokio::spawn(async move {
            connection(acceptor, tcp, peer, app, config).await;
            drop(slot);
        });
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    !matches!(
        e.kind(),
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported
    )
}

async fn connection(
    acceptor: TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    config: ServerConfig,
) {
    let tls = match tokio::time::timeout(config.handshake_timeout, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "tls handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "tls handshake timed out");
            return;
        }
    };
    let service = TowerToHyperService::new(app);
    let result = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .serve_connection(TokioIo::new(tls), service)
        .await;
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}
