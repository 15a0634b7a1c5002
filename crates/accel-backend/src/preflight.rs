//! Preflight's per-manufacturer knowledge (`device-manager preflight`, seed 000 "Preflight
//! checks"): how the host's own vendor CLI lists the accelerators, the driver-read row, which
//! accelerators are partition-backed, how a probe container is given the devices, what it runs
//! and how its output reads. The pass itself (questions, states, depths, the container runtime,
//! the lock, the document) is manufacturer-neutral and lives in the binary; it drives the
//! manufacturer's own [`crate::Responder`] for every injection, so this trait never builds one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use accel_core::Manufacturer;
use accel_core::inventory::Accelerator;
use accel_host::{Commands, Host, HostWrites};

use crate::respond::Injection;

/// A row's answer (seed 000: exhaustive and mutually exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    /// The capability works, at the depth the row states.
    Ok,
    /// The accelerator does not offer it: nothing to check.
    NotDeclared,
    /// Offered, and this pass did not establish it.
    Unavailable,
}

impl State {
    /// The spelling the document uses.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ok => "ok",
            State::NotDeclared => "not-declared",
            State::Unavailable => "unavailable",
        }
    }
}

/// How far a row was taken (never deeper than reached).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Depth {
    /// The driver was asked and answered.
    Declared,
    /// The allocator's own code produced the artifact and it was asserted on.
    Simulated,
    /// Something ran and was observed.
    Measured,
}

impl Depth {
    /// The spelling the document uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Depth::Declared => "declared",
            Depth::Simulated => "simulated",
            Depth::Measured => "measured",
        }
    }
}

/// The container CLI a probe is started with (on the host, through `chroot`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerCli {
    Docker,
    Nerdctl,
    Ctr,
}

impl ContainerCli {
    /// The program's name.
    pub fn program(self) -> &'static str {
        match self {
            ContainerCli::Docker => "docker",
            ContainerCli::Nerdctl => "nerdctl",
            ContainerCli::Ctr => "ctr",
        }
    }
}

/// One driver-read row (NVIDIA: `mig-partitioning`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverRead {
    pub capability: &'static str,
    pub state: State,
    pub reason: String,
}

/// The driver-read row of a MIG-capable manufacturer (NVIDIA, T-Head): its name.
pub const MIG_PARTITIONING: &str = "mig-partitioning";

/// `mig-partitioning` of one accelerator, read off the detection (never by creating an
/// instance): `ok` when MIG mode is on and the driver declares at least one profile,
/// `unavailable` when the mode is on and no profile could be read (`listing` names the command
/// that lists them), `not-declared` when MIG is off or absent (`device`: what the vendor calls
/// the accelerator, `GPU`, `PPU`).
pub fn mig_partitioning(accelerator: &Accelerator, device: &str, listing: &str) -> DriverRead {
    use accel_core::inventory::MigMode;
    let (state, reason) = match accelerator.mig_mode {
        Some(MigMode::Enabled) if !accelerator.partition_profiles.is_empty() => {
            let names: Vec<&str> = accelerator
                .partition_profiles
                .iter()
                .map(|p| p.name.as_str())
                .collect();
            (
                State::Ok,
                format!("MIG mode is on; profiles {}", names.join(", ")),
            )
        }
        Some(MigMode::Enabled) => (
            State::Unavailable,
            format!("MIG mode is on but the driver named no profile ({listing})"),
        ),
        Some(MigMode::Disabled) => (State::NotDeclared, "MIG mode is off".into()),
        None => (
            State::NotDeclared,
            format!("the {device} has no MIG mode (not MIG-capable)"),
        ),
    };
    DriverRead {
        capability: MIG_PARTITIONING,
        state,
        reason,
    }
}

/// What a row that asks the node itself (not only the detected inventory) is given.
pub struct NodeAccess<'a> {
    /// The vendor CLI as this process runs it (the container's own view of the driver).
    pub commands: &'a dyn Commands,
    /// The host's files, through the host root.
    pub host: &'a dyn Host,
    /// `--dry-run`: nothing may be written, on the host or in the driver.
    pub dry_run: bool,
    /// Each call's deadline.
    pub deadline: Duration,
}

/// What a probe container printed, as the manufacturer reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeReading {
    /// The lines between the maps markers (`None`: the markers were not both printed).
    pub maps: Option<Vec<String>>,
    /// The memory each visible accelerator reports, in MiB, in the order printed.
    pub memory_mib: Vec<u64>,
    /// The driver's own record that the slice's runtime took hold (Hygon: a new `Indentifier:`
    /// line in the card's kfd `vgpu` entry while the probe's workload ran): `Ok` with the
    /// record, `Err` with why none was seen; `None`: the maps say it (a preload library).
    pub runtime: Option<Result<String, String>>,
}

/// How far a manufacturer's pass can go (spec: Full = NVIDIA, Ascend, AMD, T-Head; a container
/// probe without a driver read = Hygon; a driver read and the injection = Cambricon, MetaX; the
/// injection alone = Iluvatar, Moore Threads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// A driver-read row, a container probe, and the host cross-check where a CLI is known.
    Full,
    /// A container probe; no driver-read row.
    ProbeWithoutDriverRead,
    /// A driver-read row; no container probe (capability rows stop at `simulated`).
    DriverReadAndInjection,
    /// Neither: the allocator reads no driver to answer, so the injection is all there is to
    /// check (capability rows stop at `simulated`).
    InjectionOnly,
}

impl Tier {
    /// Whether the pass starts probe containers for this tier.
    pub fn probes(self) -> bool {
        matches!(self, Tier::Full | Tier::ProbeWithoutDriverRead)
    }

    /// The spelling the document and messages use.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Full => "full",
            Tier::ProbeWithoutDriverRead => "container probe, no driver read",
            Tier::DriverReadAndInjection => "driver read and injection",
            Tier::InjectionOnly => "injection only",
        }
    }
}

/// One manufacturer's preflight knowledge. The probe's methods have answers for a tier that
/// starts no probe container (no listing, no image, no flags, an empty script).
pub trait Preflight: Send + Sync {
    fn manufacturer(&self) -> Manufacturer;
    /// How far this manufacturer's pass goes.
    fn tier(&self) -> Tier;
    /// The note the group carries (why a row is absent); `None`: none.
    fn note(&self) -> Option<String> {
        None
    }
    /// Whether a sliced Pod must run under the manufacturer's RuntimeClass (the synthetic Pods
    /// then carry it).
    fn slices_need_runtime_class(&self) -> bool {
        false
    }
    /// The host's own vendor CLI listing the accelerators (run as `chroot <host-root> …`);
    /// `None` where no host reader is established.
    fn host_listing(&self) -> Option<Vec<String>> {
        None
    }
    /// How many accelerators a successful listing names.
    fn count_listed(&self, _stdout: &str) -> usize {
        0
    }
    /// The driver-read row of one accelerator, when the manufacturer has one.
    fn driver_read(&self, _accelerator: &Accelerator) -> Option<DriverRead> {
        None
    }
    /// The driver-read row where it asks the node (Ascend's `container-share`, established by
    /// a write put straight back); the default is [`Preflight::driver_read`].
    fn driver_read_on(
        &self,
        accelerator: &Accelerator,
        _node: &NodeAccess<'_>,
    ) -> Option<DriverRead> {
        self.driver_read(accelerator)
    }
    /// Further rows of host state, filed on the accelerator at `declared` (Ascend A5's
    /// `ascend-docker-runtime` and `hccl-ranktable`); empty where there are none.
    fn host_state_rows(
        &self,
        _accelerator: &Accelerator,
        _node: &NodeAccess<'_>,
    ) -> Vec<DriverRead> {
        Vec::new()
    }
    /// The host CLI's name, for the cross-check's own wording (`the host's own <cli> reports
    /// …`); `None`: the pass's generic wording.
    fn host_cli(&self) -> Option<&'static str> {
        None
    }
    /// What this container lacks that would let it see the host's accelerators, filtered to
    /// what is really absent (the cross-check's hints when the host lists more).
    fn missing_mounts(&self, _host: &dyn Host, _accelerators: &[Accelerator]) -> Vec<String> {
        Vec::new()
    }
    /// The commands the responder is given for the pass's synthetic allocations (`None`:
    /// none). They must not change the driver: a manufacturer whose grants write driver state
    /// (Ascend's container-share flag) answers from the row that establishes it instead.
    fn simulation_commands(&self) -> Option<Arc<dyn Commands>> {
        None
    }
    /// The control-file writes the responder is given for the pass's synthetic allocations
    /// (`None`: none). A recorder: a simulated grant never makes a driver object (MetaX's
    /// sGPU subdevice would have to be torn down).
    fn simulation_writes(&self) -> Option<Arc<dyn HostWrites>> {
        None
    }
    /// Whether the accelerator serves only hardware partitions (its management rows are
    /// answered at `declared`, and it has no sliced rows).
    fn partition_backed(&self, accelerator: &Accelerator) -> bool;
    /// The default probe image for the node's runtime major; `None`: `--probe-image` is
    /// required.
    fn probe_image(&self, _runtime_major: Option<u32>) -> Option<String> {
        None
    }
    /// The flags that let `cli` hand the granted devices to a container; `None`: this CLI has
    /// no way to (the steps are printed instead of run).
    fn device_flags(&self, _cli: ContainerCli) -> Option<Vec<String>> {
        None
    }
    /// The shell script a probe runs (prints the maps between markers, then the memory).
    fn probe_script(&self) -> String {
        String::new()
    }
    /// Environment a probe container gets over the injection's own (T-Head's
    /// `LIBHGGC_LOG_LEVEL=2`, so the shim's debug lines are in what the probe prints); empty
    /// where the injection is all.
    fn probe_env(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
    /// What a probe image must bring, for the words of a pass given none where the
    /// manufacturer has no default.
    fn probe_image_needs(&self) -> &'static str {
        "the workload image brings the runtime"
    }
    /// The cores percentage the pass's synthetic slices ask (`None`: none, as a Pod that names
    /// no `.cores-percentage`). Hygon's slices partition the compute units and a card holds at
    /// most four, so its four synthetic slices of a card (the sidecar's owner, the quota probe,
    /// two tenants) each ask a quarter.
    fn probe_cores_percentage(&self) -> Option<u32> {
        None
    }
    /// Reads a probe's standard output.
    fn read_probe(&self, _stdout: &str) -> ProbeReading {
        ProbeReading::default()
    }
    /// The memory quota (MiB) an injection sets for the accelerator at `position`.
    fn quota_mib(&self, injection: &Injection, position: usize) -> Option<u64>;
    /// What in the injection enforces the slice inside the container, as a phrase completing
    /// "the responder …" (NVIDIA: "mounts the preload library at <path>"); `None`: nothing.
    fn slice_runtime(&self, injection: &Injection) -> Option<String>;
    /// Where the injection puts the preload library inside the container (what a probe looks
    /// for in its maps); `None`: no library.
    fn library_in_container(&self, injection: &Injection) -> Option<String>;
    /// The accelerators an injection makes visible (by the names it uses).
    fn visible(&self, injection: &Injection) -> BTreeSet<String>;
}
