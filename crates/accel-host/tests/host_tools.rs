//! `HostTools` inside a host root that is not this process's `/`: the tool is found under the
//! root and runs inside it (`chroot`), so it sees the host's files, not the daemon's image.
//! Needs root (CI runs as root); elsewhere it says SKIPPED.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use accel_host::{CommandError, Commands, HostTools, ToolPlaces};
use accel_testkit::live_root::{install_shell, skip_unless_chroot};

const LONG: Duration = Duration::from_secs(20);

fn executable(root: &Path, host_path: &str, text: &str) {
    let path = root.join(host_path.trim_start_matches('/'));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn corex() -> ToolPlaces {
    ToolPlaces::vendor(
        &["ixsmi"],
        &["/usr/local/corex/bin"],
        &["/usr/local/corex/lib64", "/usr/local/corex/lib"],
    )
}

#[test]
fn a_tool_runs_inside_the_host_root_with_the_hosts_search_path() {
    if !skip_unless_chroot("a_tool_runs_inside_the_host_root_with_the_hosts_search_path") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    install_shell(root.path());
    std::fs::create_dir_all(root.path().join("usr/local/corex/lib64")).unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::write(root.path().join("etc/host-marker"), "the host's own file\n").unwrap();
    // Only shell built-ins: the root holds a shell and nothing else.
    executable(
        root.path(),
        "/usr/local/corex/bin/ixsmi",
        "#!/bin/sh\nread -r marker < /etc/host-marker\necho \"$marker\"\necho \"args=$*\"\necho \"PATH=$PATH\"\necho \"LD=$LD_LIBRARY_PATH\"\necho \"cwd=$(pwd)\"\nexit 4\n",
    );
    let tools = HostTools::new(root.path(), [corex()]);
    assert!(tools.is_installed("ixsmi"));
    let out = tools.run(&["ixsmi", "-q", "-i", "0"], LONG).unwrap();
    let text = out.stdout_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "the host's own file",
        "{text}{}",
        out.stderr_text()
    );
    assert_eq!(lines[1], "args=-q -i 0");
    assert_eq!(
        lines[2],
        format!("PATH={}", corex().tool_path()),
        "the host's search path, then the vendor's directories"
    );
    assert!(
        lines[3] == "LD=/usr/local/corex/lib64"
            || lines[3].starts_with("LD=/usr/local/corex/lib64:"),
        "the library directory that exists on the host, in the host's terms: {}",
        lines[3]
    );
    assert_eq!(lines[4], "cwd=/");
    assert_eq!(out.status, Some(4), "the tool's own exit status");
}

#[test]
fn a_tool_the_host_lacks_is_not_installed_even_when_this_machine_has_it() {
    if !skip_unless_chroot("a_tool_the_host_lacks_is_not_installed_even_when_this_machine_has_it") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    install_shell(root.path());
    // `sh` is on this machine's PATH and in the root, but a row naming it looks only in its
    // places.
    let places = ToolPlaces::vendor(&["sh"], &[], &[]).searching(vec!["/opt/none/bin".into()]);
    let tools = HostTools::new(root.path(), [places]);
    assert!(!tools.is_installed("sh"));
    assert!(matches!(
        tools.run(&["sh", "-c", "true"], LONG),
        Err(CommandError::NotInstalled { program }) if program == "sh"
    ));
    // The one typed failure says where it was looked for.
    let failure = accel_host::run_bounded(&tools, &["sh", "-c", "true"], LONG).unwrap_err();
    assert_eq!(
        failure.to_string(),
        format!(
            "sh -c true: sh: not found (looked for in /opt/none/bin under the host root {})",
            root.path().display()
        )
    );
}

#[test]
fn a_hung_tool_inside_the_host_root_is_killed_at_its_deadline() {
    if !skip_unless_chroot("a_hung_tool_inside_the_host_root_is_killed_at_its_deadline") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    install_shell(root.path());
    executable(
        root.path(),
        "/usr/local/corex/bin/ixsmi",
        "#!/bin/sh\necho started\nwhile :; do :; done\n",
    );
    let tools = HostTools::new(root.path(), [corex()]);
    let started = std::time::Instant::now();
    let err = tools
        .run(&["ixsmi", "-q"], Duration::from_millis(400))
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    match err {
        CommandError::TimedOut { argv, partial, .. } => {
            assert_eq!(argv, "ixsmi -q");
            assert_eq!(partial.stdout_text(), "started\n");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}
