//! Every AMD parser takes any bytes without panicking: the tools' and the kernel's output is
//! untrusted input.

use std::sync::OnceLock;

use accel_amd::{amdsmi, cumask, drm, kfd, kmsg, rocmsmi, text};
use proptest::prelude::*;

/// Every file of the AMD captures (sysfs trees file by file).
fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        accel_testkit::read_captures(
            &accel_testkit::shared_fixtures("amd"),
            &["amd-smi", "rocm-smi", "kmsg", "drm-sysfs", "kfd-topology"],
        )
    })
}

/// Every text parser on `s`; the results are dropped, only panics matter.
fn read_all(s: &str) {
    let _ = amdsmi::parse_static(s);
    let _ = amdsmi::parse_metric(s);
    let _ = amdsmi::parse_version_json(s);
    let _ = amdsmi::parse_version_text(s);
    let _ = amdsmi::major_minor(s);
    let _ = rocmsmi::parse(s);
    let _ = kmsg::parse(s);
    let _ = drm::parse_uevent(s);
    let _ = drm::listed_char_devices(s);
    let _ = drm::partition_render_nodes(s, drm::DRIVER);
    let _ = text::unique_id(s);
    let props = kfd::parse_properties(s);
    let node = kfd::KfdNode {
        properties: props,
        ..Default::default()
    };
    let _ = (
        node.bus_id(),
        node.compute_units(),
        node.shader_engines(),
        node.gfx_target(),
    );
}

/// Text built from the fragments real outputs are made of, so the parsers' deeper branches run.
fn fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{".to_string()),
        Just("[".to_string()),
        Just("}".to_string()),
        Just("\"gpu_data\": [".to_string()),
        Just("\"asic\": {\"asic_serial\": \"0xFFFF\"}".to_string()),
        Just("\"value\": 18446744073709551615".to_string()),
        Just("N/A".to_string()),
        Just("amdgpu 0000:28:00.0: ".to_string()),
        Just("ring gfx_0.0.0 timeout".to_string()),
        Just(" Process x pid ".to_string()),
        Just("[gfxhub0] page fault".to_string()),
        Just("GPU reset begin!".to_string()),
        Just("[Hardware Error]: aca entry[00].STATUS=0x".to_string()),
        Just("\"mem_usage\": {\"used_vram\": {\"value\": 1e400, \"unit\": \"GB\"}}".to_string()),
        Just("drmn".to_string()),
        Just("AMDSMI Tool: 1 | ROCm version: ".to_string()),
        Just("crw-rw---- 1 root 106 242, ".to_string()),
        Just("/sys/devices/platform/amdgpu_xcp.".to_string()),
        Just("/drm/renderD".to_string()),
        Just("location_id 65535\n".to_string()),
        Just("\n".to_string()),
        Just("\0".to_string()),
        "[ -~]{0,12}",
        any::<u64>().prop_map(|n| n.to_string()),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn text_parsers_never_panic(s in fragments()) {
        read_all(&s);
    }

    #[test]
    fn mutated_captures_never_panic(
        file in any::<prop::sample::Index>(),
        mutation in accel_testkit::mutate::mutation(),
    ) {
        let original: &Vec<u8> = file.get(corpus());
        let bytes = mutation.apply(original);
        read_all(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let s = String::from_utf8_lossy(&bytes);
        let _ = amdsmi::parse_static(&s);
        let _ = amdsmi::parse_metric(&s);
        let _ = rocmsmi::parse(&s);
        let _ = kmsg::parse(&s);
        let _ = drm::listed_char_devices(&s);
    }

    #[test]
    fn kfd_nodes_with_any_figures_never_panic(
        figures in prop::collection::vec(any::<u64>(), 12),
        count in 1usize..10,
    ) {
        let keys = ["simd_count", "simd_per_cu", "array_count", "simd_arrays_per_engine",
            "num_xcc", "location_id", "domain", "gfx_target_version", "unique_id",
            "drm_render_minor", "vendor_id", "device_id"];
        let text: String = keys.iter().zip(&figures).map(|(k, v)| format!("{k} {v}\n")).collect();
        let node = kfd::KfdNode { properties: kfd::parse_properties(&text), ..Default::default() };
        let nodes = vec![node; count];
        for board in kfd::boards(&nodes) {
            let _ = (board.compute_units(), board.xccs(), board.primary());
        }
    }

    #[test]
    fn cu_windows_never_panic_and_stay_on_the_card(
        cu in 0u32..1024, se in 0u32..64, xcc in 0u32..16, pct in 0u32..200,
        rdna in any::<bool>(), occupied in prop::collection::vec((0u32..1024, 0u32..1024), 0..6),
    ) {
        let topology = cumask::CuTopology {
            gfx: if rdna { "gfx1101".into() } else { "gfx942".into() },
            compute_units: cu,
            shader_engines: se,
            xccs: xcc,
        };
        if let Ok(w) = cumask::window(&topology, pct) {
            prop_assert!(w.length >= 1 && w.length <= cu);
            let start = cumask::place(cu, w.length, w.quantum, &occupied);
            prop_assert!(start + w.length <= cu);
            prop_assert_eq!(start % w.quantum, 0);
        }
    }
}
