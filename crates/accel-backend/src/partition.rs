//! Hardware partitions (NVIDIA MIG; T-Head's and Hygon's MIG-named partitioning): the seam the
//! partitioned family calls to read an accelerator's partition geometry and live instances, and
//! to materialise and destroy an instance on an accelerator the allocator chose. A backend
//! without it offers no `.partitioned` pool.
//!
//! One partition is always one GPU instance (GI) with exactly one compute instance (CI) covering
//! all of it: [`Partitioner::create`] makes both at the placement asked, [`Partitioner::destroy`]
//! takes the CI down, then the GI. An implementation bounds every vendor call and runs the calls
//! of one accelerator one at a time (a per-accelerator lock); it never leaves a half-made
//! instance behind a failed create. The caller never holds the ledger lock across these calls.
//!
//! Accelerators are named by [`PartitionGpu`]: the vendor tool's index, and the UUID the
//! inventory recorded, which an implementation checks where the tool shows it.

use std::sync::Arc;

use accel_host::{Commands, Host};

/// The accelerator a partition call is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionGpu {
    /// The vendor tool's index for it (nvidia-smi's `-i`).
    pub index: u32,
    /// Its UUID, when the inventory knows it.
    pub uuid: Option<String>,
}

impl std::fmt::Display for PartitionGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.uuid {
            Some(uuid) => write!(f, "GPU {} ({uuid})", self.index),
            None => write!(f, "GPU {}", self.index),
        }
    }
}

/// What kind of failure a [`PartitionError`] is, for the caller's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionErrorKind {
    /// The instance has processes (`In use by another client`): a destroy may be retried.
    InUse,
    /// No room for the instance at that placement (`Insufficient Resources`).
    NoRoom,
    /// The accelerator does not offer that profile or placement.
    NotOffered,
    /// The vendor call gave no answer within its deadline.
    TimedOut,
    /// The vendor tool's answer could not be read.
    Unreadable,
    /// Anything else the vendor tool refused or failed with.
    Failed,
}

/// Why a partition could not be read, made or taken back: one line naming the accelerator,
/// the call and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{accelerator}: {reason}")]
pub struct PartitionError {
    /// The accelerator, as [`PartitionGpu`] displays it.
    pub accelerator: String,
    pub kind: PartitionErrorKind,
    pub reason: String,
}

impl PartitionError {
    pub fn new(gpu: &PartitionGpu, kind: PartitionErrorKind, reason: impl Into<String>) -> Self {
        PartitionError {
            accelerator: gpu.to_string(),
            kind,
            reason: reason.into(),
        }
    }
}

/// One partition profile an accelerator offers, with where it may be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileGeometry {
    /// The vendor's profile id (`-cgi <id>`).
    pub id: u32,
    /// The profile name as the vendor spells it (`3g.40gb`); always a valid resource-name
    /// segment (others are left out of the geometry).
    pub name: String,
    /// The profile's VRAM as the driver reports it.
    pub memory_mib: Option<u64>,
    /// Memory slices one instance takes.
    pub size: u32,
    /// Legal start slices, ascending.
    pub starts: Vec<u32>,
}

impl ProfileGeometry {
    /// The legal starts at which an instance overlaps none of `occupied` (`(start, size)`).
    pub fn free_starts(&self, occupied: &[(u32, u32)]) -> Vec<u32> {
        self.starts
            .iter()
            .copied()
            .filter(|s| {
                occupied
                    .iter()
                    .all(|(start, size)| !overlaps((*s, self.size), (*start, *size)))
            })
            .collect()
    }

    /// How many instances of this profile still fit beside `occupied`, placed greedily from
    /// the lowest start (each placed one occupies its slices for the next).
    pub fn free_count(&self, occupied: &[(u32, u32)]) -> u32 {
        let mut taken: Vec<(u32, u32)> = occupied.to_vec();
        let mut count = 0;
        for start in &self.starts {
            if taken
                .iter()
                .all(|(s, z)| !overlaps((*start, self.size), (*s, *z)))
            {
                taken.push((*start, self.size));
                count += 1;
            }
        }
        count
    }
}

/// Whether two `(start, size)` slice intervals overlap.
pub fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

/// An accelerator's partition geometry: the profiles that can be offered, and why others were
/// left out (each line names the accelerator and the profile).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Geometry {
    pub profiles: Vec<ProfileGeometry>,
    pub left_out: Vec<String>,
}

/// One live instance (a GI and its CIs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub gpu_instance: u32,
    pub profile_id: u32,
    /// The GI's profile name as the vendor spells it.
    pub profile: String,
    pub start: u32,
    pub size: u32,
    /// Its compute instances' ids, ascending.
    pub compute_instances: Vec<u32>,
    /// The device UUID (`MIG-…`) of its one compute instance; `None` with none or several.
    pub uuid: Option<String>,
}

impl Instance {
    /// Subdivided into several compute instances by hand: never used or destroyed.
    pub fn is_subdivided(&self) -> bool {
        self.compute_instances.len() > 1
    }
}

/// Where a partition's durable ownership record lives and in what shape (the plugin's
/// `ownership` module reads and writes both).
#[derive(Debug, Clone, Copy)]
pub enum RecordLayout {
    /// This project's own record, `<data-dir>/partitions/<pod uid>_<container>.json` (NVIDIA:
    /// the described system names none for it).
    Partitions,
    /// The described system's per-card marker,
    /// `<data-dir>/pods/<pod uid>/c-<container>/<prefix><card UUID>.json`, with its keys
    /// (`podUID`, `container`, `card`, `profile`, `profileID`, `giID`, `ciID`, `migUUID`,
    /// `computeSlices`, `start`, `length`): T-Head's `thead-mig-`, Hygon's `hygon-mig-`.
    PodMarker(MarkerSpelling),
}

/// A per-card marker's file prefix and how its `profile` is spelled: the vendor's spelling
/// is kept below the API (T-Head's `4g48gb`), the published one (`4g.48gb`) above it.
#[derive(Debug, Clone, Copy)]
pub struct MarkerSpelling {
    /// The file name's prefix before the card UUID (`thead-mig-`).
    pub prefix: &'static str,
    /// A published profile name in the vendor's spelling, for the marker.
    pub vendor: fn(&str) -> String,
    /// A marker's profile name in the published spelling.
    pub published: fn(&str) -> String,
    /// The vendor's own keys the marker must carry, non-empty (Hygon's `pciBusID` and
    /// `confPath`); their values come from [`Partitioner::marker_facts`].
    pub required: &'static [&'static str],
}

/// One manufacturer's partitioner. `commands` runs the vendor's tools (live or recorded).
pub trait Partitioner: Send + Sync {
    /// Where and how this manufacturer's partition ownership records are kept.
    fn record_layout(&self) -> RecordLayout {
        RecordLayout::Partitions
    }

    /// This partitioner reading the node's files on `host` where its vendor keeps partition
    /// facts only there (Hygon: the driver's registry holds each instance's MIG UUID); `None`:
    /// it reads no file, and serves as it is.
    fn on_host(&self, host: Arc<dyn Host>) -> Option<Arc<dyn Partitioner>> {
        let _ = host;
        None
    }

    /// The vendor's own facts the ownership marker of compute instance `compute_instance` of
    /// GPU instance `gpu_instance` on `gpu` records (`(key, value)`; Hygon: the card's PCI
    /// address and the instance's registry file); an error when one cannot be read.
    fn marker_facts(
        &self,
        gpu: &PartitionGpu,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<Vec<(&'static str, String)>, PartitionError> {
        let _ = (gpu, gpu_instance, compute_instance);
        Ok(Vec::new())
    }

    /// The profiles `gpu` offers and their legal placements.
    fn geometry(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
    ) -> Result<Geometry, PartitionError>;

    /// The live instances on `gpu`, with their device UUIDs.
    fn instances(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
    ) -> Result<Vec<Instance>, PartitionError>;

    /// Makes one GI of profile `profile_id` at `start` and one CI covering it; answers the
    /// instance as listed afterwards. On any failure nothing it made is left behind.
    fn create(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        profile_id: u32,
        start: u32,
    ) -> Result<Instance, PartitionError>;

    /// The GPU instances of `gpu` a compute process runs on (the vendor's process listing read
    /// against its instances), ascending. A compute process the listing does not place on an
    /// instance is an error (`Unreadable`): the caller then treats no instance as idle.
    fn busy(&self, commands: &dyn Commands, gpu: &PartitionGpu)
    -> Result<Vec<u32>, PartitionError>;

    /// Destroys compute instance `compute_instance` (when given), then GPU instance
    /// `gpu_instance`; an instance already gone is not an error.
    fn destroy(
        &self,
        commands: &dyn Commands,
        gpu: &PartitionGpu,
        gpu_instance: u32,
        compute_instance: Option<u32>,
    ) -> Result<(), PartitionError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(size: u32, starts: &[u32]) -> ProfileGeometry {
        ProfileGeometry {
            id: 0,
            name: "p".into(),
            memory_mib: None,
            size,
            starts: starts.to_vec(),
        }
    }

    #[test]
    fn free_starts_and_counts_read_interval_overlap() {
        // H100: a 3g at 0..4 takes the only 4g slot and leaves one 3g at 4.
        let three = profile(4, &[0, 4]);
        let four = profile(4, &[0]);
        let one = profile(1, &[0, 1, 2, 3, 4, 5, 6]);
        let occupied = [(0, 4)];
        assert_eq!(three.free_starts(&occupied), [4]);
        assert!(four.free_starts(&occupied).is_empty());
        assert_eq!(one.free_count(&occupied), 3);
        assert_eq!(one.free_count(&[]), 7);
        assert_eq!(profile(2, &[0, 2, 4, 6]).free_count(&occupied), 2);
        assert!(overlaps((0, 4), (3, 1)));
        assert!(!overlaps((0, 4), (4, 4)));
    }
}
