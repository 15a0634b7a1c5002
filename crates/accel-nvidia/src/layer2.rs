//! Folding the optional nvidia-smi queries into the GPUs the `-q -x` report listed: compute
//! capability (`--query-gpu=uuid,compute_cap`), MIG UUIDs and profile names (`-L`), peer
//! connections (`topo -m`) and MIG profiles with their placements (`mig -lgip`, `-lgipp`).
//!
//! The XML lists GPUs in document order; `-L`, `topo` and `mig` name them by nvidia-smi's index,
//! which follows the PCI bus order. So a GPU's nvidia-smi index is its position in bus order.
//! `-L` is matched by UUID where the UUID is unique and by index otherwise (masked captures
//! repeat UUIDs). Text that does not parse leaves the fields empty and is reported as a note.

use std::collections::BTreeMap;

use accel_core::inventory::{Accelerator, MigDevice};

use crate::smi;

/// Each GPU's position in `gpus` keyed by its nvidia-smi index (bus order).
fn by_smi_index(gpus: &[Accelerator]) -> BTreeMap<u32, usize> {
    let mut order: Vec<usize> = (0..gpus.len()).collect();
    order.sort_by_key(|i| (gpus[*i].bus_id.is_none(), gpus[*i].bus_id, *i));
    order
        .into_iter()
        .enumerate()
        .map(|(smi_index, at)| (smi_index as u32, at))
        .collect()
}

/// Sets each GPU's compute capability from the CSV query.
pub fn apply_compute_capability(gpus: &mut [Accelerator], text: &str) {
    let caps = smi::csv::parse_compute_caps(text);
    for gpu in gpus.iter_mut() {
        if let Some(cc) = gpu.uuid.as_ref().and_then(|u| caps.get(u)) {
            gpu.compute_capability = Some(cc.clone());
        }
    }
}

/// Names the MIG devices of each GPU (UUID and profile) from `-L`.
pub fn apply_list(gpus: &mut [Accelerator], text: &str, notes: &mut Vec<String>) {
    let listed = match smi::list::parse(text) {
        Ok(listed) => listed,
        Err(e) => {
            notes.push(format!("nvidia-smi -L: {e}"));
            return;
        }
    };
    let index = by_smi_index(gpus);
    for entry in listed {
        let same_uuid: Vec<usize> = (0..gpus.len())
            .filter(|i| entry.uuid.is_some() && gpus[*i].uuid == entry.uuid)
            .collect();
        let at = match same_uuid.as_slice() {
            [only] => Some(*only),
            _ => index.get(&entry.index).copied(),
        };
        let Some(gpu) = at.and_then(|at| gpus.get_mut(at)) else {
            notes.push(format!(
                "nvidia-smi -L lists GPU {} that -q -x did not report",
                entry.index
            ));
            continue;
        };
        for (position, mig) in entry.mig_devices.into_iter().enumerate() {
            match gpu.mig_devices.get_mut(position) {
                Some(device) => {
                    device.uuid = mig.uuid;
                    device.profile = Some(mig.profile);
                }
                None => gpu.mig_devices.push(MigDevice {
                    index: mig.device_index,
                    gpu_instance_id: mig.legacy_instance.map(|(gi, _)| gi),
                    compute_instance_id: mig.legacy_instance.map(|(_, ci)| ci),
                    uuid: mig.uuid,
                    profile: Some(mig.profile),
                    memory_mib: None,
                    multiprocessors: None,
                }),
            }
        }
    }
}

/// Sets each GPU's peer connections (and NUMA node, where nvidia-smi gave one) from `topo -m`.
pub fn apply_topology(gpus: &mut [Accelerator], text: &str, notes: &mut Vec<String>) {
    let topology = match smi::topo::parse(text) {
        Ok(topology) => topology,
        Err(e) => {
            notes.push(format!("nvidia-smi topo -m: {e}"));
            return;
        }
    };
    let index = by_smi_index(gpus);
    for row in topology.gpus {
        let Some(gpu) = index.get(&row.index).and_then(|at| gpus.get_mut(*at)) else {
            continue;
        };
        gpu.peers = row
            .peers
            .iter()
            .filter(|(peer, link)| **peer != row.index && link.as_str() != "X")
            .map(|(peer, link)| (*peer, link.clone()))
            .collect();
        if gpu.numa_node.is_none() {
            gpu.numa_node = row.gpu_numa_id.or_else(|| row.numa_node());
        }
    }
}

/// Sets each GPU's partition profiles from `mig -lgip` and their placements from `-lgipp`.
///
/// A profile whose name is not a valid resource-name segment (`1g.10gb+me`, `+me.all`, `+gfx`)
/// is left out, never rewritten, so it reaches no inventory, `Devices` spec, capacity key or
/// offered set. A profile with no legal placement (none listed, or `-lgipp` unreadable or not
/// run) is left out too, with a note naming the GPU and the profile: a profile nothing can be
/// placed for must not be offered.
pub fn apply_mig_profiles(
    gpus: &mut [Accelerator],
    profiles: Option<&str>,
    placements: Option<&str>,
    notes: &mut Vec<String>,
) {
    let Some(profiles) = profiles else {
        return;
    };
    let profiles = match smi::mig::parse_profiles(profiles) {
        Ok(p) => p,
        Err(e) => {
            notes.push(format!("nvidia-smi mig -lgip: {e}"));
            return;
        }
    };
    let placements = match placements.map(smi::mig::parse_placements) {
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            notes.push(format!("nvidia-smi mig -lgipp: {e}"));
            Vec::new()
        }
        None => Vec::new(),
    };
    let index = by_smi_index(gpus);
    for (smi_index, at) in index {
        let Some(gpu) = gpus.get_mut(at) else {
            continue;
        };
        let who = format!(
            "GPU {smi_index} ({})",
            gpu.uuid.as_deref().unwrap_or("no UUID")
        );
        let (offered, left_out) = smi::mig::offered(
            &profiles,
            &placements,
            smi_index,
            &|name| name.to_string(),
            &who,
            "nvidia-smi",
        );
        gpu.partition_profiles.extend(offered);
        notes.extend(left_out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::inventory::Source;

    fn gpu(uuid: &str, bus: &str) -> Accelerator {
        let mut a = Accelerator::new(0, Source::Driver);
        a.uuid = Some(uuid.into());
        a.bus_id = Some(bus.parse().unwrap());
        a
    }

    #[test]
    fn smi_index_follows_bus_order_not_document_order() {
        let gpus = vec![gpu("GPU-b", "0000:2a:00.0"), gpu("GPU-a", "0000:18:00.0")];
        let index = by_smi_index(&gpus);
        assert_eq!(index[&0], 1);
        assert_eq!(index[&1], 0);
    }

    #[test]
    fn list_names_mig_devices_and_topo_sets_peers() {
        let mut gpus = vec![gpu("GPU-b", "0000:2a:00.0"), gpu("GPU-a", "0000:18:00.0")];
        gpus[1].mig_devices.push(MigDevice {
            index: 0,
            gpu_instance_id: Some(2),
            compute_instance_id: Some(0),
            uuid: None,
            profile: None,
            memory_mib: Some(40192),
            multiprocessors: None,
        });
        let mut notes = Vec::new();
        let list = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n  MIG 3g.40gb     Device  0: (UUID: MIG-x)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n";
        apply_list(&mut gpus, list, &mut notes);
        assert_eq!(gpus[1].mig_devices[0].profile.as_deref(), Some("3g.40gb"));
        assert_eq!(gpus[1].mig_devices[0].uuid.as_deref(), Some("MIG-x"));
        assert_eq!(gpus[1].mig_devices[0].memory_mib, Some(40192));

        let topo = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV18\t0-55\t0\t\tN/A\nGPU1\tNV18\t X \t56-111\t1\t\tN/A\n";
        apply_topology(&mut gpus, topo, &mut notes);
        assert_eq!(gpus[1].peers.get(&1).map(String::as_str), Some("NV18"));
        assert_eq!(gpus[0].numa_node, Some(1));
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn profiles_that_are_no_resource_name_segment_or_have_no_placement_are_left_out() {
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/nvidia/mig");
        let lgip = std::fs::read_to_string(
            fixtures.join("gh200-480gb-550.54.15-mig-lgip__kf-cuanschutz-gh-logs.txt"),
        )
        .unwrap();
        // The NVL's placements (same ids), without profile 0's line (7g.96gb).
        let lgipp: String = std::fs::read_to_string(
            fixtures.join("h100-nvl-560.35.03-mig-lgipp__alizeechen11-mig-and-mps.txt"),
        )
        .unwrap()
        .lines()
        .filter(|l| !l.contains("Profile ID  0 "))
        .map(|l| format!("{l}\n"))
        .collect();
        let mut gpus = vec![gpu("GPU-a", "0000:18:00.0")];
        let mut notes = Vec::new();
        apply_mig_profiles(&mut gpus, Some(&lgip), Some(&lgipp), &mut notes);
        let names: Vec<&str> = gpus[0]
            .partition_profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            names,
            ["1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb"],
            "+me and the placement-less 7g.96gb are left out"
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("GPU 0 (GPU-a)")
                && notes[0].contains("7g.96gb (id 0)")
                && notes[0].contains("no legal placement"),
            "{notes:?}"
        );

        // An unreadable -lgipp: every profile is left out, each named.
        let mut gpus = vec![gpu("GPU-a", "0000:18:00.0")];
        let mut notes = Vec::new();
        apply_mig_profiles(&mut gpus, Some(&lgip), Some("garbage"), &mut notes);
        assert!(gpus[0].partition_profiles.is_empty());
        assert!(notes[0].starts_with("nvidia-smi mig -lgipp:"), "{notes:?}");
        assert_eq!(notes.len(), 1 + 6, "{notes:?}");
    }

    #[test]
    fn unreadable_optional_output_is_a_note() {
        let mut gpus = vec![gpu("GPU-a", "0000:18:00.0")];
        let mut notes = Vec::new();
        apply_mig_profiles(&mut gpus, Some("\u{0}garbage"), None, &mut notes);
        apply_topology(
            &mut gpus,
            "ERROR: Option -m is missing its value",
            &mut notes,
        );
        assert!(gpus[0].partition_profiles.is_empty());
        assert!(gpus[0].peers.is_empty());
    }
}
