//! The NVIDIA detector: both layers of seed 002 collected, merged and judged, answering the
//! detector contract (`Ok(empty)` when there is nothing to manage, `Err` when the pass could not
//! measure; DESIGN.md, "Detector answers").
//!
//! **Identity.** Both layers name each GPU: procfs' `information` file carries its UUID, and
//! `-q -x` (the identity query of layer 2) does. So a failing nvidia-smi (missing, hanging past
//! its deadline, exiting non-zero, printing what is not a report) leaves every GPU procfs names
//! at its index with its UUID, the failure a note (DESIGN.md, "Detector answers"). Where procfs
//! cannot name every GPU it lists (an `information` file without a UUID, or unreadable), that
//! failure is a pass not measured instead: the last good inventory and its grants stand. The
//! optional queries give no GPU identity (`-L` adds MIG device UUIDs only); their failures are
//! notes.
//!
//! Layer 2, the nvidia-smi snapshot, runs `-q -x` (required) and the optional queries, each
//! bounded to 30 s and the whole snapshot to 60 s, at most six runs in all (seed 002). An
//! optional query that fails or exits non-zero leaves its fields empty (topo exits 3 on WSL);
//! the `mig` queries run only when a GPU reports MIG mode (`mig -lgip` exits 6 without it).

use std::time::Duration;

use accel_backend::detect::Budget;
use accel_core::inventory::{Accelerator, DetectError, Detection, ManufacturerInventory, Source};
use accel_core::{Manufacturer, health};
use accel_host::{Commands, Host, RunFailure, run_bounded};

use crate::arch::architecture_from_model;
use crate::enrich::{self, SnapshotSection};
use crate::layer2;
use crate::passthrough::{self, GpuMemory, PciCandidate};
use crate::procfs;
use crate::smi;

/// The program every layer-2 query runs.
pub const NVIDIA_SMI: &str = "nvidia-smi";
/// The full report, the one required query.
pub const QUERY_XML: &[&str] = &["nvidia-smi", "-q", "-x"];
/// GPU and MIG device names and UUIDs (MIG UUIDs and profile names are only here).
pub const QUERY_LIST: &[&str] = smi::list::LIST_ARGV;
/// The topology matrix.
pub const QUERY_TOPO: &[&str] = smi::topo::TOPO_ARGV;
/// MIG GPU-instance profiles.
pub const QUERY_MIG_PROFILES: &[&str] = smi::mig::PROFILES_ARGV;
/// MIG GPU-instance profile placements.
pub const QUERY_MIG_PLACEMENTS: &[&str] = smi::mig::PLACEMENTS_ARGV;
/// The compute capability, which the XML does not carry.
pub const QUERY_COMPUTE_CAP: &[&str] = smi::csv::COMPUTE_CAP_ARGV;
/// Every query a snapshot may run, the required one first (`record` captures these). Seed 002:
/// a full snapshot runs nvidia-smi up to six times, so this list holds six. The two `mig`
/// queries run only when a GPU reports MIG mode; GPU and compute instances are read from the
/// `-q -x` report's MIG devices (their GPU and compute instance ids), never from `mig -lgi` or
/// `mig -lci`.
pub const SNAPSHOT_QUERIES: &[&[&str]] = &[
    QUERY_XML,
    QUERY_LIST,
    QUERY_TOPO,
    QUERY_COMPUTE_CAP,
    QUERY_MIG_PROFILES,
    QUERY_MIG_PLACEMENTS,
];

/// The versions of nvidia-smi, NVML, the driver and CUDA. Not part of the snapshot (which runs
/// nvidia-smi at most six times): `doctor` asks it for the NVML library's version, which no
/// other query carries.
pub const QUERY_VERSION: &[&str] = &["nvidia-smi", "--version"];

/// The queries only `doctor` runs (`record` captures these after [`SAMPLE_QUERIES`]).
pub const DOCTOR_QUERIES: &[&[&str]] = &[QUERY_VERSION];

/// The NVML library's version from `nvidia-smi --version` (`NVML version        : 590.48`),
/// `None` when the output has no such line or only a placeholder.
pub fn parse_nvml_version(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if !name.trim().eq_ignore_ascii_case("NVML version") {
            return None;
        }
        smi::value::present(value).map(str::to_string)
    })
}

/// The queries a live sample runs (`record` captures these after [`SNAPSHOT_QUERIES`]).
pub const SAMPLE_QUERIES: &[&[&str]] = &[smi::csv::SAMPLE_ARGV, smi::csv::COMPUTE_APPS_ARGV];

/// The message of a host with no nvidia-smi, word for word from seed 002.
pub const NO_NVIDIA_SMI: &str = "nvml: nvidia-smi not found (no NVIDIA driver on this host)";

/// The WSL 2 paravirtual device node and the native control node.
pub const DXG_NODE: &str = "dev/dxg";
pub const NVIDIACTL_NODE: &str = "dev/nvidiactl";

/// Deadlines of the snapshot (seed 002: 30 s a query, one minute for the whole read).
pub use accel_backend::detect::Deadlines;

/// Why the snapshot produced nothing.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// No nvidia-smi on the host.
    #[error("{NO_NVIDIA_SMI}")]
    NotInstalled,
    /// The required query could not run to its end, or exited non-zero (worded by
    /// `accel_host::run_bounded`: `nvidia-smi -q -x: exited with status 9: …`).
    #[error("{0}")]
    Run(#[source] RunFailure),
    /// The required query printed something that is not a report.
    #[error(transparent)]
    Parse(#[from] smi::xml::XmlError),
    /// The snapshot's minute ran out before the required query could start.
    #[error("nvidia-smi snapshot ran out of its {0:?}")]
    OutOfTime(Duration),
}

/// What a snapshot read: the merged section plus notes on optional queries that failed.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub section: SnapshotSection,
    pub notes: Vec<String>,
}

/// Whether the host is a WSL 2 machine with a paravirtual GPU: `/dev/dxg` without
/// `/dev/nvidiactl`.
pub fn is_paravirtual(host: &dyn Host) -> bool {
    host.exists(DXG_NODE) && !host.exists(NVIDIACTL_NODE)
}

/// Runs the nvidia-smi snapshot.
pub fn snapshot(commands: &dyn Commands, deadlines: Deadlines) -> Result<Snapshot, SnapshotError> {
    if !commands.is_installed(NVIDIA_SMI) {
        return Err(SnapshotError::NotInstalled);
    }
    let budget = Budget::start(deadlines);
    let deadline = budget
        .next()
        .map_err(|_| SnapshotError::OutOfTime(deadlines.snapshot))?;
    let output = match run_bounded(commands, QUERY_XML, deadline) {
        Ok(output) => output,
        Err(RunFailure::NotInstalled { .. }) => return Err(SnapshotError::NotInstalled),
        Err(e) => return Err(SnapshotError::Run(e)),
    };
    let report = smi::xml::parse(&output.stdout)?;
    let mut snapshot = Snapshot {
        section: SnapshotSection {
            driver_version: report.driver_version.clone(),
            cuda_version: report.cuda_version.clone(),
            nvml_version: None,
            accelerators: report
                .gpus
                .iter()
                .enumerate()
                .map(|(i, gpu)| accelerator_from_xml(i as u32, gpu))
                .collect(),
        },
        notes: Vec::new(),
    };

    let any_mig = snapshot
        .section
        .accelerators
        .iter()
        .any(|a| a.mig_mode == Some(accel_core::inventory::MigMode::Enabled));
    let mut optional = |argv: &[&str]| -> Option<String> {
        let Ok(deadline) = budget.next() else {
            snapshot.notes.push(format!(
                "{}: skipped, the snapshot's minute ran out",
                argv.join(" ")
            ));
            return None;
        };
        match run_bounded(commands, argv, deadline) {
            Ok(out) => Some(out.stdout_text()),
            Err(e) => {
                snapshot.notes.push(e.to_string());
                None
            }
        }
    };
    let list = optional(QUERY_LIST);
    let topo = optional(QUERY_TOPO);
    let compute_cap = optional(QUERY_COMPUTE_CAP);
    // Without a GPU in MIG mode the driver refuses every `mig` query (exit 6), and each call
    // can take 30 s on a sick driver: they run only when a GPU reports MIG mode.
    let (profiles, placements) = if any_mig {
        (optional(QUERY_MIG_PROFILES), optional(QUERY_MIG_PLACEMENTS))
    } else {
        (None, None)
    };

    let gpus = &mut snapshot.section.accelerators;
    let notes = &mut snapshot.notes;
    if let Some(text) = compute_cap {
        layer2::apply_compute_capability(gpus, &text);
    }
    if let Some(text) = list {
        layer2::apply_list(gpus, &text, notes);
    }
    if let Some(text) = topo {
        layer2::apply_topology(gpus, &text, notes);
    }
    layer2::apply_mig_profiles(gpus, profiles.as_deref(), placements.as_deref(), notes);
    Ok(snapshot)
}

/// One `<gpu>` of the report as an inventory accelerator (index by document position until the
/// merge gives it the collector's).
pub fn accelerator_from_xml(index: u32, gpu: &smi::xml::Gpu) -> Accelerator {
    let mut a = Accelerator::new(index, Source::Driver);
    a.uuid = gpu.uuid.clone();
    a.product = gpu.product_name.clone();
    a.brand = gpu.product_brand.clone();
    a.bus_id = gpu.bus_id;
    a.memory_mib = gpu.memory.total_mib;
    // Reports before the v11 DTD carry no architecture; guess it from the name as layer 1 does,
    // which matters for a GPU only nvidia-smi knows (WSL 2).
    a.architecture = gpu.product_architecture.clone().or_else(|| {
        gpu.product_name
            .as_deref()
            .and_then(architecture_from_model)
    });
    a.mig_mode = gpu.mig_mode;
    a.minor_number = gpu.minor_number;
    a.serial = gpu.serial.clone();
    a.vbios_version = gpu.vbios_version.clone();
    a.board_part_number = gpu.board_part_number.clone();
    a.persistence_mode = gpu.persistence_mode;
    a.driver_model = gpu.driver_model.clone();
    a.gsp_firmware_version = gpu.gsp_firmware_version.clone();
    a.ecc = gpu
        .ecc
        .clone()
        .filter(|e| *e != accel_core::inventory::Ecc::default());
    a.remapped_rows = gpu
        .remapped_rows
        .clone()
        .filter(|r| *r != accel_core::inventory::RemappedRows::default());
    a.mig_devices = gpu.mig_devices.clone();
    a.nvlinks = gpu.nvlinks.clone();
    a.classify_grantable();
    a
}

/// What the detector may use besides the host and its programs.
#[derive(Debug, Clone, Default)]
pub struct DetectOptions {
    pub deadlines: Deadlines,
    /// The passthrough memory, when the caller keeps one (the daemon, or `detect --data-dir`).
    pub memory: Option<GpuMemory>,
    /// The host's PCI functions (for the vfio-pci scan); only read when `memory` is given.
    pub pci: Vec<PciCandidate>,
}

/// The detector's answer and the memory it updated (to be written back by the caller).
#[derive(Debug, Clone)]
pub struct DetectOutcome {
    pub detection: Detection,
    pub memory: Option<GpuMemory>,
}

/// Why a pass whose nvidia-smi failed (`smi`, its one-line failure) is not measured though
/// procfs lists GPUs: `unnamed` of its `folders` GPU folders name no UUID; `notes` are procfs'
/// own lines on the folders it could not read.
fn procfs_cannot_name(smi: &str, unnamed: usize, folders: usize, notes: &[String]) -> String {
    let mut reason =
        format!("{smi}; procfs names no UUID for {unnamed} of its {folders} GPU folder(s)");
    for note in notes {
        reason.push_str("; ");
        reason.push_str(note);
    }
    reason
}

/// Detects the host's NVIDIA GPUs.
pub fn detect(host: &dyn Host, commands: &dyn Commands, options: DetectOptions) -> DetectOutcome {
    let not_measured = |reason: String| DetectError::NotMeasured {
        manufacturer: Manufacturer::Nvidia,
        reason,
    };
    let paravirtual = is_paravirtual(host);
    let layer1 = procfs::collect(host);
    let layer2 = snapshot(commands, options.deadlines);
    let mut section = ManufacturerInventory::empty(Manufacturer::Nvidia);

    let (driver_loaded, base_version, base, unread, layer1_error) = match layer1 {
        Ok(layer) => {
            section.notes.extend(layer.notes);
            (
                layer.driver_loaded,
                layer.driver_version,
                Some(layer.accelerators),
                layer.unread,
                None,
            )
        }
        Err(e) => (true, None, None, 0, Some(e.to_string())),
    };
    // Seed 002: the memory records GPUs "after every enriched collection" only. A pass where
    // nvidia-smi failed carries procfs facts alone (no VRAM, serial, part number or compute
    // capability), and remembering it would overwrite what a VM's GPU is known by with nulls.
    let smi_answered = layer2.is_ok();
    let enriched = match layer2 {
        Ok(snapshot) => {
            section.notes.extend(snapshot.notes);
            enrich::enrich(base_version, base.unwrap_or_default(), snapshot.section)
        }
        Err(e) => {
            let reason = e.to_string();
            match base {
                // Layer 1 enumerated GPUs it cannot all name: nvidia-smi, the other identity,
                // failed, so the pass is not measured (the last good one's seats stand).
                Some(accelerators)
                    if driver_loaded
                        && (unread > 0 || accelerators.iter().any(|a| a.uuid.is_none())) =>
                {
                    let unnamed = unread + accelerators.iter().filter(|a| a.uuid.is_none()).count();
                    let reason = procfs_cannot_name(
                        &reason,
                        unnamed,
                        accelerators.len() + unread,
                        &section.notes,
                    );
                    return DetectOutcome {
                        detection: Err(not_measured(reason)),
                        memory: options.memory,
                    };
                }
                // Layer 1 enumerated and named every GPU (possibly zero): a measured answer,
                // the failure kept as a note, facts nvidia-smi would have refreshed left as
                // procfs shows them, every GPU at its index with its UUID.
                Some(accelerators) if driver_loaded => {
                    section.notes.push(reason);
                    enrich::Enriched {
                        driver_version: base_version,
                        accelerators,
                        ..Default::default()
                    }
                }
                // No driver in procfs and no paravirtual GPU: nothing to manage.
                Some(_) if !paravirtual => {
                    section.notes.push(reason);
                    return DetectOutcome {
                        detection: Ok(section),
                        memory: options.memory,
                    };
                }
                // A driver is evidently there but nothing enumerated.
                _ => {
                    let reason = match layer1_error {
                        Some(l1) => format!("{l1}; {reason}"),
                        None => reason,
                    };
                    return DetectOutcome {
                        detection: Err(not_measured(reason)),
                        memory: options.memory,
                    };
                }
            }
        }
    };
    section.driver_version = enriched.driver_version;
    section.runtime_version = enriched.cuda_version;
    section.management_version = enriched.nvml_version;
    section.notes.extend(enriched.notes);
    section.accelerators = enriched.accelerators;
    if paravirtual {
        for a in &mut section.accelerators {
            if a.source == Source::Driver
                && !a.bus_id.is_some_and(|b| {
                    host.exists(&format!("{}/{}", procfs::PCI_DEVICES_DIR, b.sysfs()))
                })
            {
                a.source = Source::Paravirtual;
            }
        }
    }

    let mut memory = options.memory;
    if let Some(memory) = memory.as_mut() {
        if smi_answered {
            memory.remember(&section.accelerators);
        }
        let next = section.accelerators.len() as u32;
        let (found, unknown) =
            passthrough::passed_through(memory, &options.pci, &section.accelerators, next);
        for bus in unknown {
            section.notes.push(format!(
                "{bus}: NVIDIA GPU bound to vfio-pci was never seen on the driver; left out"
            ));
        }
        section.accelerators.extend(found);
    }
    for a in &mut section.accelerators {
        a.classify_grantable();
        health::assess(a, &[]);
    }
    DetectOutcome {
        detection: Ok(section),
        memory,
    }
}
