//! `device-manager preflight`'s pass (seed 000, "Preflight checks"): per manufacturer, three
//! questions in order, each answerable alone: are the devices detected (the detect pass,
//! cross-checked against the host's own vendor CLI through `chroot`), can they be sliced (the
//! driver read, then a probe container granted a slice reporting its quota), can they be
//! managed while sliced (`sidecar-visibility` simulated through the responder in kubelet order,
//! `co-tenancy` measured with two slices on one accelerator). Every injection a probe gets is
//! the manufacturer's own responder's answer to a synthetic allocation, so preflight and
//! Allocate cannot disagree. States `ok` / `not-declared` / `unavailable`, depths `declared` /
//! `simulated` / `measured`, never deeper than reached. One run per node (a lock file); probes
//! labelled and swept before and after; `--dry-run` prints every container step and writes
//! nothing under the host root. A panic is contained per manufacturer.

pub mod containers;
pub mod kubelet;
pub mod report;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use accel_backend::Deadlines;
use accel_backend::preflight::{ContainerCli, Depth, NodeAccess, Preflight, State};
use accel_backend::respond::{Answer, Injection, Responder, ResponderSetup};
use accel_backend::{Backend, Container, DetectRequest, Phase, Pod, slicing};
use accel_core::Manufacturer;
use accel_core::inventory::{Accelerator, Inventory};
use accel_core::ledger::units::mib_for_units;
use accel_core::ledger::{Family, Seat};
use accel_core::units::UNITS_PER_ACCELERATOR;
use accel_host::pci::PciClassPrefixes;

use crate::node::Node;
use crate::settings::Settings;
use containers::{
    HostShell, PROBE_DEADLINE, Resolution, Runtime, first_line, shell_text, status_text,
};
use kubelet::KubeletFacts;
use report::{Detection, Document, Group, Network, NetworkRow, Row, Topology};

/// The probe's container name in the synthetic Pod (its cache file is named for it).
pub const PROBE_CONTAINER: &str = "probe";
/// The SSH sidecar's container name in the synthetic Pod.
pub const SIDECAR_CONTAINER: &str = "sshd";
/// The namespace the synthetic Pods claim to be in.
pub const SYNTHETIC_NAMESPACE: &str = "gpustack-preflight";
/// A probe's slice: half the accelerator.
pub const PROBE_UNITS: u64 = UNITS_PER_ACCELERATOR / 2;
/// Co-tenancy's second slice: a quarter, so each tenant's quota is told apart.
pub const SECOND_TENANT_UNITS: u64 = UNITS_PER_ACCELERATOR / 4;

pub const SLICED_RUNTIME_LOADED: &str = "sliced-runtime-loaded";
pub const SLICED_QUOTA_IN_FORCE: &str = "sliced-quota-in-force";
pub const SIDECAR_VISIBILITY: &str = "sidecar-visibility";
pub const CO_TENANCY: &str = "co-tenancy";
pub const PREFLIGHT_PANICKED: &str = "preflight-panicked";
pub const STALE_CONTAINER_SWEEP: &str = "stale-container-sweep";

/// What the command asked for.
#[derive(Debug, Clone)]
pub struct Options {
    pub manufacturers: Vec<Manufacturer>,
    pub dry_run: bool,
    pub probe_image: Option<String>,
    pub runtime: Option<ContainerCli>,
    pub pci_gate: bool,
    pub deadlines: Deadlines,
    pub pci_classes: PciClassPrefixes,
}

/// A manufacturer's rows: its backend and its preflight knowledge (`None`: this build has
/// none).
pub struct Entry {
    pub backend: Option<Backend>,
    pub preflight: Option<Arc<dyn Preflight>>,
}

fn now() -> String {
    crate::publish::rfc3339(SystemTime::now())
}

/// The synthetic Pod a preflight allocation is answered for.
pub fn synthetic_pod(uid: &str, containers: &[&str]) -> Pod {
    Pod {
        uid: uid.to_string(),
        namespace: SYNTHETIC_NAMESPACE.to_string(),
        name: uid.to_string(),
        created: 0,
        phase: Phase::Pending,
        runtime_class: None,
        containers: containers
            .iter()
            .map(|name| Container {
                name: (*name).to_string(),
                limits: BTreeMap::new(),
                env: BTreeMap::new(),
            })
            .collect(),
        allocated: None,
    }
}

/// The injection a slice of `units` on `seat` gets: the responder's answer to a synthetic
/// sliced allocation, exactly as Allocate asks it (family, the seat, the units, the cores
/// percentage `preflight` asks — none unless the manufacturer's slices are
/// compute-partitioned, see [`Preflight::probe_cores_percentage`] —, the Pod and its
/// container).
pub fn slice_injection(
    preflight: &dyn Preflight,
    responder: &dyn Responder,
    seat: &Seat,
    units: u64,
    pod: &Pod,
) -> Result<Injection, String> {
    let cores = preflight.probe_cores_percentage();
    let seats = [seat];
    responder
        .respond(&Answer {
            family: Some(Family::Sliced),
            seats: &seats,
            slice_units: units,
            cores_percentage: cores,
            partition: None,
            pod,
            container: pod.containers.first(),
        })
        .map_err(|e| e.to_string())
}

/// Where the lock and the responder-rendered files live, in this process's view and the
/// host's.
struct Places {
    /// The host's `/` as this process reads it (the host root, or a recording's `root/`).
    files_root: PathBuf,
    /// Where the responder renders (the preflight dir, or a private scratch dir on --dry-run).
    render_dir: PathBuf,
    /// The render dir as the host names it (what the probe mounts).
    render_host: String,
}

impl Places {
    fn host_path(&self, path: &str) -> String {
        let render = self.render_dir.display().to_string();
        if let Some(rest) = path.strip_prefix(&render) {
            return format!("{}{rest}", self.render_host);
        }
        let root = self.files_root.display().to_string();
        if root != "/"
            && let Some(rest) = path.strip_prefix(root.trim_end_matches('/'))
            && rest.starts_with('/')
        {
            return rest.to_string();
        }
        path.to_string()
    }
}

/// One pass over the node.
pub struct Pass<'a> {
    node: &'a Node,
    settings: &'a Settings,
    options: &'a Options,
    shell: HostShell<'a>,
    places: Places,
    resolution: Resolution,
}

/// Why a probe is not run (its steps are printed), or `None` when it runs.
fn not_run_reason(pass: &Pass<'_>, preflight: &dyn Preflight) -> Option<String> {
    if pass.options.dry_run {
        return Some("--dry-run: the probe was printed, not run".into());
    }
    match &pass.resolution {
        Resolution::None { reason } => Some(format!("not run: {reason}")),
        Resolution::Found(runtime) => preflight.device_flags(runtime.cli).is_none().then(|| {
            format!(
                "not run: {} has no flag that hands a container its devices",
                runtime.cli.program()
            )
        }),
    }
}

/// The document's topology section.
fn topology(kubelet: &KubeletFacts) -> Topology {
    match &kubelet.topology_policy {
        Some(named) => Topology {
            timestamp: now(),
            policy: named.value.clone(),
            depth: Some(Depth::Declared.as_str()),
            source: Some(named.source.clone()),
            note: None,
        },
        None => Topology {
            timestamp: now(),
            policy: "unknown".into(),
            depth: None,
            source: None,
            note: Some(if kubelet.notes.is_empty() {
                "no readable source names a TopologyManager policy (the kubelet's command line, the configuration it names, kubeadm's flags, /var/lib/kubelet/config.yaml, /etc/kubernetes/kubelet.conf.d)".into()
            } else {
                format!(
                    "no readable source names a TopologyManager policy; unreadable: {}",
                    kubelet.notes.join("; ")
                )
            }),
        },
    }
}

/// The text of a contained panic.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".into())
}

/// Runs `answer` for a group, containing a panic: the group keeps its detection block, drops
/// its other findings, and gets one `preflight-panicked` row per accelerator and a note.
pub fn contained(
    mut group: Group,
    accelerators: &[String],
    answer: impl FnOnce(&mut Group),
) -> Group {
    let detection = group.detection.clone();
    let mut working = group.clone();
    match catch_unwind(AssertUnwindSafe(|| answer(&mut working))) {
        Ok(()) => working,
        Err(payload) => {
            let text = panic_text(payload.as_ref());
            group.detection = detection;
            group.checks = accelerators
                .iter()
                .map(|a| {
                    Row::new(
                        a,
                        PREFLIGHT_PANICKED,
                        State::Unavailable,
                        Depth::Declared,
                        "preflight panicked while answering this manufacturer",
                    )
                })
                .collect();
            group.steps.clear();
            group.note = Some(format!("panicked: {text}"));
            group
        }
    }
}

/// The lock, held for the pass (the kernel releases it when the process ends).
pub struct Lock {
    _flock: nix::fcntl::Flock<std::fs::File>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lock")
    }
}

/// Takes the one-run-per-node lock at `path`; `Err` names the path and why.
pub fn lock(path: &Path) -> Result<Lock, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("cannot open the lock {}: {e}", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(flock) => Ok(Lock { _flock: flock }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(format!(
            "another preflight holds the lock {}: one run per node",
            path.display()
        )),
        Err((_, e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

/// Preflight's `network` section: a fresh read of the interfaces (no options, `--dry-run` or
/// not), one row per interface and VF bearing RDMA or a verdict, in inventory order. Never part
/// of the exit code.
pub fn network(host: &dyn accel_host::Host) -> Network {
    use accel_core::interfaces::endpoints;
    let timestamp = now();
    let list = match accel_net::read_interfaces(host) {
        Ok(list) => list,
        Err(e) => {
            return Network {
                timestamp,
                checks: Vec::new(),
                note: Some(format!(
                    "the network interfaces could not be enumerated, so nothing is claimed about this node's RDMA links: {e}"
                )),
            };
        }
    };
    let mut checks = Vec::new();
    for endpoint in endpoints(&list) {
        if !endpoint.rdma() && endpoint.link().is_none() {
            continue;
        }
        let interface = match endpoint.vf {
            Some(vf) => accel_core::interfaces::vf_key(&endpoint.interface.name, vf),
            None => endpoint.interface.name.clone(),
        };
        let (state, reason) = match endpoint.link() {
            Some(link) => (link.state.as_str(), link.reason.clone()),
            None => (
                "unverified",
                "the inventory carries no link state for this interface".to_string(),
            ),
        };
        checks.push(NetworkRow {
            interface,
            rdma_device: endpoint.rdma_device().to_string(),
            state,
            depth: "declared",
            reason,
        });
    }
    let note = checks.is_empty().then(|| {
        let vfs: usize = list.iter().map(|i| i.virtual_functions.len()).sum();
        format!(
            "none of the {} interfaces on this node, nor any of their {vfs} virtual functions, has an RDMA device bound, so there is no link to check; this is an answer about the hardware, not a check that was skipped",
            list.len()
        )
    });
    Network {
        timestamp,
        checks,
        note,
    }
}

/// Runs the whole pass and returns the document.
pub fn run(
    node: &Node,
    settings: &Settings,
    options: &Options,
    rows: &[(Manufacturer, Entry)],
) -> Document {
    let files_root = node.kind.files();
    let chroot_root = match &node.kind {
        accel_host::HostRoot::Live { root } => root.display().to_string(),
        accel_host::HostRoot::Recorded { mark, .. } => mark
            .host_root
            .clone()
            .unwrap_or_else(|| "/host".to_string()),
    };
    let operator = settings.operator_dir();
    let preflight_host = operator.join("preflight");
    let preflight_dir =
        files_root.join(preflight_host.strip_prefix("/").unwrap_or(&preflight_host));
    let render_dir = if options.dry_run {
        std::env::temp_dir().join(format!("gpustack-preflight-{}", std::process::id()))
    } else {
        preflight_dir.join("rendered")
    };
    let places = Places {
        files_root,
        render_dir: render_dir.clone(),
        render_host: preflight_host.join("rendered").display().to_string(),
    };
    let shell = HostShell {
        commands: node.commands.as_ref(),
        root: chroot_root,
    };
    let kubelet = kubelet::read(node.host.as_ref());
    let topology = topology(&kubelet);
    let network = network(node.host.as_ref());
    // One run per node; --dry-run is exempt (it writes nothing).
    let _lock = if options.dry_run {
        None
    } else {
        match lock(&preflight_dir.join("lock")) {
            Ok(lock) => Some(lock),
            Err(reason) => {
                let accelerators = options
                    .manufacturers
                    .iter()
                    .map(|m| Group {
                        manufacturer: m.name().to_string(),
                        timestamp: now(),
                        detection: Detection::new(
                            State::Unavailable,
                            Depth::Declared,
                            0,
                            reason.clone(),
                        ),
                        checks: Vec::new(),
                        steps: Vec::new(),
                        note: Some("refused before sweeping: nothing was asked".into()),
                    })
                    .collect();
                return Document {
                    accelerators,
                    network,
                    topology,
                };
            }
        }
    };
    let resolution = containers::resolve(&shell, options.runtime, &kubelet);
    match &resolution {
        Resolution::Found(r) => tracing::debug!("container CLI {} ({})", r.cli.program(), r.source),
        Resolution::None { reason } => tracing::debug!("no container CLI: {reason}"),
    }
    let pass = Pass {
        node,
        settings,
        options,
        shell,
        places,
        resolution,
    };
    let sweeping = !options.dry_run;
    let sweep_runtime = match &pass.resolution {
        Resolution::Found(r) if r.cli != ContainerCli::Ctr && sweeping => Some(r.clone()),
        _ => None,
    };
    let before = sweep_runtime
        .as_ref()
        .map(|r| containers::sweep(&pass.shell, r));
    let mut groups = Vec::new();
    for (manufacturer, row) in rows {
        let sweep_failure = before.as_ref().and_then(|r| r.as_ref().err());
        // A panic while detecting leaves no detection block to keep: the group is unavailable.
        let group = catch_unwind(AssertUnwindSafe(|| {
            pass.group(*manufacturer, row, sweep_failure)
        }))
        .unwrap_or_else(|payload| Group {
            manufacturer: manufacturer.name().to_string(),
            timestamp: now(),
            detection: Detection::new(
                State::Unavailable,
                Depth::Declared,
                0,
                "preflight panicked while detecting".into(),
            ),
            checks: Vec::new(),
            steps: Vec::new(),
            note: Some(format!("panicked: {}", panic_text(payload.as_ref()))),
        });
        groups.push(group);
    }
    // On --dry-run the printed probes are framed by the sweeps they would run between.
    if let (true, Resolution::Found(r)) = (options.dry_run, &pass.resolution)
        && r.cli != ContainerCli::Ctr
    {
        let list = shell_text(&pass.shell.argv(&r.list_command()));
        for group in groups.iter_mut().filter(|g| !g.steps.is_empty()) {
            group.steps.insert(0, list.clone());
            group.steps.push(list.clone());
        }
    }
    if let Some(r) = &sweep_runtime
        && let Err(reason) = containers::sweep(&pass.shell, r)
    {
        for group in &mut groups {
            let accelerators: Vec<String> =
                group.checks.iter().map(|c| c.accelerator.clone()).collect();
            let mut seen = std::collections::BTreeSet::new();
            for a in accelerators.into_iter().filter(|a| seen.insert(a.clone())) {
                group.checks.push(Row::new(
                    &a,
                    STALE_CONTAINER_SWEEP,
                    State::Unavailable,
                    Depth::Measured,
                    format!("after the pass: {reason}"),
                ));
            }
        }
    }
    // The rendered files go; the lock file stays (the lock is the process's).
    match std::fs::remove_dir_all(&render_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove {}: {e}", render_dir.display()),
    }
    Document {
        accelerators: groups,
        network,
        topology,
    }
}

impl Pass<'_> {
    fn group(
        &self,
        manufacturer: Manufacturer,
        row: &Entry,
        sweep_failure: Option<&String>,
    ) -> Group {
        let mut group = Group {
            manufacturer: manufacturer.name().to_string(),
            timestamp: now(),
            detection: Detection::new(State::Unavailable, Depth::Declared, 0, String::new()),
            checks: Vec::new(),
            steps: Vec::new(),
            note: None,
        };
        let Some(backend) = &row.backend else {
            group.detection.reason = format!("this build has no {} backend", manufacturer.name());
            group.note = Some("detection is unavailable, so nothing else can be answered".into());
            return group;
        };
        let section = match self.detect(backend, row.preflight.as_deref(), &mut group) {
            Some(section) => section,
            None => {
                group.note =
                    Some("detection is unavailable, so nothing else can be answered".into());
                return group;
            }
        };
        let names: Vec<String> = section
            .accelerators
            .iter()
            .filter(|a| a.grantable.feeds_any())
            .map(accelerator_name)
            .collect();
        // A manufacturer whose backend has no preflight knowledge yet answers detection alone.
        let Some(preflight) = &row.preflight else {
            group.note = Some(format!(
                "this build has no preflight rows for {}: only detection is answered",
                manufacturer.name()
            ));
            return group;
        };
        group.note = preflight.note();
        if let Some(reason) = sweep_failure {
            for name in &names {
                group.checks.push(Row::new(
                    name,
                    STALE_CONTAINER_SWEEP,
                    State::Unavailable,
                    Depth::Measured,
                    format!("before the pass: {reason}"),
                ));
            }
        }
        contained(group, &names, |group| {
            self.answer(backend, preflight.as_ref(), &section, group)
        })
    }

    /// Question 1. `None` when detection is unavailable.
    fn detect(
        &self,
        backend: &Backend,
        preflight: Option<&dyn Preflight>,
        group: &mut Group,
    ) -> Option<accel_core::ManufacturerInventory> {
        let request = DetectRequest {
            host: self.node.host.as_ref(),
            commands: self.node.commands.as_ref(),
            deadlines: self.options.deadlines,
            state_dir: None,
            pci_classes: &self.options.pci_classes,
            vendor_ids: &self
                .settings
                .manufacturers
                .get(backend.manufacturer)
                .pci_vendor_ids,
            pci_gate: self.options.pci_gate,
        };
        let section = match backend.detector.detect(&request) {
            Ok(Ok(section)) => section,
            Ok(Err(e)) => {
                group.detection.reason = format!("the detect pass could not measure: {e}");
                return None;
            }
            Err(e) => {
                group.detection.reason = format!("the detect pass could not run: {e}");
                return None;
            }
        };
        let mut inventory = Inventory::default();
        inventory.manufacturers.push(section);
        inventory.canonicalize();
        let section = inventory.manufacturers.pop()?;
        let count = section
            .accelerators
            .iter()
            .filter(|a| a.grantable.feeds_any())
            .count();
        let notes = if section.notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", section.notes.join("; "))
        };
        let Some((preflight, listing)) = preflight.and_then(|p| Some((p, p.host_listing()?)))
        else {
            group.detection = Detection::new(
                State::Ok,
                Depth::Declared,
                count,
                format!(
                    "the detect pass found {count}; no host reader is established, so this is the container's own view{notes}"
                ),
            );
            return Some(section);
        };
        let command = shell_text(&self.shell.argv(&listing));
        let ran = self.shell.run(&listing, self.options.deadlines.per_query);
        // The host has no such CLI (chroot's 127, or none recorded): no failure, nothing to ask.
        let absent = match &ran {
            Ok(out) => out.status == Some(127),
            Err(e) => e.ends_with(": not found"),
        };
        if let (true, Some(cli)) = (absent, preflight.host_cli()) {
            group.detection = Detection::new(
                State::Ok,
                Depth::Declared,
                count,
                format!(
                    "the detect pass found {count}; the host carries no {cli}, so it cannot be asked what it sees{notes}"
                ),
            );
            group.detection.command = Some(command);
            return Some(section);
        }
        let host = match ran {
            Ok(out) if out.success() => Ok(preflight.count_listed(&out.stdout_text())),
            Ok(out) => Err(format!(
                "exited {}: {}",
                status_text(&out),
                first_line(&format!("{}{}", out.stderr_text(), out.stdout_text()))
            )),
            Err(e) => Err(e),
        };
        group.detection = match host {
            Ok(listed) if listed == count => {
                let mut d = Detection::new(
                    State::Ok,
                    Depth::Measured,
                    count,
                    format!("the detect pass and the host's own listing agree on {count}{notes}"),
                );
                d.host = Some(listed);
                d
            }
            Ok(listed) => {
                let reason = match preflight.host_cli() {
                    Some(cli) if listed > count => {
                        let hints = preflight
                            .missing_mounts(self.node.host.as_ref(), &section.accelerators);
                        let hints = if hints.is_empty() {
                            String::new()
                        } else {
                            format!("; not in this container: {}", hints.join(", "))
                        };
                        format!(
                            "the host's own {cli} reports {listed} accelerator(s) where this container detected {count}, so what is missing is this container's access to them rather than the hardware{hints}{notes}"
                        )
                    }
                    _ => format!(
                        "this container sees {count} of the host's {listed}: run preflight with the vendor runtime (docker --runtime nvidia, nerdctl --gpus all) and the host's /dev{notes}"
                    ),
                };
                let mut d = Detection::new(State::Unavailable, Depth::Measured, count, reason);
                d.host = Some(listed);
                d
            }
            Err(reason) => Detection::new(
                State::Ok,
                Depth::Declared,
                count,
                format!(
                    "the detect pass found {count}; the host's own listing did not answer ({reason}), so this is the container's own view{notes}"
                ),
            ),
        };
        group.detection.command = Some(command);
        if group.detection.state == State::Unavailable.as_str() {
            return None;
        }
        Some(section)
    }

    /// Questions 2 and 3 for every accelerator of a detected section.
    fn answer(
        &self,
        backend: &Backend,
        preflight: &dyn Preflight,
        section: &accel_core::ManufacturerInventory,
        group: &mut Group,
    ) {
        let offer = backend.slicing.as_ref().map(|library| {
            slicing::offer(
                library.as_ref(),
                section,
                &self.settings.library_dir(),
                |p| self.node.host.exists(p),
            )
        });
        let runtime_major = offer.as_ref().and_then(|o| o.runtime_major);
        let responder = (backend.responder)(ResponderSetup {
            scratch: Some(self.places.render_dir.join("scratch")),
            strategy: self.settings.injection(section.name).unwrap_or_default(),
            runtime_major,
            pod_dir_root: self.places.render_dir.join("pods"),
            preload_dir: self.places.render_dir.clone(),
            library_dir: self.settings.library_dir(),
            engine: match backend.engine {
                Some(engine) => engine(
                    std::sync::Arc::new(accel_host::FsHost::new(self.node.host.root())),
                    &self.settings.containerd_config_dir,
                ),
                None => std::sync::Arc::new(accel_backend::EngineFacts::default()),
            },
            accelerators: section.accelerators.clone(),
            host: Some(std::sync::Arc::new(accel_host::FsHost::new(
                self.node.kind.files(),
            ))),
            commands: preflight.simulation_commands(),
            runtime_class: self
                .settings
                .manufacturers
                .get(section.name)
                .runtime_class
                .clone(),
            writes: preflight.simulation_writes(),
        });
        let mut inventory = Inventory::default();
        inventory.manufacturers.push(section.clone());
        let seats = crate::daemon::seats_of(&inventory, section.name);
        let mut prepared: Option<Result<(), String>> = None;
        for accelerator in section
            .accelerators
            .iter()
            .filter(|a| a.grantable.feeds_any())
        {
            let name = accelerator_name(accelerator);
            let access = NodeAccess {
                commands: self.node.commands.as_ref(),
                host: self.node.host.as_ref(),
                dry_run: self.options.dry_run,
                deadline: self.options.deadlines.per_query,
            };
            let driver = preflight.driver_read_on(accelerator, &access);
            let host_state = preflight.host_state_rows(accelerator, &access);
            for read in driver.iter().chain(&host_state) {
                group.checks.push(Row::new(
                    &name,
                    read.capability,
                    read.state,
                    Depth::Declared,
                    read.reason.clone(),
                ));
            }
            if preflight.partition_backed(accelerator) {
                // No sliced rows; the management rows stop at declared (reaching the
                // visibility response would create a partition).
                let (state, reason) = match &driver {
                    Some(read) if read.state == State::Ok => (State::Ok, "partition-backed: the driver declares its partitions; reaching the visibility response would create one, so this stops at declared".to_string()),
                    Some(read) => (State::Unavailable, format!("partition-backed, and the driver read did not establish the partitions: {}", read.reason)),
                    None => (State::Unavailable, "partition-backed, with no driver read to declare the partitions".to_string()),
                };
                for capability in [SIDECAR_VISIBILITY, CO_TENANCY] {
                    group.checks.push(Row::new(
                        &name,
                        capability,
                        state,
                        Depth::Declared,
                        reason.clone(),
                    ));
                }
                continue;
            }
            let Some(offer) = &offer else {
                continue; // No logical slicing here: no sliced rows.
            };
            let Some(seat) = seats.iter().find(|s| s.index == accelerator.index) else {
                continue;
            };
            if prepared.is_none() {
                prepared = Some(responder.prepare_slicing().map_err(|e| e.to_string()));
            }
            let unstaged = if !offer.offered {
                Some(match &offer.library {
                    Some(path) => format!("the preload library {path} is not on the host: slices are not offered until serve's init container stages it"),
                    None => "the driver reports no runtime version, so no preload library applies and slices are not offered".to_string(),
                })
            } else {
                prepared
                    .as_ref()
                    .and_then(|p| p.as_ref().err())
                    .map(|e| format!("the preload file could not be rendered: {e}"))
            };
            self.sliced_rows(
                preflight,
                responder.as_ref(),
                accelerator,
                seat,
                runtime_major,
                unstaged,
                group,
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn sliced_rows(
        &self,
        preflight: &dyn Preflight,
        responder: &dyn Responder,
        accelerator: &Accelerator,
        seat: &Seat,
        runtime_major: Option<u32>,
        unstaged: Option<String>,
        group: &mut Group,
    ) {
        let name = accelerator_name(accelerator);
        let index = accelerator.index;
        let manufacturer = group.manufacturer.clone();
        let uid = |case: &str| format!("preflight-{manufacturer}-{index}-{case}");
        // Q3 sidecar visibility: the owner's slice, then the sidecar, in kubelet order.
        let pod = self.synthetic(
            preflight,
            &manufacturer,
            &uid("sidecar"),
            &[PROBE_CONTAINER, SIDECAR_CONTAINER],
        );
        group
            .checks
            .push(self.sidecar_row(preflight, responder, seat, &pod, &name));
        if let Some(reason) = unstaged {
            for capability in [SLICED_RUNTIME_LOADED, SLICED_QUOTA_IN_FORCE, CO_TENANCY] {
                group.checks.push(Row::new(
                    &name,
                    capability,
                    State::Unavailable,
                    Depth::Declared,
                    reason.clone(),
                ));
            }
            return;
        }
        let image = self
            .options
            .probe_image
            .clone()
            .or_else(|| preflight.probe_image(runtime_major));
        let vram = accelerator.memory_mib;
        // Q2: one probe granted half the accelerator.
        let quota_pod = self.synthetic(preflight, &manufacturer, &uid("quota"), &[PROBE_CONTAINER]);
        let injection = match slice_injection(preflight, responder, seat, PROBE_UNITS, &quota_pod) {
            Ok(i) => i,
            Err(e) => {
                for capability in [SLICED_RUNTIME_LOADED, SLICED_QUOTA_IN_FORCE, CO_TENANCY] {
                    group.checks.push(Row::new(
                        &name,
                        capability,
                        State::Unavailable,
                        Depth::Simulated,
                        format!("the responder refused the synthetic slice: {e}"),
                    ));
                }
                return;
            }
        };
        let expected = vram.map(|v| mib_for_units(PROBE_UNITS, v));
        let simulated = simulated_slice(preflight, &injection, expected);
        if !preflight.tier().probes() {
            let reason = format!(
                "no container probe: {manufacturer}'s preflight is {}",
                preflight.tier().as_str()
            );
            self.injection_rows(
                preflight, responder, seat, &name, &simulated, &reason, group,
            );
            return;
        }
        let probe = Probe {
            name: format!("gpustack-{}", uid("quota")),
            injection,
            expected,
        };
        let second_pod = self.synthetic(
            preflight,
            &manufacturer,
            &uid("tenant-b"),
            &[PROBE_CONTAINER],
        );
        let tenant_a_pod = self.synthetic(
            preflight,
            &manufacturer,
            &uid("tenant-a"),
            &[PROBE_CONTAINER],
        );
        let tenants = slice_injection(preflight, responder, seat, PROBE_UNITS, &tenant_a_pod)
            .and_then(|a| {
                slice_injection(preflight, responder, seat, SECOND_TENANT_UNITS, &second_pod)
                    .map(|b| (a, b))
            });
        let blocked = not_run_reason(self, preflight).or_else(|| {
            image.is_none().then(|| {
                // With a runtime version known, no image means the manufacturer has no default.
                if runtime_major.is_some() {
                    format!(
                        "not run: {} has no default probe image ({}); give --probe-image",
                        preflight.manufacturer(),
                        preflight.probe_image_needs()
                    )
                } else {
                    "not run: no probe image (the driver reports no runtime version; give --probe-image)".to_string()
                }
            })
        });
        let image = image.unwrap_or_else(|| "<--probe-image>".into());
        // A CLI that cannot hand a container its devices (ctr) has its steps printed in a
        // dialect that can: nerdctl's, on the same containerd socket and namespace.
        let runtime = match &self.resolution {
            Resolution::Found(r) if preflight.device_flags(r.cli).is_none() => Runtime {
                cli: ContainerCli::Nerdctl,
                ..r.clone()
            },
            Resolution::Found(r) => r.clone(),
            Resolution::None { .. } => Runtime {
                cli: ContainerCli::Docker,
                address: None,
                source: "printed".into(),
            },
        };
        let flags = preflight.device_flags(runtime.cli).unwrap_or_default();
        let command = |p: &Probe| {
            let mut injection = p.injection.clone();
            for (name, value) in preflight.probe_env() {
                injection.envs.insert(name.to_string(), value.to_string());
            }
            self.shell.argv(&runtime.run_command(
                &p.name,
                &flags,
                &injection,
                &|path| self.places.host_path(path),
                &image,
                &preflight.probe_script(),
            ))
        };
        let quota_command = command(&probe);
        let (loaded, quota) = match &blocked {
            Some(reason) => {
                group.steps.push(shell_text(&quota_command));
                simulated_rows(&name, &simulated, reason, &quota_command)
            }
            None => {
                let out = self.shell.run(&quota_command[2..], PROBE_DEADLINE);
                measured_rows(preflight, &name, &probe, vram, out, &quota_command)
            }
        };
        group.checks.push(loaded);
        group.checks.push(quota);
        // Q3 co-tenancy: two slices on this accelerator at once, each seeing its own quota.
        let (a, b) = match tenants {
            Ok(t) => t,
            Err(e) => {
                group.checks.push(Row::new(
                    &name,
                    CO_TENANCY,
                    State::Unavailable,
                    Depth::Simulated,
                    format!("the responder refused a tenant's slice: {e}"),
                ));
                return;
            }
        };
        let tenants = [
            Probe {
                name: format!("gpustack-{}", uid("tenant-a")),
                expected: vram.map(|v| mib_for_units(PROBE_UNITS, v)),
                injection: a,
            },
            Probe {
                name: format!("gpustack-{}", uid("tenant-b")),
                expected: vram.map(|v| mib_for_units(SECOND_TENANT_UNITS, v)),
                injection: b,
            },
        ];
        let commands: Vec<Vec<String>> = tenants.iter().map(command).collect();
        let mut row = match &blocked {
            Some(reason) => {
                group.steps.extend(commands.iter().map(|c| shell_text(c)));
                let own = tenants.iter().all(|t| {
                    t.expected.is_some() && preflight.quota_mib(&t.injection, 0) == t.expected
                });
                if own {
                    Row::new(
                        &name,
                        CO_TENANCY,
                        State::Ok,
                        Depth::Simulated,
                        format!("the responder gives the two tenants their own quotas; {reason}"),
                    )
                } else {
                    Row::new(
                        &name,
                        CO_TENANCY,
                        State::Unavailable,
                        Depth::Simulated,
                        "the responder's two tenants do not carry their own quotas",
                    )
                }
            }
            None => {
                let outputs: Vec<Result<accel_host::CommandOutput, String>> =
                    std::thread::scope(|scope| {
                        let handles: Vec<_> = commands
                            .iter()
                            .map(|c| scope.spawn(move || self.shell.run(&c[2..], PROBE_DEADLINE)))
                            .collect();
                        handles
                            .into_iter()
                            .map(|h| {
                                h.join()
                                    .unwrap_or_else(|_| Err("the probe's thread panicked".into()))
                            })
                            .collect()
                    });
                co_tenancy_row(preflight, &name, &tenants, outputs)
            }
        };
        row.command = Some(
            commands
                .iter()
                .map(|c| shell_text(c))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        group.checks.push(row);
    }

    /// A synthetic Pod of `manufacturer`'s; under its RuntimeClass in force where the
    /// manufacturer's sliced Pods must run under one (Iluvatar's are refused outside it).
    fn synthetic(
        &self,
        preflight: &dyn Preflight,
        manufacturer: &str,
        uid: &str,
        containers: &[&str],
    ) -> Pod {
        let mut pod = synthetic_pod(uid, containers);
        if preflight.slices_need_runtime_class() {
            pod.runtime_class = manufacturer
                .parse::<Manufacturer>()
                .ok()
                .and_then(|m| self.settings.manufacturers.get(m).runtime_class.clone());
        }
        pod
    }

    /// The sliced rows of a tier that starts no probe: the responder's own injections asserted
    /// on, nothing run, no step printed.
    #[allow(clippy::too_many_arguments)]
    fn injection_rows(
        &self,
        preflight: &dyn Preflight,
        responder: &dyn Responder,
        seat: &Seat,
        name: &str,
        simulated: &((bool, String), (bool, String)),
        reason: &str,
        group: &mut Group,
    ) {
        let row = |capability: &str, (ok, what): &(bool, String)| {
            Row::new(
                name,
                capability,
                if *ok { State::Ok } else { State::Unavailable },
                Depth::Simulated,
                format!("{what}; {reason}"),
            )
        };
        group.checks.push(row(SLICED_RUNTIME_LOADED, &simulated.0));
        group.checks.push(row(SLICED_QUOTA_IN_FORCE, &simulated.1));
        let manufacturer = &group.manufacturer;
        let index = seat.index;
        let tenant = |case: &str, units: u64| {
            let pod = self.synthetic(
                preflight,
                manufacturer,
                &format!("preflight-{manufacturer}-{index}-{case}"),
                &[PROBE_CONTAINER],
            );
            slice_injection(preflight, responder, seat, units, &pod)
                .map(|i| preflight.quota_mib(&i, 0))
        };
        let vram = seat.memory_mib;
        let co_tenancy = match (
            tenant("tenant-a", PROBE_UNITS),
            tenant("tenant-b", SECOND_TENANT_UNITS),
        ) {
            (Ok(a), Ok(b))
                if vram.is_some()
                    && a == vram.map(|v| mib_for_units(PROBE_UNITS, v))
                    && b == vram.map(|v| mib_for_units(SECOND_TENANT_UNITS, v)) =>
            {
                (
                    true,
                    format!(
                        "the responder gives the two tenants their own quotas ({} and {} MiB)",
                        a.unwrap_or_default(),
                        b.unwrap_or_default()
                    ),
                )
            }
            (Ok(a), Ok(b)) => (
                false,
                format!(
                    "the responder's two tenants do not carry their own quotas ({a:?} and {b:?} MiB)"
                ),
            ),
            (Err(e), _) | (_, Err(e)) => (
                false,
                format!("the responder refused a tenant's slice: {e}"),
            ),
        };
        group.checks.push(row(CO_TENANCY, &co_tenancy));
    }

    fn sidecar_row(
        &self,
        preflight: &dyn Preflight,
        responder: &dyn Responder,
        seat: &Seat,
        pod: &Pod,
        name: &str,
    ) -> Row {
        let seats = [seat];
        let owner = responder.respond(&Answer {
            family: Some(Family::Sliced),
            seats: &seats,
            slice_units: PROBE_UNITS,
            cores_percentage: preflight.probe_cores_percentage(),
            partition: None,
            pod,
            container: pod.container(PROBE_CONTAINER),
        });
        let sidecar = responder.respond(&Answer {
            family: None,
            seats: &seats,
            slice_units: 0,
            cores_percentage: None,
            partition: None,
            pod,
            container: pod.container(SIDECAR_CONTAINER),
        });
        let (owner, sidecar) = match (owner, sidecar) {
            (Ok(o), Ok(s)) => (preflight.visible(&o), preflight.visible(&s)),
            (Err(e), _) | (_, Err(e)) => {
                return Row::new(
                    name,
                    SIDECAR_VISIBILITY,
                    State::Unavailable,
                    Depth::Simulated,
                    format!("the responder refused: {e}"),
                );
            }
        };
        let extra: Vec<&String> = sidecar.difference(&owner).collect();
        let mut row = if sidecar.is_empty() {
            Row::new(
                name,
                SIDECAR_VISIBILITY,
                State::Unavailable,
                Depth::Simulated,
                "the sidecar's answer names no accelerator",
            )
        } else if extra.is_empty() {
            Row::new(
                name,
                SIDECAR_VISIBILITY,
                State::Ok,
                Depth::Simulated,
                "the sidecar, answered after its owner, names nothing the owner was not granted; measuring it needs the owner running, and every probe is one-shot",
            )
        } else {
            Row::new(
                name,
                SIDECAR_VISIBILITY,
                State::Unavailable,
                Depth::Simulated,
                format!("the sidecar names {extra:?}, which the owner was not granted"),
            )
        };
        row.detail = Some(format!(
            "owner {} sees {}; {} sees {}",
            PROBE_CONTAINER,
            owner.iter().cloned().collect::<Vec<_>>().join(","),
            SIDECAR_CONTAINER,
            sidecar.iter().cloned().collect::<Vec<_>>().join(",")
        ));
        row
    }
}

struct Probe {
    name: String,
    injection: Injection,
    expected: Option<u64>,
}

/// The simulated assertions on a slice's injection: `(library mounted, quota set as expected)`,
/// each with its reason.
fn simulated_slice(
    preflight: &dyn Preflight,
    injection: &Injection,
    expected: Option<u64>,
) -> ((bool, String), (bool, String)) {
    let library = match preflight.slice_runtime(injection) {
        Some(what) => (true, format!("the responder {what}")),
        None => (
            false,
            "the responder's slice sets nothing that enforces it".to_string(),
        ),
    };
    let quota = match (preflight.quota_mib(injection, 0), expected) {
        (Some(q), Some(e)) if q == e => (true, format!("the responder sets the quota to {q} MiB")),
        (got, e) => (
            false,
            format!("the responder's quota is {got:?} MiB, expected {e:?}"),
        ),
    };
    (library, quota)
}

fn simulated_rows(
    name: &str,
    simulated: &((bool, String), (bool, String)),
    reason: &str,
    command: &[String],
) -> (Row, Row) {
    let row = |capability: &str, (ok, what): &(bool, String)| {
        let mut row = Row::new(
            name,
            capability,
            if *ok { State::Ok } else { State::Unavailable },
            Depth::Simulated,
            format!("{what}; {reason}"),
        );
        row.command = Some(shell_text(command));
        row
    };
    (
        row(SLICED_RUNTIME_LOADED, &simulated.0),
        row(SLICED_QUOTA_IN_FORCE, &simulated.1),
    )
}

fn probe_failed(out: &accel_host::CommandOutput) -> String {
    format!(
        "the probe container did not run to its end (exit {}): {}",
        status_text(out),
        first_line(&out.stderr_text())
    )
}

fn measured_rows(
    preflight: &dyn Preflight,
    name: &str,
    probe: &Probe,
    vram: Option<u64>,
    out: Result<accel_host::CommandOutput, String>,
    command: &[String],
) -> (Row, Row) {
    let text = shell_text(command);
    let finish = |mut row: Row, evidence: Option<String>| {
        row.command = Some(text.clone());
        row.evidence = evidence.filter(|e| !e.is_empty());
        row
    };
    let out = match out {
        Ok(out) => out,
        Err(reason) => {
            let r = format!("the probe could not be started: {reason}");
            return (
                finish(
                    Row::new(
                        name,
                        SLICED_RUNTIME_LOADED,
                        State::Unavailable,
                        Depth::Measured,
                        r.clone(),
                    ),
                    None,
                ),
                finish(
                    Row::new(
                        name,
                        SLICED_QUOTA_IN_FORCE,
                        State::Unavailable,
                        Depth::Measured,
                        r,
                    ),
                    None,
                ),
            );
        }
    };
    let evidence = format!("{}{}", out.stdout_text(), out.stderr_text());
    if !out.success() {
        let r = probe_failed(&out);
        return (
            finish(
                Row::new(
                    name,
                    SLICED_RUNTIME_LOADED,
                    State::Unavailable,
                    Depth::Measured,
                    r.clone(),
                ),
                Some(evidence.clone()),
            ),
            finish(
                Row::new(
                    name,
                    SLICED_QUOTA_IN_FORCE,
                    State::Unavailable,
                    Depth::Measured,
                    r,
                ),
                Some(evidence),
            ),
        );
    }
    let reading = preflight.read_probe(&out.stdout_text());
    let library = preflight.library_in_container(&probe.injection);
    let loaded = match (&reading.runtime, &reading.maps, &library) {
        // The driver's own record (Hygon's kfd vgpu entry) says it, whatever the maps show.
        (Some(Ok(record)), _, _) => Row::new(
            name,
            SLICED_RUNTIME_LOADED,
            State::Ok,
            Depth::Measured,
            record.clone(),
        ),
        (Some(Err(why)), _, _) => Row::new(
            name,
            SLICED_RUNTIME_LOADED,
            State::Unavailable,
            Depth::Measured,
            why.clone(),
        ),
        (None, None, _) => Row::new(
            name,
            SLICED_RUNTIME_LOADED,
            State::Unavailable,
            Depth::Measured,
            "the probe printed no maps between its markers",
        ),
        (None, Some(_), None) => Row::new(
            name,
            SLICED_RUNTIME_LOADED,
            State::Unavailable,
            Depth::Measured,
            "the responder's slice mounts no preload library",
        ),
        (None, Some(maps), Some(path)) if maps.iter().any(|l| l.contains(path.as_str())) => {
            Row::new(
                name,
                SLICED_RUNTIME_LOADED,
                State::Ok,
                Depth::Measured,
                format!("{path} is mapped into the probe's process"),
            )
        }
        (None, Some(_), Some(path)) => Row::new(
            name,
            SLICED_RUNTIME_LOADED,
            State::Unavailable,
            Depth::Measured,
            format!("{path} is not mapped into the probe's process"),
        ),
    };
    let quota = quota_row(
        name,
        SLICED_QUOTA_IN_FORCE,
        reading.memory_mib.first().copied(),
        probe.expected,
        vram,
    );
    (
        finish(loaded, Some(evidence.clone())),
        finish(quota, Some(evidence)),
    )
}

fn quota_row(
    name: &str,
    capability: &str,
    seen: Option<u64>,
    expected: Option<u64>,
    vram: Option<u64>,
) -> Row {
    match (seen, expected) {
        (None, _) => Row::new(
            name,
            capability,
            State::Unavailable,
            Depth::Measured,
            "the probe reported no memory figure",
        ),
        (Some(seen), Some(expected)) if seen == expected => Row::new(
            name,
            capability,
            State::Ok,
            Depth::Measured,
            format!("the probe sees its quota, {seen} MiB"),
        ),
        (Some(seen), _) if Some(seen) == vram => Row::new(
            name,
            capability,
            State::Unavailable,
            Depth::Measured,
            format!(
                "the probe sees the whole accelerator ({seen} MiB) instead of its quota ({} MiB)",
                expected.map_or("?".into(), |e| e.to_string())
            ),
        ),
        (Some(seen), expected) => Row::new(
            name,
            capability,
            State::Unavailable,
            Depth::Measured,
            format!(
                "the probe sees {seen} MiB, not its quota ({} MiB)",
                expected.map_or("?".into(), |e| e.to_string())
            ),
        ),
    }
}

fn co_tenancy_row(
    preflight: &dyn Preflight,
    name: &str,
    tenants: &[Probe],
    outputs: Vec<Result<accel_host::CommandOutput, String>>,
) -> Row {
    let mut seen = Vec::new();
    let mut evidence = String::new();
    for (tenant, out) in tenants.iter().zip(outputs) {
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                return Row::new(
                    name,
                    CO_TENANCY,
                    State::Unavailable,
                    Depth::Measured,
                    format!("{}: could not be started: {e}", tenant.name),
                );
            }
        };
        evidence.push_str(&format!(
            "{}:\n{}{}",
            tenant.name,
            out.stdout_text(),
            out.stderr_text()
        ));
        if !out.success() {
            let mut row = Row::new(
                name,
                CO_TENANCY,
                State::Unavailable,
                Depth::Measured,
                format!("{}: {}", tenant.name, probe_failed(&out)),
            );
            row.evidence = Some(evidence);
            return row;
        }
        let reading = preflight.read_probe(&out.stdout_text());
        seen.push((
            tenant.name.clone(),
            reading.memory_mib.first().copied(),
            tenant.expected,
        ));
    }
    let wrong: Vec<String> = seen
        .iter()
        .filter(|(_, s, e)| s.is_none() || s != e)
        .map(|(n, s, e)| {
            format!(
                "{n} sees {} MiB, its quota is {} MiB",
                s.map_or("no".into(), |v| v.to_string()),
                e.map_or("?".into(), |v| v.to_string())
            )
        })
        .collect();
    let mut row = if wrong.is_empty() {
        let figures: Vec<String> = seen
            .iter()
            .map(|(n, s, _)| format!("{n} {} MiB", s.unwrap_or(0)))
            .collect();
        Row::new(
            name,
            CO_TENANCY,
            State::Ok,
            Depth::Measured,
            format!(
                "two slices ran together, each seeing its own quota: {}",
                figures.join(", ")
            ),
        )
    } else {
        Row::new(
            name,
            CO_TENANCY,
            State::Unavailable,
            Depth::Measured,
            wrong.join("; "),
        )
    };
    row.evidence = Some(evidence);
    row
}

/// How a row names an accelerator: its UUID, else its index.
fn accelerator_name(a: &Accelerator) -> String {
    a.uuid.clone().unwrap_or_else(|| a.index.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_backend::respond::{EngineFacts, InjectionStrategy};
    use accel_core::inventory::Source;
    use accel_plugin::pods::MemoryPods;
    use accel_plugin::service::Offer;
    use accel_plugin::testing::Kubelet;
    use accel_plugin::{Config, DevicePlugins};

    const SLICED: &str = "nvidia.com/gpu.sliced";

    /// Hygon's probe (spec §8): the driver's new kfd vgpu record is the runtime evidence, not
    /// the maps (it maps no library); no record is no evidence; the quota is the container's
    /// vdev0.conf `mem`, compared with what the responder rendered.
    #[test]
    fn a_drivers_record_is_the_runtime_evidence_where_the_manufacturer_reads_one() {
        let dir = tempfile::tempdir().unwrap();
        let conf_dir = dir.path().join("etc/vdev/docker");
        std::fs::create_dir_all(&conf_dir).unwrap();
        std::fs::write(
            conf_dir.join("vdev0.conf"),
            "PciBusId: 0000:09:00.0\nmem: 32760 MiB\n",
        )
        .unwrap();
        let hygon = accel_hygon::preflight::HygonPreflight;
        let mut injection = Injection::default();
        injection.mounts.push(accel_backend::respond::Mount {
            container_path: "/etc/vdev/docker".into(),
            host_path: conf_dir.display().to_string(),
            read_only: true,
        });
        let expected = hygon.quota_mib(&injection, 0);
        assert_eq!(expected, Some(32760), "the rendered file's mem");
        let probe = Probe {
            name: "dcu-0".into(),
            injection,
            expected,
        };
        let answer = |stdout: &str| {
            Ok(accel_host::CommandOutput {
                status: Some(0),
                stdout: stdout.as_bytes().to_vec(),
                stderr: Vec::new(),
            })
        };
        let (loaded, quota) = measured_rows(
            &hygon,
            "dcu-0",
            &probe,
            Some(65520),
            answer(
                "gpustack-preflight-mem: 32760 MiB\ngpustack-preflight-vgpu: /sys/devices/virtual/kfd/kfd/vgpu/0x2b6d@0/entry Indentifier: 91\n",
            ),
            &["docker".into()],
        );
        assert_eq!(loaded.state, "ok", "{}", loaded.reason);
        assert!(
            loaded.reason.contains("Indentifier: 91"),
            "{}",
            loaded.reason
        );
        assert_eq!(quota.state, "ok", "{}", quota.reason);
        let (loaded, quota) = measured_rows(
            &hygon,
            "dcu-0",
            &probe,
            Some(65520),
            answer(
                "gpustack-preflight-mem: 65520 MiB\ngpustack-preflight-vgpu-none: no new record in x within 30 s\n",
            ),
            &["docker".into()],
        );
        assert_eq!(loaded.state, "unavailable");
        assert!(loaded.reason.contains("no new record"), "{}", loaded.reason);
        assert_eq!(quota.state, "unavailable");
        assert!(
            quota.reason.contains("whole accelerator"),
            "{}",
            quota.reason
        );
    }

    fn setup(dir: &Path, strategy: InjectionStrategy) -> ResponderSetup {
        ResponderSetup {
            scratch: None,
            strategy,
            runtime_major: Some(13),
            pod_dir_root: dir.join("pods"),
            preload_dir: dir.join("preload"),
            library_dir: PathBuf::from("/var/lib/gpustack/operator/lib"),
            engine: std::sync::Arc::new(EngineFacts::default()),
            accelerators: Vec::new(),
            host: None,
            commands: None,
            runtime_class: None,
            writes: None,
        }
    }

    fn accelerator() -> Accelerator {
        let mut a = Accelerator::new(0, Source::Driver);
        a.uuid = Some("GPU-12345678-aaaa-bbbb-cccc-0123456789ab".into());
        a.memory_mib = Some(24564);
        a
    }

    /// The probe's environment is what Allocate injects for the same slice: the same
    /// responder code (NVIDIA's factory), asked through the real plugin by the kubelet
    /// emulator for a Pod asking half the GPU, and by preflight's synthetic allocation.
    #[tokio::test]
    async fn the_probe_gets_what_allocate_injects_for_the_same_slice() {
        for strategy in [InjectionStrategy::Envvar, InjectionStrategy::CdiAnnotations] {
            let dir = tempfile::tempdir().unwrap();
            let backend = accel_nvidia::backend::backend();
            let mut inventory = Inventory::default();
            let mut section = accel_core::ManufacturerInventory::empty(Manufacturer::Nvidia);
            section.accelerators.push(accelerator());
            inventory.manufacturers.push(section);
            let seats = crate::daemon::seats_of(&inventory, Manufacturer::Nvidia);
            let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
            let config = Config {
                kubelet_dir: dir.path().join("kubelet"),
                data_dir: dir.path().join("data"),
                settings: accel_plugin::settings::Settings::default(),
                offer: Offer::of(Manufacturer::Nvidia),
                seats: seats.clone(),
                responder: (backend.responder)(setup(&dir.path().join("daemon"), strategy)),
                poll_interval: std::time::Duration::from_millis(20),
                metrics: Default::default(),
                partitions: None,
            };
            let plugins = DevicePlugins::start(config, Arc::new(kubelet.pods().clone()))
                .await
                .unwrap();
            let resources = plugins.resources();
            let names: Vec<&str> = resources.iter().map(String::as_str).collect();
            kubelet.wait_for(&names).await;
            let mut pod = synthetic_pod("preflight-nvidia-0-quota", &[PROBE_CONTAINER]);
            pod.containers[0].limits = BTreeMap::from([
                (SLICED.to_string(), "1".to_string()),
                (format!("{SLICED}.memory-percentage"), "50".to_string()),
            ]);
            kubelet.create(pod);
            let admission = kubelet.admit("preflight-nvidia-0-quota").await.unwrap();
            let allocated = &admission[PROBE_CONTAINER][SLICED];

            let responder = (backend.responder)(setup(&dir.path().join("preflight"), strategy));
            let probe = slice_injection(
                &accel_nvidia::preflight::NvidiaPreflight,
                responder.as_ref(),
                &seats[0],
                PROBE_UNITS,
                &synthetic_pod("preflight-nvidia-0-quota", &[PROBE_CONTAINER]),
            )
            .unwrap();
            assert_eq!(probe.envs, allocated.envs, "{strategy:?}");
            assert_eq!(probe.annotations, allocated.annotations, "{strategy:?}");
            assert_eq!(probe.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], "12282m");
            // The mounts differ only in where the per-Pod directory lives.
            let containers = |m: &[accel_backend::respond::Mount]| {
                m.iter()
                    .map(|m| m.container_path.clone())
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                containers(&probe.mounts),
                allocated
                    .mounts
                    .iter()
                    .map(|m| m.container_path.clone())
                    .collect::<Vec<_>>()
            );
            plugins.stop().await;
        }
    }

    #[test]
    fn a_panic_is_contained_to_its_group() {
        let group = Group {
            manufacturer: "nvidia".into(),
            timestamp: "t".into(),
            detection: Detection::new(State::Ok, Depth::Measured, 2, "agree".into()),
            checks: Vec::new(),
            steps: Vec::new(),
            note: None,
        };
        let names = vec!["GPU-a".to_string(), "GPU-b".to_string()];
        let out = contained(group.clone(), &names, |g| {
            g.checks
                .push(Row::new("GPU-a", "x", State::Ok, Depth::Declared, "r"));
            panic!("the reader fell over");
        });
        assert_eq!(out.detection.state, "ok");
        assert_eq!(out.checks.len(), 2);
        assert!(
            out.checks
                .iter()
                .all(|r| r.capability == PREFLIGHT_PANICKED && r.unavailable())
        );
        assert_eq!(out.note.as_deref(), Some("panicked: the reader fell over"));
        let fine = contained(group, &names, |g| g.note = Some("fine".into()));
        assert_eq!(fine.note.as_deref(), Some("fine"));
        assert!(fine.checks.is_empty());
    }

    #[test]
    fn rendered_paths_are_mounted_as_the_host_names_them() {
        let places = Places {
            files_root: PathBuf::from("/host"),
            render_dir: PathBuf::from("/tmp/gpustack-preflight-7"),
            render_host: "/var/lib/gpustack/operator/preflight/rendered".into(),
        };
        assert_eq!(
            places.host_path("/tmp/gpustack-preflight-7/pods/u"),
            "/var/lib/gpustack/operator/preflight/rendered/pods/u"
        );
        assert_eq!(places.host_path("/host/var/x"), "/var/x");
        assert_eq!(places.host_path("/hostile/x"), "/hostile/x");
        assert_eq!(
            places.host_path("/var/lib/gpustack/operator/lib/cuda-13/libvgpu.so"),
            "/var/lib/gpustack/operator/lib/cuda-13/libvgpu.so"
        );
    }

    #[test]
    fn the_lock_admits_one_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/lock");
        let first = lock(&path).unwrap();
        let refused = lock(&path).unwrap_err();
        assert!(
            refused.contains("another preflight holds the lock"),
            "{refused}"
        );
        drop(first);
        assert!(lock(&path).is_ok());
    }

    #[test]
    fn quota_rows_tell_the_whole_gpu_from_another_figure() {
        assert_eq!(
            quota_row("g", "c", Some(12282), Some(12282), Some(24564)).state,
            "ok"
        );
        let whole = quota_row("g", "c", Some(24564), Some(12282), Some(24564));
        assert!(
            whole.reason.contains("whole accelerator"),
            "{}",
            whole.reason
        );
        let other = quota_row("g", "c", Some(100), Some(12282), Some(24564));
        assert!(
            other.reason.contains("100 MiB, not its quota"),
            "{}",
            other.reason
        );
        assert!(quota_row("g", "c", None, Some(1), None).unavailable());
    }

    /// The structure other manufacturers' rows plug into: a backend without preflight
    /// knowledge answers detection alone (the container's own view), one without a backend is
    /// reported unavailable; neither stops the other groups.
    #[test]
    fn a_backend_without_preflight_rows_answers_detection_alone() {
        let host =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hosts/dual-rtx-a5000");
        let node = Node::open(&host).unwrap();
        let options = Options {
            manufacturers: vec![Manufacturer::Nvidia, Manufacturer::Amd],
            dry_run: true,
            probe_image: None,
            runtime: None,
            pci_gate: true,
            deadlines: Deadlines::default(),
            pci_classes: PciClassPrefixes::default(),
        };
        let entries = [
            (
                Manufacturer::Nvidia,
                Entry {
                    backend: Some(accel_nvidia::backend::backend()),
                    preflight: None,
                },
            ),
            (
                Manufacturer::Amd,
                Entry {
                    backend: None,
                    preflight: None,
                },
            ),
        ];
        let doc = run(&node, &Settings::default(), &options, &entries);
        let nvidia = &doc.accelerators[0];
        assert_eq!(
            (
                nvidia.detection.state,
                nvidia.detection.depth,
                nvidia.detection.accelerators
            ),
            ("ok", "declared", 2)
        );
        assert!(
            nvidia.detection.reason.contains("container's own view"),
            "{}",
            nvidia.detection.reason
        );
        assert!(nvidia.checks.is_empty());
        assert!(
            nvidia
                .note
                .as_deref()
                .unwrap()
                .contains("no preflight rows for nvidia")
        );
        let amd = &doc.accelerators[1];
        assert_eq!(amd.detection.state, "unavailable");
        assert_eq!(amd.detection.reason, "this build has no amd backend");
        assert!(doc.failed());
    }
}
