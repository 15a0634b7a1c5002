//! Hygon MIG's vendor calls, as Hygon's own tools and library have them (spec addendum H1–H3),
//! through [`accel_backend::mig_cli`]'s dialect where Hygon documents nothing else:
//!
//! - **create**: `hy-smi mig -cgi <profile id> -C -i <dev>`, the one `mig` form Hygon documents
//!   (its device plugin's README, H1): no placement — the driver picks it, and an instance it
//!   placed elsewhere than the grant's placement is destroyed and refused (the create reads the
//!   ids it made from the registry when its answer names none: that answer is in no capture);
//! - **instances**: the driver's registry files `/etc/dmi_mig_config/ci/dev<N>gi<G>ci<C>.conf`,
//!   read in Hygon's grammar ([`registry::parse_conf`]) — Hygon's own MIG discovery reads
//!   nothing else (H3): GI id, profile id, placement (`placement_start`, `placement_size`) from
//!   the GI block, CI id and `mig_uuid` (the partition is `MIG-<mig_uuid>`) from the CI block;
//! - **profile names** ([`profile_name`]): `<g>g.<GB>gb` where `g` counts shader-engine units
//!   (shader engines per slice × the GI's slices; the card's shader engines from the KFD
//!   topology, spread over 4 slices) and `GB` is `memory_size_MB / 1024` rounded down — `2g.15gb`
//!   for a one-slice instance of a BW card (2 engines a slice, 16380 MiB); a compute instance
//!   narrower than its GI is `<c>c.<g>g.<GB>gb`. So no slice count is ever read from a name;
//! - **geometry**: `hy-smi mig -lgip`/`-lgipp` (no source documents them: read as nvidia-smi's,
//!   unmeasured), each profile's name the listing's; the detector withholds one whose `g` is
//!   not Hygon's count ([`se_units`]);
//! - **destroy**: `hy-smi mig -i <N> -gi <G> -ci <C> -dci`, then `-i <N> -gi <G> -dgi` (the
//!   described system's doc shows `-dci -i <card>` / `-dgi -i <card>`, which would take every
//!   instance of the card; the per-instance form is kept, unmeasured);
//! - `-i` is the card's index in the driver's multi-instance numbering, the `N` of the
//!   registry's `dev<N>` file, which this build takes to be the detector's index (cards in bus
//!   order);
//! - busy: no Hygon listing is known to place a process on a GPU instance, so none is reported
//!   busy here; the driver itself refuses to destroy an instance in use
//!   (`The device is exist and may be in use.`, spec §6.5), which the destroy reads as in use
//!   and leaves for the next pass;
//! - the ownership record is the described system's marker, `hygon-mig-<card UUID>.json` in the
//!   container's directory (spec §6.4).

use std::collections::BTreeMap;
use std::sync::Arc;

use accel_backend::mig_cli::partitioner::{Cli, CliPartitioner, CreateCall, MigTool};
use accel_backend::partition::{
    Instance, MarkerSpelling, PartitionError, PartitionErrorKind, PartitionGpu, RecordLayout,
};
use accel_host::Host;
use accel_host::kfd;

use crate::registry;

/// The detector's reading of every card's profiles (`hy-smi mig -lgip`).
pub const LGIP_ARGV: &[&str] = &["hy-smi", "mig", "-lgip"];
/// ... and of their placements (`hy-smi mig -lgipp`).
pub const LGIPP_ARGV: &[&str] = &["hy-smi", "mig", "-lgipp"];

/// `hy-smi mig`, one card at a time.
pub type HySmiPartitioner = CliPartitioner<HySmi>;

/// The prefix of Hygon's ownership marker, `hygon-mig-<card UUID>.json` (spec §6.4).
pub const MARKER_PREFIX: &str = "hygon-mig-";

/// The marker's key for the card's PCI address (spec §6.4).
pub const PCI_BUS_ID: &str = "pciBusID";
/// The marker's key for the partition's registry file (spec §6.4).
pub const CONF_PATH: &str = "confPath";

/// The value prefix a container selects its partition with (`DMI_MIG_VISIBLE_DEVICE`): a bare
/// UUID silently selects the first instance (spec §6.3).
pub const MIG_PREFIX: &str = "MIG-";

/// hy-smi's side of the MIG dialect; `registry` reads the driver's registry files (none until
/// the partitioner is put on the node's files).
#[derive(Clone, Default)]
pub struct HySmi {
    registry: Option<Arc<dyn Host>>,
}

impl std::fmt::Debug for HySmi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HySmi")
            .field(
                "registry",
                &self.registry.as_ref().map(|h| h.root().to_path_buf()),
            )
            .finish()
    }
}

/// A profile name as published (spec §6.1, `NormalizePartitionedProfileName`): lower case.
pub fn published_profile(listed: &str) -> String {
    listed.to_ascii_lowercase()
}

/// The GPU slices a Hygon card is cut into (`NVML_GPU_INSTANCE_PROFILE_<n>_SLICE`, count 4;
/// Hygon's library divides the card's shader engines by it, addendum H3).
pub const SLICES_PER_CARD: u32 = 4;

/// The shader engines one slice of a card with `engines` holds (Hygon's `getSECount` / 4):
/// `None` when the card's count is unknown or less than a slice's.
pub fn engines_per_slice(engines: Option<u32>) -> Option<u32> {
    engines
        .map(|e| e / SLICES_PER_CARD)
        .filter(|per_slice| *per_slice > 0)
}

/// A MIG instance's name as Hygon's library forms it (`formatMIGName`, addendum H3), lower
/// case and without `MIG `: `<g>g.<GB>gb` where the compute instance spans its GPU instance,
/// else `<c>c.<g>g.<GB>gb`; `g` and `c` are shader-engine units (engines per slice × slices),
/// `GB` the memory in MiB over 1024, rounded down.
pub fn profile_name(per_slice: u32, gi_slices: u32, ci_slices: u32, memory_mib: u64) -> String {
    let g = per_slice * gi_slices;
    let gb = memory_mib / 1024;
    if ci_slices == gi_slices {
        format!("{g}g.{gb}gb")
    } else {
        format!("{}c.{g}g.{gb}gb", per_slice * ci_slices)
    }
}

/// The `g` of a profile name (`2g.15gb` → 2; `1c.2g.15gb` → 2): its shader-engine units.
pub fn se_units(name: &str) -> Option<u32> {
    name.split('.')
        .find_map(|part| part.strip_suffix('g'))
        .and_then(|n| n.parse().ok())
}

fn same(profile: &str) -> String {
    profile.to_string()
}

/// The registry file of compute instance `ci` of GPU instance `gi` on card `dev`.
pub fn conf_path(dev: u32, gi: u32, ci: u32) -> String {
    format!("{}/dev{dev}gi{gi}ci{ci}.conf", registry::CI_DIR)
}

/// `MIG-<uuid>` of a registry's `mig_uuid` value (a prefix it already carries is kept once).
pub fn mig_id(uuid: &str) -> String {
    match uuid.get(..4) {
        Some(p) if p.eq_ignore_ascii_case(MIG_PREFIX) => format!("{MIG_PREFIX}{}", &uuid[4..]),
        _ => format!("{MIG_PREFIX}{uuid}"),
    }
}

impl HySmi {
    /// A tool reading the registry on `host`.
    pub fn on(host: Arc<dyn Host>) -> HySmi {
        HySmi {
            registry: Some(host),
        }
    }

    /// The shader engines a slice of card `bus` holds, from the KFD topology on `host`: the
    /// card's own node, else (Hygon's library's rule) the first node with a `gpu_id`.
    fn engines_per_slice(host: &dyn Host, bus: Option<accel_core::busid::BusId>) -> Option<u32> {
        let nodes = kfd::read_topology(host, kfd::TOPOLOGY_DIR).ok()??;
        let gpus: Vec<&kfd::KfdNode> = nodes
            .iter()
            .filter(|n| n.properties.get("gpu_id").is_some_and(|id| *id != 0) || n.is_gpu())
            .collect();
        let own = bus.and_then(|b| {
            gpus.iter()
                .find(|n| n.board() == Some(accel_core::busid::BusId { function: 0, ..b }))
        });
        engines_per_slice(own.or(gpus.first()).and_then(|n| n.shader_engines()))
    }

    /// Card `gpu`'s instances from its registry files (the module's doc).
    fn registry_instances(&self, gpu: &PartitionGpu) -> Result<Vec<Instance>, PartitionError> {
        let unreadable =
            |why: String| PartitionError::new(gpu, PartitionErrorKind::Unreadable, why);
        let Some(host) = &self.registry else {
            return Err(unreadable(format!(
                "the instances are the driver's registry files under {}, and this partitioner reads no node files",
                registry::CI_DIR
            )));
        };
        let confs = registry::read_confs(host.as_ref(), gpu.index).map_err(unreadable)?;
        if confs.is_empty() {
            return Ok(Vec::new());
        }
        let bus = host
            .read_to_string(&format!("{}/dev{}", registry::DIR, gpu.index))
            .ok()
            .as_deref()
            .and_then(registry::parse_dev);
        let per_slice = HySmi::engines_per_slice(host.as_ref(), bus).ok_or_else(|| {
            unreadable(format!(
                "no shader-engine count in the KFD topology ({}), so its registry's instances cannot be named as Hygon's library names them",
                kfd::TOPOLOGY_DIR
            ))
        })?;
        let mut by_gi: BTreeMap<u32, Vec<(u32, registry::CiConf)>> = BTreeMap::new();
        for read in confs {
            let conf = read
                .conf
                .clone()
                .map_err(|why| unreadable(format!("registry file {}: {why}", read.path)))?;
            check_names(&read, &conf).map_err(unreadable)?;
            by_gi
                .entry(read.gpu_instance)
                .or_default()
                .push((read.compute_instance, conf));
        }
        by_gi
            .into_iter()
            .map(|(gi, cis)| instance_of(gi, &cis, per_slice).map_err(unreadable))
            .collect()
    }
}

/// A file's blocks must name the GPU and compute instance its name does.
fn check_names(read: &registry::ConfRead, conf: &registry::CiConf) -> Result<(), String> {
    let named = [
        ("GPU-instance block id", conf.gi.id, read.gpu_instance),
        (
            "compute-instance block gi_id",
            conf.ci.gi_id,
            read.gpu_instance,
        ),
        (
            "compute-instance block id",
            conf.ci.id,
            read.compute_instance,
        ),
    ];
    for (what, value, want) in named {
        if let Some(v) = value
            && v != want
        {
            return Err(format!(
                "registry file {}: its {what} is {v}, not the {want} its name says",
                read.path
            ));
        }
    }
    Ok(())
}

/// One GPU instance of the registry, from the files of its compute instances.
fn instance_of(
    gi: u32,
    cis: &[(u32, registry::CiConf)],
    per_slice: u32,
) -> Result<Instance, String> {
    let Some((_, first)) = cis.first() else {
        return Err(format!("GPU instance {gi}: no compute-instance file"));
    };
    let g = &first.gi;
    let missing = |what: &str| {
        format!("GPU instance {gi}: its registry file's GPU-instance block has no {what}")
    };
    let start = g
        .placement_start
        .ok_or_else(|| missing("placement_start"))?;
    let size = g.placement_size.ok_or_else(|| missing("placement_size"))?;
    let gi_slices = g
        .gpu_slice_count
        .ok_or_else(|| missing("gpu_slice_count"))?;
    let memory = g.memory_size_mb.ok_or_else(|| missing("memory_size_MB"))?;
    let ci_slices = first.ci.gpu_slice_count.unwrap_or(gi_slices);
    let uuid = match cis {
        [(_, only)] => only.ci.mig_uuid.as_deref().map(mig_id),
        _ => None,
    };
    Ok(Instance {
        gpu_instance: gi,
        profile_id: g.profile_id.ok_or_else(|| missing("profile_id"))?,
        profile: profile_name(per_slice, gi_slices, ci_slices, memory),
        start,
        size,
        compute_instances: cis.iter().map(|(ci, _)| *ci).collect(),
        uuid,
    })
}

impl MigTool for HySmi {
    fn program(&self) -> &'static str {
        "hy-smi"
    }

    fn record_layout(&self) -> RecordLayout {
        RecordLayout::PodMarker(MarkerSpelling {
            prefix: MARKER_PREFIX,
            vendor: same,
            published: same,
            required: &[PCI_BUS_ID, CONF_PATH],
        })
    }

    /// The card's PCI address (the registry's `dev<N>`) and the instance's registry file.
    fn marker_facts(
        &self,
        gpu: &PartitionGpu,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<Vec<(&'static str, String)>, PartitionError> {
        let unreadable =
            |why: String| PartitionError::new(gpu, PartitionErrorKind::Unreadable, why);
        let Some(host) = &self.registry else {
            return Err(unreadable(format!(
                "the card's PCI address is in the driver's registry {}, and this partitioner reads no node files",
                registry::DIR
            )));
        };
        let dev = format!("{}/dev{}", registry::DIR, gpu.index);
        let text = host
            .read_to_string(&dev)
            .map_err(|e| unreadable(format!("its registry entry: {e}")))?;
        let bus = registry::parse_dev(&text)
            .ok_or_else(|| unreadable(format!("registry file {dev} names no PCI address")))?;
        Ok(vec![
            (PCI_BUS_ID, bus.sysfs()),
            (
                CONF_PATH,
                conf_path(gpu.index, gpu_instance, compute_instance),
            ),
        ])
    }

    fn profile_name(&self, listed: &str) -> String {
        published_profile(listed)
    }

    /// `hy-smi mig -cgi <profile id> -C -i <dev>` (addendum H1): no placement.
    fn create_call(&self, gpu: &PartitionGpu, profile_id: u32, _start: u32) -> CreateCall {
        CreateCall {
            argv: [
                self.program().to_string(),
                "mig".into(),
                "-cgi".into(),
                profile_id.to_string(),
                "-C".into(),
                "-i".into(),
                self.target(gpu),
            ]
            .to_vec(),
            driver_places: true,
            ids_by_listing: true,
        }
    }

    fn instances(
        &self,
        _cli: &Cli<'_>,
        gpu: &PartitionGpu,
    ) -> Option<Result<Vec<Instance>, PartitionError>> {
        Some(self.registry_instances(gpu))
    }

    fn on_host(&self, host: Arc<dyn Host>) -> Option<Self> {
        Some(HySmi::on(host))
    }

    fn mig_uuids(
        &self,
        _cli: &Cli<'_>,
        gpu: &PartitionGpu,
        computes: &[(u32, u32)],
    ) -> Result<BTreeMap<(u32, u32), String>, PartitionError> {
        let unreadable =
            |why: String| PartitionError::new(gpu, PartitionErrorKind::Unreadable, why);
        let Some(host) = &self.registry else {
            return Err(unreadable(format!(
                "the MIG UUIDs are in the driver's registry {}, and this partitioner reads no node files",
                registry::DIR
            )));
        };
        let mut uuids = BTreeMap::new();
        for &(gi, ci) in computes {
            let path = conf_path(gpu.index, gi, ci);
            let text = host.read_to_string(&path).map_err(|e| {
                unreadable(format!(
                    "GPU instance {gi} compute instance {ci}: its registry file: {e}"
                ))
            })?;
            let uuid = registry::parse_mig_uuid(&text).ok_or_else(|| {
                unreadable(format!(
                    "registry file {path} carries no mig_uuid: line: its MIG UUID is unknown"
                ))
            })?;
            uuids.insert((gi, ci), mig_id(&uuid));
        }
        Ok(uuids)
    }

    /// None known: the driver refuses to destroy a busy instance itself (spec §6.5).
    fn busy(&self, _cli: &Cli<'_>, _gpu: &PartitionGpu) -> Result<Vec<u32>, PartitionError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Addendum H3: `g` counts shader-engine units, the memory is floored to GiB.
    #[test]
    fn hygons_names_count_shader_engines() {
        let bw = engines_per_slice(Some(8)).unwrap();
        assert_eq!(profile_name(bw, 1, 1, 16380), "2g.15gb");
        assert_eq!(profile_name(bw, 2, 2, 32760), "4g.31gb");
        assert_eq!(profile_name(bw, 4, 4, 65520), "8g.63gb");
        assert_eq!(profile_name(bw, 2, 1, 32760), "2c.4g.31gb");
        assert_eq!(engines_per_slice(Some(2)), None);
        assert_eq!(engines_per_slice(None), None);
        assert_eq!(se_units("2g.15gb"), Some(2));
        assert_eq!(se_units("2c.4g.31gb"), Some(4));
        assert_eq!(se_units("1g.16gb+me"), Some(1));
        assert_eq!(se_units("big"), None);
    }

    #[test]
    fn names_paths_and_ids() {
        assert_eq!(published_profile("2G.15GB"), "2g.15gb");
        assert_eq!(conf_path(3, 4, 0), "/etc/dmi_mig_config/ci/dev3gi4ci0.conf");
        assert_eq!(mig_id("5f0c-aa"), "MIG-5f0c-aa");
        assert_eq!(mig_id("mig-5f0c-aa"), "MIG-5f0c-aa");
        assert_eq!(mig_id("MIG-5f0c-aa"), "MIG-5f0c-aa");
    }
}
