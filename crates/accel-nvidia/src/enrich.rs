//! `enrich`: merging the nvidia-smi snapshot (layer 2) into the procfs collection (layer 1),
//! exactly as seed 002's "The inventory merge" states.
//!
//! - The section's driver, CUDA driver and NVML versions are replaced by the snapshot's when it
//!   has them.
//! - A GPU both layers know takes every field from nvidia-smi but keeps the collector's index,
//!   and the collector's NUMA node and architecture when nvidia-smi gave none. Facts only procfs
//!   reads (the driver's exclusion flag, the device minor when the XML lacks it) are kept too.
//! - A GPU only nvidia-smi knows is appended with the next index (the WSL 2 case).
//!
//! Matching is by UUID, but two GPUs never collapse into one: masked captures repeat UUIDs, so a
//! repeated UUID is matched by bus address as well and reported in the section's notes. A GPU
//! one layer names no UUID for matches the other layer's by bus address.

use std::collections::BTreeMap;

use accel_core::inventory::{Accelerator, Source};

/// The versions and GPUs one nvidia-smi snapshot produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SnapshotSection {
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub nvml_version: Option<String>,
    pub accelerators: Vec<Accelerator>,
}

/// The merged layers: versions, GPUs in index order, and notes about what did not line up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Enriched {
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub nvml_version: Option<String>,
    pub accelerators: Vec<Accelerator>,
    pub notes: Vec<String>,
}

/// Merges `snapshot` into the collector's `base` GPUs (already indexed in bus order).
pub fn enrich(
    base_driver_version: Option<String>,
    base: Vec<Accelerator>,
    snapshot: SnapshotSection,
) -> Enriched {
    let mut out = Enriched {
        driver_version: snapshot.driver_version.or(base_driver_version),
        cuda_version: snapshot.cuda_version,
        nvml_version: snapshot.nvml_version,
        accelerators: base,
        notes: Vec::new(),
    };
    note_repeated_uuids(&out.accelerators, "procfs", &mut out.notes);
    note_repeated_uuids(&snapshot.accelerators, "nvidia-smi", &mut out.notes);

    let mut taken = vec![false; out.accelerators.len()];
    let mut appended = Vec::new();
    for from_smi in snapshot.accelerators {
        match find_match(&out.accelerators, &taken, &from_smi) {
            Some(at) => {
                taken[at] = true;
                let merged = merge(&out.accelerators[at], from_smi);
                out.accelerators[at] = merged;
            }
            None => appended.push(from_smi),
        }
    }
    let next = out
        .accelerators
        .iter()
        .map(|a| a.index + 1)
        .max()
        .unwrap_or(0);
    for (offset, mut only_smi) in appended.into_iter().enumerate() {
        only_smi.index = next + offset as u32;
        if only_smi.source == Source::Driver && only_smi.bus_id.is_none() {
            only_smi.source = Source::Paravirtual;
        }
        out.accelerators.push(only_smi);
    }
    out
}

/// The base GPU a snapshot GPU stands for: the same UUID (and, when that UUID repeats or both
/// carry a bus address, the same bus address); a GPU without a UUID matches by bus address.
fn find_match(base: &[Accelerator], taken: &[bool], candidate: &Accelerator) -> Option<usize> {
    let same_bus = |a: &Accelerator| match (a.bus_id, candidate.bus_id) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    };
    let free = |i: &usize| !taken[*i];
    if let Some(uuid) = candidate.uuid.as_deref() {
        let by_uuid: Vec<usize> = (0..base.len())
            .filter(free)
            .filter(|i| base[*i].uuid.as_deref() == Some(uuid))
            .collect();
        if let Some(at) = by_uuid.iter().copied().find(|i| same_bus(&base[*i])) {
            return Some(at);
        }
        let bus_known = |i: &usize| base[*i].bus_id.is_some() && candidate.bus_id.is_some();
        if let Some(at) = by_uuid.into_iter().find(|i| !bus_known(i)) {
            return Some(at);
        }
        // A GPU procfs could not name (no UUID in its `information` file) is the one at the
        // same bus address: never listed twice, once unnamed.
        return (0..base.len())
            .filter(free)
            .filter(|i| base[*i].uuid.is_none())
            .find(|i| same_bus(&base[*i]));
    }
    (0..base.len()).filter(free).find(|i| same_bus(&base[*i]))
}

fn merge(collector: &Accelerator, mut from_smi: Accelerator) -> Accelerator {
    from_smi.index = collector.index;
    from_smi.source = collector.source;
    if from_smi.numa_node.is_none() {
        from_smi.numa_node = collector.numa_node;
    }
    if from_smi.architecture.is_none() {
        from_smi.architecture = collector.architecture.clone();
    }
    if from_smi.excluded.is_none() {
        from_smi.excluded = collector.excluded;
    }
    if from_smi.minor_number.is_none() {
        from_smi.minor_number = collector.minor_number;
    }
    if from_smi.bus_id.is_none() {
        from_smi.bus_id = collector.bus_id;
    }
    from_smi.classify_grantable();
    from_smi
}

fn note_repeated_uuids(accelerators: &[Accelerator], layer: &str, notes: &mut Vec<String>) {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for uuid in accelerators.iter().filter_map(|a| a.uuid.as_deref()) {
        *seen.entry(uuid).or_default() += 1;
    }
    for (uuid, count) in seen.into_iter().filter(|(_, n)| *n > 1) {
        notes.push(format!(
            "{layer} lists UUID {uuid} on {count} GPUs (a masked capture?); kept apart by bus address"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::BusId;

    fn gpu(index: u32, uuid: &str, bus: &str) -> Accelerator {
        let mut a = Accelerator::new(index, Source::Driver);
        a.uuid = Some(uuid.into());
        a.bus_id = Some(bus.parse::<BusId>().unwrap());
        a
    }

    #[test]
    fn both_layers_merge_keeping_index_numa_and_architecture() {
        let mut base = gpu(0, "GPU-a", "0000:18:00.0");
        base.numa_node = Some(1);
        base.architecture = Some("Hopper".into());
        base.excluded = Some(false);
        let mut smi = gpu(7, "GPU-a", "00000000:18:00.0");
        smi.memory_mib = Some(81559);
        smi.product = Some("NVIDIA H100 80GB HBM3".into());
        let out = enrich(
            Some("590.48.01".into()),
            vec![base],
            SnapshotSection {
                driver_version: Some("590.48.01".into()),
                cuda_version: Some("13.0".into()),
                nvml_version: Some("13.590.48".into()),
                accelerators: vec![smi],
            },
        );
        assert_eq!(out.cuda_version.as_deref(), Some("13.0"));
        let a = &out.accelerators[0];
        assert_eq!(a.index, 0, "the collector's index is kept");
        assert_eq!(a.numa_node, Some(1));
        assert_eq!(a.architecture.as_deref(), Some("Hopper"));
        assert_eq!(a.memory_mib, Some(81559));
        assert_eq!(a.excluded, Some(false));
        assert!(out.notes.is_empty());
    }

    #[test]
    fn smi_architecture_wins_when_present() {
        let mut base = gpu(0, "GPU-a", "0000:18:00.0");
        base.architecture = Some("Ampere".into());
        let mut smi = gpu(0, "GPU-a", "0000:18:00.0");
        smi.architecture = Some("Hopper".into());
        let out = enrich(
            None,
            vec![base],
            SnapshotSection {
                accelerators: vec![smi],
                ..Default::default()
            },
        );
        assert_eq!(out.accelerators[0].architecture.as_deref(), Some("Hopper"));
    }

    #[test]
    fn gpu_only_smi_knows_is_appended_with_the_next_index() {
        let mut wsl = Accelerator::new(0, Source::Driver);
        wsl.uuid = Some("GPU-w".into());
        wsl.bus_id = Some("00000000:F1:00.0".parse().unwrap());
        let out = enrich(
            None,
            vec![gpu(0, "GPU-a", "0000:18:00.0")],
            SnapshotSection {
                accelerators: vec![gpu(0, "GPU-a", "0000:18:00.0"), wsl],
                ..Default::default()
            },
        );
        assert_eq!(out.accelerators.len(), 2);
        assert_eq!(out.accelerators[1].index, 1);
        assert_eq!(out.accelerators[1].uuid.as_deref(), Some("GPU-w"));
    }

    #[test]
    fn a_gpu_procfs_names_no_uuid_for_is_matched_by_bus_not_listed_twice() {
        let mut unnamed = gpu(1, "", "0000:2a:00.0");
        unnamed.uuid = None;
        let out = enrich(
            None,
            vec![gpu(0, "GPU-a", "0000:18:00.0"), unnamed],
            SnapshotSection {
                accelerators: vec![
                    gpu(0, "GPU-a", "00000000:18:00.0"),
                    gpu(1, "GPU-b", "00000000:2A:00.0"),
                ],
                ..Default::default()
            },
        );
        let seats: Vec<(u32, Option<&str>)> = out
            .accelerators
            .iter()
            .map(|a| (a.index, a.uuid.as_deref()))
            .collect();
        assert_eq!(seats, [(0, Some("GPU-a")), (1, Some("GPU-b"))]);
    }

    #[test]
    fn repeated_uuids_never_collapse() {
        let base = vec![
            gpu(0, "GPU-00000000", "0000:18:00.0"),
            gpu(1, "GPU-00000000", "0000:2a:00.0"),
        ];
        let mut a = gpu(0, "GPU-00000000", "0000:2a:00.0");
        a.memory_mib = Some(2);
        let mut b = gpu(1, "GPU-00000000", "0000:18:00.0");
        b.memory_mib = Some(1);
        let out = enrich(
            None,
            base,
            SnapshotSection {
                accelerators: vec![a, b],
                ..Default::default()
            },
        );
        assert_eq!(out.accelerators.len(), 2);
        assert_eq!(
            out.accelerators[0].memory_mib,
            Some(1),
            "matched by bus address"
        );
        assert_eq!(out.accelerators[1].memory_mib, Some(2));
        assert!(
            out.notes.iter().any(|n| n.contains("GPU-00000000")),
            "{:?}",
            out.notes
        );
    }

    #[test]
    fn versions_fall_back_to_procfs_only_for_the_driver() {
        let out = enrich(Some("535.1".into()), vec![], SnapshotSection::default());
        assert_eq!(out.driver_version.as_deref(), Some("535.1"));
        assert_eq!(out.cuda_version, None);
    }
}
