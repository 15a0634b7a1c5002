//! `doctor`: one pass over what an NVIDIA node needs, each check `ok`, `warn` or `fail` with a
//! one-line reason and what to do (seed 002, "bcd doctor's GPU checks" and "diag.nvml").
//!
//! Host checks: nvidia-smi present and answering within its deadline (with a hint for the
//! failures seen on real hosts), driver and CUDA versions, persistence mode, `gpu-bus` (NVIDIA
//! display functions in sysfs against the GPUs nvidia-smi lists), `gpu-host` (a WSL 2
//! paravirtual GPU), `/dev/kmsg`, the kubelet's sockets, the CDI specs, the preload library
//! for the CUDA major, the NVML library's version (`nvidia-smi --version`), MIG GPU instances
//! subdivided into several compute instances (`mig-layout`), and the health sources: the
//! counters `-q -x` gave the health rule (`health-counters`: for how many GPUs the volatile ECC
//! counters and the row-remap state were read, which GPUs they take out of service — a warning,
//! the daemon already keeps them out) and the kernel log XIDs are read from (`kmsg`). Per-GPU
//! diagnosis (`--gpus`): every check of every listed GPU; a GPU
//! passes only when all its checks pass. This module reads the host through [`Host`] and
//! [`Commands`]; it changes nothing.

use std::collections::BTreeSet;
use std::time::Instant;

use accel_core::BusId;
use accel_core::health;
use accel_core::inventory::Accelerator;
use accel_host::pci::{PciClassPrefixes, scan_pci};
use accel_host::{Commands, Host, KMSG_PATH};

use accel_backend::respond::{EngineFacts, InjectionStrategy};

use crate::detector::{self, DXG_NODE, Deadlines, NVIDIACTL_NODE, Snapshot, SnapshotError};
use crate::procfs;

/// NVIDIA's PCI vendor id.
const NVIDIA_VENDOR: u16 = 0x10de;
pub use crate::cdi::{CDI_DIRS, CDI_KIND};
pub use accel_backend::doctor::{KUBELET_DIR, LIBRARY_DIR};

pub use accel_backend::doctor::{Check, GpuDiagnosis, Options, Report, Status};

/// Runs every check on the host.
pub fn run(host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
    let started = Instant::now();
    let snapshot = detector::snapshot(commands, options.deadlines);
    let took = started.elapsed();
    let bus = nvidia_display_functions(host);
    let paravirtual = detector::is_paravirtual(host);
    let driver_present = host.exists(procfs::DRIVER_DIR) || paravirtual;

    let mut checks = Vec::new();
    checks.push(smi_check(
        &snapshot,
        took,
        driver_present || !bus.is_empty(),
    ));
    let gpus: &[Accelerator] = match &snapshot {
        Ok(s) => &s.section.accelerators,
        Err(_) => &[],
    };
    let nvml = nvml_version(commands, options.deadlines);
    checks.push(versions_check(host, &snapshot, nvml.as_deref()));
    checks.push(mig_layout_check(&snapshot));
    checks.push(persistence_check(&snapshot));
    checks.push(health_counters_check(
        &snapshot,
        driver_present || !bus.is_empty(),
    ));
    checks.push(bus_check(&bus, &snapshot, paravirtual));
    checks.push(host_check(
        host,
        paravirtual,
        driver_present || !bus.is_empty(),
    ));
    checks.push(kmsg_check(host, options.kmsg.as_deref()));
    checks.extend(kubelet_checks(host, &options.kubelet_dir));
    checks.push(cdi_check(host, gpus));
    checks.push(preload_check(host, &snapshot, &options.library_dir));

    let diagnoses = match &options.gpus {
        None => Vec::new(),
        Some(wanted) => diagnose(wanted, &snapshot, &bus, paravirtual),
    };
    let passed =
        checks.iter().all(|c| c.status != Status::Fail) && diagnoses.iter().all(|g| g.passed);
    Report {
        checks,
        gpus: diagnoses,
        passed,
    }
}

/// A hint for the nvidia-smi failures seen on real hosts.
pub fn error_hint(text: &str) -> &'static str {
    let lower = text.to_lowercase();
    if lower.contains("couldn't communicate with the nvidia driver") {
        "the NVIDIA kernel module is not loaded: load it (modprobe nvidia) or reboot after the driver install"
    } else if lower.contains("driver/library version mismatch") {
        "the loaded kernel module is older than the user-space driver: reboot (or reload the nvidia modules) after the upgrade"
    } else if lower.contains("no devices were found") {
        "the driver sees no GPU: check that the GPU is on the bus (lspci) and not bound to vfio-pci"
    } else if lower.contains("insufficient permissions") {
        "run doctor as root (nvidia-smi needs access to /dev/nvidia*)"
    } else if lower.contains("gpu is lost") || lower.contains("unknown error") {
        "a GPU has fallen off the bus: check the kernel log (dmesg | device-manager xids), then reset the GPU or reboot"
    } else if lower.contains("no answer within") {
        "nvidia-smi hangs: a GPU or the driver is wedged; check the kernel log (dmesg | device-manager xids), then reset the GPU or reboot"
    } else {
        "run nvidia-smi -q by hand and check the kernel log (dmesg | device-manager xids)"
    }
}

fn smi_check(
    snapshot: &Result<Snapshot, SnapshotError>,
    took: std::time::Duration,
    gpu_expected: bool,
) -> Check {
    const NAME: &str = "nvidia-smi";
    match snapshot {
        Ok(s) => Check::ok(
            NAME,
            format!(
                "answered in {} ms, {} GPU(s)",
                took.as_millis(),
                s.section.accelerators.len()
            ),
        ),
        Err(SnapshotError::NotInstalled) if !gpu_expected => Check::warn(
            NAME,
            format!(
                "{}; no NVIDIA GPU on the bus either",
                detector::NO_NVIDIA_SMI
            ),
            "nothing to do on a node without NVIDIA GPUs",
        ),
        Err(SnapshotError::NotInstalled) => Check::fail(
            NAME,
            detector::NO_NVIDIA_SMI,
            "install the NVIDIA driver, or put nvidia-smi on the PATH (WSL 2: /usr/lib/wsl/lib)",
        ),
        Err(e) => {
            let text = e.to_string();
            let hint = error_hint(&text);
            Check::fail(NAME, text, hint)
        }
    }
}

/// The NVML library's version, from `nvidia-smi --version` (`None` when it does not answer).
fn nvml_version(commands: &dyn Commands, deadlines: Deadlines) -> Option<String> {
    commands
        .run(detector::QUERY_VERSION, deadlines.per_query)
        .ok()
        .filter(|out| out.success())
        .and_then(|out| detector::parse_nvml_version(&out.stdout_text()))
}

/// seed 002: only nvidia-smi fills the CUDA driver version, and without it `diag.nvml` fails its
/// `nvml.init` check; so a driver that reports no CUDA version fails here.
fn versions_check(
    host: &dyn Host,
    snapshot: &Result<Snapshot, SnapshotError>,
    nvml: Option<&str>,
) -> Check {
    const NAME: &str = "driver";
    let nvml = match nvml {
        Some(v) => format!("NVML {v}"),
        None => "NVML version unknown (nvidia-smi --version did not report it)".to_string(),
    };
    let procfs_version = host
        .read_to_string(procfs::VERSION_FILE)
        .ok()
        .and_then(|t| procfs::parse_driver_version(&t));
    let (driver, cuda) = match snapshot {
        Ok(s) => (
            s.section.driver_version.clone().or(procfs_version),
            s.section.cuda_version.clone(),
        ),
        Err(_) => (procfs_version, None),
    };
    match (driver, cuda) {
        (Some(d), Some(c)) => Check::ok(NAME, format!("driver {d}, CUDA {c}, {nvml}")),
        (Some(d), None) => Check::fail(
            NAME,
            format!("driver {d} reports no CUDA version (nvidia-smi did not report one), {nvml}"),
            "repair the driver install until nvidia-smi -q shows a CUDA Version: without it NVML cannot initialise and the CUDA version decides the preload library and slicing",
        ),
        (None, _) if snapshot.is_err() => Check::warn(
            NAME,
            "no driver version: neither procfs nor nvidia-smi reported one",
            "install or repair the NVIDIA driver if this node has NVIDIA GPUs",
        ),
        (None, Some(c)) => Check::warn(
            NAME,
            format!("driver version unknown, CUDA {c}, {nvml}"),
            "check /proc/driver/nvidia/version",
        ),
        (None, None) => Check::fail(
            NAME,
            format!(
                "the driver reports neither its version nor a CUDA version (nvidia-smi did not report one), {nvml}"
            ),
            "repair the driver install until nvidia-smi -q shows a CUDA Version: without it NVML cannot initialise",
        ),
    }
}

/// GPU instances subdivided into several compute instances: each MIG device the report lists
/// is one compute instance, named by its GPU instance id.
fn mig_layout_check(snapshot: &Result<Snapshot, SnapshotError>) -> Check {
    const NAME: &str = "mig-layout";
    let Ok(s) = snapshot else {
        return Check::warn(
            NAME,
            "not checked: nvidia-smi gave no report",
            "fix the nvidia-smi check first",
        );
    };
    let mut split = Vec::new();
    let mut instances = 0;
    for gpu in &s.section.accelerators {
        let mut per_gi: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
        for device in &gpu.mig_devices {
            if let Some(gi) = device.gpu_instance_id {
                per_gi
                    .entry(gi)
                    .or_default()
                    .extend(device.compute_instance_id);
            }
        }
        instances += per_gi.len();
        for (gi, cis) in per_gi.into_iter().filter(|(_, cis)| cis.len() > 1) {
            let cis: Vec<String> = cis.iter().map(u32::to_string).collect();
            split.push(format!(
                "GPU {} GPU instance {gi} is subdivided into {} compute instances ({}): serve never uses or destroys it, and reclaims nothing on GPU {} while it is",
                gpu.index,
                cis.len(),
                cis.join(", "),
                gpu.index
            ));
        }
    }
    if !split.is_empty() {
        return Check::warn(
            NAME,
            split.join("; "),
            "a compute instance shares its GPU instance's memory with the others: destroy the extra compute instances (nvidia-smi mig -dci) so each GPU instance holds one",
        );
    }
    if instances == 0 {
        Check::ok(NAME, "no MIG GPU instances")
    } else {
        Check::ok(
            NAME,
            format!("{instances} MIG GPU instance(s), each with one compute instance"),
        )
    }
}

fn persistence_check(snapshot: &Result<Snapshot, SnapshotError>) -> Check {
    const NAME: &str = "persistence";
    let Ok(s) = snapshot else {
        return Check::warn(
            NAME,
            "not checked: nvidia-smi gave no report",
            "fix the nvidia-smi check first",
        );
    };
    let off: Vec<String> = s
        .section
        .accelerators
        .iter()
        .filter(|a| a.persistence_mode == Some(false))
        .map(|a| a.index.to_string())
        .collect();
    if off.is_empty() {
        let known = s
            .section
            .accelerators
            .iter()
            .any(|a| a.persistence_mode.is_some());
        return Check::ok(
            NAME,
            if known {
                "on for every GPU"
            } else {
                "not applicable (the driver reports no persistence mode)"
            },
        );
    }
    Check::warn(
        NAME,
        format!("persistence mode off on GPU {}", off.join(", ")),
        "run nvidia-persistenced (or nvidia-smi -pm 1), so the driver stays initialised between jobs",
    )
}

/// `health-counters`: what `nvidia-smi -q -x` gave the health rule (seed 002, "Healthy"), GPU
/// by GPU: the volatile ECC counters (not printed where ECC is off or unsupported) and the
/// row-remap state (not printed before Ampere), and the GPUs they take out of service.
fn health_counters_check(snapshot: &Result<Snapshot, SnapshotError>, gpu_expected: bool) -> Check {
    const NAME: &str = "health-counters";
    if matches!(snapshot, Err(SnapshotError::NotInstalled)) && !gpu_expected {
        return Check::ok(NAME, "no NVIDIA GPU on this node: no counters to read");
    }
    let Ok(s) = snapshot else {
        return Check::warn(
            NAME,
            "not read: nvidia-smi -q -x gave no report, so the GPUs' ECC counters and row remaps are not seen",
            "fix the nvidia-smi check first",
        );
    };
    let gpus = &s.section.accelerators;
    let total = gpus.len();
    if total == 0 {
        return Check::ok(NAME, "no GPU to read ECC counters and row remaps for");
    }
    let ecc_read = gpus
        .iter()
        .filter(|a| {
            a.ecc
                .as_ref()
                .is_some_and(|e| e.volatile_uncorrected.is_some())
        })
        .count();
    let ecc_off = gpus
        .iter()
        .filter(|a| {
            a.ecc
                .as_ref()
                .is_some_and(|e| e.volatile_uncorrected.is_none())
        })
        .filter(|a| a.ecc.as_ref().and_then(|e| e.enabled) == Some(false))
        .count();
    let remap_read = gpus
        .iter()
        .filter(|a| {
            a.remapped_rows
                .as_ref()
                .is_some_and(|r| r.pending.is_some() || r.failure.is_some())
        })
        .count();
    let mut reason = format!(
        "nvidia-smi -q -x: volatile ECC counters read for {ecc_read} of {total} GPU(s), row-remap state for {remap_read} of {total}"
    );
    if ecc_off > 0 {
        reason.push_str(&format!("; ECC is off on {ecc_off} (nothing to count)"));
    }
    let ecc_none = total - ecc_read - ecc_off;
    if ecc_none > 0 {
        reason.push_str(&format!(
            "; {ecc_none} print(s) no ECC counter (N/A: the board or its driver has none)"
        ));
    }
    let out: Vec<String> = gpus
        .iter()
        .filter_map(|a| {
            let reasons = health::counter_reasons(a);
            let bus = a
                .bus_id
                .map_or_else(|| "no bus id".into(), |b| b.to_string());
            (!reasons.is_empty())
                .then(|| format!("GPU {} ({bus}): {}", a.index, reasons.join("; ")))
        })
        .collect();
    if out.is_empty() {
        Check::ok(NAME, format!("{reason}; none fails the health rule"))
    } else {
        Check::warn(
            NAME,
            format!("{reason}; out of service: {}", out.join(", ")),
            "drain those GPUs and reset them (device-manager reset GPU-…); replace one whose errors come back",
        )
    }
}

/// NVIDIA display functions (class 0x03xxxx) on the PCI bus, with their drivers.
fn nvidia_display_functions(host: &dyn Host) -> Vec<(BusId, Option<String>)> {
    let Ok(prefixes) = PciClassPrefixes::from_env_value("03") else {
        return Vec::new();
    };
    scan_pci(host, &prefixes)
        .map(|scan| {
            scan.functions
                .into_iter()
                .filter(|f| f.vendor_id == NVIDIA_VENDOR && f.class >> 16 == 0x03)
                .map(|f| (f.bus_id, f.driver))
                .collect()
        })
        .unwrap_or_default()
}

fn bus_check(
    bus: &[(BusId, Option<String>)],
    snapshot: &Result<Snapshot, SnapshotError>,
    paravirtual: bool,
) -> Check {
    const NAME: &str = "gpu-bus";
    let Ok(s) = snapshot else {
        return Check::warn(
            NAME,
            format!(
                "{} NVIDIA display function(s) on the bus; nvidia-smi gave no list to compare",
                bus.len()
            ),
            "fix the nvidia-smi check first",
        );
    };
    let listed: BTreeSet<BusId> = s
        .section
        .accelerators
        .iter()
        .filter_map(|a| a.bus_id)
        .collect();
    if bus.is_empty() && paravirtual {
        return Check::ok(
            NAME,
            format!(
                "paravirtual GPU: no PCI function to compare, nvidia-smi lists {}",
                listed.len()
            ),
        );
    }
    let passed_through: Vec<String> = bus
        .iter()
        .filter(|(_, d)| d.as_deref() == Some("vfio-pci"))
        .map(|(b, _)| b.sysfs())
        .collect();
    let missing: Vec<String> = bus
        .iter()
        .filter(|(b, d)| d.as_deref() != Some("vfio-pci") && !listed.contains(b))
        .map(|(b, _)| b.sysfs())
        .collect();
    let through = if passed_through.is_empty() {
        String::new()
    } else {
        format!(
            ", {} passed through to VMs ({})",
            passed_through.len(),
            passed_through.join(", ")
        )
    };
    if !missing.is_empty() {
        return Check::fail(
            NAME,
            format!(
                "{} on the bus but not listed by nvidia-smi{through}",
                missing.join(", ")
            ),
            "the driver did not initialise these GPUs: check the kernel log (dmesg | device-manager xids) and reset or reseat them",
        );
    }
    Check::ok(
        NAME,
        format!(
            "{} NVIDIA display function(s) on the bus, {} listed by nvidia-smi{through}",
            bus.len(),
            listed.len()
        ),
    )
}

fn host_check(host: &dyn Host, paravirtual: bool, gpu_expected: bool) -> Check {
    const NAME: &str = "gpu-host";
    if paravirtual {
        return Check::warn(
            NAME,
            "WSL 2 paravirtual GPU (/dev/dxg without /dev/nvidiactl)",
            "containers reach the GPU through /dev/dxg and /usr/lib/wsl/lib: every GPU is shared, none can be isolated",
        );
    }
    if host.exists(NVIDIACTL_NODE) {
        return Check::ok(NAME, "native driver (/dev/nvidiactl)");
    }
    if host.exists(DXG_NODE) {
        return Check::ok(NAME, "/dev/dxg and /dev/nvidiactl both present");
    }
    if gpu_expected {
        return Check::fail(
            NAME,
            "no /dev/nvidiactl: the NVIDIA device nodes are missing",
            "load the NVIDIA kernel module (nvidia-modprobe) or mount /dev into the container",
        );
    }
    Check::ok(NAME, "no NVIDIA device nodes (no NVIDIA GPU on this node)")
}

fn kmsg_check(host: &dyn Host, kmsg: Option<&std::path::Path>) -> Check {
    const NAME: &str = "kmsg";
    let (path, shown) = match kmsg {
        Some(path) => (path.to_path_buf(), path.display().to_string()),
        None => (host.root().join(KMSG_PATH), "/dev/kmsg".to_string()),
    };
    match std::fs::File::open(&path) {
        Ok(_) => Check::ok(NAME, format!("{shown} is readable: XIDs are watched")),
        Err(e) => Check::warn(
            NAME,
            format!("{shown}: {e}: XIDs cannot be watched"),
            "mount /dev/kmsg into the DaemonSet's container and give it CAP_SYSLOG (or run it privileged)",
        ),
    }
}

fn kubelet_checks(host: &dyn Host, kubelet_dir: &str) -> Vec<Check> {
    let dir = kubelet_dir.trim_start_matches('/').trim_end_matches('/');
    [
        ("kubelet-device-plugins", "device-plugins/kubelet.sock", "register the device plugin"),
        ("kubelet-pod-resources", "pod-resources/kubelet.sock", "identify containers at Allocate"),
    ]
    .into_iter()
    .map(|(name, socket, purpose)| {
        let path = format!("{dir}/{socket}");
        if host.exists(&path) {
            Check::ok(name, format!("/{path} present"))
        } else {
            Check::warn(
                name,
                format!("/{path} missing: cannot {purpose}"),
                "run on a Kubernetes node with the kubelet up, and mount its directory (--kubelet-dir) into the container",
            )
        }
    })
    .collect()
}

fn cdi_check(host: &dyn Host, gpus: &[Accelerator]) -> Check {
    const NAME: &str = "cdi";
    const GENERATE: &str = "generate it: nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml";
    let crate::cdi::VendorSpecs {
        specs,
        names,
        unreadable,
    } = crate::cdi::vendor_specs(host, &CDI_DIRS);
    let bad = if unreadable.is_empty() {
        String::new()
    } else {
        format!("; unreadable: {}", unreadable.join(", "))
    };
    if specs.is_empty() {
        return Check::warn(
            NAME,
            format!("no NVIDIA CDI spec in /etc/cdi or /var/run/cdi{bad}"),
            format!("needed when the toolkit runs in CDI mode; {GENERATE}"),
        );
    }
    let unnamed: Vec<String> = gpus
        .iter()
        .filter_map(|g| g.uuid.clone())
        .filter(|uuid| !names.contains(uuid))
        .collect();
    if !unnamed.is_empty() {
        return Check::warn(
            NAME,
            format!(
                "{} does not name {}{bad}",
                specs.join(", "),
                unnamed.join(", ")
            ),
            format!("the spec is stale; {GENERATE}"),
        );
    }
    let status = if unreadable.is_empty() {
        Status::Ok
    } else {
        Status::Warn
    };
    Check {
        name: NAME.to_string(),
        status,
        reason: format!(
            "{} names every GPU nvidia-smi lists ({}){bad}",
            specs.join(", "),
            gpus.len()
        ),
        action: (status == Status::Warn).then(|| "fix or remove the unreadable specs".to_string()),
    }
}

fn preload_check(
    host: &dyn Host,
    snapshot: &Result<Snapshot, SnapshotError>,
    library_dir: &str,
) -> Check {
    const NAME: &str = "preload";
    let major = snapshot
        .as_ref()
        .ok()
        .and_then(|s| s.section.cuda_version.as_deref())
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.trim().parse::<u32>().ok());
    let Some(major) = major else {
        return Check::warn(
            NAME,
            "CUDA major unknown: cannot tell which preload library slicing needs",
            "fix the nvidia-smi check first",
        );
    };
    let dir = format!("{}/cuda-{major}", library_dir.trim_matches('/'));
    match host.list(&dir) {
        Ok(files) if !files.is_empty() => {
            Check::ok(NAME, format!("/{dir} holds {}", files.join(", ")))
        }
        _ => Check::warn(
            NAME,
            format!("no preload library in /{dir}: logical slices are not offered"),
            format!(
                "stage the CUDA {major} preload library in /{dir} (the operator's install does)"
            ),
        ),
    }
}

/// seed 002's per-GPU diagnosis: listed by nvidia-smi, on the bus, counters clean,
/// persistence on.
fn diagnose(
    wanted: &[String],
    snapshot: &Result<Snapshot, SnapshotError>,
    bus: &[(BusId, Option<String>)],
    paravirtual: bool,
) -> Vec<GpuDiagnosis> {
    let gpus: &[Accelerator] = match snapshot {
        Ok(s) => &s.section.accelerators,
        Err(_) => &[],
    };
    let uuids: Vec<String> = if wanted.is_empty() {
        gpus.iter().filter_map(|g| g.uuid.clone()).collect()
    } else {
        wanted.to_vec()
    };
    uuids
        .into_iter()
        .map(|uuid| {
            let Some(gpu) = gpus
                .iter()
                .find(|g| g.uuid.as_deref() == Some(uuid.as_str()))
            else {
                let check = match snapshot {
                    Ok(_) => Check::fail(
                        "listed",
                        "unknown GPU: nvidia-smi does not list it",
                        "check the UUID against nvidia-smi -L",
                    ),
                    Err(e) => Check::fail(
                        "listed",
                        format!("not checked: {e}"),
                        "fix the nvidia-smi check first",
                    ),
                };
                return GpuDiagnosis {
                    uuid,
                    index: None,
                    passed: false,
                    checks: vec![check],
                };
            };
            let mut checks = vec![Check::ok("listed", format!("GPU {}", gpu.index))];
            checks.push(match gpu.bus_id {
                Some(b) if bus.iter().any(|(f, _)| *f == b) => Check::ok("on-bus", b.sysfs()),
                _ if paravirtual => Check::ok("on-bus", "paravirtual GPU: no PCI function"),
                Some(b) => Check::fail(
                    "on-bus",
                    format!("{} not found among the PCI functions", b.sysfs()),
                    "check the PCI bus (lspci) and the kernel log",
                ),
                None => Check::fail(
                    "on-bus",
                    "nvidia-smi reports no bus id",
                    "check nvidia-smi -q",
                ),
            });
            let reasons = health::counter_reasons(gpu);
            checks.push(if reasons.is_empty() {
                Check::ok(
                    "health",
                    "no uncorrectable volatile ECC errors, no failed or pending row remap",
                )
            } else {
                Check::fail(
                    "health",
                    reasons.join("; "),
                    "drain the GPU and reset it (device-manager reset); replace it if it recurs",
                )
            });
            checks.push(match gpu.persistence_mode {
                Some(false) => Check::warn("persistence", "off", "nvidia-smi -i <uuid> -pm 1"),
                Some(true) => Check::ok("persistence", "on"),
                None => Check::ok("persistence", "not applicable"),
            });
            // seed 002: passed only if every check passed (a warning is not a failure).
            let passed = checks.iter().all(|c| c.status != Status::Fail);
            GpuDiagnosis {
                uuid,
                index: Some(gpu.index),
                passed,
                checks,
            }
        })
        .collect()
}

/// `GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY`, named in the injection check's advice.
pub const INJECTION_STRATEGY_ENV: &str = "GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY";

/// Whether the configured injection strategy can hand a GPU to a container on this engine
/// (DESIGN.md, "CDI": the `envvar` channel grants nothing without the vendor runtime in the
/// Pod's path; the CDI channel needs an engine that resolves CDI and a vendor spec naming GPUs).
pub fn injection_check(strategy: InjectionStrategy, engine: &EngineFacts) -> Check {
    const NAME: &str = "injection";
    let check = |status, reason: String, action: Option<&str>| Check {
        name: NAME.to_string(),
        status,
        reason,
        action: action.map(str::to_string),
    };
    let cdi_works = engine.cdi_enabled && !engine.cdi_devices.is_empty();
    let unreadable = "the container engine's configuration (containerd or CRI-O) could not be read";
    match strategy {
        InjectionStrategy::Envvar if engine.default_runtime_is_vendor => check(
            Status::Ok,
            "envvar: the engine's default runtime is NVIDIA's".into(),
            None,
        ),
        InjectionStrategy::Envvar if !engine.readable => check(
            Status::Warn,
            format!("envvar: {unreadable}, so whether NVIDIA's runtime applies it is unknown"),
            Some("make sure Pods run with NVIDIA's container runtime, or use auto"),
        ),
        InjectionStrategy::Envvar => check(
            Status::Warn,
            "envvar: the engine's default runtime is not NVIDIA's, so NVIDIA_VISIBLE_DEVICES grants nothing".into(),
            Some(&format!(
                "set {INJECTION_STRATEGY_ENV}=auto (or cdi-annotations), or make NVIDIA's runtime the default"
            )),
        ),
        InjectionStrategy::CdiAnnotations if cdi_works => check(
            Status::Ok,
            format!(
                "cdi-annotations: the engine resolves CDI and the vendor specs name {} devices",
                engine.cdi_devices.len()
            ),
            None,
        ),
        InjectionStrategy::CdiAnnotations => check(
            Status::Warn,
            if !engine.readable {
                format!("cdi-annotations: {unreadable}")
            } else if !engine.cdi_enabled {
                "cdi-annotations: the engine does not resolve CDI requests".into()
            } else {
                "cdi-annotations: no vendor CDI spec in the engine's spec directories names a GPU".into()
            },
            Some("enable CDI in the engine and generate NVIDIA's spec (nvidia-ctk cdi generate), or use auto"),
        ),
        InjectionStrategy::Auto if engine.default_runtime_is_vendor => check(
            Status::Ok,
            "auto: envvar, the engine's default runtime is NVIDIA's".into(),
            None,
        ),
        InjectionStrategy::Auto if engine.readable && cdi_works => check(
            Status::Ok,
            "auto: CDI annotations, the engine resolves CDI and the vendor specs name the GPUs".into(),
            None,
        ),
        InjectionStrategy::Auto => check(
            Status::Warn,
            "auto: falls back to envvar, and nothing shows NVIDIA's runtime in the Pods' path".into(),
            Some("install NVIDIA's container toolkit as the default runtime, or enable CDI with NVIDIA's spec"),
        ),
    }
}

/// NVIDIA's doctor behind the seam: [`run`], then the injection check for the configured
/// strategy against the container engine's configuration.
#[derive(Debug, Clone, Copy, Default)]
pub struct SmiDoctor;

impl accel_backend::doctor::Doctor for SmiDoctor {
    fn driver_shown(&self, host: &dyn Host) -> bool {
        host.exists(procfs::DRIVER_DIR)
    }

    fn run(&self, host: &dyn Host, commands: &dyn Commands, options: &Options) -> Report {
        let mut report = run(host, commands, options);
        let engine = crate::engine::engine_facts_in(host, &options.containerd_config_dir);
        let strategy = options.injection.unwrap_or_default();
        report.checks.push(injection_check(strategy, &engine));
        report.passed = report.passed && report.checks.iter().all(|c| c.status != Status::Fail);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enrich::SnapshotSection;
    use accel_core::inventory::{MigDevice, Source};

    fn report(driver: Option<&str>, cuda: Option<&str>, gpus: Vec<Accelerator>) -> Snapshot {
        Snapshot {
            section: SnapshotSection {
                driver_version: driver.map(str::to_string),
                cuda_version: cuda.map(str::to_string),
                nvml_version: None,
                accelerators: gpus,
            },
            notes: Vec::new(),
        }
    }

    #[test]
    fn a_driver_that_reports_no_cuda_version_fails_the_driver_check() {
        let dir = tempfile::tempdir().unwrap();
        let host = accel_host::FsHost::new(dir.path());
        let without = versions_check(&host, &Ok(report(Some("590.48.01"), None, vec![])), None);
        assert_eq!(without.status, Status::Fail, "{without:?}");
        assert!(
            without.reason.contains("reports no CUDA version"),
            "{}",
            without.reason
        );
        let neither = versions_check(&host, &Ok(report(None, None, vec![])), None);
        assert_eq!(neither.status, Status::Fail, "{neither:?}");
        let with = versions_check(
            &host,
            &Ok(report(Some("590.48.01"), Some("13.1"), vec![])),
            Some("590.48"),
        );
        assert_eq!(with.status, Status::Ok);
        assert_eq!(with.reason, "driver 590.48.01, CUDA 13.1, NVML 590.48");
    }

    #[test]
    fn the_nvml_version_is_read_from_nvidia_smi_version() {
        let text = "NVIDIA-SMI version  : 590.48.01\nNVML version        : 590.48\nDRIVER version      : 590.48.01\nCUDA Version        : 13.1\n";
        assert_eq!(
            detector::parse_nvml_version(text).as_deref(),
            Some("590.48")
        );
        assert_eq!(detector::parse_nvml_version("NVML version : N/A\n"), None);
        assert_eq!(detector::parse_nvml_version("garbage"), None);
    }

    #[test]
    fn a_gpu_instance_subdivided_into_several_compute_instances_is_reported() {
        let mig = |index, gi, ci| MigDevice {
            index,
            gpu_instance_id: Some(gi),
            compute_instance_id: Some(ci),
            uuid: None,
            profile: None,
            memory_mib: None,
            multiprocessors: None,
        };
        let mut gpu = Accelerator::new(0, Source::Driver);
        gpu.mig_devices = vec![mig(0, 1, 0), mig(1, 1, 1), mig(2, 2, 0)];
        let check = mig_layout_check(&Ok(report(
            Some("590.48.01"),
            Some("13.1"),
            vec![gpu.clone()],
        )));
        assert_eq!(check.status, Status::Warn, "{check:?}");
        assert_eq!(
            check.reason,
            "GPU 0 GPU instance 1 is subdivided into 2 compute instances (0, 1): serve never uses or destroys it, and reclaims nothing on GPU 0 while it is"
        );
        gpu.mig_devices = vec![mig(0, 1, 0), mig(1, 2, 0)];
        let check = mig_layout_check(&Ok(report(Some("590.48.01"), Some("13.1"), vec![gpu])));
        assert_eq!(check.status, Status::Ok, "{check:?}");
    }

    #[test]
    fn hints_for_the_failures_seen_on_real_hosts() {
        for (text, hint) in [
            (
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
                "modprobe nvidia",
            ),
            (
                "Failed to initialize NVML: Driver/library version mismatch",
                "reboot",
            ),
            ("No devices were found", "lspci"),
            (
                "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error",
                "fallen off the bus",
            ),
            ("nvidia-smi -q -x: no answer within 1s", "wedged"),
            (
                "Failed to initialize NVML: Insufficient Permissions",
                "root",
            ),
            ("something new", "nvidia-smi -q by hand"),
        ] {
            assert!(
                error_hint(text).contains(hint),
                "{text:?} -> {}",
                error_hint(text)
            );
        }
    }

    use accel_backend::respond::{EngineFacts, InjectionStrategy};

    fn engine(readable: bool, vendor: bool, cdi: bool, devices: &[&str]) -> EngineFacts {
        EngineFacts {
            readable,
            default_runtime_is_vendor: vendor,
            cdi_enabled: cdi,
            cdi_devices: devices.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn a_forced_strategy_that_cannot_work_warns() {
        let containerd_no_nvidia = engine(true, false, false, &[]);
        let c = injection_check(InjectionStrategy::Envvar, &containerd_no_nvidia);
        assert_eq!(c.status, Status::Warn);
        assert!(c.reason.contains("grants nothing"), "{}", c.reason);
        let c = injection_check(InjectionStrategy::CdiAnnotations, &containerd_no_nvidia);
        assert_eq!(c.status, Status::Warn);
        assert!(c.reason.contains("does not resolve CDI"), "{}", c.reason);
        let c = injection_check(InjectionStrategy::Auto, &containerd_no_nvidia);
        assert_eq!(c.status, Status::Warn);
    }

    #[test]
    fn a_workable_strategy_is_ok() {
        let nvidia = engine(true, true, false, &[]);
        assert_eq!(
            injection_check(InjectionStrategy::Envvar, &nvidia).status,
            Status::Ok
        );
        let cdi = engine(true, false, true, &["nvidia.com/gpu=GPU-a"]);
        assert_eq!(
            injection_check(InjectionStrategy::CdiAnnotations, &cdi).status,
            Status::Ok
        );
        let c = injection_check(InjectionStrategy::Auto, &cdi);
        assert_eq!(c.status, Status::Ok);
        assert!(c.reason.starts_with("auto: CDI"), "{}", c.reason);
        let stale = engine(true, false, true, &[]);
        assert_eq!(
            injection_check(InjectionStrategy::CdiAnnotations, &stale).status,
            Status::Warn
        );
    }
}
