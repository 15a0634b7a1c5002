//! `device-manager refresh` and `reset` as an operator runs them: against no daemon (a clear
//! error, exit 2), and against a stand-in daemon in the test that checks the request line and
//! answers a refusal (the daemon's one-line error, exit 1) or a report (exit 0 or 1).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::process::Output;
use std::thread::JoinHandle;

fn device_manager(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args(args)
        .env_remove("DATA_DIR")
        .output()
        .unwrap()
}

/// Answers one connection on `<dir>/admin.sock` with `answer`; returns the request line.
fn stand_in(dir: &std::path::Path, answer: &'static str) -> JoinHandle<String> {
    let listener = UnixListener::bind(dir.join("admin.sock")).unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).unwrap();
        (&stream).write_all(answer.as_bytes()).unwrap();
        (&stream).write_all(b"\n").unwrap();
        line
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn without_a_daemon_both_commands_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    for args in [
        vec!["refresh", "--data-dir", data],
        vec!["reset", "GPU-a", "--data-dir", data],
    ] {
        let run = device_manager(&args);
        assert_eq!(run.status.code(), Some(2));
        let stderr = text(&run.stderr);
        assert!(
            stderr.starts_with(&format!(
                "device-manager: the daemon is not running: no admin socket at {data}/admin.sock"
            )),
            "{stderr}"
        );
    }
}

#[test]
fn a_refusal_is_the_daemons_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = stand_in(
        dir.path(),
        r#"{"ok":false,"error":"gpu-busy: GPU-b (granted to default/trainer-0); nothing was reset"}"#,
    );
    let run = device_manager(&[
        "reset",
        "GPU-a",
        "GPU-b",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(
        daemon.join().unwrap(),
        "{\"op\":\"reset\",\"gpus\":[\"GPU-a\",\"GPU-b\"]}\n"
    );
    assert_eq!(run.status.code(), Some(1));
    assert_eq!(
        text(&run.stderr),
        "device-manager: gpu-busy: GPU-b (granted to default/trainer-0); nothing was reset\n"
    );
    assert_eq!(text(&run.stdout), "");
}

#[test]
fn a_report_prints_each_gpu_and_exits_by_health() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = stand_in(
        dir.path(),
        r#"{"ok":true,"op":"reset","gpus":[{"uuid":"GPU-a","result":"healthy","faultsCleared":2},{"uuid":"GPU-b","result":"unhealthy","reasons":["row remap pending (reset the GPU)"]}]}"#,
    );
    let run = device_manager(&[
        "reset",
        "GPU-a",
        "GPU-b",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    daemon.join().unwrap();
    assert_eq!(run.status.code(), Some(1), "GPU-b is still unhealthy");
    assert_eq!(
        text(&run.stdout),
        "GPU-a: reset, healthy (2 faults cleared)\nGPU-b: reset, still UNHEALTHY (row remap pending (reset the GPU))\n"
    );

    let daemon = stand_in_again(dir.path());
    let run = device_manager(&["refresh", "--data-dir", dir.path().to_str().unwrap()]);
    assert_eq!(daemon.join().unwrap(), "{\"op\":\"refresh\"}\n");
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert_eq!(
        text(&run.stdout),
        "0 GPU-a: healthy\n1 GPU-b: UNHEALTHY (Xid 79: GPU has fallen off the bus)\n"
    );
}

/// A second stand-in on the same folder (the first left its socket file behind).
fn stand_in_again(dir: &std::path::Path) -> JoinHandle<String> {
    std::fs::remove_file(dir.join("admin.sock")).unwrap();
    stand_in(
        dir,
        r#"{"ok":true,"op":"refresh","gpus":[{"index":0,"uuid":"GPU-a","healthy":true},{"index":1,"uuid":"GPU-b","healthy":false,"healthReasons":["Xid 79: GPU has fallen off the bus"]}]}"#,
    )
}
