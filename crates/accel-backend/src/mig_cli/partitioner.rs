//! A [`Partitioner`] for any tool speaking the `nvidia-smi mig` dialect ([`super::listing`]):
//!
//! - geometry: `<tool> mig -i <target> -lgip` and `-lgipp`; a profile whose name is no
//!   resource-name segment (`+me`, `+me.all`, `+gfx`) is left out silently, one with no legal
//!   placement is left out with a line naming the accelerator and the profile;
//! - instances: `-i <target> -lgi`, `-lci`, and the tool's own listing of MIG UUIDs
//!   ([`MigTool::mig_uuids`]) — or, where the vendor keeps its instances elsewhere, the tool's
//!   own reading of them ([`MigTool::instances`]: Hygon's registry files);
//! - create: first what the tool requires of the accelerator ([`MigTool::before_create`]),
//!   then `-i <target> -cgi <profile-id>:<start> -C` (one GI at that placement and one CI
//!   covering it, the tool's default compute profile), or the tool's own form
//!   ([`MigTool::create_call`]: Hygon's names no placement, so the driver picks it and the
//!   instance is kept only where it picked the one asked for). Whatever fails — the GI made and
//!   not the CI, no answer within the deadline, the instance not listed afterwards, or listed
//!   elsewhere — what this call made is destroyed before the error returns;
//! - busy: the tool's process listing ([`MigTool::busy`]);
//! - destroy: `-i <target> -gi G -ci C -dci`, then `-i <target> -gi G -dgi`. Every command
//!   carries `-i`, and every destroy its `-gi` (a bare `-dgi` destroys every GI of the card).
//!
//! Every call is bounded (the partitioner's deadline) and the calls of one accelerator run one
//! at a time under that accelerator's lock; accelerators do not wait for each other.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use accel_host::{CommandOutput, Commands, Host, RunFailure, run_bounded};

use super::listing;
use crate::partition::{
    Geometry, Instance, PartitionError, PartitionErrorKind, PartitionGpu, Partitioner,
    ProfileGeometry, RecordLayout,
};

/// How long one call of the tool may take, unless the partitioner is made with another.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// How a tool makes one GPU instance with the compute instance covering it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateCall {
    /// The whole argv.
    pub argv: Vec<String>,
    /// The call names no placement: the driver picks one, and the instance is kept only where
    /// it picked the one asked for.
    pub driver_places: bool,
    /// The tool's answer to a create is not known to print the ids it made (`created GPU
    /// instance ID <g>`): when it does not, the instance the call made is the one listed
    /// afterwards that was not listed before.
    pub ids_by_listing: bool,
}

/// What differs between the tools that speak the dialect.
pub trait MigTool: Send + Sync + std::fmt::Debug {
    /// The program (`nvidia-smi`, `ppu-smi`).
    fn program(&self) -> &'static str;

    /// What `-i` names `gpu` by: its index unless the tool takes something steadier.
    fn target(&self, gpu: &PartitionGpu) -> String {
        gpu.index.to_string()
    }

    /// Whether a row a `-i <target>` listing prints for device `row` (the listing's first
    /// column) is `gpu`'s.
    fn row_is(&self, gpu: &PartitionGpu, row: u32) -> bool {
        row == gpu.index
    }

    /// A profile name in the inventory's spelling, from the listing's (`3g.40gb` for
    /// nvidia-smi, unchanged).
    fn profile_name(&self, listed: &str) -> String {
        listed.to_string()
    }

    /// The device UUID (`MIG-…`) of each of `gpu`'s compute instances `computes`
    /// (`(GPU instance, compute instance)`, ascending); an error when they cannot be paired,
    /// never a guess.
    fn mig_uuids(
        &self,
        cli: &Cli<'_>,
        gpu: &PartitionGpu,
        computes: &[(u32, u32)],
    ) -> Result<BTreeMap<(u32, u32), String>, PartitionError>;

    /// The GPU instances of `gpu` a compute process runs on, ascending; a compute process the
    /// listing places on no instance is an `Unreadable` error.
    fn busy(&self, cli: &Cli<'_>, gpu: &PartitionGpu) -> Result<Vec<u32>, PartitionError>;

    /// [`Partitioner::record_layout`] for this tool's manufacturer.
    fn record_layout(&self) -> RecordLayout {
        RecordLayout::Partitions
    }

    /// How one GI of `profile_id` at memory slice `start` and its CI are made: the dialect's
    /// `<tool> mig -i <target> -cgi <profile-id>:<start> -C` unless the tool documents another
    /// form.
    fn create_call(&self, gpu: &PartitionGpu, profile_id: u32, start: u32) -> CreateCall {
        CreateCall {
            argv: [self.program(), "mig", "-i"]
                .into_iter()
                .map(str::to_string)
                .chain([
                    self.target(gpu),
                    "-cgi".into(),
                    format!("{profile_id}:{start}"),
                    "-C".into(),
                ])
                .collect(),
            driver_places: false,
            ids_by_listing: false,
        }
    }

    /// `gpu`'s live instances as the tool's vendor keeps them, where that is not the dialect's
    /// `-lgi`/`-lci` listings (Hygon: the driver's registry files); `None`: the listings.
    fn instances(
        &self,
        cli: &Cli<'_>,
        gpu: &PartitionGpu,
    ) -> Option<Result<Vec<Instance>, PartitionError>> {
        let _ = (cli, gpu);
        None
    }

    /// [`Partitioner::marker_facts`] for this tool's manufacturer.
    fn marker_facts(
        &self,
        gpu: &PartitionGpu,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<Vec<(&'static str, String)>, PartitionError> {
        let _ = (gpu, gpu_instance, compute_instance);
        Ok(Vec::new())
    }

    /// What must hold of `gpu` before an instance is made on it, checked under its lock
    /// before [`Partitioner::create`] makes any call (T-Head: the card's device node proves
    /// it addresses the card, spec/thead.md §6.3 step 2). An error refuses the create with
    /// nothing made, so a card that fails it costs no create and destroy on every try.
    fn before_create(&self, cli: &Cli<'_>, gpu: &PartitionGpu) -> Result<(), PartitionError> {
        let _ = (cli, gpu);
        Ok(())
    }

    /// This tool reading the node's files on `host` ([`Partitioner::on_host`]); `None`: it
    /// reads none.
    fn on_host(&self, host: Arc<dyn Host>) -> Option<Self>
    where
        Self: Sized,
    {
        let _ = host;
        None
    }
}

/// The node's programs under the partitioner's deadline, for a [`MigTool`]'s own reads.
pub struct Cli<'a> {
    commands: &'a dyn Commands,
    deadline: Duration,
}

impl Cli<'_> {
    /// Runs `argv`; an answer within the deadline is `Ok` whatever its exit status.
    pub fn run(&self, gpu: &PartitionGpu, argv: &[&str]) -> Result<CommandOutput, PartitionError> {
        match run_bounded(self.commands, argv, self.deadline) {
            Ok(out) | Err(RunFailure::Exited { output: out, .. }) => Ok(out),
            Err(e @ RunFailure::TimedOut { .. }) => {
                Err(PartitionError::new(gpu, Kind::TimedOut, e.to_string()))
            }
            Err(e) => Err(PartitionError::new(gpu, Kind::Failed, e.to_string())),
        }
    }

    /// Runs `argv` and answers its standard output; a failed run is an error naming the
    /// command and the first line it printed.
    pub fn output(
        &self,
        gpu: &PartitionGpu,
        argv: &[&str],
    ) -> Result<CommandOutput, PartitionError> {
        let out = self.run(gpu, argv)?;
        if !out.success() {
            return Err(PartitionError::new(
                gpu,
                Kind::Failed,
                format!("{}: {}", argv.join(" "), first_line(&out)),
            ));
        }
        Ok(out)
    }
}

/// The GPU instances compute processes run on, ascending and once each, from the tool's
/// process listing (`(GPU instance, pid)` of each compute process on the accelerator); a
/// process the listing places on no instance is an `Unreadable` error naming `call` and it.
pub fn busy_instances(
    gpu: &PartitionGpu,
    call: &str,
    processes: impl IntoIterator<Item = (Option<u32>, Option<u32>)>,
) -> Result<Vec<u32>, PartitionError> {
    let mut busy = Vec::new();
    for (gpu_instance, pid) in processes {
        let Some(gi) = gpu_instance else {
            return Err(PartitionError::new(
                gpu,
                Kind::Unreadable,
                format!(
                    "{call}: compute process {} runs on no GPU instance it names",
                    pid.map_or_else(|| "?".to_string(), |p| p.to_string())
                ),
            ));
        };
        busy.push(gi);
    }
    busy.sort_unstable();
    busy.dedup();
    Ok(busy)
}

/// A partitioner driving one [`MigTool`], one accelerator at a time.
#[derive(Debug)]
pub struct CliPartitioner<T> {
    tool: T,
    deadline: Duration,
    locks: Mutex<BTreeMap<u32, Arc<Mutex<()>>>>,
}

impl<T: MigTool + Default> Default for CliPartitioner<T> {
    fn default() -> Self {
        CliPartitioner::new(T::default(), DEADLINE)
    }
}

impl<T: MigTool + Default> CliPartitioner<T> {
    /// A partitioner whose every call may take `deadline`.
    pub fn with_deadline(deadline: Duration) -> Self {
        CliPartitioner::new(T::default(), deadline)
    }
}

use PartitionErrorKind as Kind;

/// The first line an answer printed, standard output first.
pub fn first_line(out: &CommandOutput) -> String {
    let stdout = out.stdout_text();
    let stderr = out.stderr_text();
    stdout
        .lines()
        .chain(stderr.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output")
        .to_string()
}

/// An answer that lists nothing (`No GPU instances found: Not Found`, exit 6).
fn says_none(out: &CommandOutput) -> bool {
    // `No GPU instances found`, `No compute instances found`, `No MIG-enabled devices found`
    // (a device not in MIG mode has none); never `No devices were found`, the answer for a
    // `-i` naming no device (the card is gone, not empty).
    let line = first_line(out);
    line.starts_with("No ")
        && (line.contains("instances found") || line.contains("MIG-enabled devices found"))
}

/// The number after `marker` in the first line holding it (`GPU instance ID  2`).
fn id_after(text: &str, marker: &str) -> Option<u32> {
    let line = text.lines().find(|l| l.contains(marker))?;
    let (_, rest) = line.split_once(marker)?;
    rest.split_whitespace().next()?.parse().ok()
}

impl<T: MigTool> CliPartitioner<T> {
    /// A partitioner driving `tool`, whose every call may take `deadline`.
    pub fn new(tool: T, deadline: Duration) -> Self {
        CliPartitioner {
            tool,
            deadline,
            locks: Mutex::new(BTreeMap::new()),
        }
    }

    /// The tool it drives.
    pub fn tool(&self) -> &T {
        &self.tool
    }

    fn cli<'a>(&self, commands: &'a dyn Commands) -> Cli<'a> {
        Cli {
            commands,
            deadline: self.deadline,
        }
    }

    fn gpu_lock(&self, gpu: &PartitionGpu) -> Arc<Mutex<()>> {
        self.locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(gpu.index)
            .or_default()
            .clone()
    }

    /// `<tool> mig -i <target> <args>`, as words.
    fn mig_argv(&self, gpu: &PartitionGpu, args: &[&str]) -> Vec<String> {
        [self.tool.program(), "mig", "-i"]
            .into_iter()
            .map(str::to_string)
            .chain(std::iter::once(self.tool.target(gpu)))
            .chain(args.iter().map(|a| a.to_string()))
            .collect()
    }

    /// The command a call names in its errors.
    fn call(&self, gpu: &PartitionGpu, args: &[&str]) -> String {
        self.mig_argv(gpu, args).join(" ")
    }

    /// Runs `<tool> mig -i <target> <args>`; an answer within the deadline is `Ok` whatever
    /// its exit status.
    fn mig(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        args: &[&str],
    ) -> Result<CommandOutput, PartitionError> {
        let argv = self.mig_argv(gpu, args);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        self.cli(commands).run(gpu, &argv)
    }

    /// A listing's text, or an error naming the command when it failed for another reason
    /// than "nothing found".
    fn listing(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        args: &[&str],
    ) -> Result<String, PartitionError> {
        let out = self.mig(commands, gpu, args)?;
        if out.success() || says_none(&out) {
            return Ok(out.stdout_text());
        }
        let argv = self.mig_argv(gpu, args);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        Err(PartitionError::new(
            gpu,
            Kind::Failed,
            RunFailure::exited(&argv, out).to_string(),
        ))
    }

    fn unreadable(
        &self,
        gpu: &PartitionGpu,
        what: &str,
        e: impl std::fmt::Display,
    ) -> PartitionError {
        PartitionError::new(
            gpu,
            Kind::Unreadable,
            format!("{}: {e}", self.call(gpu, &[what])),
        )
    }

    fn geometry_locked(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
    ) -> Result<Geometry, PartitionError> {
        let lgip = self.listing(commands, gpu, &["-lgip"])?;
        let lgipp = self.listing(commands, gpu, &["-lgipp"])?;
        let profiles =
            listing::parse_profiles(&lgip).map_err(|e| self.unreadable(gpu, "-lgip", e))?;
        let placements =
            listing::parse_placements(&lgipp).map_err(|e| self.unreadable(gpu, "-lgipp", e))?;
        let mut geometry = Geometry::default();
        for profile in profiles
            .into_iter()
            .filter(|p| self.tool.row_is(gpu, p.gpu))
        {
            let name = self.tool.profile_name(&profile.name);
            if !accel_core::resources::is_profile_segment(&name) {
                continue;
            }
            let place = placements
                .iter()
                .find(|p| self.tool.row_is(gpu, p.gpu) && p.profile_id == profile.id)
                .filter(|p| !p.starts.is_empty() && p.size > 0);
            let Some(place) = place else {
                geometry.left_out.push(format!(
                    "{gpu}: MIG profile {name} (id {}) has no legal placement in {} mig -lgipp, left out",
                    profile.id,
                    self.tool.program()
                ));
                continue;
            };
            let mut starts = place.starts.clone();
            starts.sort_unstable();
            starts.dedup();
            geometry.profiles.push(ProfileGeometry {
                id: profile.id,
                memory_mib: profile.memory_mib(),
                name,
                size: place.size,
                starts,
            });
        }
        Ok(geometry)
    }

    fn instances_locked(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
    ) -> Result<Vec<Instance>, PartitionError> {
        if let Some(own) = self.tool.instances(&self.cli(commands), gpu) {
            return own;
        }
        let lgi = self.listing(commands, gpu, &["-lgi"])?;
        let gis =
            listing::parse_gpu_instances(&lgi).map_err(|e| self.unreadable(gpu, "-lgi", e))?;
        if gis.is_empty() {
            return Ok(Vec::new());
        }
        let lci = self.listing(commands, gpu, &["-lci"])?;
        let cis =
            listing::parse_compute_instances(&lci).map_err(|e| self.unreadable(gpu, "-lci", e))?;
        let mut computes: Vec<(u32, u32)> = cis
            .iter()
            .filter(|c| self.tool.row_is(gpu, c.gpu))
            .map(|c| (c.gpu_instance_id, c.instance_id))
            .collect();
        computes.sort_unstable();
        let uuids = self.tool.mig_uuids(&self.cli(commands), gpu, &computes)?;
        let mut out = Vec::new();
        for gi in gis.iter().filter(|g| self.tool.row_is(gpu, g.gpu)) {
            let Some(place) = gi.placement else {
                return Err(self.unreadable(
                    gpu,
                    "-lgi",
                    format!("GPU instance {} lists no placement", gi.instance_id),
                ));
            };
            let compute_instances: Vec<u32> = computes
                .iter()
                .filter(|(g, _)| *g == gi.instance_id)
                .map(|(_, c)| *c)
                .collect();
            let uuid = match compute_instances.as_slice() {
                [only] => uuids.get(&(gi.instance_id, *only)).cloned(),
                _ => None,
            };
            out.push(Instance {
                gpu_instance: gi.instance_id,
                profile_id: gi.profile_id,
                profile: self.tool.profile_name(&gi.name),
                start: place.start,
                size: place.size,
                compute_instances,
                uuid,
            });
        }
        out.sort_by_key(|i| i.gpu_instance);
        Ok(out)
    }

    fn destroy_locked(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        gpu_instance: u32,
        compute_instance: Option<u32>,
    ) -> Result<(), PartitionError> {
        let gi = gpu_instance.to_string();
        let refused = |args: &[&str], out: &CommandOutput| {
            let line = first_line(out);
            let kind = if line.to_ascii_lowercase().contains("in use") {
                Kind::InUse
            } else {
                Kind::Failed
            };
            PartitionError::new(gpu, kind, format!("{}: {line}", self.call(gpu, args)))
        };
        let gone = |out: &CommandOutput| first_line(out).to_ascii_lowercase().contains("not found");
        if let Some(ci) = compute_instance {
            let ci = ci.to_string();
            let args = ["-gi", gi.as_str(), "-ci", ci.as_str(), "-dci"];
            let out = self.mig(commands, gpu, &args)?;
            if !out.success() && !gone(&out) {
                return Err(refused(&args, &out));
            }
        }
        let args = ["-gi", gi.as_str(), "-dgi"];
        let out = self.mig(commands, gpu, &args)?;
        if !out.success() && !gone(&out) {
            return Err(refused(&args, &out));
        }
        Ok(())
    }

    /// The instances listed now that were not listed `before`, as `(GI, its first CI)`;
    /// none when the listing fails.
    fn made_since(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        before: &[u32],
    ) -> Vec<(u32, Option<u32>)> {
        self.instances_locked(commands, gpu)
            .map(|now| {
                now.iter()
                    .filter(|i| !before.contains(&i.gpu_instance))
                    .map(|i| (i.gpu_instance, i.compute_instances.first().copied()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Destroys what a failed create left, saying so after `error`.
    fn undo(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        made: &[(u32, Option<u32>)],
        mut error: PartitionError,
    ) -> PartitionError {
        for (gi, ci) in made {
            match self.destroy_locked(commands, gpu, *gi, *ci) {
                Ok(()) => error
                    .reason
                    .push_str(&format!("; GPU instance {gi} it made was destroyed")),
                Err(e) => error.reason.push_str(&format!(
                    "; GPU instance {gi} it made could not be destroyed: {}",
                    e.reason
                )),
            }
        }
        error
    }
}

impl<T: MigTool + 'static> Partitioner for CliPartitioner<T> {
    fn record_layout(&self) -> RecordLayout {
        self.tool.record_layout()
    }

    fn marker_facts(
        &self,
        gpu: &PartitionGpu,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<Vec<(&'static str, String)>, PartitionError> {
        self.tool.marker_facts(gpu, gpu_instance, compute_instance)
    }

    fn on_host(&self, host: Arc<dyn Host>) -> Option<Arc<dyn Partitioner>> {
        let tool = self.tool.on_host(host)?;
        Some(Arc::new(CliPartitioner::new(tool, self.deadline)))
    }

    fn geometry(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
    ) -> Result<Geometry, PartitionError> {
        let lock = self.gpu_lock(gpu);
        let _held = lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.geometry_locked(commands, gpu)
    }

    fn instances(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
    ) -> Result<Vec<Instance>, PartitionError> {
        let lock = self.gpu_lock(gpu);
        let _held = lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.instances_locked(commands, gpu)
    }

    fn create(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        profile_id: u32,
        start: u32,
    ) -> Result<Instance, PartitionError> {
        let lock = self.gpu_lock(gpu);
        let _held = lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.tool.before_create(&self.cli(commands), gpu)?;
        let geometry = self.geometry_locked(commands, gpu)?;
        let Some(profile) = geometry.profiles.iter().find(|p| p.id == profile_id) else {
            return Err(PartitionError::new(
                gpu,
                Kind::NotOffered,
                format!("MIG profile id {profile_id} is not offered by this accelerator"),
            ));
        };
        if !profile.starts.contains(&start) {
            return Err(PartitionError::new(
                gpu,
                Kind::NotOffered,
                format!(
                    "MIG profile {} cannot start at memory slice {start} (legal starts {:?})",
                    profile.name, profile.starts
                ),
            ));
        }
        let before: Vec<u32> = self
            .instances_locked(commands, gpu)?
            .iter()
            .map(|i| i.gpu_instance)
            .collect();
        let form = self.tool.create_call(gpu, profile_id, start);
        let argv: Vec<&str> = form.argv.iter().map(String::as_str).collect();
        let call = form.argv.join(" ");
        let out = match self.cli(commands).run(gpu, &argv) {
            Ok(out) => out,
            Err(e) => {
                // No answer: whatever it made by now is found by listing and destroyed.
                let made = self.made_since(commands, gpu, &before);
                return Err(self.undo(commands, gpu, &made, e));
            }
        };
        let text = out.stdout_text();
        let mut gi = id_after(&text, "created GPU instance ID");
        let mut ci = id_after(&text, "created compute instance ID");
        let mut made: Vec<(u32, Option<u32>)> = gi.map(|g| (g, ci)).into_iter().collect();
        if form.ids_by_listing && (gi.is_none() || ci.is_none()) {
            // The answer names no ids: what the call made is what is listed now and was not.
            made = self.made_since(commands, gpu, &before);
            if let [(g, c)] = made.as_slice() {
                (gi, ci) = (Some(*g), *c);
            } else if !made.is_empty() {
                let error = PartitionError::new(
                    gpu,
                    Kind::Failed,
                    format!(
                        "{call}: {} GPU instances appeared, not one: {made:?}",
                        made.len()
                    ),
                );
                return Err(self.undo(commands, gpu, &made, error));
            }
        }
        let (Some(gi), Some(ci), true) = (gi, ci, out.success()) else {
            let line = text
                .lines()
                .chain(out.stderr_text().lines())
                .map(str::trim)
                .find(|l| l.starts_with("Unable") || l.starts_with("Failed"))
                .map_or_else(|| first_line(&out), str::to_string);
            let kind = if line.to_ascii_lowercase().contains("insufficient resources") {
                Kind::NoRoom
            } else {
                Kind::Failed
            };
            let error = PartitionError::new(gpu, kind, format!("{call}: {line}"));
            return Err(self.undo(commands, gpu, &made, error));
        };
        let listed = match self.instances_locked(commands, gpu) {
            Ok(now) => now.into_iter().find(|i| i.gpu_instance == gi),
            Err(e) => return Err(self.undo(commands, gpu, &made, e)),
        };
        match listed {
            Some(instance)
                if instance.start == start
                    && instance.compute_instances == [ci]
                    && instance.uuid.is_some() =>
            {
                Ok(instance)
            }
            Some(instance) if form.driver_places && instance.start != start => {
                let error = PartitionError::new(
                    gpu,
                    Kind::NoRoom,
                    format!(
                        "{call}: the driver placed GPU instance {gi} at memory slice {}, not at {start}, the placement this grant holds (the command names none)",
                        instance.start
                    ),
                );
                Err(self.undo(commands, gpu, &made, error))
            }
            other => {
                let error = PartitionError::new(
                    gpu,
                    Kind::Failed,
                    format!(
                        "{call}: GPU instance {gi} is not listed afterwards at slice {start} with one compute instance and a MIG UUID ({other:?})"
                    ),
                );
                Err(self.undo(commands, gpu, &made, error))
            }
        }
    }

    fn busy(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
    ) -> Result<Vec<u32>, PartitionError> {
        let lock = self.gpu_lock(gpu);
        let _held = lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.tool.busy(&self.cli(commands), gpu)
    }

    fn destroy(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        gpu_instance: u32,
        compute_instance: Option<u32>,
    ) -> Result<(), PartitionError> {
        let lock = self.gpu_lock(gpu);
        let _held = lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.destroy_locked(commands, gpu, gpu_instance, compute_instance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(text: &str) -> CommandOutput {
        CommandOutput {
            status: Some(6),
            stdout: text.as_bytes().to_vec(),
            stderr: Vec::new(),
        }
    }

    #[test]
    fn nothing_found_is_empty_but_no_such_device_is_not() {
        for empty in [
            "No GPU instances found: Not Found\n",
            "No compute instances found: Not Found\n",
            "No MIG-enabled devices found.\n",
        ] {
            assert!(says_none(&said(empty)), "{empty}");
        }
        for refused in ["No devices were found\n", "Not Found\n", ""] {
            assert!(!says_none(&said(refused)), "{refused}");
        }
    }
}
