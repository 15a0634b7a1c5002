//! `PPU_HOME` (spec/thead.md §1.1, §9): the PPU SDK's home, where the described system looks for
//! `libhgml.so` (`<home>/lib64`, then `<home>/lib`; default `/usr/local/PPU_SDK`). This build
//! reads the same facts through the SDK's `ppu-smi`, so the home moves where that tool and its
//! libraries are looked for on the host. Read as the daemon does: a live-looking root made from
//! the recorded 16-PPU host, the tool a stand-in inside it, run there with `chroot` (these
//! tests need root, as CI runs; elsewhere they say SKIPPED).

use std::path::Path;

use accel_host::{FsHost, HostTools};
use accel_testkit::live_root::{install_shell, live_root_from, skip_unless_chroot, stand_in_tool};
use accel_thead::backend::{DEFAULT_TOOLS, PPU_HOME_ENV, ppu_home, tool_dirs};
use accel_thead::detector::{self, DetectOptions};

const HOST: &str = "thead-16x-zw810e";

/// A live-looking root of the recorded host with its `ppu-smi` a stand-in at `tool` (a host
/// path).
fn live_root_with_tool_at(tool: &str) -> tempfile::TempDir {
    let recorded = accel_testkit::recorded_host(HOST);
    let dir = tempfile::tempdir().unwrap();
    live_root_from(&recorded, dir.path());
    install_shell(dir.path());
    assert!(stand_in_tool(dir.path(), &recorded, "ppu-smi", tool) > 0);
    dir
}

fn detect_with(root: &Path, home: Option<&str>) -> accel_core::Detection {
    let commands = HostTools::new(root, [tool_dirs(home).places()]);
    detector::detect(&FsHost::new(root), &commands, DetectOptions::default())
}

#[test]
fn the_sdk_home_the_environment_names_is_where_ppu_smi_is_found() {
    if !skip_unless_chroot("the_sdk_home_the_environment_names_is_where_ppu_smi_is_found") {
        return;
    }
    let root = live_root_with_tool_at("/opt/ppu-sdk-1.5/bin/ppu-smi");
    let found = detect_with(root.path(), Some("/opt/ppu-sdk-1.5")).unwrap();
    assert_eq!(found.accelerators.len(), 16);
    assert_eq!(found.driver_version.as_deref(), Some("2.1.0-ra1f23041713"));
    // Unset: the default SDK home, where this host has no tool; the kernel shows the PPUs, so
    // the pass is not measured (never zero PPUs, never PPUs without their versions).
    match detect_with(root.path(), None) {
        Err(e) => assert!(e.to_string().contains("ppu-smi"), "{e}"),
        Ok(section) => panic!("ppu-smi found outside the SDK home: {section:?}"),
    }
}

#[test]
fn unset_the_default_sdk_home_is_read_as_before() {
    if !skip_unless_chroot("unset_the_default_sdk_home_is_read_as_before") {
        return;
    }
    let root = live_root_with_tool_at("/usr/local/PPU_SDK/bin/ppu-smi");
    let found = detect_with(root.path(), None).unwrap();
    assert_eq!(found.driver_version.as_deref(), Some("2.1.0-ra1f23041713"));
}

#[test]
fn the_sdk_homes_places() {
    assert_eq!(tool_dirs(None), DEFAULT_TOOLS);
    let moved = tool_dirs(Some("/opt/ppu"));
    assert_eq!(moved.programs, ["ppu-smi"]);
    assert_eq!(moved.install_dirs, ["/opt/ppu/ppu-smi/bin", "/opt/ppu/bin"]);
    assert_eq!(moved.library_dirs, ["/opt/ppu/lib64", "/opt/ppu/lib"]);
    let var = |value: &'static str| move |name: &str| (name == PPU_HOME_ENV).then(|| value.into());
    assert_eq!(ppu_home(var("/opt/ppu/")).as_deref(), Some("/opt/ppu"));
    assert_eq!(ppu_home(var("  ")), None);
    assert_eq!(ppu_home(|_| None), None);
}
