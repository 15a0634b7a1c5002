//! `device-manager doctor`: one pass over what this node needs, each check `ok`, `warn` or
//! `fail` with a reason and what to do; `--gpus` adds the per-GPU diagnosis. Exit 1 when any
//! check fails, 0 otherwise (warnings included), 2 when the host cannot be opened.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use accel_backend::respond::{EngineFacts, InjectionStrategy};
use accel_core::Manufacturer;
use accel_nvidia::detector::Deadlines;
use accel_nvidia::doctor::{self, Check, Options, Report, Status};
use accel_nvidia::engine::engine_facts_in;
use accel_plugin::settings::NVIDIA_INJECTION_STRATEGY_ENV;

use super::Format;
use crate::node::Node;
use crate::settings::Settings;

/// Arguments of `doctor`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's root, or a recorded host folder (one carrying recorded-host.json).
    #[arg(long, env = "HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// The kubelet's directory (its sockets are device-plugins/ and pod-resources/kubelet.sock).
    #[arg(long, env = "KUBELET_DIR", default_value = "/var/lib/kubelet")]
    pub kubelet_dir: String,
    /// The host directory the preload (slicing) libraries are staged in, as `serve` reads it
    /// (default `<GPUSTACK_DATA_DIR>/operator/lib`).
    #[arg(long, env = "LIBRARY_DIR")]
    pub library_dir: Option<String>,
    /// The kernel log, as `serve` reads it (default: `<host-root>/dev/kmsg`).
    #[arg(long, env = "KMSG_PATH")]
    pub kmsg_path: Option<PathBuf>,
    /// Seconds each nvidia-smi query may take (the whole snapshot gets twice this).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub nvidia_smi_timeout: u64,
    /// Diagnose these GPUs one by one (UUIDs; none: every GPU nvidia-smi lists).
    #[arg(long, num_args = 0.., value_name = "UUID")]
    pub gpus: Option<Vec<String>>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
    /// The manufacturer whose needs are checked (default: AMD on a host that shows an AMD
    /// driver or AMD accelerator and no NVIDIA one, NVIDIA otherwise).
    #[arg(long, env = "MANUFACTURER")]
    pub manufacturer: Option<Manufacturer>,
}

/// The manufacturer doctor checks when none is named: AMD where the host shows AMD's KFD
/// topology or an AMD function on the PCI bus and neither NVIDIA's driver nor an NVIDIA
/// function; NVIDIA otherwise (its checks explain a host with nothing).
fn chosen(node: &Node) -> Manufacturer {
    let host = node.host.as_ref();
    let on_bus = |m: Manufacturer| {
        accel_host::pci::scan_pci(host, &accel_host::pci::PciClassPrefixes::default())
            .map(|scan| {
                scan.functions.iter().any(|f| {
                    node.table
                        .get(m)
                        .pci_vendor_ids
                        .iter()
                        .any(|id| id.vendor == f.vendor_id)
                })
            })
            .unwrap_or(false)
    };
    let amd = host.exists(accel_amd::kfd::TOPOLOGY_DIR) || on_bus(Manufacturer::Amd);
    let nvidia = host.exists("/proc/driver/nvidia") || on_bus(Manufacturer::Nvidia);
    if amd && !nvidia {
        Manufacturer::Amd
    } else {
        Manufacturer::Nvidia
    }
}

/// AMD's checks as a report (accel-amd's doctor).
fn amd_report(node: &Node, args: &Args, library_dir: &str) -> Report {
    let checks: Vec<Check> = accel_amd::doctor::run(
        node.host.as_ref(),
        node.commands.as_ref(),
        Duration::from_secs(args.nvidia_smi_timeout),
        &format!("/{library_dir}"),
        std::env::consts::ARCH,
    )
    .into_iter()
    .map(|c| Check {
        name: c.name.to_string(),
        status: match c.verdict {
            accel_amd::doctor::Verdict::Ok => Status::Ok,
            accel_amd::doctor::Verdict::Warn => Status::Warn,
            accel_amd::doctor::Verdict::Fail => Status::Fail,
        },
        reason: c.reason,
        action: c.action,
    })
    .collect();
    let passed = checks.iter().all(|c| c.status != Status::Fail);
    Report {
        checks,
        gpus: Vec::new(),
        passed,
    }
}

pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut node = Node::open(&args.host_root)?;
    node.table = settings.manufacturers.clone();
    let manufacturer = args.manufacturer.unwrap_or_else(|| chosen(&node));
    if manufacturer != Manufacturer::Nvidia && manufacturer != Manufacturer::Amd {
        anyhow::bail!("doctor: no checks for {manufacturer} yet (this build checks nvidia, amd)");
    }
    let options = Options {
        deadlines: Deadlines {
            per_query: Duration::from_secs(args.nvidia_smi_timeout),
            snapshot: Duration::from_secs(args.nvidia_smi_timeout * 2),
        },
        kubelet_dir: args.kubelet_dir.clone(),
        library_dir: args
            .library_dir
            .clone()
            .unwrap_or_else(|| settings.library_dir().display().to_string())
            .trim_start_matches('/')
            .to_string(),
        kmsg: args.kmsg_path.clone(),
        gpus: args.gpus.clone(),
    };
    let mut report = if manufacturer == Manufacturer::Amd {
        amd_report(&node, &args, &options.library_dir)
    } else {
        let mut report = doctor::run(node.host.as_ref(), node.commands.as_ref(), &options);
        let engine = engine_facts_in(node.host.as_ref(), &settings.containerd_config_dir);
        report
            .checks
            .push(injection_check(settings.plugin.nvidia_injection, &engine));
        report
    };
    report.passed = report.passed && report.checks.iter().all(|c| c.status != Status::Fail);
    match args.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Table => print!("{}", table(&report)),
    }
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Whether the configured injection strategy can hand a GPU to a container on this engine
/// (DESIGN.md, "CDI": the `envvar` channel grants nothing without the vendor runtime in the
/// Pod's path; the CDI channel needs an engine that resolves CDI and a vendor spec naming GPUs).
fn injection_check(strategy: InjectionStrategy, engine: &EngineFacts) -> Check {
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
                "set {NVIDIA_INJECTION_STRATEGY_ENV}=auto (or cdi-annotations), or make NVIDIA's runtime the default"
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

fn table(report: &Report) -> String {
    let mut out = String::new();
    let width = report
        .checks
        .iter()
        .chain(report.gpus.iter().flat_map(|g| &g.checks))
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0);
    let line = |out: &mut String, indent: &str, check: &Check| {
        let _ = writeln!(
            out,
            "{indent}{:<4}  {:<width$}  {}",
            check.status.to_string(),
            check.name,
            check.reason
        );
        if let Some(action) = &check.action {
            let _ = writeln!(out, "{indent}{:<4}  {:<width$}  → {action}", "", "");
        }
    };
    for check in &report.checks {
        line(&mut out, "", check);
    }
    for gpu in &report.gpus {
        let index = gpu.index.map_or_else(|| "?".to_string(), |i| i.to_string());
        let verdict = if gpu.passed { "passed" } else { "FAILED" };
        let _ = writeln!(out, "\nGPU {index} {}: {verdict}", gpu.uuid);
        for check in &gpu.checks {
            line(&mut out, "  ", check);
        }
    }
    let _ = writeln!(
        out,
        "\n{}",
        if report.passed {
            "doctor: no check failed"
        } else {
            "doctor: some checks failed"
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
