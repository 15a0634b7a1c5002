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
