//! `device-manager monitor` through the real binary on the recorded hosts: one line per GPU
//! (table or JSON), `--watch` every `--monitor-period`, a host without nvidia-smi and a bad period
//! each one clear line (issue 12, item 7); each accelerator's holders from the daemon's ledger
//! journal beside its usage, for every manufacturer, named by the kubelet's pod-resources
//! (issue 47, item 5).

use std::path::{Path, PathBuf};
use std::process::Command;

fn host(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/hosts")
        .join(name)
}

fn monitor(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .arg("monitor")
        .args(args)
        .env_remove("HOST_ROOT")
        .env_remove("MONITOR_PERIOD")
        .env_remove("DATA_DIR")
        .env_remove("KUBELET_DIR")
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const GPU0: &str = "GPU-63d1e50a-b952-d15c-0740-12bc14859142";

#[test]
fn one_line_per_gpu_with_utilization_memory_temperature_power_and_processes() {
    let root = host("hgx-h100-8gpu");
    let (code, out, err) = monitor(&["--host-root", root.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 9, "a header and 8 GPUs:\n{out}");
    assert!(lines[0].starts_with("UUID"), "{out}");
    for column in ["UTIL", "MEMORY", "TEMP", "POWER", "PROCS"] {
        assert!(lines[0].contains(column), "{column} in {}", lines[0]);
    }
    let first = lines[1];
    assert!(first.starts_with(GPU0), "{first}");
    for cell in ["0 %", "0 / 81559 MiB", "41 C", "70 / 700 W"] {
        assert!(first.contains(cell), "{cell:?} in {first:?}");
    }
}

#[test]
fn json_is_one_object_per_sample() {
    let root = host("hgx-h100-8gpu");
    let (code, out, err) = monitor(&["--host-root", root.to_str().unwrap(), "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let sample: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(sample["source"], "csv");
    assert!(sample["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    let gpus = sample["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8);
    assert_eq!(gpus[0]["uuid"], GPU0);
    assert_eq!(gpus[0]["memoryTotalMib"], 81559);
    assert!(gpus[0]["computeProcesses"].is_u64(), "{}", gpus[0]);
}

#[test]
fn watch_samples_again_every_period() {
    let root = host("hgx-h100-8gpu");
    let started = std::time::Instant::now();
    let (code, out, err) = monitor(&[
        "--host-root",
        root.to_str().unwrap(),
        "-o",
        "json",
        "--watch",
        "--monitor-period",
        "1s",
        "--count",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(1),
        "the second sample waits one period"
    );
}

/// On an AMD node `monitor` reads amd-smi's `metric --json` through AMD's backend: one sample
/// per GPU the answer lists, named by its board's identity from `static`, with utilisation and
/// memory (the recorded host's metric answer is one real Radeon capture, gpu 0).
#[test]
fn an_amd_node_is_sampled_with_amd_smi_metric() {
    let root = host("amd-8x-mi300x");
    let (code, out, err) = monitor(&["--host-root", root.to_str().unwrap(), "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let sample: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(sample["manufacturer"], "amd");
    assert_eq!(sample["source"], "amd-smi metric --json");
    let gpus = sample["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1, "{sample}");
    let gpu = &gpus[0];
    assert!(
        gpu["uuid"]
            .as_str()
            .is_some_and(|u| u.starts_with("GPU-") && u.len() == 20),
        "{gpu}"
    );
    assert_eq!(gpu["index"], 0);
    assert_eq!(gpu["utilizationPercent"], 0.0);
    assert_eq!(gpu["memoryTotalMib"], 46064);
    assert!(gpu["memoryUsedMib"].is_u64(), "{gpu}");

    // The detector names the same board the same way, so the gauges and the inventory agree.
    let o = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args([
            "detect",
            "-o",
            "json",
            "--host-root",
            root.to_str().unwrap(),
        ])
        .env_remove("HOST_ROOT")
        .output()
        .unwrap();
    let detected: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let uuids: Vec<&str> = detected["manufacturers"][0]["accelerators"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["uuid"].as_str())
        .collect();
    assert!(uuids.contains(&gpu["uuid"].as_str().unwrap()), "{uuids:?}");

    let (code, out, err) = monitor(&["--host-root", root.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "a header and one GPU:\n{out}");
    assert!(out.contains("0 %") && out.contains("/ 46064 MiB"), "{out}");
}

/// `detect`'s UUIDs of a recorded host, sorted.
fn detected_uuids(root: &Path) -> Vec<String> {
    let o = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args([
            "detect",
            "-o",
            "json",
            "--host-root",
            root.to_str().unwrap(),
        ])
        .env_remove("HOST_ROOT")
        .output()
        .unwrap();
    let detected: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut uuids: Vec<String> = detected["manufacturers"][0]["accelerators"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["uuid"].as_str().map(str::to_string))
        .collect();
    uuids.sort_unstable();
    uuids
}

/// `monitor -o json` on a recorded host: its one sample, checked to name exactly the
/// accelerators `detect` names (so the gauges and the inventory agree).
fn sample_named_as_detected(name: &str, manufacturer: &str, count: usize) -> serde_json::Value {
    let root = host(name);
    let (code, out, err) = monitor(&["--host-root", root.to_str().unwrap(), "-o", "json"]);
    assert_eq!(code, 0, "{name}: {err}");
    let sample: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(sample["manufacturer"], manufacturer, "{sample}");
    let gpus = sample["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), count, "{sample}");
    let mut sampled: Vec<String> = gpus
        .iter()
        .filter_map(|g| g["uuid"].as_str().map(str::to_string))
        .collect();
    sampled.sort_unstable();
    assert_eq!(sampled, detected_uuids(&root), "{name}");
    sample
}

/// On a Hygon node `monitor` reads hy-smi's JSON query through Hygon's backend: every DCU, named
/// by its unique id exactly as `detect` names it, with utilisation, VRAM, power and temperature.
#[test]
fn a_hygon_node_is_sampled_with_hy_smi_named_as_detect_names_it() {
    let sample = sample_named_as_detected("hygon-4x-k100ai", "hygon", 4);
    assert!(
        sample["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("hy-smi --showid")),
        "{sample}"
    );
    let first = &sample["gpus"][0];
    assert_eq!(first["uuid"], "GPU-7137d9b2a08a4841");
    assert_eq!(first["utilizationPercent"], 0.0);
    assert_eq!(first["memoryUsedMib"], 2);
    assert_eq!(first["memoryTotalMib"], 65520);
    assert_eq!(first["powerDrawW"], 77.0);
    assert_eq!(first["temperatureC"], 37.0);
}

/// On an Ascend node `monitor` reads `npu-smi info`'s table, each chip named by its die id
/// through `-t board` exactly as `detect` names it: HBM on 910-class chips, DDR on 310P's two
/// chips per card (whose power prints `NA`), and the 950's own layout.
#[test]
fn an_ascend_node_is_sampled_with_npu_smi_named_by_die_id() {
    let sample = sample_named_as_detected("ascend-8x-910b2", "ascend", 8);
    assert_eq!(sample["source"], "npu-smi info");
    let first = &sample["gpus"][0];
    assert_eq!(
        first["uuid"],
        "E0F4EE64 802061B1 6A691492 89528485 104301E3"
    );
    assert_eq!(first["memoryUsedMib"], 3432);
    assert_eq!(first["memoryTotalMib"], 65536);
    assert_eq!(first["powerDrawW"], 101.3);
    assert_eq!(first["temperatureC"], 47.0);
    assert_eq!(first["utilizationPercent"], 0.0);

    let sample = sample_named_as_detected("ascend-310p-2chips-gapped", "ascend", 8);
    let first = &sample["gpus"][0];
    assert_eq!(first["memoryUsedMib"], 1848, "DDR is a 310P's memory");
    assert_eq!(first["memoryTotalMib"], 21525);
    assert_eq!(first["powerDrawW"], serde_json::Value::Null, "NA power");

    let sample = sample_named_as_detected("ascend-950pr-v2", "ascend", 2);
    assert_eq!(sample["gpus"][0]["memoryTotalMib"], 131072);
    assert_eq!(sample["gpus"][0]["powerDrawW"], 201.2);
}

/// On a MetaX node `monitor` reads mx-smi's table, named through `mx-smi -L`: both table
/// layouts (2.1.12 prints `Pwr:Usage/Cap`, 2.1.6 the draw alone).
#[test]
fn a_metax_node_is_sampled_with_mx_smi_in_both_layouts() {
    let sample = sample_named_as_detected("metax-8x-c500", "metax", 8);
    assert_eq!(sample["source"], "mx-smi");
    let first = &sample["gpus"][0];
    assert_eq!(first["utilizationPercent"], 0.0);
    assert_eq!(first["memoryUsedMib"], 826);
    assert_eq!(first["memoryTotalMib"], 65536);
    assert_eq!(first["temperatureC"], 35.0);
    assert_eq!(first["powerDrawW"], 54.0);
    assert_eq!(first["powerLimitW"], 350.0);

    let sample = sample_named_as_detected("metax-8x-c550", "metax", 8);
    let first = &sample["gpus"][0];
    assert_eq!(first["memoryUsedMib"], 810);
    assert_eq!(first["temperatureC"], 31.0);
    assert_eq!(first["powerDrawW"], 44.0);
    assert_eq!(
        first["powerLimitW"],
        serde_json::Value::Null,
        "2.1.6 prints no cap"
    );
}

/// On a Cambricon node `monitor` reads cnmon's table, named through `cnmon info`: 5.x (bus ids
/// in the table) and 4.x (none: joined by the card ordinal).
#[test]
fn a_cambricon_node_is_sampled_with_cnmon_in_both_generations() {
    let sample = sample_named_as_detected("cambricon-8x-mlu370-cnmon-v5", "cambricon", 8);
    assert_eq!(sample["source"], "cnmon");
    let first = &sample["gpus"][0];
    assert_eq!(first["utilizationPercent"], 0.0);
    assert_eq!(first["memoryUsedMib"], 0);
    assert_eq!(first["memoryTotalMib"], 23308);
    assert_eq!(first["temperatureC"], 30.0);
    assert_eq!(first["powerDrawW"], 27.0);
    assert_eq!(first["powerLimitW"], 150.0);

    let sample = sample_named_as_detected("cambricon-3x-mlu370-cnmon-v4", "cambricon", 3);
    let temperatures: Vec<f64> = sample["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["temperatureC"].as_f64())
        .collect();
    assert_eq!(temperatures, [32.0, 33.0, 30.0]);
}

#[test]
fn a_host_without_nvidia_smi_and_a_bad_period_are_one_clear_line() {
    let root = host("no-driver");
    let (code, out, err) = monitor(&["--host-root", root.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        err.trim(),
        "device-manager: monitor: nvml: nvidia-smi not found (no NVIDIA driver on this host)"
    );
    let (code, _, err) = monitor(&["--monitor-period", "fast"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("\"fast\" is not a period") && err.contains("--monitor-period"),
        "{err}"
    );
}

/// The PROCS cell of each accelerator's line of `monitor`'s table (its last column).
fn procs_column(out: &str) -> Vec<String> {
    out.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect()
}

/// `monitor` on a recorded host as a table and as JSON: each accelerator's compute processes as
/// the PROCS column prints them and as `computeProcesses` holds them, in the tool's order.
fn processes(name: &str) -> (Vec<String>, Vec<serde_json::Value>) {
    let root = host(name);
    let (code, out, err) = monitor(&["--host-root", root.to_str().unwrap()]);
    assert_eq!(code, 0, "{name}: {err}");
    let column = procs_column(&out);
    let (code, json, err) = monitor(&["--host-root", root.to_str().unwrap(), "-o", "json"]);
    assert_eq!(code, 0, "{name}: {err}");
    let sample: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    let counts = sample["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["computeProcesses"].clone())
        .collect();
    (column, counts)
}

/// Issue 44 item 8: ixsmi's default table ends with a `Processes:` table like nvidia-smi's, read
/// from the output the sampler already takes; every recorded host's says `No running processes
/// found`, which is 0 on each GPU — a reading, as NVIDIA's idle GPUs show it, not `-`.
#[test]
fn an_iluvatar_node_reports_the_processes_of_ixsmis_table() {
    sample_named_as_detected("iluvatar-16x-bi-v150", "iluvatar", 16);
    let (column, counts) = processes("iluvatar-16x-bi-v150");
    assert_eq!(column, vec!["0"; 16]);
    assert_eq!(counts, vec![serde_json::json!(0); 16]);
    let (column, counts) = processes("iluvatar-bi-v100-ixml3");
    assert_eq!(
        (column, counts),
        (vec!["0".into()], vec![serde_json::json!(0)])
    );
}

/// Issue 44 item 8: cnmon's `Processes:` table, in both generations (`VF` on 4.x, `MI` on 5.x):
/// idle on every recorded host, 0 on each card.
#[test]
fn a_cambricon_node_reports_the_processes_of_cnmons_table() {
    for (name, cards) in [
        ("cambricon-8x-mlu370-cnmon-v5", 8),
        ("cambricon-3x-mlu370-cnmon-v4", 3),
    ] {
        let (column, counts) = processes(name);
        assert_eq!(column, vec!["0"; cards], "{name}");
        assert_eq!(counts, vec![serde_json::json!(0); cards], "{name}");
    }
}

/// Issue 44 item 8: mx-smi's `Process:` table (`no process found` on the 2.1.6 host: 0 on each
/// GPU); the 2.1.12 host's capture ends before any process table, so its counts stay unknown
/// (`-`), never a 0 that reads as a fact.
#[test]
fn a_metax_node_reports_the_processes_of_mx_smis_table_where_it_prints_one() {
    let (column, counts) = processes("metax-8x-c550");
    assert_eq!(column, vec!["0"; 8]);
    assert_eq!(counts, vec![serde_json::json!(0); 8]);
    let (column, counts) = processes("metax-8x-c500");
    assert_eq!(column, vec!["-"; 8]);
    assert_eq!(counts, vec![serde_json::Value::Null; 8]);
}

/// Issue 44 item 8: `npu-smi info`'s process section (HAZARDS 9), joined to each chip by NPU ID
/// and chip: the 24.1.RC2 host lists four processes on each of its eight NPUs; the 910B2 host's
/// table prints no section, so its counts stay unknown.
#[test]
fn an_ascend_node_reports_the_processes_of_npu_smi_infos_section() {
    let sample = sample_named_as_detected("ascend-8x-910a-npu-smi24", "ascend", 8);
    assert_eq!(sample["gpus"][3]["index"], 3);
    let (column, counts) = processes("ascend-8x-910a-npu-smi24");
    assert_eq!(column, vec!["4"; 8]);
    assert_eq!(counts, vec![serde_json::json!(4); 8]);
    let (column, counts) = processes("ascend-8x-910b2");
    assert_eq!(column, vec!["-"; 8]);
    assert_eq!(counts, vec![serde_json::Value::Null; 8]);
}

/// One recorded host of each manufacturer, with its usage recorded.
const EVERY_MANUFACTURER: [(&str, &str); 9] = [
    ("nvidia", "hgx-h100-8gpu"),
    ("amd", "amd-8x-mi300x"),
    ("ascend", "ascend-8x-910b2"),
    ("cambricon", "cambricon-8x-mlu370-cnmon-v5"),
    ("hygon", "hygon-4x-k100ai"),
    ("iluvatar", "iluvatar-16x-bi-v150"),
    ("metax", "metax-8x-c500"),
    ("mthreads", "mthreads-8x-s4000"),
    ("thead", "thead-16x-zw810e"),
];

/// `detect`'s index of each UUID on a recorded host.
fn detected_indexes(root: &Path) -> std::collections::BTreeMap<String, u64> {
    let o = Command::new(env!("CARGO_BIN_EXE_device-manager"))
        .args([
            "detect",
            "-o",
            "json",
            "--host-root",
            root.to_str().unwrap(),
        ])
        .env_remove("HOST_ROOT")
        .output()
        .unwrap();
    let detected: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    detected["manufacturers"][0]["accelerators"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| Some((a["uuid"].as_str()?.to_string(), a["index"].as_u64()?)))
        .collect()
}

/// A ledger journal as the daemon writes it: one grant line per (pod UID, container, family,
/// resource, device IDs, accelerator indexes, units, cores percentage).
type Line<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a [&'a str],
    &'a [u64],
    u64,
    Option<u32>,
);

fn write_journal(dir: &Path, lines: &[Line<'_>]) {
    let mut text = String::new();
    for (uid, container, family, resource, ids, on, units, cores) in lines {
        let mut grant = serde_json::json!({
            "family": family,
            "resource": resource,
            "deviceIds": ids,
            "accelerators": on,
            "units": units,
        });
        if let Some(cores) = cores {
            grant["coresPercentage"] = serde_json::json!(cores);
        }
        let entry = serde_json::json!({
            "op": "grant",
            "key": {"podUid": uid, "container": container},
            "grant": grant,
        });
        text.push_str(&format!("{entry}\n"));
    }
    std::fs::write(dir.join("ledger.journal"), text).unwrap();
}

/// Issue 47 item 5, on a recorded host of each of the nine manufacturers: with the daemon's
/// ledger readable, each accelerator's line ends with its holders' family and holders (the Pod
/// UID when the kubelet cannot be asked), placed by the UUID detection gives the ledger's index;
/// the JSON lists them under the accelerator; a free one shows `-` and an empty list.
#[test]
fn every_manufacturers_accelerators_show_their_holders_beside_their_usage() {
    for (m, name) in EVERY_MANUFACTURER {
        let root = host(name);
        let root_text = root.to_str().unwrap();
        let indexes = detected_indexes(&root);
        let (code, out, err) =
            monitor(&["--host-root", root_text, "--manufacturer", m, "-o", "json"]);
        assert_eq!(code, 0, "{name}: {err}");
        let sample: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let sampled: Vec<String> = sample["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["uuid"].as_str().unwrap().to_string())
            .collect();
        assert!(
            sample["gpus"][0].get("holders").is_none(),
            "{name}: no ledger, no holders"
        );
        // The whole first card to one container; a share of the last sampled one to another.
        let first = &sampled[0];
        let last = sampled.last().unwrap();
        let (a, b) = (indexes[first], indexes[last]);
        let data = tempfile::tempdir().unwrap();
        let manufacturer: accel_core::Manufacturer = m.parse().unwrap();
        let base = accel_core::manufacturer::ManufacturerTable::default()
            .get(manufacturer)
            .resource_base
            .clone();
        let shared = format!("{base}.shared");
        let whole = [first.as_str()];
        let share_id = format!("{last}::0");
        let share = [share_id.as_str()];
        let mut journal: Vec<Line<'_>> = vec![(
            "uid-a",
            "main",
            "exclusive",
            &base,
            &whole,
            std::slice::from_ref(&a),
            1_600_000,
            None,
        )];
        if last != first {
            journal.push((
                "uid-b",
                "web",
                "shared",
                &shared,
                &share,
                std::slice::from_ref(&b),
                160_000,
                None,
            ));
        }
        write_journal(data.path(), &journal);
        let ledger = [
            "--host-root",
            root_text,
            "--manufacturer",
            m,
            "--data-dir",
            data.path().to_str().unwrap(),
            "--kubelet-dir",
            data.path().to_str().unwrap(),
        ];
        let (code, out, err) = monitor(&ledger);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(
            err.contains("did not answer: holders are named by Pod UID"),
            "{name}: {err}"
        );
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].ends_with("FAMILY     HOLDER"),
            "{name}: {}",
            lines[0]
        );
        assert_eq!(lines.len(), sampled.len() + 1, "{name}:\n{out}");
        for (uuid, line) in sampled.iter().zip(&lines[1..]) {
            assert!(line.starts_with(uuid.as_str()), "{name}: {line}");
            let want = if uuid == first {
                "exclusive  pod uid-a container main"
            } else if uuid == last {
                "shared     pod uid-b container web"
            } else {
                "-          -"
            };
            assert!(
                line.ends_with(want),
                "{name}: {line:?} should end with {want:?}"
            );
        }
        let (code, out, err) = monitor(&[&ledger[..], &["-o", "json"]].concat());
        assert_eq!(code, 0, "{name}: {err}");
        let sample: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let gpus = sample["gpus"].as_array().unwrap();
        assert_eq!(
            gpus[0]["holders"],
            serde_json::json!([{
                "namespace": null, "pod": null, "container": "main", "podUid": "uid-a",
                "family": "exclusive", "resource": base, "memoryMiB": null,
                "coresPercentage": null, "profile": null,
            }]),
            "{name}"
        );
        let free = gpus
            .iter()
            .filter(|g| g["holders"] == serde_json::json!([]))
            .count();
        assert_eq!(free, sampled.len() - journal.len(), "{name}");
    }
}

/// A kubelet's pod-resources that answers List with one fixed answer.
struct PodResources(accel_plugin::api::podresources::ListPodResourcesResponse);

#[tonic::async_trait]
impl accel_plugin::api::podresources::pod_resources_lister_server::PodResourcesLister
    for PodResources
{
    async fn list(
        &self,
        _: tonic::Request<accel_plugin::api::podresources::ListPodResourcesRequest>,
    ) -> Result<
        tonic::Response<accel_plugin::api::podresources::ListPodResourcesResponse>,
        tonic::Status,
    > {
        Ok(tonic::Response::new(self.0.clone()))
    }

    async fn get_allocatable_resources(
        &self,
        _: tonic::Request<accel_plugin::api::podresources::AllocatableResourcesRequest>,
    ) -> Result<
        tonic::Response<accel_plugin::api::podresources::AllocatableResourcesResponse>,
        tonic::Status,
    > {
        Err(tonic::Status::unimplemented("List only"))
    }

    async fn get(
        &self,
        _: tonic::Request<accel_plugin::api::podresources::GetPodResourcesRequest>,
    ) -> Result<
        tonic::Response<accel_plugin::api::podresources::GetPodResourcesResponse>,
        tonic::Status,
    > {
        Err(tonic::Status::unimplemented("List only"))
    }
}

/// Issue 47 item 5: the kubelet's pod-resources names each holder `namespace/pod/container`, by
/// the resource and device IDs the kubelet handed it (a slice with its budget, and a grant the
/// daemon answered before it knew its container).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_names_each_holder_namespace_pod_container() {
    use accel_plugin::api::podresources as pr;
    let root = host("hgx-h100-8gpu");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let gpu1 = "GPU-7e7d2a20-56b8-3220-e75c-1f3185864bda";
    write_journal(
        &data,
        &[
            (
                "",
                "nvidia.com/gpu=GPU-63d1e50a-b952-d15c-0740-12bc14859142",
                "exclusive",
                "nvidia.com/gpu",
                &[GPU0],
                &[0],
                1_600_000,
                None,
            ),
            (
                "uid-s",
                "infer",
                "sliced",
                "nvidia.com/gpu.sliced",
                &["GPU-7e7d2a20-56b8-3220-e75c-1f3185864bda::7"],
                &[1],
                400_000,
                Some(50),
            ),
        ],
    );
    let devices = |resource: &str, id: &str| pr::ContainerDevices {
        resource_name: resource.into(),
        device_ids: vec![id.into()],
        ..Default::default()
    };
    let answer = pr::ListPodResourcesResponse {
        pod_resources: vec![
            pr::PodResources {
                name: "trainer".into(),
                namespace: "team-a".into(),
                containers: vec![pr::ContainerResources {
                    name: "main".into(),
                    devices: vec![devices("nvidia.com/gpu", GPU0)],
                    ..Default::default()
                }],
            },
            pr::PodResources {
                name: "chat".into(),
                namespace: "team-b".into(),
                containers: vec![pr::ContainerResources {
                    name: "infer".into(),
                    devices: vec![devices(
                        "nvidia.com/gpu.sliced",
                        "GPU-7e7d2a20-56b8-3220-e75c-1f3185864bda::7",
                    )],
                    ..Default::default()
                }],
            },
        ],
    };
    let socket_dir = dir.path().join("kubelet/pod-resources");
    std::fs::create_dir_all(&socket_dir).unwrap();
    let listener = tokio::net::UnixListener::bind(socket_dir.join("kubelet.sock")).unwrap();
    let incoming = async_stream::stream! {
        loop {
            yield listener.accept().await.map(|(stream, _)| stream);
        }
    };
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(
                pr::pod_resources_lister_server::PodResourcesListerServer::new(PodResources(
                    answer,
                )),
            )
            .serve_with_incoming(incoming),
    );
    let args = [
        "--host-root".to_string(),
        root.display().to_string(),
        "--manufacturer".into(),
        "nvidia".into(),
        "--data-dir".into(),
        data.display().to_string(),
        "--kubelet-dir".into(),
        dir.path().join("kubelet").display().to_string(),
    ];
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        monitor(&args)
    })
    .await
    .unwrap();
    server.abort();
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "the kubelet answered: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[1].starts_with(GPU0) && lines[1].ends_with("exclusive  team-a/trainer/main"),
        "{out}"
    );
    assert!(
        lines[2].starts_with(gpu1)
            && lines[2].ends_with("sliced     team-b/chat/infer (20389 MiB, 50 % cores)"),
        "{out}"
    );
}

/// A journal that does not read is one line on stderr, and the usage is still printed.
#[test]
fn a_journal_that_does_not_read_is_one_line_and_the_usage_still_prints() {
    let root = host("hgx-h100-8gpu");
    let data = tempfile::tempdir().unwrap();
    std::fs::write(
        data.path().join("ledger.journal"),
        "{\"op\":\"grant\"}\nnot json\n",
    )
    .unwrap();
    let (code, out, err) = monitor(&[
        "--host-root",
        root.to_str().unwrap(),
        "--manufacturer",
        "nvidia",
        "--data-dir",
        data.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 9, "{out}");
    assert!(!out.contains("HOLDER"), "{out}");
    let journal = data.path().join("ledger.journal");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "device-manager: monitor: {}: the ledger journal does not read (line 1: ",
            journal.display()
        )) && err.trim_end().ends_with("; holders are not shown"),
        "{err}"
    );
    // --data-dir is one manufacturer's: without --manufacturer it is refused.
    let (code, _, err) = monitor(&["--host-root", root.to_str().unwrap(), "--data-dir", "/tmp"]);
    assert_eq!(code, 2);
    assert!(err.contains("--manufacturer"), "{err}");
}
