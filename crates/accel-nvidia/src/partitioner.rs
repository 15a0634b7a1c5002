//! NVIDIA MIG behind the [`accel_backend::partition::Partitioner`] seam, through
//! `nvidia-smi mig` ([`accel_backend::mig_cli`], which this crate's former partitioner became
//! when T-Head's `ppu-smi`, a fork of nvidia-smi, needed the same driver). What is NVIDIA's:
//!
//! - the MIG UUIDs: `nvidia-smi -L` lists a GPU's MIG devices in (GPU instance, compute
//!   instance) id order, so they are paired with the compute instances in that order; a count
//!   that differs is an error, never a guess (R450's `MIG-GPU-<uuid>/<gi>/<ci>` names its
//!   instance itself);
//! - busy: `nvidia-smi -q -x -i N`, whose `<processes>` name each compute process's GPU and
//!   compute instance (`--query-compute-apps` names only the parent GPU on a MIG GPU).
//!
//! `-i` names a GPU by nvidia-smi's index, which is the inventory's.

use std::collections::BTreeMap;

use accel_backend::mig_cli::partitioner::{
    Cli, CliPartitioner, MigTool, busy_instances, first_line,
};
use accel_backend::partition::{PartitionError, PartitionErrorKind, PartitionGpu};

use crate::smi;

pub use accel_backend::mig_cli::partitioner::DEADLINE;

use PartitionErrorKind as Kind;

/// `nvidia-smi mig`, one GPU at a time.
pub type SmiPartitioner = CliPartitioner<NvidiaSmi>;

/// nvidia-smi's side of the MIG dialect.
#[derive(Debug, Clone, Copy, Default)]
pub struct NvidiaSmi;

impl MigTool for NvidiaSmi {
    fn program(&self) -> &'static str {
        "nvidia-smi"
    }

    fn mig_uuids(
        &self,
        cli: &Cli<'_>,
        gpu: &PartitionGpu,
        computes: &[(u32, u32)],
    ) -> Result<BTreeMap<(u32, u32), String>, PartitionError> {
        let list = cli.run(gpu, smi::list::LIST_ARGV)?;
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
        Ok(uuids)
    }

    /// `nvidia-smi -q -x -i N`: the GPU instances a compute process runs on.
    fn busy(&self, cli: &Cli<'_>, gpu: &PartitionGpu) -> Result<Vec<u32>, PartitionError> {
        let index = gpu.index.to_string();
        let argv = ["nvidia-smi", "-q", "-x", "-i", index.as_str()];
        let call = argv.join(" ");
        let out = cli.run(gpu, &argv)?;
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
        busy_instances(
            gpu,
            &call,
            one.processes
                .iter()
                .filter(|p| p.is_compute())
                .map(|p| (p.gpu_instance_id, p.pid)),
        )
    }
}
