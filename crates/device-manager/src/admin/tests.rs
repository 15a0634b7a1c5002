//! The admin socket over real unix sockets in temp dirs: refresh and reset through a handler
//! that runs the real reset over a recorded host, refusals carried word for word, bad and
//! oversize requests answered while the server keeps serving, the peer check (unit and, as
//! root with `setpriv`, a real connection from uid 65534).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accel_core::inventory::Inventory;
use accel_host::{FsHost, RecordedCommands};
use accel_nvidia::detector::{self, DetectOptions};
use accel_nvidia::faults::FaultRecord;
use accel_nvidia::reset::{self, MemoryGrants, ResetError, ResetReport, reset_argv};
use serde_json::Value;

use super::client::{self, ClientError};
use super::server::{AdminServer, RunningServer, ServerOptions};
use super::*;

const WAIT: Duration = Duration::from_secs(20);

/// A daemon stand-in: the real reset over a copy of a recorded host.
struct Daemon {
    host: PathBuf,
    inventory: Mutex<Inventory>,
    grants: MemoryGrants,
    faults: Mutex<FaultRecord>,
    refreshes: AtomicUsize,
}

fn collect(host: &Path) -> Result<Inventory, String> {
    let commands = RecordedCommands::load(host).map_err(|e| e.to_string())?;
    let section = detector::detect(
        &FsHost::new(host.join("root")),
        &commands,
        DetectOptions::default(),
    )
    .detection
    .map_err(|e| e.to_string())?;
    Ok(Inventory {
        manufacturers: vec![section],
    })
}

impl AdminHandler for Daemon {
    fn refresh(&self) -> Result<Refreshed, String> {
        self.refreshes.fetch_add(1, Ordering::SeqCst);
        let mut fresh = collect(&self.host)?;
        self.faults.lock().unwrap().apply(&mut fresh);
        let answer = Refreshed::from_inventory(&fresh, vec![]);
        *self.inventory.lock().unwrap() = fresh;
        Ok(answer)
    }

    fn reset(&self, gpus: &[String]) -> Result<ResetReport, ResetError> {
        let mut inventory = self.inventory.lock().unwrap();
        let commands = RecordedCommands::load(&self.host)
            .map_err(|e| ResetError::Unavailable(e.to_string()))?;
        let mut faults = self.faults.lock().unwrap();
        let report = reset::reset(
            &inventory,
            gpus,
            &self.grants,
            &commands,
            reset::RESET_DEADLINE,
            &mut || collect(&self.host),
            &mut *faults,
        )?;
        if let Some(fresh) = &report.inventory {
            *inventory = fresh.clone();
        }
        Ok(report)
    }
}

struct Fixture {
    _host: tempfile::TempDir,
    data: tempfile::TempDir,
    daemon: Arc<Daemon>,
    gpus: Vec<String>,
}

/// A copy of `testdata/hosts/dual-rtx-a5000` with both resets recorded; GPU 1 is granted.
fn fixture() -> Fixture {
    let host = crate::daemon::test_support::copy_recorded("dual-rtx-a5000");
    let inventory = collect(host.path()).unwrap();
    let gpus: Vec<String> = inventory.manufacturers[0]
        .accelerators
        .iter()
        .map(|a| a.uuid.clone().unwrap())
        .collect();
    for uuid in &gpus {
        let folder = host.path().join("commands").join(format!("reset-{uuid}"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("argv"), reset_argv(uuid).join("\n")).unwrap();
        std::fs::write(folder.join("stdout"), "illustrative: reset done\n").unwrap();
    }
    let mut grants = MemoryGrants::new();
    grants.grant(&gpus[1], "default/trainer-0");
    let daemon = Arc::new(Daemon {
        host: host.path().to_path_buf(),
        inventory: Mutex::new(inventory),
        grants,
        faults: Mutex::new(FaultRecord::new("boot")),
        refreshes: AtomicUsize::new(0),
    });
    Fixture {
        _host: host,
        data: tempfile::tempdir().unwrap(),
        daemon,
        gpus,
    }
}

fn start(fixture: &Fixture, options: ServerOptions) -> RunningServer {
    let server = AdminServer::bind_at(&socket_path(fixture.data.path()), options).unwrap();
    server.spawn(Arc::clone(&fixture.daemon)).unwrap()
}

fn send(stream: &mut UnixStream, bytes: &[u8]) -> Value {
    stream.write_all(bytes).unwrap();
    let mut line = String::new();
    BufReader::new(&*stream).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

fn connect(path: &Path) -> UnixStream {
    let stream = UnixStream::connect(path).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream
}

#[test]
fn refresh_and_reset_end_to_end() {
    let fixture = fixture();
    let bound = AdminServer::bind(fixture.data.path()).unwrap();
    assert_eq!(bound.path(), socket_path(fixture.data.path()));
    let server = bound.spawn(Arc::clone(&fixture.daemon)).unwrap();
    let path = server.path().to_path_buf();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let answer = client::request(&path, &Request::Refresh, WAIT).unwrap();
    assert_eq!(answer["ok"], true);
    assert_eq!(answer["op"], "refresh");
    let refreshed: Refreshed = serde_json::from_value(answer).unwrap();
    assert_eq!(refreshed.gpus.len(), 2);
    assert!(refreshed.gpus.iter().all(|g| g.healthy));

    let (free, granted) = (fixture.gpus[0].clone(), fixture.gpus[1].clone());
    let busy = client::request(
        &path,
        &Request::Reset {
            gpus: vec![free.clone(), granted.clone()],
        },
        WAIT,
    )
    .unwrap_err();
    assert_eq!(
        busy.to_string(),
        format!("gpu-busy: {granted} (granted to default/trainer-0); nothing was reset")
    );
    let unknown = client::request(
        &path,
        &Request::Reset {
            gpus: vec!["GPU-nope".into()],
        },
        WAIT,
    )
    .unwrap_err();
    assert!(
        matches!(&unknown, ClientError::Daemon(e) if e.starts_with("unknown GPU GPU-nope: ")),
        "{unknown}"
    );
    let done = client::request(
        &path,
        &Request::Reset {
            gpus: vec![free.clone()],
        },
        WAIT,
    )
    .unwrap();
    assert_eq!(done["op"], "reset");
    assert_eq!(
        done["gpus"],
        serde_json::json!([{"uuid": free, "result": "healthy", "faultsCleared": 0}])
    );
    server.shutdown();
    assert!(!path.exists(), "shutdown removes the socket");
}

#[test]
fn bad_and_oversize_requests_are_answered_and_the_server_keeps_serving() {
    let fixture = fixture();
    let options = ServerOptions {
        max_request_bytes: 1024,
        ..ServerOptions::default()
    };
    let server = start(&fixture, options);
    let path = server.path().to_path_buf();

    let mut stream = connect(&path);
    let bad = send(&mut stream, b"this is not json\n");
    assert_eq!(bad["ok"], false);
    let error = bad["error"].as_str().unwrap();
    assert!(error.starts_with("bad request: "), "{error}");
    let unknown_op = send(&mut stream, b"{\"op\":\"format\",\"disk\":\"/dev/sda\"}\n");
    assert!(
        unknown_op["error"]
            .as_str()
            .unwrap()
            .contains("unknown variant `format`"),
        "{unknown_op}"
    );
    // The same connection still serves a good request after bad ones.
    let good = send(&mut stream, b"\n{\"op\":\"refresh\"}\n");
    assert_eq!(good["ok"], true, "{good}");

    let mut big = connect(&path);
    let oversize = send(&mut big, &vec![b'x'; 4096]);
    assert_eq!(
        oversize,
        serde_json::json!({"ok": false, "error": "request larger than 1024 bytes"})
    );
    let mut rest = Vec::new();
    let closed = big.read_to_end(&mut rest);
    assert!(
        matches!(closed, Ok(0)) || closed.is_err(),
        "the connection is closed after an oversize request"
    );

    let after = client::request(&path, &Request::Refresh, WAIT).unwrap();
    assert_eq!(after["ok"], true);
    assert_eq!(fixture.daemon.refreshes.load(Ordering::SeqCst), 2);
    server.shutdown();
}

#[test]
fn a_request_not_complete_in_time_is_answered_and_closed() {
    let fixture = fixture();
    let options = ServerOptions {
        request_timeout: Duration::from_millis(200),
        ..ServerOptions::default()
    };
    let server = start(&fixture, options);
    let mut stream = connect(server.path());
    let answer = send(&mut stream, br#"{"op":"#);
    assert_eq!(
        answer,
        serde_json::json!({"ok": false, "error": "request not complete within 0.2s"})
    );
    assert_eq!(fixture.daemon.refreshes.load(Ordering::SeqCst), 0);
    server.shutdown();
}

#[test]
fn the_peer_check_admits_root_and_the_daemons_user_only() {
    assert!(check_peer(0, &[]).is_ok());
    assert!(check_peer(1000, &[1000]).is_ok());
    let refused = check_peer(65534, &[1000]).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "refused a connection from uid 65534: the admin socket is for root only"
    );
}

#[test]
fn binding_replaces_a_stale_socket_and_refuses_a_live_one_or_a_file() {
    let fixture = fixture();
    let path = socket_path(fixture.data.path());
    // A socket left behind by a daemon that died: nothing answers, so it is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(matches!(
        client::request(&path, &Request::Refresh, WAIT),
        Err(ClientError::Refused(_))
    ));
    let server = start(&fixture, ServerOptions::default());
    let again = AdminServer::bind_at(&path, ServerOptions::default()).unwrap_err();
    assert!(matches!(again, AdminError::InUse(_)), "{again}");
    server.shutdown();

    std::fs::write(&path, "not a socket").unwrap();
    let file = AdminServer::bind_at(&path, ServerOptions::default()).unwrap_err();
    assert!(
        file.to_string()
            .ends_with("exists and is not a socket; remove it or choose another --data-dir")
    );

    let missing = client::request(
        &fixture.data.path().join("none.sock"),
        &Request::Refresh,
        WAIT,
    )
    .unwrap_err();
    assert!(
        missing
            .to_string()
            .starts_with("the daemon is not running: no admin socket at "),
        "{missing}"
    );
}

/// The environment variable that turns [`child_client`] into the unprivileged peer.
const CHILD_SOCKET: &str = "DEVICE_MANAGER_ADMIN_TEST_SOCKET";

/// Run by [`a_real_non_root_peer_is_refused`] as uid 65534: sends a refresh and prints the
/// answer line.
#[test]
#[ignore = "the unprivileged half of a_real_non_root_peer_is_refused"]
fn child_client() {
    let Ok(path) = std::env::var(CHILD_SOCKET) else {
        return;
    };
    // Through the real client, which reads the refusal even when the daemon closed first.
    let answer = client::request(Path::new(&path), &Request::Refresh, WAIT);
    println!(
        "ANSWER {}",
        answer.map_or_else(|e| e.to_string(), |v| v.to_string())
    );
}

#[test]
fn a_real_non_root_peer_is_refused() {
    let root = nix::unistd::geteuid().is_root();
    let setpriv = Path::new("/usr/bin/setpriv");
    if !root || !setpriv.exists() {
        eprintln!("skipped: needs root and setpriv (check_peer is unit-tested above)");
        return;
    }
    let fixture = fixture();
    let options = ServerOptions {
        allowed_uids: vec![],
        ..ServerOptions::default()
    };
    let server = start(&fixture, options);
    // Let the kernel pass uid 65534 through to the server's own check.
    std::fs::set_permissions(fixture.data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(server.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let output = std::process::Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "admin::tests::child_client",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_SOCKET, server.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            "ANSWER refused a connection from uid 65534: the admin socket is for root only\n"
        ),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(fixture.daemon.refreshes.load(Ordering::SeqCst), 0);
    server.shutdown();
}
