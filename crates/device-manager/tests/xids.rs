//! `device-manager xids` through the real binary: the JSON contract and the table over every
//! kernel-log capture in `../shared/fixtures/nvidia/kmsg/` and `../shared/fixtures/amd/kmsg/`
//! (insta snapshots), standard input, binary garbage (never a panic), and bad input (one clear
//! line, exit 2).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn kmsg_files() -> Vec<PathBuf> {
    let files = kmsg_files_of("nvidia");
    assert!(
        files.len() >= 11,
        "expected the 11 kmsg captures, found {files:?}"
    );
    files
}

fn kmsg_files_of(manufacturer: &str) -> Vec<PathBuf> {
    let dir = accel_testkit::shared_fixture_folder(manufacturer, "kmsg");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn xids(args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .arg("xids")
        .args(args)
        .env_remove("GPUSTACK_NVIDIA_XID_APPLICATION")
        .env_remove("GPUSTACK_NVIDIA_XID_HARDWARE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("device-manager runs");
    let mut input = child.stdin.take().unwrap();
    // The binary may exit before reading everything (a bad argument): a broken pipe is fine.
    let _ = input.write_all(stdin);
    drop(input);
    let output = child.wait_with_output().unwrap();
    Run {
        status: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn stem(path: &std::path::Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

#[test]
fn json_of_every_kmsg_capture() {
    for path in kmsg_files() {
        let name = stem(&path);
        let run = xids(&["-o", "json", path.to_str().unwrap()], b"");
        assert_eq!(run.status, 0, "{name}: {}", run.stderr);
        let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        let events = json.as_array().expect("a JSON list");
        assert!(!events.is_empty(), "{name}: no events");
        for event in events {
            let keys: Vec<&str> = event
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(
                keys,
                ["busId", "line", "message", "pid", "process", "xid"],
                "{name}"
            );
        }
        // The bulk capture (636 events of two kinds) is snapshotted by its ends and its size.
        let shown = if events.len() > 40 {
            serde_json::json!({
                "count": events.len(),
                "first": events[..5],
                "last": events[events.len() - 5..],
            })
        } else {
            json.clone()
        };
        insta::assert_json_snapshot!(format!("xids-json-{name}"), shown);
    }
}

#[test]
fn table_of_every_kmsg_capture() {
    for path in kmsg_files() {
        let name = stem(&path);
        if name.contains("bulk") {
            continue;
        }
        let run = xids(&[path.to_str().unwrap()], b"");
        assert_eq!(run.status, 0, "{name}: {}", run.stderr);
        insta::assert_snapshot!(format!("xids-table-{name}"), run.stdout);
    }
}

#[test]
fn amd_faults_of_every_amdgpu_capture() {
    let files = kmsg_files_of("amd");
    assert!(
        files.len() >= 9,
        "expected the 9 amdgpu captures, found {files:?}"
    );
    for path in files {
        let name = stem(&path);
        let run = xids(&["-o", "json", path.to_str().unwrap()], b"");
        assert_eq!(run.status, 0, "{name}: {}", run.stderr);
        let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        let faults = json.as_array().expect("a JSON list");
        assert!(!faults.is_empty(), "{name}: no faults");
        for fault in faults {
            let object = fault.as_object().unwrap();
            let keys: Vec<&str> = object.keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                [
                    "busId",
                    "class",
                    "condition",
                    "line",
                    "manufacturer",
                    "message",
                    "pid",
                    "process",
                    "xid"
                ],
                "{name}"
            );
            assert_eq!(object["manufacturer"], "amd", "{name}");
            assert!(object["xid"].is_null(), "{name}: AMD has no codes");
            // An ACA dump's deferred or corrected entry (AmdAcaDeferred, AmdAcaCorrected) is a
            // condition, not the board's fault.
            let hardware = matches!(
                object["condition"].as_str(),
                Some("AmdRasUncorrectable" | "AmdGpuReset")
            );
            assert_eq!(
                object["class"],
                if hardware { "hardware" } else { "application" },
                "{name}"
            );
        }
        let shown = if faults.len() > 40 {
            serde_json::json!({
                "count": faults.len(),
                "first": faults[..5],
                "last": faults[faults.len() - 5..],
            })
        } else {
            json.clone()
        };
        insta::assert_json_snapshot!(format!("xids-json-amd-{name}"), shown);
        let table = xids(&[path.to_str().unwrap()], b"");
        assert_eq!(table.status, 0, "{name}: {}", table.stderr);
        let lines: Vec<&str> = table.stdout.lines().collect();
        let shown = if lines.len() > 41 {
            format!(
                "{}\n... {} rows ...\n{}\n",
                lines[..6].join("\n"),
                lines.len() - 1,
                lines[lines.len() - 5..].join("\n")
            )
        } else {
            table.stdout.clone()
        };
        insta::assert_snapshot!(format!("xids-table-amd-{name}"), shown);
    }
}

#[test]
fn reads_standard_input_and_the_class_settings() {
    let text = b"[ 12.5] NVRM: Xid (PCI:0000:18:00): 13, pid=7, name=python, Graphics Exception\n";
    let run = xids(&["-"], text);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("13   application  00000000:18:00.0  7"),
        "{}",
        run.stdout
    );
    let run = xids(&["--xid-hardware", "13"], text);
    assert!(run.stdout.contains("13   hardware"), "{}", run.stdout);
    let run = xids(&["-o", "json"], b"no kernel messages here\n");
    assert_eq!((run.status, run.stdout.trim()), (0, "[]"));
}

#[test]
fn binary_garbage_never_panics() {
    let mut garbage: Vec<u8> = (0..=255u8).cycle().take(64 * 1024).collect();
    garbage.extend_from_slice(b"\n\xff\xfeNVRM: Xid (PCI:\xff): 79,\n[ 1.0] NVRM: Xid (PCI:0000:18:00): 79, \xc3\x28 GPU has fallen off the bus\n");
    let mut state = 0x2545_f491_u32;
    for _ in 0..32 * 1024 {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        garbage.push(state as u8);
    }
    for format in ["json", "table"] {
        let run = xids(&["-o", format], &garbage);
        assert_eq!(run.status, 0, "{format}: {}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
        assert!(run.stdout.contains("00000000:18:00.0"), "{}", run.stdout);
    }
}

#[test]
fn bad_input_is_one_clear_line() {
    let run = xids(&["/nonexistent/kern.log"], b"");
    assert_eq!(run.status, 2);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("/nonexistent/kern.log"),
        "{}",
        run.stderr
    );

    let run = xids(&["--xid-application", "13,abc"], b"");
    assert_eq!(run.status, 2);
    assert!(
        run.stderr.contains("GPUSTACK_NVIDIA_XID_APPLICATION"),
        "{}",
        run.stderr
    );
}
