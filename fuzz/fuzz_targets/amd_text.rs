//! AMD's untrusted text: amd-smi (`static`, `metric`, `version`, JSON and plain), rocm-smi, the
//! amdgpu kernel-log lines, DRM uevents and device listings, and KFD topology properties.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = accel_amd::amdsmi::parse_static(&text);
    let _ = accel_amd::amdsmi::parse_metric(&text);
    let _ = accel_amd::amdsmi::parse_version_json(&text);
    let _ = accel_amd::amdsmi::parse_version_text(&text);
    let _ = accel_amd::rocmsmi::parse(&text);
    let _ = accel_amd::kmsg::parse(&text);
    let _ = accel_amd::drm::parse_uevent(&text);
    let _ = accel_amd::drm::listed_char_devices(&text);
    let _ = accel_amd::drm::partition_render_nodes(&text);
    let _ = accel_amd::text::unique_id(&text);
    let node = accel_amd::kfd::KfdNode {
        properties: accel_amd::kfd::parse_properties(&text),
        ..Default::default()
    };
    let _ = (node.bus_id(), node.compute_units(), node.shader_engines(), node.gfx_target());
});
