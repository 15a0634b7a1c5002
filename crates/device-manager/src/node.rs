//! Opening the node the commands read: the live host, or a recorded host folder, and running
//! every manufacturer's detector over it into one inventory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use accel_backend::Deadlines;
use accel_backend::DetectRequest;
use accel_backend::faults::{self, FaultRecord};
use accel_core::inventory::{Detection, Inventory};
use accel_core::manufacturer::ManufacturerTable;
use accel_host::pci::PciClassPrefixes;
use accel_host::{
    Commands, FsHost, FsWrites, Host, HostRoot, HostTools, HostWrites, RecordedCommands, ToolPlaces,
};
use anyhow::{Context, bail};

use crate::settings::Settings;

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
    /// Look at the PCI bus first and skip a manufacturer none of whose configured vendor ids
    /// is on it (what `serve` does unless `--no-pci-check`). Off by default: `detect` reports
    /// whatever the drivers answer.
    #[arg(long)]
    pub pci_check: bool,
}

impl NodeArgs {
    /// Opens the node and runs every detector over it (with `--pci-check`, gated by the
    /// configured vendor ids).
    pub fn detect(&self, settings: &Settings) -> anyhow::Result<(Inventory, Vec<Detection>)> {
        let prefixes = class_prefixes(self.pci_class_prefixes.as_deref())?;
        let mut node = Node::open_with(&self.host_root, settings.tool_places())?;
        node.table = settings.manufacturers.clone();
        node.pci_gate = self.pci_check;
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
    /// Writes to the node's control files (sysfs attributes a driver object is made with).
    pub writes: Arc<dyn HostWrites>,
    /// What `--host-root` named: a live root or a recording.
    pub kind: HostRoot,
    /// The manufacturers table in force: each backend recognises its functions on the bus by
    /// its configured vendor ids (the default table unless the caller sets the settings').
    pub table: ManufacturerTable,
    /// Gate each backend's detection on its vendor ids being on the bus (`serve` unless
    /// `--no-pci-check`; `detect --pci-check`).
    pub pci_gate: bool,
}

impl Node {
    /// Opens `--host-root DIR` with every manufacturer's tools looked for in their rows' default
    /// places ([`Node::open_with`]).
    pub fn open(host_root: &Path) -> anyhow::Result<Node> {
        Node::open_with(host_root, default_tool_places())
    }

    /// Opens `--host-root DIR`: a recorded host when DIR carries the recording mark
    /// (`recorded-host.json`, written by `record`), else a live root whose manufacturers' tools
    /// are found in `tools` under it and run inside it ([`HostTools`]: `/` on the node itself,
    /// or `/host` in a container that mounts it). The folder's shape decides nothing: every
    /// Linux `/` holds `/root`.
    pub fn open_with(host_root: &Path, tools: Vec<ToolPlaces>) -> anyhow::Result<Node> {
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
            HostRoot::Recorded { dir, .. } => {
                let replay: Box<dyn Commands> = Box::new(
                    RecordedCommands::load(dir)
                        .with_context(|| format!("recorded host {}", dir.display()))?,
                );
                // A backend that keeps state in a recording (NVIDIA's `mig-state.json`)
                // answers its commands from it, so what `serve` made shows in a later
                // `detect`.
                crate::backends::all()
                    .iter()
                    .filter_map(|b| b.replay)
                    .fold(replay, |commands, wrap| wrap(dir, commands))
            }
            HostRoot::Live { root } => Box::new(HostTools::new(root.clone(), tools)),
        };
        // Control-file writes: on a live node through this process's own `/` — the host root
        // is mounted read-only, and the chart mounts the host's /sys read-write at /sys for a
        // manufacturer that writes it (MetaX), so the same sysfs is read through the host root
        // and written here; a recording's are answered by the backends that make driver
        // objects that way (MetaX's sGPU subdevices), over the recording's own files.
        let writes: Arc<dyn HostWrites> = match &kind {
            HostRoot::Recorded { dir, .. } => crate::backends::all()
                .iter()
                .filter_map(|b| b.replay_writes)
                .fold(
                    Arc::new(FsWrites::new(kind.files())) as Arc<dyn HostWrites>,
                    |writes, wrap| wrap(dir, writes),
                ),
            HostRoot::Live { .. } => Arc::new(FsWrites::new("/")),
        };
        Ok(Node {
            host: Box::new(host),
            commands,
            writes,
            kind,
            table: ManufacturerTable::default(),
            pci_gate: false,
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
    /// holds the fault record itself and applies it. Every backend of the build detects
    /// (`crate::backends`); each keeps its own memory in `data_dir` when given. Each
    /// accelerator's PCI topology is then read from the host
    /// ([`accel_backend::detect::place_on_bus`]).
    pub fn collect(
        &self,
        data_dir: Option<&Path>,
        prefixes: &PciClassPrefixes,
        deadlines: Deadlines,
    ) -> anyhow::Result<(Inventory, Vec<Detection>)> {
        let mut inventory = Inventory::default();
        let mut detections = Vec::new();
        for backend in crate::backends::all() {
            let request = DetectRequest {
                host: self.host.as_ref(),
                commands: self.commands.as_ref(),
                deadlines,
                state_dir: data_dir,
                pci_classes: prefixes,
                vendor_ids: &self.table.get(backend.manufacturer).pci_vendor_ids,
                pci_gate: self.pci_gate,
            };
            let mut detection = backend.detector.detect(&request)?;
            // Where each accelerator sits on the bus, read the same way for every manufacturer.
            if let Ok(section) = &mut detection {
                accel_backend::detect::place_on_bus(self.host.as_ref(), section);
            }
            if let Ok(section) = &detection
                && !section.accelerators.is_empty()
            {
                inventory.manufacturers.push(section.clone());
            }
            detections.push(detection);
        }
        inventory.canonicalize();
        inventory.withhold_unidentified();
        Ok((inventory, detections))
    }
}

/// Where every backend's tools are looked for when no setting says otherwise.
pub fn default_tool_places() -> Vec<ToolPlaces> {
    crate::backends::all()
        .iter()
        .map(|b| b.tools.places())
        .collect()
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
            let vars: std::collections::BTreeMap<String, String> = std::env::vars().collect();
            let classifiers =
                crate::backends::fault_classifiers(&vars).map_err(|e| anyhow::anyhow!(e))?;
            for classifier in classifiers {
                record.reclassify(classifier.as_ref());
            }
            record.apply(inventory);
        }
        Ok(None) => {}
        Err(e) => eprintln!("device-manager: faults not shown: {e}"),
    }
    Ok(())
}

/// Reads `GPUSTACK_PCI_CLASS_PREFIXES` (or its flag); absent means the default classes.
pub fn class_prefixes(value: Option<&str>) -> anyhow::Result<PciClassPrefixes> {
    match value {
        None => Ok(PciClassPrefixes::default()),
        Some(text) => PciClassPrefixes::from_env_value(text)
            .with_context(|| format!("{PCI_CLASS_PREFIXES_ENV}={text:?}")),
    }
}
