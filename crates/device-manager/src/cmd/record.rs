//! `device-manager record DIR`: captures this node into the recorded-host format (DESIGN.md,
//! "A recorded host"), so a host that misbehaves can be sent in and become a test.
//!
//! The folder carries the mark that makes it a recording (`recorded-host.json`): without it,
//! `--host-root DIR` reads DIR as a live root.
//!
//! It copies what every host needs (the boot id, the PCI functions in sysfs, the CDI specs, the
//! network interfaces and RDMA devices with the verbs nodes),
//! then for each manufacturer of this build what its backend lists (`RecordPlan`: its driver's
//! files and trees, its device nodes as markers, every command its detector, sampler and doctor
//! run), each command with its deadline; a program that hangs is recorded as a hang, one that
//! is not installed is recorded as nothing (so the replay finds it missing too).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use accel_backend::record::RecordPlan;
use accel_host::record::{CommandRecord, Recorder};
use accel_host::{FsHost, Host, HostTools, Mark};
use anyhow::Context;

use crate::settings::Settings;

/// Arguments of `record`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The folder to write (must be absent or empty).
    pub dir: PathBuf,
    /// The node's root to read (default `/`; `/host` in a container that mounts it).
    #[arg(long, env = "HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// Seconds each vendor command may take before it is recorded as a hang.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub command_timeout: u64,
}

/// What every host's recording holds, whatever its manufacturers: files copied one by one.
const FILES: &[&str] = &["proc/sys/kernel/random/boot_id"];

/// Trees every host's recording holds (links kept as links): the PCI functions, the CDI specs,
/// and the node's network as the interface inventory reads it (each `class/net` and
/// `class/infiniband` entry with the device directory it points at, the verbs index).
const TREES: &[&str] = &[
    "sys/bus/pci/devices",
    "etc/cdi",
    "var/run/cdi",
    "sys/class/net",
    "sys/class/infiniband",
    "sys/class/infiniband_verbs",
];

/// Device nodes every host's recording marks where present: the RDMA connection manager, and
/// (numbered) each verbs node the RDMA plugin grants.
const DEVICE_NODES: &[&str] = &["dev/infiniband/rdma_cm"];
const NUMBERED_DEVICES: &[&str] = &["infiniband/uverbs"];

pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let host = FsHost::new(&args.host_root);
    if !args.host_root.is_dir() {
        anyhow::bail!(
            "cannot read the host at {}: not a directory",
            args.host_root.display()
        );
    }
    let mark = Mark::new(
        Some(format!("device-manager {}", env!("CARGO_PKG_VERSION"))),
        Some(args.host_root.display().to_string()),
    );
    let mut recorder = Recorder::new(&args.dir, &mark)
        .with_context(|| format!("cannot record into {}", args.dir.display()))?;
    let plans: Vec<RecordPlan> = crate::backends::all()
        .into_iter()
        .map(|b| b.record)
        .collect();
    for file in FILES
        .iter()
        .copied()
        .chain(plans.iter().flat_map(|p| p.files.iter().copied()))
    {
        recorder.copy_file(&host, file)?;
    }
    for tree in TREES
        .iter()
        .copied()
        .chain(plans.iter().flat_map(|p| p.trees.iter().copied()))
    {
        recorder.copy_tree(&host, tree)?;
    }
    let markers = DEVICE_NODES
        .iter()
        .chain(plans.iter().flat_map(|p| p.device_nodes.iter()));
    for marker in markers {
        recorder.mark_if_present(&host, marker)?;
    }
    let prefixes = NUMBERED_DEVICES
        .iter()
        .chain(plans.iter().flat_map(|p| p.numbered_devices.iter()));
    for prefix in prefixes {
        for node in numbered_nodes(&host, prefix) {
            recorder.mark_if_present(&host, &node)?;
        }
    }

    // The tools as the daemon runs them: found under the host root, run inside it.
    let commands = HostTools::new(&args.host_root, settings.tool_places());
    let deadline = Duration::from_secs(args.command_timeout);
    let mut names = std::collections::BTreeSet::new();
    for plan in &plans {
        record_commands(&mut recorder, &commands, plan, deadline, &mut names)?;
    }
    for note in recorder.notes() {
        eprintln!("record: {note}");
    }
    println!(
        "recorded {} into {}",
        host.root().display(),
        args.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Records a plan's commands; a program found missing skips its remaining command lines.
fn record_commands(
    recorder: &mut Recorder,
    commands: &HostTools,
    plan: &RecordPlan,
    deadline: Duration,
    names: &mut std::collections::BTreeSet<String>,
) -> anyhow::Result<()> {
    let mut missing: Vec<&str> = Vec::new();
    for argv in &plan.commands {
        let Some(program) = argv.first() else {
            continue;
        };
        if missing.contains(program) {
            continue;
        }
        // Two tools may share a subcommand's name (`version`): the later one's folder then
        // carries its program too.
        let mut name = command_name(argv);
        if !names.insert(name.clone()) {
            name = format!("{}-{name}", command_name(&["", program]));
            names.insert(name.clone());
        }
        match recorder.record_command(commands, &name, argv, deadline)? {
            CommandRecord::Answered { status: Some(0) } => {}
            CommandRecord::Answered { status } => eprintln!(
                "{}: exited with status {}",
                argv.join(" "),
                status.map_or_else(|| "signal".to_string(), |s| s.to_string())
            ),
            CommandRecord::TimedOut => {
                eprintln!(
                    "{}: no answer within {deadline:?}, recorded as a hang",
                    argv.join(" ")
                )
            }
            CommandRecord::NotInstalled => {
                eprintln!("{program}: not installed");
                missing.push(program);
            }
            CommandRecord::Failed { message } => eprintln!("{}: {message}", argv.join(" ")),
        }
    }
    Ok(())
}

/// The device nodes `dev/<prefix><number>` on the host (`nvidia` → `dev/nvidia0`;
/// `dri/card` → `dev/dri/card1`), by name.
fn numbered_nodes(host: &dyn Host, prefix: &str) -> Vec<String> {
    let (dir, stem) = match prefix.rsplit_once('/') {
        Some((dir, stem)) => (format!("dev/{dir}"), stem),
        None => ("dev".to_string(), prefix),
    };
    host.list(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|name| {
            name.strip_prefix(stem)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
        .map(|name| format!("{dir}/{name}"))
        .collect()
}

/// A folder name for an argv: the arguments after the program, reduced to `[A-Za-z0-9-]`
/// (`nvidia-smi topo -m` → `topo-m`).
fn command_name(argv: &[&str]) -> String {
    let joined = argv[1..].join("-");
    let mut name = String::new();
    for c in joined.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '-' };
        if c == '-' && (name.is_empty() || name.ends_with('-')) {
            continue;
        }
        name.push(c);
    }
    let name: String = name.trim_end_matches('-').chars().take(80).collect();
    if name.is_empty() {
        "run".to_string()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_names_are_folder_names() {
        assert_eq!(command_name(&["nvidia-smi", "-q", "-x"]), "q-x");
        assert_eq!(command_name(&["nvidia-smi", "topo", "-m"]), "topo-m");
        assert_eq!(
            command_name(&[
                "nvidia-smi",
                "--query-gpu=uuid,compute_cap",
                "--format=csv,noheader"
            ]),
            "query-gpu-uuid-compute-cap-format-csv-noheader"
        );
        assert_eq!(command_name(&["nvidia-smi"]), "run");
    }
}
