//! A loopback webhook for tests and benchmarks: rcgen certificates in a temp dir, the server on
//! 127.0.0.1, and a small HTTPS client that trusts the given certificates.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use accel_core::pool::Pool;
use accel_core::resources::KeyGrammar;
use accel_webhook::metrics::Metrics;
use accel_webhook::{CertReloader, PoolSource, ServerConfig, router, serve};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

/// A self-signed certificate for localhost and 127.0.0.1.
pub struct Cert {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

pub fn cert() -> Cert {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    Cert {
        cert_pem: generated.cert.pem(),
        key_pem: generated.key_pair.serialize_pem(),
        der: generated.cert.der().clone(),
    }
}

pub struct Webhook {
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
    pub metrics: Arc<Metrics>,
    pub reloader: Arc<CertReloader>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The H100 pool of DESIGN.md's example.
pub fn h100() -> Pool {
    serde_json::from_value(
        json!({"group": "nvidia-h100-80gb-hbm3", "manufacturer": "nvidia", "memoryMiB": 81559,
        "count": 8, "profiles": {"1g.10gb": 9984, "3g.40gb": 40320}}),
    )
    .unwrap()
}

/// Start a webhook serving `first` with `pools`, reloading its certificate every `reload`.
pub async fn start(
    first: &Cert,
    pools: Arc<dyn PoolSource>,
    config: ServerConfig,
    reload: Duration,
) -> Webhook {
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("tls.crt");
    let key_path = dir.path().join("tls.key");
    std::fs::write(&cert_path, &first.cert_pem).unwrap();
    std::fs::write(&key_path, &first.key_pem).unwrap();
    let reloader = CertReloader::load(&cert_path, &key_path).unwrap();
    let tls = reloader.server_config().unwrap();
    let metrics = Arc::new(Metrics::default());
    let app = router(pools, KeyGrammar::default(), metrics.clone(), &config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        serve(listener, tls, app, config, std::future::pending())
            .await
            .unwrap();
    });
    let watcher = tokio::spawn(reloader.clone().watch(reload));
    Webhook {
        addr,
        dir,
        cert_path,
        key_path,
        metrics,
        reloader,
        tasks: vec![server, watcher],
    }
}

/// One HTTPS connection trusting `roots`.
pub struct Client {
    pub sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    pub peer: CertificateDer<'static>,
}

pub async fn connect(addr: SocketAddr, roots: &[&CertificateDer<'static>]) -> Client {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add((*root).clone()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(store)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let peer = tls.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Client { sender, peer }
}

impl Client {
    /// Send one request; the status and the body as text.
    pub async fn call(&mut self, method: &str, path: &str, body: Vec<u8>) -> (u16, String) {
        self.sender.ready().await.unwrap();
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = self.sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    pub async fn review(&mut self, path: &str, review: &Value) -> Value {
        let (status, body) = self
            .call("POST", path, serde_json::to_vec(review).unwrap())
            .await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }
}

/// An AdmissionReview v1 of a Pod on the queue `h100`.
pub fn review_of(uid: &str, limits: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE", "namespace": "team-a",
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "h100"}},
            "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]}}}})
}
