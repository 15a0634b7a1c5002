//! `device-manager worker` as a Deployment runs it, as far as it goes without a cluster.

use std::process::Command;

#[test]
fn worker_without_its_certificate_exits_2_naming_the_file() {
    let o = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args([
            "worker",
            "--tls-cert",
            "/nonexistent/tls.crt",
            "--tls-key",
            "/nonexistent/tls.key",
        ])
        .env_remove("TLS_CERT")
        .env_remove("TLS_KEY")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.starts_with("device-manager: cannot load the serving certificate: cannot read /nonexistent/tls.crt: "),
        "{stderr}"
    );
}

#[test]
fn worker_outside_a_pod_campaigns_as_its_host_name_and_a_random_suffix() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&crt, cert.cert.pem()).unwrap();
    std::fs::write(&key, cert.key_pair.serialize_pem()).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(["worker", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&crt)
        .arg("--tls-key")
        .arg(&key)
        .env_remove("POD_NAME")
        .env_remove("TLS_CERT")
        .env_remove("TLS_KEY")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("HOSTNAME", "node-a")
        .env("HOME", dir.path())
        .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !stderr.contains("no identity for the leader election"),
        "{stderr}"
    );
    // It goes as far as the API server, which this test has none of, having logged who it is.
    assert!(stderr.contains("identity=node-a_"), "{stderr}");
    assert!(stderr.contains("cannot reach the API server"), "{stderr}");
}
