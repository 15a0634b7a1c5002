//! The captured AMD corpus: every file in `../shared/fixtures/amd/` read by the parser it is
//! for, with what it must yield. A capture tree (a KFD topology, a DRM sysfs snapshot) is one
//! unit. The folder missing fails; a file on disk without an expectation here fails; an
//! expectation without its file fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use accel_amd::drm::Amdgpu as _;
use accel_amd::kmsg::FaultKind;
use accel_amd::{amdsmi, drm, kfd, kmsg, rocmsmi};
use accel_host::FsHost;

fn fixtures() -> PathBuf {
    accel_testkit::shared_fixtures("amd")
}

/// The units on disk: `<folder>/<tree>/` for capture trees, else the file's path.
fn units(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for folder in std::fs::read_dir(root).unwrap() {
        let folder = folder.unwrap();
        let name = folder.file_name().to_string_lossy().into_owned();
        if folder.file_type().unwrap().is_file() {
            out.insert(name);
            continue;
        }
        for entry in std::fs::read_dir(folder.path()).unwrap() {
            let entry = entry.unwrap();
            let file = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().unwrap().is_dir() {
                out.insert(format!("{name}/{file}/"));
            } else {
                out.insert(format!("{name}/{file}"));
            }
        }
    }
    out
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned()
}

/// A KFD tree's nodes, from `<dir>/topology/nodes` or `<dir>/nodes`.
fn topology(dir: &Path) -> Vec<kfd::KfdNode> {
    let host = FsHost::new(dir);
    let base = if dir.join("topology").is_dir() {
        "/topology"
    } else {
        ""
    };
    kfd::read_topology(&host, base).unwrap().unwrap()
}

fn untar(path: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("tar")
        .arg("xzf")
        .arg(path)
        .arg("-C")
        .arg(dir.path())
        .status()
        .expect("tar runs");
    assert!(status.success(), "tar xzf {}", path.display());
    dir
}

/// `(boards, GPU nodes, gfx of the first, CUs of the first board, XCCs of the first board,
/// render minor of the first board's primary)`.
fn kfd_summary(
    nodes: &[kfd::KfdNode],
) -> (
    usize,
    usize,
    Option<String>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
) {
    let boards = kfd::boards(nodes);
    let gpus = nodes.iter().filter(|n| n.is_gpu()).count();
    let first = &boards[0];
    let primary = first.primary().unwrap();
    (
        boards.len(),
        gpus,
        primary.gfx_target(),
        first.compute_units(),
        first.xccs(),
        primary.render_minor(),
    )
}

fn kfd_tree(unit: &str, dir: &Path) {
    let nodes = topology(dir);
    let summary = kfd_summary(&nodes);
    let gfx = |s: &str| Some(s.to_string());
    let expected = match unit {
        // Bus order is not render-minor order: the lowest bus is renderD130.
        "k8sdp__mi210-8gpu-xgmi-pcie" => (8, 8, gfx("gfx90a"), Some(104), Some(1), Some(130)),
        // CPX: 8 partitions per board (38 CUs and 1 XCC each), the last board shows 7.
        "k8sdp__mi300x-8gpu-cpx" => (8, 63, gfx("gfx942"), Some(304), Some(8), Some(128)),
        "k8sdp__mi308x-8gpu-qpx-2domains" => (8, 32, gfx("gfx942"), Some(80), Some(4), Some(128)),
        // The 2018 kernel has no gfx_target_version or num_xcc; node 2 is a copy of node 1 made
        // upstream, so both sit on one board.
        "k8sdp__vega10-1gpu" => (1, 2, None, Some(128), None, Some(128)),
        "lact__phoenix-apu" => (1, 1, gfx("gfx1103"), Some(12), Some(1), Some(128)),
        "lact__strixpoint-apu" => (1, 1, gfx("gfx1150"), Some(12), Some(1), Some(128)),
        "rocmi__mi100-1node" => (1, 1, gfx("gfx908"), Some(120), Some(1), Some(128)),
        other => panic!("kfd-topology/{other}/: a tree without expectations"),
    };
    assert_eq!(summary, expected, "kfd-topology/{unit}/");
    let boards = kfd::boards(&nodes);
    match unit {
        "k8sdp__mi300x-8gpu-cpx" => {
            assert_eq!(boards.last().unwrap().partitions(), 7);
            assert!(boards.iter().all(|b| {
                let ids: BTreeSet<_> = b.nodes.iter().map(|n| n.unique_id()).collect();
                ids.len() == 1
            }));
            assert_eq!(
                boards[0].primary().unwrap().unique_id(),
                Some(16_404_946_649_897_475_633)
            );
        }
        "k8sdp__mi308x-8gpu-qpx-2domains" => {
            let domains: BTreeSet<u32> = boards.iter().map(|b| b.bus_id.domain).collect();
            assert_eq!(domains, BTreeSet::from([0, 1]));
            assert!(boards.iter().all(|b| b.partitions() == 4));
            let bank = boards[0].primary().unwrap().framebuffer_bytes().unwrap();
            assert_eq!(bank >> 30, 48, "48 GiB per partition");
        }
        "k8sdp__mi210-8gpu-xgmi-pcie" => {
            let host = FsHost::new(dir);
            let base = if dir.join("topology").is_dir() {
                "/topology"
            } else {
                ""
            };
            let peers = kfd::xgmi_peers(&host, base, 2);
            assert!(!peers.is_empty(), "node 2 has XGMI links");
            assert!(
                boards
                    .iter()
                    .all(|b| b.primary().unwrap().hive_id().is_some())
            );
        }
        "lact__phoenix-apu" | "lact__strixpoint-apu" => {
            // An APU: no unique id; KFD's bank is the shared system memory, far above the
            // DRM carve-out (which the detector prefers).
            let p = boards[0].primary().unwrap();
            assert_eq!(p.unique_id(), None);
            assert!(p.framebuffer_bytes().unwrap() > 8 << 30);
            assert_eq!(p.name.as_deref(), Some("ip discovery"));
        }
        _ => {}
    }
}

fn kfd_archive(unit: &str, path: &Path) {
    let dir = untar(path);
    let nodes = topology(dir.path());
    let (boards, gpus, ..) = kfd_summary(&nodes);
    let expected = match unit {
        "k8sdp__mi210-8gpu-xgmi-pcie.full.tar.gz" => (8, 8),
        "k8sdp__mi300x-8gpu-cpx.full.tar.gz" => (8, 63),
        "k8sdp__mi308x-8gpu-qpx-2domains.full.tar.gz" => (8, 32),
        "k8sdp__vega10-1gpu.full.tar.gz" => (1, 2),
        other => panic!("kfd-topology/{other}: an archive without expectations"),
    };
    assert_eq!((boards, gpus), expected, "kfd-topology/{unit}");
}

/// `(card, driver, vendor:device, bus, vram bytes, unique id)` of each DRM snapshot.
#[allow(clippy::type_complexity)]
const DRM: &[(&str, u32, &str, &str, &str, Option<u64>, Option<u64>)] = &[
    (
        "lact__hd7870",
        0,
        "radeon",
        "1002:6818",
        "0000:01:00.0",
        None,
        None,
    ),
    (
        "lact__nvidia-rtx4080-not-amd",
        1,
        "nvidia",
        "10de:2704",
        "0000:09:00.0",
        None,
        None,
    ),
    (
        "lact__phoenix",
        1,
        "amdgpu",
        "1002:15bf",
        "0000:64:00.0",
        Some(4_294_967_296),
        None,
    ),
    (
        "lact__r7-240",
        1,
        "amdgpu",
        "1002:6617",
        "0000:01:00.0",
        Some(2_147_483_648),
        None,
    ),
    (
        "lact__r9-280",
        0,
        "amdgpu",
        "1002:679a",
        "0000:01:00.0",
        None,
        None,
    ),
    (
        "lact__rx5500xt",
        1,
        "amdgpu",
        "1002:7340",
        "0000:04:00.0",
        None,
        None,
    ),
    (
        "lact__rx5700xt",
        1,
        "amdgpu",
        "1002:731f",
        "0000:28:00.0",
        None,
        None,
    ),
    (
        "lact__rx580",
        0,
        "amdgpu",
        "1002:67df",
        "0000:09:00.0",
        Some(4_294_967_296),
        None,
    ),
    (
        "lact__rx6600",
        1,
        "amdgpu",
        "1002:73ff",
        "0000:12:00.0",
        None,
        None,
    ),
    (
        "lact__rx6600xt",
        0,
        "amdgpu",
        "1002:73ff",
        "0000:0b:00.0",
        None,
        None,
    ),
    (
        "lact__rx6900xt",
        0,
        "amdgpu",
        "1002:73bf",
        "0000:0c:00.0",
        Some(17_163_091_968),
        Some(0x946d_7e1e_f9b1_72dd),
    ),
    (
        "lact__rx7600s",
        1,
        "amdgpu",
        "1002:7480",
        "0000:03:00.0",
        None,
        None,
    ),
    (
        "lact__rx7700s",
        1,
        "amdgpu",
        "1002:7480",
        "0000:03:00.0",
        None,
        None,
    ),
    (
        "lact__rx7800xt",
        1,
        "amdgpu",
        "1002:747e",
        "0000:03:00.0",
        None,
        None,
    ),
    (
        "lact__rx7900xtx",
        0,
        "amdgpu",
        "1002:744c",
        "0000:03:00.0",
        None,
        None,
    ),
    (
        "lact__rx9070",
        1,
        "amdgpu",
        "1002:7550",
        "0000:03:00.0",
        None,
        None,
    ),
    (
        "lact__rx9070xt",
        1,
        "amdgpu",
        "1002:7550",
        "0000:0f:00.0",
        None,
        None,
    ),
    (
        "lact__strixpoint",
        1,
        "amdgpu",
        "1002:150e",
        "0000:c1:00.0",
        Some(536_870_912),
        None,
    ),
    (
        "lact__vangogh",
        0,
        "amdgpu",
        "1002:163f",
        "0000:04:00.0",
        None,
        None,
    ),
    (
        "lact__vega56",
        0,
        "amdgpu",
        "1002:687f",
        "0000:0b:00.0",
        Some(8_573_157_376),
        None,
    ),
    (
        "procfs__rx-vega64-asus",
        0,
        "amdgpu",
        "1002:687f",
        "0000:09:00.0",
        Some(8_573_157_376),
        Some(0x0123_4567_89ab_cdef),
    ),
];

fn drm_tree(unit: &str, dir: &Path) {
    let Some(&(_, card, driver, ids, bus, vram, unique)) = DRM.iter().find(|e| e.0 == unit) else {
        panic!("drm-sysfs/{unit}/: a tree without expectations");
    };
    let cards = drm::read_cards(&FsHost::new(dir), "");
    assert_eq!(cards.len(), 1, "drm-sysfs/{unit}/");
    let c = &cards[0];
    assert_eq!(c.card, card, "{unit}");
    assert_eq!(c.driver.as_deref(), Some(driver), "{unit}");
    assert_eq!(c.is_amdgpu(), driver == "amdgpu", "{unit}");
    let read_ids = format!("{:04x}:{:04x}", c.vendor_id.unwrap(), c.device_id.unwrap());
    assert_eq!(read_ids, ids, "{unit}");
    assert_eq!(c.bus_id.unwrap().sysfs(), bus, "{unit}");
    assert_eq!(c.vram_bytes, vram, "{unit}");
    assert_eq!(c.unique_id, unique, "{unit}");
    // No snapshot carries the device's drm/ listing: the render minor is KFD's to say.
    assert_eq!(c.render, None, "{unit}");
    if matches!(unit, "procfs__rx-vega64-asus" | "lact__vega56") {
        assert_eq!(c.numa_node, None, "{unit}: numa_node -1 is no affinity");
        assert_eq!(
            c.product_name, None,
            "{unit}: an empty product_name is absent"
        );
    }
    if unit == "lact__strixpoint" {
        assert_eq!(c.numa_node, None);
        assert_eq!(c.class, Some(0x038000), "an APU's class is not VGA");
    }
}

fn drm_file(unit: &str, text: &str) {
    match unit {
        "k8sdp-157__mi300x-partition-amdgpu_xcp-sysfs-listing-excerpt.txt" => {
            let nodes = drm::partition_render_nodes(text, drm::DRIVER);
            assert!(!nodes.is_empty(), "{unit}");
            assert!(nodes.contains(&(36, 170)), "{unit}: {nodes:?}");
        }
        "k8sdp-39__ls-dev-kfd-renderD128-in-pod-numeric-gid.txt" => {
            let nodes = drm::listed_char_devices(text);
            assert_eq!(
                nodes,
                vec![("kfd".into(), 242, 0), ("renderD128".into(), 226, 128)]
            );
        }
        "rocmdocker-pr93__ls-dev-dri-kfd-container-2x-mi210.txt" => {
            let nodes = drm::listed_char_devices(text);
            let names: BTreeSet<&str> = nodes.iter().map(|n| n.0.as_str()).collect();
            for want in ["renderD128", "renderD129", "card1", "card2", "kfd"] {
                assert!(names.contains(want), "{unit}: {want} in {nodes:?}");
            }
            assert!(nodes.contains(&("kfd".into(), 509, 0)), "{unit}: {nodes:?}");
        }
        "roct-36__ls-dev-kfd-root-only-0600.txt" => {
            assert_eq!(drm::listed_char_devices(text), vec![("kfd".into(), 234, 0)]);
        }
        other => panic!("drm-sysfs/{other}: a file without expectations"),
    }
}

fn amd_smi(unit: &str, text: &str) {
    match unit {
        "dellai__8x-mi300x-static-json-amdsmi26.2.2-rocm7.2.1.json" => {
            let gpus = amdsmi::parse_static(text).unwrap();
            assert_eq!(gpus.len(), 8);
            let g = &gpus[0];
            assert_eq!(g.bus_id.unwrap().sysfs(), "0000:1b:00.0");
            assert_eq!(g.unique_id, Some(0x2824_6ce5_673b_4aa0));
            assert_eq!(g.market_name.as_deref(), Some("AMD Instinct MI300X"));
            assert_eq!(g.vram_mib, Some(196_592));
            assert_eq!(g.compute_units, Some(304));
            assert_eq!(g.gfx_target.as_deref(), Some("gfx942"));
            assert_eq!(g.driver_version.as_deref(), Some("6.16.13"));
            assert_eq!(g.device_id, Some(0x74a1));
            assert!(gpus.iter().all(|g| !g.identity_unreadable));
            let ids: BTreeSet<_> = gpus.iter().map(|g| g.unique_id).collect();
            assert_eq!(ids.len(), 8);
        }
        "dellai__8x-mi300x-static-json-nonroot-preamble.txt" => {
            let gpus = amdsmi::parse_static(text).unwrap();
            assert_eq!(gpus.len(), 8);
            assert!(
                gpus.iter()
                    .all(|g| g.identity_unreadable && g.unique_id.is_none())
            );
            assert_eq!(gpus[0].bus_id.unwrap().sysfs(), "0000:1b:00.0");
        }
        "dellai__version-json-amdsmi26.2.2-rocm7.2.1.json" => {
            let v = amdsmi::parse_version_json(text).unwrap();
            assert_eq!(v.rocm.as_deref(), Some("7.2.1"));
            assert_eq!(v.amdgpu.as_deref(), Some("6.16.13"));
            assert_eq!(v.library.as_deref(), Some("26.2.2"));
        }
        "jkoudela__radeon-unnamed-46064mb-metric-json-list.json" => {
            // `metric`, not `static`: the list shape reads, with no identity in it.
            let gpus = amdsmi::parse_static(text).unwrap();
            assert_eq!(gpus.len(), 1);
            assert_eq!(gpus[0].gpu, Some(0));
            assert_eq!(gpus[0].unique_id, None);
            // Its live usage, as the capture shows it.
            let usage = amdsmi::parse_metric(text).unwrap();
            assert_eq!(
                usage,
                vec![amdsmi::MetricGpu {
                    gpu: Some(0),
                    utilization_percent: Some(0.0),
                    memory_used_mib: Some(1758),
                    memory_total_mib: Some(46064),
                    temperature_c: Some(43.0),
                    power_w: Some(34.0),
                }]
            );
        }
        "k8sdp-157__mi300x-version-amdgpu-kernel-string.txt" => {
            let v = amdsmi::parse_version_text(text).unwrap();
            assert_eq!(v.rocm.as_deref(), Some("6.4.0"));
            assert_eq!(
                v.amdgpu, None,
                "a squashed /proc/version is no driver version"
            );
        }
        "ocihpcoke__8x-mi300x-version-list-plain-amdsmi24.5.1-rocm6.1.2.txt" => {
            let v = amdsmi::parse_version_text(text).unwrap();
            assert_eq!(v.rocm.as_deref(), Some("6.1.2"));
            assert_eq!(v.amdgpu, None);
            assert_eq!(v.library.as_deref(), Some("24.5.2.0"));
        }
        // Plain-text tables people read: no JSON document and no version line in them; the
        // detector asks for JSON, and these must not be mistaken for it.
        "amdsmi-132__mi300x-dpx-gpu-choices-bdf-function-same-uuid.txt"
        | "amdsmi-132__mi300x-dpx-partition-accelerator-later-gpu0.txt"
        | "amdsmi-132__mi300x-dpx-partition-accelerator-rocm6.4.0-gpu0-1.txt"
        | "amdsmichangelog__mi308x-cpx-nps4-list-asic-partition-plain.txt"
        | "legacyrocm-4477__4gpu-partition-plain-na.txt"
        | "rocmsys-2987__mi350x-static-plain-excerpt.txt" => {
            assert!(amdsmi::parse_static(text).is_err(), "{unit}");
            assert_eq!(amdsmi::parse_version_text(text), None, "{unit}");
        }
        "rocmblogs__mi300x-o-list-static-metric-plain-truncated.txt" => {
            // Its last block is a jq fragment of the old list shape (`.[0]["vram"]`).
            assert!(amdsmi::parse_version_text(text).is_none());
            assert!(
                amdsmi::parse_static(text)
                    .map(|g| g.iter().all(|g| g.unique_id.is_none()))
                    .unwrap_or(true)
            );
            // Plain `amd-smi metric` is no JSON: never read as a sample of usage.
            assert!(
                amdsmi::parse_metric(text)
                    .map(|g| g.iter().all(|g| g.utilization_percent.is_none()))
                    .unwrap_or(true)
            );
        }
        other => panic!("amd-smi/{other}: a file without expectations"),
    }
}

fn rocm_smi(unit: &str, text: &str) {
    let card0 = |doc: &rocmsmi::RocmSmi| doc.cards[0].clone();
    match unit {
        "gpustack__rx7800xt-navi32-rocm6.2.4.json" => {
            let doc = rocmsmi::parse(text).unwrap();
            let c = card0(&doc);
            assert_eq!(c.unique_id, Some(0x5c88_007d_7603_74f3));
            assert_eq!(
                accel_amd::text::rocr_uuid(c.unique_id.unwrap()),
                "GPU-5c88007d760374f3"
            );
            assert_eq!(
                c.name.as_deref(),
                Some("Navi 32 [Radeon RX 7700 XT / 7800 XT]")
            );
            assert_eq!(c.vram_bytes, Some(17_163_091_968));
        }
        "telegraf__mi100-rocm6.0.2-showallinfo.json" => {
            let doc = rocmsmi::parse(text).unwrap();
            assert_eq!(doc.cards.len(), 4);
            assert_eq!(doc.driver_version.as_deref(), Some("6.3.6"));
            let c = card0(&doc);
            assert_eq!(c.bus_id.unwrap().sysfs(), "0000:83:00.0");
            assert_eq!(c.unique_id, Some(0x79cc_d551_67a2_124a));
            assert_eq!(c.name.as_deref(), Some("Arcturus GL-XL [Instinct MI100]"));
        }
        "telegraf__rx6700xt-rocm5.7.1.json"
        | "telegraf__rx6700xt-rocm6.0.2.json"
        | "telegraf__rx6700xt-rocm6.1.2.json" => {
            let doc = rocmsmi::parse(text).unwrap();
            let c = card0(&doc);
            assert_eq!(c.unique_id, None, "{unit}: Unique ID N/A");
            assert_eq!(c.bus_id.unwrap().sysfs(), "0000:07:00.0");
            assert_eq!(
                c.name.as_deref(),
                Some("Navi 22 [Radeon RX 6700/6700 XT / 6800M]")
            );
            assert_eq!(c.vram_bytes, Some(12_868_124_672));
        }
        "telegraf__vega10-xt.json" => {
            let c = card0(&rocmsmi::parse(text).unwrap());
            assert_eq!(
                accel_amd::text::rocr_uuid(c.unique_id.unwrap()),
                "GPU-02150e7d042a1124",
                "leading zeros rocm-smi dropped come back"
            );
            assert_eq!(c.name, None);
        }
        "telegraf__vega20-wks-gl-xe.json" => {
            let c = card0(&rocmsmi::parse(text).unwrap());
            assert_eq!(c.name.as_deref(), Some("Radeon Instinct MI50 32GB"));
            assert_eq!(c.bus_id.unwrap().sysfs(), "0000:63:00.0");
        }
        "rocmsmilib-159__mi250x-gcd-showproductname.json" => {
            let c = card0(&rocmsmi::parse(text).unwrap());
            assert_eq!(
                c.name.as_deref(),
                Some("AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2")
            );
        }
        "torchserve__2x-mi250-gcd-productname-power.json"
        | "torchserve__2x-mi250-gcd-use-meminfo.json" => {
            let doc = rocmsmi::parse(text).unwrap();
            assert_eq!(doc.cards.len(), 2, "{unit}: one card per GCD");
            assert_eq!(doc.cards[0].name, doc.cards[1].name);
        }
        "rainbowminer-749__2019-single-card-f-t-P.json" => {
            let c = card0(&rocmsmi::parse(text).unwrap());
            assert_eq!((c.unique_id, c.bus_id, c.name), (None, None, None));
        }
        "legacyrocm-4759__mi300x-cpx-rocm6.4.1-showid-na-partitions.txt" => {
            // Plain `rocm-smi -i` after an amd-smi version line: not JSON.
            assert!(rocmsmi::parse(text).is_err());
            let v = amdsmi::parse_version_text(text).unwrap();
            assert_eq!(v.amdgpu.as_deref(), Some("6.10.5"));
        }
        other => panic!("rocm-smi/{other}: a file without expectations"),
    }
}

fn kernel_log(unit: &str, text: &str) {
    let faults = kmsg::parse(text);
    let count = |k: FaultKind| faults.iter().filter(|f| f.kind == k).count();
    let kinds = (
        count(FaultKind::RasUncorrectable),
        count(FaultKind::GpuReset),
        count(FaultKind::RingTimeout),
        count(FaultKind::PageFault),
    );
    let first = faults.first().expect("a fault");
    let bus = first.bus_id.map(|b| b.sysfs());
    match unit {
        "cachyos-960__rx6800xt-journalctl-gcvm-fault.log" => {
            assert_eq!(kinds.0 + kinds.1 + kinds.2, 0, "{unit}");
            assert!(kinds.3 >= 1);
            let fault = faults
                .iter()
                .find(|f| f.kind == FaultKind::PageFault)
                .unwrap();
            assert_eq!(fault.process.as_deref(), Some("kwin_wayland"));
            assert_eq!(fault.pid, Some(1671));
            assert_eq!(bus.as_deref(), Some("0000:0d:00.0"));
        }
        "cosmic-3764__rx5700xt-ring-gfx-timeout-baco-reset.log" => {
            assert_eq!(kinds, (0, 1, 1, 0), "{unit}");
            assert_eq!(first.process.as_deref(), Some("cosmic-comp"));
            assert_eq!(bus.as_deref(), Some("0000:28:00.0"));
        }
        "drmkmod-78__freebsd-drmn0-retry-page-fault.log" => {
            assert!(kinds.3 >= 4, "{unit}: {kinds:?}");
            assert_eq!(first.bus_id, None, "FreeBSD names no PCI device");
            assert_eq!(first.pid, Some(101_038));
            assert_eq!(first.process, None, "an empty process name");
        }
        "legacyrocm-1886__mi50-athub-ue-gpu-reset-ctime.log" => {
            assert_eq!(kinds, (1, 1, 0, 0), "{unit}");
            assert!(first.kind.is_hardware());
            assert_eq!(bus.as_deref(), Some("0000:e3:00.0"));
        }
        "legacyrocm-4021__mi300x-aca-uncorrectable-ras.log" => {
            assert_eq!(kinds.1 + kinds.2 + kinds.3, 0, "{unit}");
            let devices: BTreeSet<_> = faults.iter().filter_map(|f| f.bus_id).collect();
            assert!(devices.len() >= 3, "{unit}: {devices:?}");
            assert_eq!(bus.as_deref(), Some("0000:68:00.0"));
            // Only the ATHUB interrupt is uncorrectable; the two ACA dumps' STATUS
            // 0x98000800003e0000 is VAL|EN|MISCV|Poison (no UC, no PCC): deferred, conditions.
            assert_eq!(kinds.0, 1, "{unit}");
            let aca: Vec<_> = faults
                .iter()
                .filter(|f| f.message.contains("aca entry"))
                .map(|f| (f.kind, f.bus_id.map(|b| b.sysfs())))
                .collect();
            assert_eq!(
                aca,
                vec![
                    (FaultKind::AcaDeferred, Some("0000:9e:00.0".to_string())),
                    (FaultKind::AcaDeferred, Some("0000:d4:00.0".to_string())),
                ],
                "{unit}"
            );
            assert!(aca.iter().all(|(k, _)| !k.is_hardware()));
        }
        "legacyrocm-6127__gfx1201-comp-ring-timeout-wedged.log" => {
            assert_eq!((kinds.0, kinds.1, kinds.2), (0, 0, 1), "{unit}");
            assert_eq!(first.process.as_deref(), Some("gst-plugin-scan"));
            assert_eq!(first.pid, Some(4087));
            assert!(!first.kind.is_hardware());
        }
        "rocmamdgpu-172__gfxhub0-no-retry-page-fault-utcl2.log" => {
            assert_eq!((kinds.0, kinds.1, kinds.2), (0, 0, 0), "{unit}");
            assert_eq!(first.process.as_deref(), Some("pt_main_thread"));
            assert_eq!(first.pid, Some(12_924));
            assert_eq!(bus.as_deref(), Some("0000:c6:00.0"));
        }
        "rocmsdkbuilder-141__7840u-syslog-iso-mode2-reset.log" => {
            assert_eq!(kinds.1, 1, "{unit}: {kinds:?}");
            assert_eq!(bus.as_deref(), Some("0000:c3:00.0"));
        }
        "steamos-2802__navi33-mes-fail-mode1-ctime.log" => {
            assert_eq!((kinds.1, kinds.2), (1, 1), "{unit}");
            assert_eq!(first.process.as_deref(), Some("WoWClassic.exe"));
        }
        other => panic!("kmsg/{other}: a file without expectations"),
    }
}

#[test]
fn every_capture_has_expectations_and_meets_them() {
    let root = fixtures();
    let found = units(&root);
    let mut checked = 0;
    for unit in &found {
        let path = root.join(unit.trim_end_matches('/'));
        let (folder, name) = unit.split_once('/').unwrap_or(("", unit.as_str()));
        let name = name.trim_end_matches('/');
        match folder {
            "" if name == "SOURCES.md" || name == "HAZARDS.md" => {}
            "kfd-topology" if unit.ends_with('/') => kfd_tree(name, &path),
            "kfd-topology" if name.ends_with(".tar.gz") => kfd_archive(name, &path),
            "drm-sysfs" if unit.ends_with('/') => drm_tree(name, &path),
            "drm-sysfs" => drm_file(name, &read(&path)),
            "amd-smi" => amd_smi(name, &read(&path)),
            "rocm-smi" => rocm_smi(name, &read(&path)),
            "kmsg" => kernel_log(name, &read(&path)),
            _ => panic!("{unit}: a capture without expectations"),
        }
        checked += 1;
    }
    // Every DRM expectation names a tree that is there (a vanished capture fails too).
    for (tree, ..) in DRM {
        assert!(
            found.contains(&format!("drm-sysfs/{tree}/")),
            "drm-sysfs/{tree}/ is missing"
        );
    }
    // Exactly the captures named above: one that vanished (or a new one) changes the count.
    assert_eq!(checked, 72, "captures read: {found:?}");
}
