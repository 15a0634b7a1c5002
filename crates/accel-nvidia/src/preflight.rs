//! NVIDIA's preflight knowledge behind accel-backend's [`Preflight`]: the host cross-check is
//! `nvidia-smi -L` (a `GPU <n>:` line per GPU, the MIG lines under it not counted); the
//! driver-read row is `mig-partitioning` (read off the detection, never by creating an
//! instance); a GPU in MIG mode is partition-backed; the probe image is `nvidia/cuda:<CUDA
//! major>` and gets the devices through `--runtime nvidia` (docker) or `--gpus all` (nerdctl),
//! `ctr` having no device flag; the probe prints its own `/proc/self/maps` between markers and
//! then `nvidia-smi --query-gpu=memory.total`, read against the `CUDA_DEVICE_MEMORY_LIMIT_<i>`
//! the responder set.

use std::collections::BTreeSet;

use accel_backend::preflight::{
    ContainerCli, DriverRead, Preflight, ProbeReading, Tier, mig_partitioning,
};
use accel_backend::respond::Injection;
use accel_core::Manufacturer;
use accel_core::inventory::{Accelerator, Grantable};

use crate::responder::{CDI_ANNOTATION, CDI_KIND, PRELOAD_LIBRARY};

/// The marker a probe prints before its maps.
pub const MAPS_BEGIN: &str = "gpustack-preflight-maps-begin";
/// The marker a probe prints after its maps.
pub const MAPS_END: &str = "gpustack-preflight-maps-end";
pub use accel_backend::preflight::MIG_PARTITIONING;

/// NVIDIA's preflight row.
#[derive(Debug, Clone, Copy, Default)]
pub struct NvidiaPreflight;

impl Preflight for NvidiaPreflight {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Nvidia
    }

    fn tier(&self) -> Tier {
        Tier::Full
    }

    fn host_listing(&self) -> Option<Vec<String>> {
        Some(vec!["nvidia-smi".into(), "-L".into()])
    }

    fn count_listed(&self, stdout: &str) -> usize {
        stdout
            .lines()
            .filter(|l| {
                l.strip_prefix("GPU ")
                    .and_then(|rest| rest.split(':').next())
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
            .count()
    }

    /// `ok`: MIG mode is on and the GPU declares at least one profile; `unavailable`: the mode
    /// is on and no profile could be read; `not-declared`: MIG is off or absent.
    fn driver_read(&self, accelerator: &Accelerator) -> Option<DriverRead> {
        Some(mig_partitioning(accelerator, "GPU", "nvidia-smi mig -lgip"))
    }

    fn partition_backed(&self, accelerator: &Accelerator) -> bool {
        accelerator.grantable == Grantable::PartitionsOnly
    }

    fn probe_image(&self, runtime_major: Option<u32>) -> Option<String> {
        runtime_major.map(|major| format!("nvidia/cuda:{major}"))
    }

    fn device_flags(&self, cli: ContainerCli) -> Option<Vec<String>> {
        match cli {
            ContainerCli::Docker => Some(vec!["--runtime".into(), "nvidia".into()]),
            ContainerCli::Nerdctl => Some(vec!["--gpus".into(), "all".into()]),
            ContainerCli::Ctr => None,
        }
    }

    fn probe_script(&self) -> String {
        format!(
            "echo {MAPS_BEGIN}; cat /proc/self/maps; echo {MAPS_END}; \
             nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits"
        )
    }

    fn read_probe(&self, stdout: &str) -> ProbeReading {
        let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
        let begin = lines.iter().position(|l| *l == MAPS_BEGIN);
        let end = lines.iter().position(|l| *l == MAPS_END);
        let maps = match (begin, end) {
            (Some(b), Some(e)) if b < e => {
                Some(lines[b + 1..e].iter().map(|l| l.to_string()).collect())
            }
            _ => None,
        };
        let after = end.map_or(0, |e| e + 1);
        let memory_mib = lines[after.min(lines.len())..]
            .iter()
            .filter_map(|l| l.trim_end_matches("MiB").trim().parse::<u64>().ok())
            .collect();
        ProbeReading {
            maps,
            memory_mib,
            ..ProbeReading::default()
        }
    }

    fn quota_mib(&self, injection: &Injection, position: usize) -> Option<u64> {
        injection
            .envs
            .get(&format!("CUDA_DEVICE_MEMORY_LIMIT_{position}"))
            .and_then(|v| v.strip_suffix('m'))
            .and_then(|v| v.parse().ok())
    }

    fn slice_runtime(&self, injection: &Injection) -> Option<String> {
        self.library_in_container(injection)
            .map(|path| format!("mounts the preload library at {path}"))
    }

    fn library_in_container(&self, injection: &Injection) -> Option<String> {
        injection
            .mounts
            .iter()
            .find(|m| m.container_path.ends_with(&format!("/{PRELOAD_LIBRARY}")))
            .map(|m| m.container_path.clone())
    }

    fn visible(&self, injection: &Injection) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        if let Some(v) = injection.envs.get("NVIDIA_VISIBLE_DEVICES") {
            names.extend(v.split(',').filter(|s| !s.is_empty()).map(str::to_string));
        }
        if let Some(v) = injection.annotations.get(CDI_ANNOTATION) {
            let prefix = format!("{CDI_KIND}=");
            names.extend(
                v.split(',')
                    .filter_map(|s| s.strip_prefix(&prefix))
                    .map(str::to_string),
            );
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_backend::preflight::State;
    use accel_core::inventory::{MigMode, PartitionProfile, Source};

    #[test]
    fn the_host_listing_counts_gpus_not_their_mig_devices() {
        let text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\n  MIG 3g.40gb     Device  0: (UUID: MIG-0)\nGPU 1: NVIDIA H100 (UUID: GPU-1)\nNo devices were found\n";
        assert_eq!(NvidiaPreflight.count_listed(text), 2);
        assert_eq!(NvidiaPreflight.count_listed(""), 0);
    }

    #[test]
    fn mig_partitioning_reads_the_mode_and_the_profiles() {
        let mut gpu = Accelerator::new(0, Source::Driver);
        let read = |g: &Accelerator| NvidiaPreflight.driver_read(g).unwrap().state;
        assert_eq!(read(&gpu), State::NotDeclared);
        gpu.mig_mode = Some(MigMode::Disabled);
        assert_eq!(read(&gpu), State::NotDeclared);
        gpu.mig_mode = Some(MigMode::Enabled);
        assert_eq!(read(&gpu), State::Unavailable);
        gpu.partition_profiles.push(PartitionProfile {
            name: "3g.40gb".into(),
            id: 9,
            memory_mib: Some(40320),
            instances_total: Some(2),
            instances_free: Some(2),
            multiprocessors: None,
            placements: Vec::new(),
        });
        assert_eq!(read(&gpu), State::Ok);
    }

    #[test]
    fn a_probe_reads_its_maps_between_the_markers_then_the_memory() {
        let out = format!(
            "{MAPS_BEGIN}\n7f00-7f01 r-xp 0 0:0 1 /usr/local/vgpu/libvgpu.so\n{MAPS_END}\n12282\n"
        );
        let reading = NvidiaPreflight.read_probe(&out);
        assert_eq!(reading.maps.unwrap().len(), 1);
        assert_eq!(reading.memory_mib, vec![12282]);
        let none = NvidiaPreflight.read_probe("docker: error\n");
        assert_eq!(none.maps, None);
        assert!(none.memory_mib.is_empty());
    }
}
