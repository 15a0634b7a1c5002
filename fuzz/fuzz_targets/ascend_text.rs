//! Ascend's and Hygon's untrusted text: npu-smi's table, `-m` mapping, `-t` key/value blocks,
//! board, health, process table and `-t topo` matrix; hy-smi's JSON and plain table, its health check, rocminfo.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = accel_ascend::npusmi::parse_info(&text);
    let _ = accel_ascend::npusmi::parse_mapping(&text);
    let _ = accel_ascend::npusmi::parse_blocks(&text);
    let _ = accel_ascend::npusmi::parse_board(&text);
    let _ = accel_ascend::npusmi::board_hex(&text);
    let _ = accel_ascend::npusmi::parse_spod_info(&text);
    let _ = accel_ascend::health::parse_health(&text);
    let _ = accel_ascend::procs::parse_processes(&text);
    let _ = accel_ascend::topo::parse_topo(&text);
    let _ = accel_hygon::hysmi::parse_json("hy-smi", &text);
    let _ = accel_hygon::hysmi::parse_table(&text);
    let _ = accel_hygon::health::parse_healthcheck(&text);
    let _ = accel_hygon::registry::parse_conf(&text);
    let _ = accel_hygon::registry::parse_ci_name(&text);
    let _ = accel_hygon::registry::parse_dev(&text);
    let _ = accel_hygon::rocminfo::parse(&text);
});
