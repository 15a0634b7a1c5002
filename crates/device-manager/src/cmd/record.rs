//! `device-manager record DIR`: captures this node into the recorded-host format (DESIGN.md,
//! "A recorded host"), so a host that misbehaves can be sent in and become a test.
//!
//! The folder carries the mark that makes it a recording (`recorded-host.json`): without it,
//! `--host-root DIR` reads DIR as a live root.
//!
//! It copies what the detectors read (procfs, the PCI functions in sysfs, `/dev` markers, CDI
//! specs, the boot id) and records every vendor command they run, each with its deadline; a
//! program that hangs is recorded as a hang.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use accel_host::record::{CommandRecord, Recorder};
use accel_host::{FsHost, Host, Mark, SystemCommands};
use accel_nvidia::detector;
use anyhow::Context;

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

/// Files copied one by one (absent ones are noted, not errors).
const FILES: &[&str] = &[
    "proc/driver/nvidia/version",
    "proc/sys/kernel/random/boot_id",
];

/// Trees copied whole (links kept as links).
const TREES: &[&str] = &[
    "proc/driver/nvidia/gpus",
    "proc/driver/nvidia/capabilities",
    "sys/bus/pci/devices",
    "etc/cdi",
    "var/run/cdi",
];

/// Device nodes recorded as empty marker files.
const DEVICE_MARKERS: &[&str] = &[
    "dev/nvidiactl",
    "dev/nvidia-uvm",
    "dev/nvidia-uvm-tools",
    "dev/nvidia-modeset",
    "dev/dxg",
];

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
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
    for file in FILES {
        recorder.copy_file(&host, file)?;
    }
    for tree in TREES {
        recorder.copy_tree(&host, tree)?;
    }
    for marker in DEVICE_MARKERS {
        recorder.mark_if_present(&host, marker)?;
    }
    for name in host.list("dev").unwrap_or_default() {
        let numbered = name
            .strip_prefix("nvidia")
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if numbered {
            recorder.mark_if_present(&host, &format!("dev/{name}"))?;
        }
    }

    let commands = SystemCommands::new();
    let deadline = Duration::from_secs(args.command_timeout);
    for argv in detector::SNAPSHOT_QUERIES
        .iter()
        .chain(detector::SAMPLE_QUERIES)
        .chain(detector::DOCTOR_QUERIES)
    {
        let name = command_name(argv);
        match recorder.record_command(&commands, &name, argv, deadline)? {
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
                eprintln!("{}: not installed", argv[0]);
                break;
            }
            CommandRecord::Failed { message } => eprintln!("{}: {message}", argv.join(" ")),
        }
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
