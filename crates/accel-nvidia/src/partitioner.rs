//! NVIDIA MIG behind the [`Partitioner`] seam, through `nvidia-smi mig` (an NVML implementation
//! can follow behind the same trait).
//!
//! - geometry: `nvidia-smi mig -i N -lgip` and `-lgipp`; a profile whose name is no resource-name
//!   segment (`+me`, `+me.all`, `+gfx`) is left out silently, one with no legal placement is left
//!   out with a line naming the GPU and the profile;
//! - instances: `-i N -lgi`, `-i N -lci` and `nvidia-smi -L` for the MIG UUIDs. `-L` lists a
//!   GPU's MIG devices in (GPU instance, compute instance) id order, so they are paired with the
//!   compute instances in that order; a count that differs is an error, never a guess (R450's
//!   `MIG-GPU-<uuid>/<gi>/<ci>` names its instance itself);
//! - create: `-i N -cgi <profile-id>:<start> -C` (one GI at that placement and one CI covering
//!   it). Whatever fails — the GI made and not the CI, no answer within the deadline, the
//!   instance not listed afterwards — what this call made is destroyed before the error returns;
//! - busy: `nvidia-smi -q -x -i N`, whose `<processes>` name each compute process's GPU and
//!   compute instance (`--query-compute-apps` names only the parent GPU on a MIG GPU);
//! - destroy: `-i N -gi G -ci C -dci`, then `-i N -gi G -dgi`. Every command carries `-i`, and
//!   every destroy its `-gi` (a bare `-dgi` destroys every GI of the card).
//!
//! Every call is bounded ([`DEADLINE`], 30 s) and the calls of one GPU run one at a time under
//! that GPU's lock; GPUs do not wait for each other.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use accel_backend::partition::{
    Geometry, Instance, PartitionError, PartitionErrorKind, PartitionGpu, Partitioner,
    ProfileGeometry,
};
use accel_host::{CommandOutput, Commands, RunFailure, run_bounded};

use crate::smi;

/// How long one `nvidia-smi` call may take.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// `nvidia-smi mig`, one GPU at a time.
#[derive(Debug)]
pub struct SmiPartitioner {
    deadline: Duration,
    locks: Mutex<BTreeMap<u32, Arc<Mutex<()>>>>,
}

impl Default for SmiPartitioner {
    fn default() -> Self {
        SmiPartitioner::new(DEADLINE)
    }
}

use PartitionErrorKind as Kind;

fn first_line(out: &CommandOutput) -> String {
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
    let line = first_line(out);
    line.starts_with("No ") && line.contains("found")
}

/// The number after `marker` in the first line holding it (`GPU instance ID  2`).
fn id_after(text: &str, marker: &str) -> Option<u32> {
    let line = text.lines().find(|l| l.contains(marker))?;
    let (_, rest) = line.split_once(marker)?;
    rest.split_whitespace().next()?.parse().ok()
}

impl SmiPartitioner {
    /// A partitioner whose every call may take `deadline`.
    pub fn new(deadline: Duration) -> Self {
        SmiPartitioner {
            deadline,
            locks: Mutex::new(BTreeMap::new()),
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

    /// Runs `nvidia-smi mig -i N <args>`; an answer within the deadline is `Ok` whatever its
    /// exit status.
    fn mig(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        args: &[&str],
    ) -> Result<CommandOutput, PartitionError> {
        let index = gpu.index.to_string();
        let mut argv = vec!["nvidia-smi", "mig", "-i", index.as_str()];
        argv.extend_from_slice(args);
        self.run(commands, gpu, &argv)
    }

    fn run(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        argv: &[&str],
    ) -> Result<CommandOutput, PartitionError> {
        match run_bounded(commands, argv, self.deadline) {
            Ok(out) | Err(RunFailure::Exited { output: out, .. }) => Ok(out),
            Err(e @ RunFailure::TimedOut { .. }) => {
                Err(PartitionError::new(gpu, Kind::TimedOut, e.to_string()))
            }
            Err(e) => Err(PartitionError::new(gpu, Kind::Failed, e.to_string())),
        }
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
        let index = gpu.index.to_string();
        let argv: Vec<&str> = ["nvidia-smi", "mig", "-i", index.as_str()]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        Err(PartitionError::new(
            gpu,
            Kind::Failed,
            RunFailure::exited(&argv, out).to_string(),
        ))
    }

    fn unreadable(gpu: &PartitionGpu, what: &str, e: impl std::fmt::Display) -> PartitionError {
        PartitionError::new(
            gpu,
            Kind::Unreadable,
            format!("nvidia-smi mig -i {} {what}: {e}", gpu.index),
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
            smi::mig::parse_profiles(&lgip).map_err(|e| Self::unreadable(gpu, "-lgip", e))?;
        let placements =
            smi::mig::parse_placements(&lgipp).map_err(|e| Self::unreadable(gpu, "-lgipp", e))?;
        let mut geometry = Geometry::default();
        for profile in profiles.into_iter().filter(|p| p.gpu == gpu.index) {
            if !accel_core::resources::is_profile_segment(&profile.name) {
                continue;
            }
            let place = placements
                .iter()
                .find(|p| p.gpu == gpu.index && p.profile_id == profile.id)
                .filter(|p| !p.starts.is_empty() && p.size > 0);
            let Some(place) = place else {
                geometry.left_out.push(format!(
                    "{gpu}: MIG profile {} (id {}) has no legal placement in nvidia-smi mig -lgipp, left out",
                    profile.name, profile.id
                ));
                continue;
            };
            let mut starts = place.starts.clone();
            starts.sort_unstable();
            starts.dedup();
            geometry.profiles.push(ProfileGeometry {
                id: profile.id,
                memory_mib: profile.memory_mib(),
                name: profile.name,
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
        let lgi = self.listing(commands, gpu, &["-lgi"])?;
        let gis =
            smi::mig::parse_gpu_instances(&lgi).map_err(|e| Self::unreadable(gpu, "-lgi", e))?;
        if gis.is_empty() {
            return Ok(Vec::new());
        }
        let lci = self.listing(commands, gpu, &["-lci"])?;
        let cis = smi::mig::parse_compute_instances(&lci)
            .map_err(|e| Self::unreadable(gpu, "-lci", e))?;
        let list = self.run(commands, gpu, smi::list::LIST_ARGV)?;
        if !list.success() {
            return Err(PartitionError::new(
                gpu,
                Kind::Failed,
                format!("nvidia-smi -L: {}", first_line(&list)),
            ));
        }
        let listed = smi::list::parse(&list.stdout_text()).map_err(|e| {
            PartitionError::new(gpu, Kind::Unreadable, format!("nvidia-smi -L: {e}"))
        })?;
        let Some(parent) = listed.iter().find(|g| g.index == gpu.index) else {
            return Err(PartitionError::new(
                gpu,
                Kind::Unreadable,
                "nvidia-smi -L does not list this GPU",
            ));
        };
        if let (Some(want), Some(got)) = (&gpu.uuid, &parent.uuid)
            && want != got
        {
            return Err(PartitionError::new(
                gpu,
                Kind::Unreadable,
                format!("nvidia-smi -L names GPU {} {got}, not {want}", gpu.index),
            ));
        }
        let mut computes: Vec<(u32, u32)> = cis
            .iter()
            .filter(|c| c.gpu == gpu.index)
            .map(|c| (c.gpu_instance_id, c.instance_id))
            .collect();
        computes.sort_unstable();
        let mut uuids: BTreeMap<(u32, u32), String> = BTreeMap::new();
        let legacy = parent
            .mig_devices
            .iter()
            .all(|m| m.legacy_instance.is_some());
        if legacy {
            for m in &parent.mig_devices {
                if let (Some(key), Some(uuid)) = (m.legacy_instance, &m.uuid) {
                    uuids.insert(key, uuid.clone());
                }
            }
        } else if parent.mig_devices.len() == computes.len() {
            for (key, m) in computes.iter().zip(&parent.mig_devices) {
                if let Some(uuid) = &m.uuid {
                    uuids.insert(*key, uuid.clone());
                }
            }
        } else {
            return Err(PartitionError::new(
                gpu,
                Kind::Unreadable,
                format!(
                    "nvidia-smi -L lists {} MIG devices, nvidia-smi mig -lci {} compute instances: the MIG UUIDs cannot be paired",
                    parent.mig_devices.len(),
                    computes.len()
                ),
            ));
        }
        let mut out = Vec::new();
        for gi in gis.iter().filter(|g| g.gpu == gpu.index) {
            let Some(place) = gi.placement else {
                return Err(Self::unreadable(
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
                profile: gi.name.clone(),
                start: place.start,
                size: place.size,
                compute_instances,
                uuid,
            });
        }
        out.sort_by_key(|i| i.gpu_instance);
        Ok(out)
    }

    /// `nvidia-smi -q -x -i N`: the GPU instances a compute process runs on.
    fn busy_locked(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
    ) -> Result<Vec<u32>, PartitionError> {
        let index = gpu.index.to_string();
        let argv = ["nvidia-smi", "-q", "-x", "-i", index.as_str()];
        let call = argv.join(" ");
        let out = self.run(commands, gpu, &argv)?;
        if !out.success() {
            return Err(PartitionError::new(
                gpu,
                Kind::Failed,
                format!("{call}: {}", first_line(&out)),
            ));
        }
        let report = smi::xml::parse(&out.stdout)
            .map_err(|e| PartitionError::new(gpu, Kind::Unreadable, format!("{call}: {e}")))?;
        let [one] = report.gpus.as_slice() else {
            return Err(PartitionError::new(
                gpu,
                Kind::Unreadable,
                format!("{call}: reports {} GPUs, not one", report.gpus.len()),
            ));
        };
        if let (Some(want), Some(got)) = (&gpu.uuid, &one.uuid)
            && want != got
        {
            return Err(PartitionError::new(
                gpu,
                Kind::Unreadable,
                format!("{call}: reports {got}, not {want}"),
            ));
        }
        let mut busy = Vec::new();
        for process in one.processes.iter().filter(|p| p.is_compute()) {
            let Some(gi) = process.gpu_instance_id else {
                return Err(PartitionError::new(
                    gpu,
                    Kind::Unreadable,
                    format!(
                        "{call}: compute process {} runs on no GPU instance it names",
                        process
                            .pid
                            .map_or_else(|| "?".to_string(), |p| p.to_string())
                    ),
                ));
            };
            busy.push(gi);
        }
        busy.sort_unstable();
        busy.dedup();
        Ok(busy)
    }

    fn destroy_locked(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        gpu_instance: u32,
        compute_instance: Option<u32>,
    ) -> Result<(), PartitionError> {
        let gi = gpu_instance.to_string();
        let refused = |what: &str, out: &CommandOutput| {
            let line = first_line(out);
            let kind = if line.contains("In use") {
                Kind::InUse
            } else {
                Kind::Failed
            };
            PartitionError::new(
                gpu,
                kind,
                format!("nvidia-smi mig -i {} -gi {gi} {what}: {line}", gpu.index),
            )
        };
        if let Some(ci) = compute_instance {
            let ci = ci.to_string();
            let out = self.mig(commands, gpu, &["-gi", &gi, "-ci", &ci, "-dci"])?;
            if !out.success() && !first_line(&out).contains("Not Found") {
                return Err(refused(&format!("-ci {ci} -dci"), &out));
            }
        }
        let out = self.mig(commands, gpu, &["-gi", &gi, "-dgi"])?;
        if !out.success() && !first_line(&out).contains("Not Found") {
            return Err(refused("-dgi", &out));
        }
        Ok(())
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

impl Partitioner for SmiPartitioner {
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
        let geometry = self.geometry_locked(commands, gpu)?;
        let Some(profile) = geometry.profiles.iter().find(|p| p.id == profile_id) else {
            return Err(PartitionError::new(
                gpu,
                Kind::NotOffered,
                format!("MIG profile id {profile_id} is not offered by this GPU"),
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
        let spec = format!("{profile_id}:{start}");
        let call = format!("nvidia-smi mig -i {} -cgi {spec} -C", gpu.index);
        let out = match self.mig(commands, gpu, &["-cgi", &spec, "-C"]) {
            Ok(out) => out,
            Err(e) => {
                // No answer: whatever it made by now is found by listing and destroyed.
                let made: Vec<(u32, Option<u32>)> = self
                    .instances_locked(commands, gpu)
                    .map(|now| {
                        now.iter()
                            .filter(|i| !before.contains(&i.gpu_instance))
                            .map(|i| (i.gpu_instance, i.compute_instances.first().copied()))
                            .collect()
                    })
                    .unwrap_or_default();
                return Err(self.undo(commands, gpu, &made, e));
            }
        };
        let text = out.stdout_text();
        let gi = id_after(&text, "created GPU instance ID");
        let ci = id_after(&text, "created compute instance ID");
        let made: Vec<(u32, Option<u32>)> = gi.map(|g| (g, ci)).into_iter().collect();
        let (Some(gi), Some(ci), true) = (gi, ci, out.success()) else {
            let line = text
                .lines()
                .chain(out.stderr_text().lines())
                .map(str::trim)
                .find(|l| l.starts_with("Unable") || l.starts_with("Failed"))
                .map_or_else(|| first_line(&out), str::to_string);
            let kind = if line.contains("Insufficient Resources") {
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
        self.busy_locked(commands, gpu)
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
