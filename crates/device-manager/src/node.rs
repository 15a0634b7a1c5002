//! Opening the node the commands read: the live host, or a recorded host folder, and running
//! every manufacturer's detector over it into one inventory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use accel_core::inventory::{Detection, Inventory};
use accel_host::pci::{self, PciClassPrefixes};
use accel_host::{Commands, FsHost, Host, HostRoot, RecordedCommands, SystemCommands};
use accel_nvidia::detector::{self, Deadlines, DetectOptions};
use accel_nvidia::faults::{self, FaultRecord};
use accel_nvidia::passthrough::{self, GpuMemory, PciCandidate};
use accel_nvidia::xid::XidClasses;
use anyhow::{Context, bail};

pub use accel_host::pci::PCI_CLASS_PREFIXES_ENV;

/// The flags every command that reads the node shares.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// The node's root, or a recorded host folder (one carrying recorded-host.json).
    #[arg(long, env = "HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// The daemon's data directory: with it, GPUs passed through to VMs are listed (and
    /// remembered) too, and the faults recorded this boot show in each GPU's health.
    #[arg(long, env = "DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// PCI class prefixes the bus scan reads (comma-separated hex, default 02,03,0b,12).
    #[arg(long, env = PCI_CLASS_PREFIXES_ENV)]
    pub pci_class_prefixes: Option<String>,
    /// Seconds each nvidia-smi query may take (the whole snapshot gets twice this).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub nvidia_smi_timeout: u64,
}

impl NodeArgs {
    /// Opens the node and runs every detector over it.
    pub fn detect(&self) -> anyhow::Result<(Inventory, Vec<Detection>)> {
        let prefixes = class_prefixes(self.pci_class_prefixes.as_deref())?;
        let node = Node::open(&self.host_root)?;
        let deadlines = Deadlines {
            per_query: Duration::from_secs(self.nvidia_smi_timeout),
            snapshot: Duration::from_secs(self.nvidia_smi_timeout * 2),
        };
        node.detect(self.data_dir.as_deref(), &prefixes, deadlines)
    }
}

/// The host a command reads: its files and its programs.
pub struct Node {
    pub host: Box<dyn Host>,
    pub commands: Box<dyn Commands>,
    /// What `--host-root` named: a live root or a recording.
    pub kind: HostRoot,
}

impl Node {
    /// Opens `--host-root DIR`: a recorded host when DIR carries the recording mark
    /// (`recorded-host.json`, written by `record`), else a live root read with the real programs
    /// (`/` on the node itself, or `/host` in a container that mounts it). The folder's shape
    /// decides nothing: every Linux `/` holds `/root`.
    pub fn open(host_root: &Path) -> anyhow::Result<Node> {
        if !host_root.is_dir() {
            bail!(
                "cannot read the host at {}: not a directory",
                host_root.display()
            );
        }
        let kind = HostRoot::classify(host_root)?;
        if let Some(note) = kind.unmarked_recording_note() {
            tracing::warn!("{note}");
        }
        let host = FsHost::new(kind.files());
        let commands: Box<dyn Commands> = match &kind {
            HostRoot::Recorded { dir, .. } => Box::new(
                RecordedCommands::load(dir)
                    .with_context(|| format!("recorded host {}", dir.display()))?,
            ),
            HostRoot::Live { .. } => Box::new(SystemCommands::new()),
        };
        Ok(Node {
            host: Box::new(host),
            commands,
            kind,
        })
    }

    /// Whether this node is a recording (its programs replayed, not run).
    pub fn is_recorded(&self) -> bool {
        matches!(self.kind, HostRoot::Recorded { .. })
    }

    /// Runs every detector; today NVIDIA's. `data_dir` holds the passthrough memory: when given,
    /// GPUs passed through to VMs are listed and the memory is updated, and the faults the
    /// daemon recorded this boot show in each GPU's health.
    pub fn detect(
        &self,
        data_dir: Option<&Path>,
        prefixes: &PciClassPrefixes,
        deadlines: Deadlines,
    ) -> anyhow::Result<(Inventory, Vec<Detection>)> {
        let (mut inventory, detections) = self.collect(data_dir, prefixes, deadlines)?;
        if let Some(dir) = data_dir {
            apply_recorded_faults(self.host.as_ref(), dir, &mut inventory)?;
        }
        Ok((inventory, detections))
    }

    /// One collection pass, as [`Node::detect`] but without reading `faults.json`: the daemon
    /// holds the fault record itself and applies it.
    pub fn collect(
        &self,
        data_dir: Option<&Path>,
        prefixes: &PciClassPrefixes,
        deadlines: Deadlines,
    ) -> anyhow::Result<(Inventory, Vec<Detection>)> {
        let mut options = DetectOptions {
            deadlines,
            ..DetectOptions::default()
        };
        let memory_path = data_dir.map(|d| d.join(passthrough::FILE_NAME));
        if let Some(path) = &memory_path {
            options.memory = Some(load_memory(path)?);
            options.pci = pci_candidates(self.host.as_ref(), prefixes)?;
        }
        let outcome = detector::detect(self.host.as_ref(), self.commands.as_ref(), options);
        if let (Some(path), Some(memory)) = (&memory_path, &outcome.memory) {
            accel_host::atomic::write_atomic(path, memory.to_json().as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let mut inventory = Inventory::default();
        if let Ok(section) = &outcome.detection {
            if !section.accelerators.is_empty() {
                inventory.manufacturers.push(section.clone());
            }
        }
        inventory.canonicalize();
        Ok((inventory, vec![outcome.detection]))
    }
}

/// Shows the faults the daemon recorded this boot (`<data-dir>/faults.json`) in the inventory's
/// health, reading the file without changing it. A host without a boot id (a recorded host)
/// or a file from another boot shows none; an unreadable file is a warning, not a failure.
fn apply_recorded_faults(
    host: &dyn Host,
    data_dir: &Path,
    inventory: &mut Inventory,
) -> anyhow::Result<()> {
    let boot_id = match faults::read_boot_id(host) {
        Ok(id) => id,
        Err(e) => {
            tracing::debug!("faults not shown: {e}");
            return Ok(());
        }
    };
    let path = data_dir.join(faults::FILE_NAME);
    match FaultRecord::read(&path, &boot_id) {
        Ok(Some(mut record)) => {
            record.reclassify(&XidClasses::from_env()?);
            record.apply(inventory);
        }
        Ok(None) => {}
        Err(e) => eprintln!("device-manager: faults not shown: {e}"),
    }
    Ok(())
}

fn load_memory(path: &Path) -> anyhow::Result<GpuMemory> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(GpuMemory::from_json(&path.display().to_string(), &text)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(GpuMemory::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn pci_candidates(
    host: &dyn Host,
    prefixes: &PciClassPrefixes,
) -> anyhow::Result<Vec<PciCandidate>> {
    let scan = pci::scan_pci(host, prefixes)?;
    for note in &scan.notes {
        tracing::warn!("pci scan: {note}");
    }
    Ok(scan
        .functions
        .into_iter()
        .map(|f| PciCandidate {
            bus_id: f.bus_id,
            vendor: f.vendor_id,
            class: f.class,
            driver: f.driver,
            numa_node: f.numa_node,
        })
        .collect())
}

/// Reads `GPUSTACK_PCI_CLASS_PREFIXES` (or its flag); absent means the default classes.
pub fn class_prefixes(value: Option<&str>) -> anyhow::Result<PciClassPrefixes> {
    match value {
        None => Ok(PciClassPrefixes::default()),
        Some(text) => PciClassPrefixes::from_env_value(text)
            .with_context(|| format!("{PCI_CLASS_PREFIXES_ENV}={text:?}")),
    }
}
