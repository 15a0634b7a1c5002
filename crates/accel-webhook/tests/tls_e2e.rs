//! The webhook end to end over real TLS on 127.0.0.1: reviews in, exact responses out, bad input
//! answered with a clear error while the server keeps serving, and a certificate rotation picked
//! up without a restart.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use accel_core::pool::Pool;
use accel_webhook::{PoolSource, Readiness, ServerConfig, StaticPool};
use base64::Engine as _;
use common::*;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// Fails the test with what deadlocked instead of hanging CI.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn patch_of(response: &Value) -> Vec<Value> {
    let text = response["response"]["patch"].as_str().unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn reviews_in_responses_out() {
    within("reviews", async {
        let cert = cert();
        let hook = start(&cert, Arc::new(StaticPool(h100())), ServerConfig::default(), Duration::from_secs(60)).await;
        let mut client = connect(hook.addr, &[&cert.der]).await;

        let sliced = json!({"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50", "nvidia.com/gpu.sliced.cores-percentage": "40"});
        let mutated = client.review("/mutate-pods", &review_of("m-1", sliced.clone())).await;
        assert_eq!(mutated["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(mutated["response"]["uid"], "m-1");
        assert_eq!(mutated["response"]["allowed"], true);
        assert_eq!(mutated["response"]["patchType"], "JSONPatch");
        let patch = patch_of(&mutated);
        assert!(patch.contains(&json!({"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units", "value": "800000"})), "{patch:?}");

        let validated = client.review("/validate-pods", &review_of("v-1", sliced)).await;
        assert_eq!(validated["response"], json!({"uid": "v-1", "allowed": true}));

        let denied = client
            .review("/validate-pods", &review_of("v-2", json!({"nvidia.com/gpu.partitioned": "2", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"})))
            .await;
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(
            denied["response"]["status"]["message"],
            "spec.containers[0].resources.limits[nvidia.com/gpu.partitioned]: Invalid value: \"2\": a partition request is always a single accelerator; request one Pod per instance"
        );

        let (status, body) = client.call("GET", "/healthz", vec![]).await;
        assert_eq!((status, body.as_str()), (200, "ok"));
        let (status, _) = client.call("GET", "/readyz", vec![]).await;
        assert_eq!(status, 200);
        let (status, metrics) = client.call("GET", "/metrics", vec![]).await;
        assert_eq!(status, 200);
        assert!(metrics.contains("device_manager_webhook_reviews_total{webhook=\"validate\",outcome=\"denied\"} 1\n"), "{metrics}");
        assert!(metrics.contains("device_manager_webhook_denials_total{rule=\"rule3\"} 1\n"));
        assert!(metrics.contains("device_manager_webhook_review_duration_seconds_count{webhook=\"mutate\"} 1\n"));
    })
    .await;
}

#[tokio::test]
async fn bad_input_gets_a_clear_error_and_the_server_keeps_serving() {
    within("bad input", async {
        let cert = cert();
        let config = ServerConfig { body_limit: 64 * 1024, ..ServerConfig::default() };
        let hook = start(&cert, Arc::new(StaticPool(h100())), config, Duration::from_secs(60)).await;

        let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
            ("not JSON", b"{not json".to_vec(), 400, "the body is not JSON: key must be a string at line 1 column 2\n"),
            ("invalid UTF-8", b"{\"a\":\"\xff\"}".to_vec(), 400, "the body is not UTF-8 text (invalid byte at offset 6)\n"),
            ("not an AdmissionReview", br#"{"kind":"Pod","apiVersion":"v1"}"#.to_vec(), 400, "the body is not an AdmissionReview: kind is \"Pod\"\n"),
            (
                "v1beta1",
                br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{"uid":"x"}}"#.to_vec(),
                400,
                "unsupported AdmissionReview version \"admission.k8s.io/v1beta1\": this webhook serves admission.k8s.io/v1 only (set admissionReviewVersions: [v1])\n",
            ),
            ("no request", br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#.to_vec(), 400, "the AdmissionReview has no request\n"),
            ("over the limit", vec![b' '; 65 * 1024], 413, "Failed to buffer the request body: length limit exceeded"),
        ];
        for (what, body, status, message) in cases {
            // A fresh connection per case; and one long-lived connection after each, to show the
            // server still answers a good review.
            let mut client = connect(hook.addr, &[&cert.der]).await;
            let (got_status, got_body) = client.call("POST", "/validate-pods", body).await;
            assert_eq!((got_status, got_body.as_str()), (status, message), "{what}");
            let mut again = connect(hook.addr, &[&cert.der]).await;
            let ok = again.review("/validate-pods", &review_of("after", json!({"nvidia.com/gpu": "1"}))).await;
            assert_eq!(ok["response"]["allowed"], true, "after {what}");
        }

        let mut client = connect(hook.addr, &[&cert.der]).await;
        // An object that is not a Pod passes untouched.
        let service = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "s",
            "kind": {"group": "", "version": "v1", "kind": "Service"}, "operation": "CREATE", "object": {"kind": "Service"}}});
        assert_eq!(client.review("/mutate-pods", &service).await["response"], json!({"uid": "s", "allowed": true}));
        // Absurd quantities are refused with the field, the value and why.
        for (value, detail) in [
            ("1e100", "must be a whole number no larger than 18446744073709551615"),
            ("-1", "must be greater than or equal to 0"),
            ("0.5", "must be a whole number"),
        ] {
            let r = client.review("/validate-pods", &review_of("q", json!({"nvidia.com/gpu": value}))).await;
            assert_eq!(
                r["response"]["status"]["message"],
                format!("spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: \"{value}\": {detail}")
            );
            let m = client.review("/mutate-pods", &review_of("q", json!({"nvidia.com/gpu.shared": value}))).await;
            assert_eq!(m["response"]["allowed"], true, "mutation leaves an unreadable count to validation");
        }
        let (status, metrics) = client.call("GET", "/metrics", vec![]).await;
        assert_eq!(status, 200);
        assert!(metrics.contains("device_manager_webhook_reviews_total{webhook=\"validate\",outcome=\"error\"} 6\n"), "{metrics}");
        assert!(metrics.contains("device_manager_webhook_denials_total{rule=\"quantity\"} 3\n"));
    })
    .await;
}

#[tokio::test]
async fn a_slow_request_is_cut_off_by_the_timeout() {
    within("timeout", async {
        let cert = cert();
        let config = ServerConfig {
            request_timeout: Duration::from_millis(300),
            ..ServerConfig::default()
        };
        let hook = start(
            &cert,
            Arc::new(StaticPool(h100())),
            config,
            Duration::from_secs(60),
        )
        .await;
        // Headers promising a body that never comes.
        let mut store = rustls::RootCertStore::empty();
        store.add(cert.der.clone()).unwrap();
        let tls_config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(hook.addr).await.unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(tls_config))
            .connect(
                rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await
            .unwrap();
        tls.write_all(
            b"POST /validate-pods HTTP/1.1\r\nhost: localhost\r\ncontent-length: 100\r\n\r\n{",
        )
        .await
        .unwrap();
        tls.flush().await.unwrap();
        let mut response = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut response).await;
        let response = String::from_utf8_lossy(&response);
        assert!(response.starts_with("HTTP/1.1 408"), "{response}");
        // And the server still serves.
        let mut client = connect(hook.addr, &[&cert.der]).await;
        assert_eq!(client.call("GET", "/healthz", vec![]).await.0, 200);
    })
    .await;
}

/// A pool source whose caches sync when told.
struct Syncing(AtomicBool);

impl PoolSource for Syncing {
    fn pool(&self, _: &str, _: &str) -> Pool {
        Pool::unknown("caches not synced")
    }
    fn synced(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn readyz_waits_for_the_caches() {
    within("readyz", async {
        let cert = cert();
        let source = Arc::new(Syncing(AtomicBool::new(false)));
        let hook = start(
            &cert,
            source.clone(),
            ServerConfig::default(),
            Duration::from_secs(60),
        )
        .await;
        let mut client = connect(hook.addr, &[&cert.der]).await;
        assert_eq!(
            client.call("GET", "/readyz", vec![]).await,
            (503, "the pool caches have not synced yet\n".to_string())
        );
        assert_eq!(client.call("GET", "/healthz", vec![]).await.0, 200);
        source.0.store(true, Ordering::SeqCst);
        assert_eq!(client.call("GET", "/readyz", vec![]).await.0, 200);
    })
    .await;
}

/// A pool source that answers `/readyz` as told.
struct Says(std::sync::Mutex<Readiness>);

impl PoolSource for Says {
    fn pool(&self, _: &str, _: &str) -> Pool {
        Pool::unknown("Kueue is not installed")
    }
    fn readiness(&self) -> Readiness {
        self.0.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn readyz_names_what_it_waits_for_and_what_is_missing_while_ready() {
    within("readyz reasons", async {
        let cert = cert();
        let source = Arc::new(Says(std::sync::Mutex::new(Readiness::NotReady(
            "the pool caches have not synced yet: waiting for devices (last error: forbidden)"
                .into(),
        ))));
        let hook = start(
            &cert,
            source.clone(),
            ServerConfig::default(),
            Duration::from_secs(60),
        )
        .await;
        let mut client = connect(hook.addr, &[&cert.der]).await;
        assert_eq!(
            client.call("GET", "/readyz", vec![]).await,
            (
                503,
                "the pool caches have not synced yet: waiting for devices (last error: forbidden)\n"
                    .to_string()
            )
        );
        *source.0.lock().unwrap() = Readiness::Ready(Some("Kueue is not installed".into()));
        assert_eq!(
            client.call("GET", "/readyz", vec![]).await,
            (200, "ok: Kueue is not installed\n".to_string())
        );
        *source.0.lock().unwrap() = Readiness::Ready(None);
        assert_eq!(
            client.call("GET", "/readyz", vec![]).await,
            (200, "ok\n".to_string())
        );
    })
    .await;
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    within("rotation", async {
        let first = cert();
        let second = cert();
        let hook = start(
            &first,
            Arc::new(StaticPool(h100())),
            ServerConfig::default(),
            Duration::from_millis(50),
        )
        .await;
        let client = connect(hook.addr, &[&first.der, &second.der]).await;
        assert_eq!(client.peer, first.der);

        // A half-written rotation (a key that does not parse) keeps the old certificate serving.
        std::fs::write(&hook.key_path, "garbage").unwrap();
        let refused = hook.reloader.reload().unwrap_err().to_string();
        assert!(
            refused.ends_with("tls.key: no usable PEM private key: no PRIVATE KEY block found"),
            "{refused}"
        );
        assert_eq!(
            connect(hook.addr, &[&first.der, &second.der]).await.peer,
            first.der
        );

        std::fs::write(&hook.cert_path, &second.cert_pem).unwrap();
        std::fs::write(&hook.key_path, &second.key_pem).unwrap();
        loop {
            let mut client = connect(hook.addr, &[&first.der, &second.der]).await;
            if client.peer == second.der {
                let ok = client
                    .review(
                        "/validate-pods",
                        &review_of("r", json!({"nvidia.com/gpu": "1"})),
                    )
                    .await;
                assert_eq!(ok["response"]["allowed"], true);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_their_turn() {
    within("connection limit", async {
        let cert = cert();
        let config = ServerConfig {
            max_connections: 1,
            ..ServerConfig::default()
        };
        let hook = start(
            &cert,
            Arc::new(StaticPool(h100())),
            config,
            Duration::from_secs(60),
        )
        .await;
        let mut first = connect(hook.addr, &[&cert.der]).await;
        assert_eq!(first.call("GET", "/healthz", vec![]).await.0, 200);
        // The second connection's handshake cannot complete while the first holds the only slot.
        let addr = hook.addr;
        let der = cert.der.clone();
        let second = tokio::spawn(async move {
            connect(addr, &[&der])
                .await
                .call("GET", "/healthz", vec![])
                .await
                .0
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        if second.is_finished() {
            panic!(
                "a second connection was served beyond the limit: {:?}",
                second.await
            );
        }
        drop(first);
        assert_eq!(second.await.unwrap(), 200);
    })
    .await;
}
