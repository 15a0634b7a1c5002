//! The ledger: per accelerator its mode, remaining units, shares and slices, and the grants that
//! hold it, keyed by (Pod UID, container). The single authoritative accounting of occupancy.
//!
//! Every rule of seed 000's "Container identification and cross-mode exclusion" is a function of
//! this state: cross-mode exclusion, a shared grant of N being N distinct accelerators, the slice
//! gate (a free slot, the units it needs and, where compute is not over-committed, the cores
//! percent it needs), release when the Pod is gone, the Succeeded/Failed exception, the give-back
//! after a responder refusal, and a retried call never charged twice.
//! Placement preference lives in [`placement`]. This module is pure: no I/O, no clock, no async.
//! It never decides who a container is (the plugin identifies it) nor what is injected.

pub mod annotation;
pub mod partitions;
pub mod placement;
pub mod units;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::inventory::{Accelerator, Grantable, PeerLink};
use units::{SHARES_PER_ACCELERATOR, UNITS_PER_ACCELERATOR, UNITS_PER_SHARE};

pub use crate::resources::Family;

/// What an accelerator is doing now: free, or held by one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    Free,
    Held(Family),
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Free => f.write_str("free"),
            Mode::Held(family) => family.fmt(f),
        }
    }
}

/// Who holds a grant: one container of one Pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantKey {
    pub pod_uid: String,
    pub container: String,
}

impl GrantKey {
    pub fn new(pod_uid: impl Into<String>, container: impl Into<String>) -> Self {
        GrantKey {
            pod_uid: pod_uid.into(),
            container: container.into(),
        }
    }

    /// The key of a grant answered before its container was named (an exclusive or shared
    /// grant, whose answer is the same for every container): no Pod, and the resource with its
    /// sorted device IDs in the container's place, which no two live grants share. The plugin
    /// renames it as soon as the kubelet names the container holding those devices.
    pub fn unattributed(resource: &str, device_ids: &[String]) -> GrantKey {
        let mut ids = device_ids.to_vec();
        ids.sort();
        GrantKey {
            pod_uid: String::new(),
            container: format!("{resource}={}", ids.join(",")),
        }
    }

    /// Whether this is an [`GrantKey::unattributed`] key (no Pod UID: the API gives every Pod
    /// one, so no real container has an empty one).
    pub fn is_unattributed(&self) -> bool {
        self.pod_uid.is_empty()
    }

    /// The key of a grant made through a DRA ResourceClaim (issue 46): the claim, not a Pod,
    /// holds it (one claim may be shared by several Pods), so it lives as long as the claim is
    /// prepared on this node and is released when the claim is unprepared or gone, never on a
    /// Pod's word. Its "Pod UID" is [`CLAIM_PREFIX`] and the claim's UID, which no Pod UID
    /// (a bare UUID) can be; its "container" is the UID of the Pod the claim was prepared for
    /// (what a visibility sidecar of that Pod is shown).
    pub fn claim(claim_uid: &str, pod_uid: &str) -> GrantKey {
        GrantKey {
            pod_uid: format!("{CLAIM_PREFIX}{claim_uid}"),
            container: pod_uid.to_string(),
        }
    }

    /// The ResourceClaim UID of a [`GrantKey::claim`] key; `None` for a container's.
    pub fn claim_uid(&self) -> Option<&str> {
        self.pod_uid.strip_prefix(CLAIM_PREFIX)
    }

    /// The Pod a claim's grant was prepared for; `None` for a container's.
    pub fn claim_pod(&self) -> Option<&str> {
        self.claim_uid().map(|_| self.container.as_str())
    }
}

/// What a claim key's Pod UID starts with.
pub const CLAIM_PREFIX: &str = "resourceclaim:";

impl fmt::Display for GrantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unattributed() {
            write!(
                f,
                "the grant of {} (container not named yet)",
                self.container
            )
        } else if let Some(claim) = self.claim_uid() {
            write!(f, "ResourceClaim {claim}")
        } else {
            write!(f, "pod {} container {}", self.pod_uid, self.container)
        }
    }
}

/// What one container holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    pub family: Family,
    /// The Kubernetes resource the grant was served under (`nvidia.com/gpu.sliced`).
    pub resource: String,
    /// The kubelet's device IDs, sorted: a retried call names the same ones.
    pub device_ids: Vec<String>,
    /// The accelerators, by index, ascending (the positional order of seed 000).
    pub accelerators: Vec<u32>,
    /// Units charged on each accelerator: a slice's memory budget; for exclusive and shared the
    /// whole accelerator and one share.
    pub units: u64,
    /// The compute cap of a slice, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores_percentage: Option<u32>,
    /// The Pod reached Succeeded or Failed.
    #[serde(default)]
    pub finished: bool,
    /// A partition grant's instance: its profile and placement on its one accelerator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<partitions::PartitionPlacement>,
}

/// What a container asks the ledger for: the accelerators the kubelet's tokens name, one entry
/// per token (so a repeated accelerator is visible), and the budget of a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub key: GrantKey,
    pub family: Family,
    pub resource: String,
    pub device_ids: Vec<String>,
    pub accelerators: Vec<u32>,
    /// Units per accelerator for a slice or a partition (its profile's VRAM folded); ignored
    /// for exclusive and shared.
    pub slice_units: u64,
    pub cores_percentage: Option<u32>,
    /// A partition's profile and placement (the allocator chose them against the geometry).
    pub partition: Option<partitions::PartitionPlacement>,
}

/// The ledger's switches (seed 000's settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// `GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS`: a Succeeded or Failed Pod stops charging its
    /// exclusive, shared and sliced grants.
    pub release_terminated_pods: bool,
    /// `GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE`: refuse a slice without a free slot or the
    /// units it needs.
    pub slice_gate: bool,
    /// A finished Pod's slices stay charged until the Pod object is gone, whatever
    /// `release_terminated_pods` says (MetaX: the reclaimer destroys a slice's sGPU subdevice
    /// only then, spec metax §4.5), as a hardware partition always does.
    pub slices_held_until_gone: bool,
    /// The slices on one accelerator may ask for more than 100 cores percent together (the
    /// manufacturers table's `cores_percentage_overcommit`, handed in by whoever builds the
    /// ledger; the ledger never names a manufacturer). False: each slice's cores percentage is
    /// counted on its accelerator (a slice without one counts 100) and, under the slice gate,
    /// a slice that would take the accelerator past 100 is refused and never offered.
    pub cores_overcommit: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            release_terminated_pods: true,
            slice_gate: true,
            slices_held_until_gone: false,
            cores_overcommit: true,
        }
    }
}

/// The ledger's view of one accelerator: what it can host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seat {
    pub index: u32,
    pub uuid: Option<String>,
    pub numa_node: Option<u32>,
    /// Topology links to peers by index (`NV18`, `SYS`, …).
    pub peers: BTreeMap<u32, String>,
    pub memory_mib: Option<u64>,
    pub grantable: Grantable,
    pub healthy: bool,
    /// Logical slices it may host (0: not logically sliceable here).
    pub slice_capacity: u32,
    /// The partition profiles it offers with their placements (in a partitioning mode).
    pub partitions: Vec<partitions::PartitionShape>,
}

impl Seat {
    /// The seat of an inventory accelerator with the manufacturer's slice count.
    pub fn from_accelerator(accelerator: &Accelerator, slice_capacity: u32) -> Seat {
        Seat {
            index: accelerator.index,
            uuid: accelerator.uuid.clone(),
            numa_node: accelerator.numa_node,
            peers: accelerator.peers.clone(),
            memory_mib: accelerator.memory_mib,
            grantable: accelerator.grantable,
            healthy: accelerator.healthy,
            slice_capacity,
            partitions: partitions::shapes_of(accelerator),
        }
    }

    /// The direct link its topology shows to `peer` (NVLink, XGMI, HCCS: [`PeerLink::of`]),
    /// whichever the manufacturer; `None` for a PCIe path or no entry.
    pub fn link_to(&self, peer: u32) -> Option<PeerLink> {
        self.peers.get(&peer).and_then(|word| PeerLink::of(word))
    }
}

/// How much of one accelerator is taken, by the grants that charge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Occupancy {
    pub mode: Mode,
    /// Units charged; above [`UNITS_PER_ACCELERATOR`] only when the slice gate is off.
    pub used_units: u64,
    pub shares: u32,
    pub slices: u32,
    /// Cores percent its slices take, counted only where the policy says compute is not
    /// over-committed ([`Policy::cores_overcommit`]); above 100 only when the slice gate is off.
    #[serde(default)]
    pub cores_percentage: u32,
    /// Grants that charge it.
    pub holders: u32,
}

impl Occupancy {
    pub const FREE: Occupancy = Occupancy {
        mode: Mode::Free,
        used_units: 0,
        shares: 0,
        slices: 0,
        cores_percentage: 0,
        holders: 0,
    };

    /// Units still free (the `Remaining` of the `Devices` ledger).
    pub fn remaining_units(&self) -> u64 {
        UNITS_PER_ACCELERATOR.saturating_sub(self.used_units)
    }
}

/// Why the ledger refused a claim. Every message names the accelerator and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The claim named no accelerator.
    #[error("{key}: the request names no accelerator")]
    Empty { key: GrantKey },
    /// An index the node does not have.
    #[error("accelerator {index} is not on this node")]
    UnknownAccelerator { index: u32 },
    /// The family is not served yet.
    #[error("the {family} family is not served by this device manager")]
    FamilyNotServed { family: Family },
    /// In MIG mode or passed through.
    #[error("accelerator {accelerator} cannot be granted as {family}: {why}")]
    NotGrantable {
        accelerator: String,
        family: Family,
        why: &'static str,
    },
    /// Failing the health rule.
    #[error("accelerator {accelerator} is unhealthy: {why}")]
    Unhealthy { accelerator: String, why: String },
    /// Two tokens on one accelerator.
    #[error(
        "accelerator {accelerator} was assigned twice: a {family} grant of N is N distinct accelerators"
    )]
    Repeated { accelerator: String, family: Family },
    /// Another mode holds the accelerator (the cross-mode invariant).
    #[error("accelerator {accelerator} is held {held}; a {requested} grant cannot use it")]
    OtherMode {
        accelerator: String,
        held: Mode,
        requested: Family,
    },
    /// Exclusive asked of an accelerator another container already holds.
    #[error("accelerator {accelerator} is already held exclusively by another container")]
    ExclusivelyHeld { accelerator: String },
    /// All shares taken.
    #[error("accelerator {accelerator} has no share left ({used} of {total} taken)")]
    NoShare {
        accelerator: String,
        used: u32,
        total: u32,
    },
    /// The slice gate: no free slot.
    #[error("accelerator {accelerator} has no free slice slot ({used} of {capacity} taken)")]
    NoSlot {
        accelerator: String,
        used: u32,
        capacity: u32,
    },
    /// The slice gate: not the units it needs.
    #[error("accelerator {accelerator} has {remaining} units left; the slice needs {needed}")]
    NoRoom {
        accelerator: String,
        remaining: u64,
        needed: u64,
    },
    /// The slice gate where compute is not over-committed: not the cores percent it needs.
    #[error(
        "accelerator {accelerator} has {used} of its 100 cores percent taken; the slice needs {needed}"
    )]
    NoCompute {
        accelerator: String,
        used: u32,
        needed: u32,
    },
    /// A slice with a budget outside 1 – 1,600,000 units.
    #[error("{key}: a slice of {units} units is outside 1-1600000")]
    BadBudget { key: GrantKey, units: u64 },
    /// A partition claim without its one accelerator and placement.
    #[error("{key}: a partition grant is one instance on one accelerator, with its placement")]
    PartitionShape { key: GrantKey },
    /// A profile or start the accelerator does not offer.
    #[error("accelerator {accelerator} offers no {profile} instance at memory slice {start}")]
    NotOffered {
        accelerator: String,
        profile: String,
        start: u32,
    },
    /// The placement overlaps a live instance.
    #[error(
        "accelerator {accelerator}: a {profile} instance at memory slice {start} overlaps a live instance"
    )]
    PlacementTaken {
        accelerator: String,
        profile: String,
        start: u32,
    },
    /// One container asking for a second family.
    #[error("{key} already holds a {held} grant; one container holds one family")]
    SecondFamily { key: GrantKey, held: Family },
}

/// The handle of a recorded grant, to give it back if the responder refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub key: GrantKey,
    /// False when the call was a retry of one already recorded: nothing new was charged.
    pub fresh: bool,
    /// The claim the container held before this one replaced it, restored on give-back.
    pub previous: Option<Grant>,
}

/// The ledger of one node.
#[derive(Debug, Clone)]
pub struct Ledger {
    seats: BTreeMap<u32, Seat>,
    grants: BTreeMap<GrantKey, Grant>,
    occupancy: BTreeMap<u32, Occupancy>,
    policy: Policy,
    /// Live partition instances no grant accounts for, by accelerator (told by the plugin's
    /// passes over the live instances; never journalled).
    outside: BTreeMap<u32, Vec<partitions::Outside>>,
}

impl Ledger {
    /// An empty ledger over these accelerators.
    pub fn new(seats: impl IntoIterator<Item = Seat>, policy: Policy) -> Ledger {
        let seats: BTreeMap<u32, Seat> = seats.into_iter().map(|s| (s.index, s)).collect();
        let occupancy = seats.keys().map(|i| (*i, Occupancy::FREE)).collect();
        Ledger {
            seats,
            grants: BTreeMap::new(),
            occupancy,
            policy,
            outside: BTreeMap::new(),
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn seats(&self) -> impl Iterator<Item = &Seat> {
        self.seats.values()
    }

    pub fn seat(&self, index: u32) -> Option<&Seat> {
        self.seats.get(&index)
    }

    pub fn grants(&self) -> &BTreeMap<GrantKey, Grant> {
        &self.grants
    }

    pub fn grant(&self, key: &GrantKey) -> Option<&Grant> {
        self.grants.get(key)
    }

    /// The occupancy of one accelerator.
    pub fn occupancy(&self, index: u32) -> Option<&Occupancy> {
        self.occupancy.get(&index)
    }

    pub fn occupancies(&self) -> &BTreeMap<u32, Occupancy> {
        &self.occupancy
    }

    /// "3 (GPU-…)": how messages name an accelerator.
    pub fn describe(&self, index: u32) -> String {
        match self.seats.get(&index).and_then(|s| s.uuid.as_deref()) {
            Some(uuid) => format!("{index} ({uuid})"),
            None => index.to_string(),
        }
    }

    /// Marks an accelerator healthy or not (issue 6's health rule feeds this). Returns whether
    /// it changed.
    pub fn set_health(&mut self, index: u32, healthy: bool) -> bool {
        match self.seats.get_mut(&index) {
            Some(seat) if seat.healthy != healthy => {
                seat.healthy = healthy;
                true
            }
            _ => false,
        }
    }

    /// Replaces what is known of accelerator `index`'s live partition instances that no grant
    /// accounts for ([`partitions::Outside`]). Returns whether that changed.
    pub fn set_outside(&mut self, index: u32, mut outside: Vec<partitions::Outside>) -> bool {
        outside.sort_by_key(|o| (o.start, o.size));
        if !self.seats.contains_key(&index) {
            return false;
        }
        let before = self.outside.get(&index).map_or(&[][..], Vec::as_slice);
        if before == outside.as_slice() {
            return false;
        }
        if outside.is_empty() {
            self.outside.remove(&index);
        } else {
            self.outside.insert(index, outside);
        }
        true
    }

    /// Accelerator `index`'s live partition instances that no grant accounts for, as last told.
    pub fn outside(&self, index: u32) -> &[partitions::Outside] {
        self.outside.get(&index).map_or(&[][..], Vec::as_slice)
    }

    /// Whether a grant still charges its accelerators.
    pub fn charges(&self, grant: &Grant) -> bool {
        !(grant.finished
            && self.policy.release_terminated_pods
            && releases_on_finish(grant.family, &self.policy))
    }

    /// The container holding exactly these device IDs of `resource`: a retried call. A finished
    /// Pod's grant is never matched: the kubelet has taken its tokens back and may hand them on.
    pub fn find_by_devices(&self, resource: &str, device_ids: &[String]) -> Option<&GrantKey> {
        let mut wanted = device_ids.to_vec();
        wanted.sort();
        self.grants
            .iter()
            .find(|(_, g)| !g.finished && g.resource == resource && g.device_ids == wanted)
            .map(|(k, _)| k)
    }

    /// Whether a token of `family` on accelerator `index` is usable now: the accelerator exists,
    /// is healthy, and no other mode holds it. ListAndWatch reports the rest Unhealthy.
    pub fn token_healthy(&self, index: u32, family: Family) -> bool {
        let (Some(seat), Some(occupancy)) = (self.seats.get(&index), self.occupancy.get(&index))
        else {
            return false;
        };
        seat.healthy
            && match occupancy.mode {
                Mode::Free => true,
                // A card a ResourceClaim holds is the DRA driver's: the kubelet, which does not
                // know it, must not count its tokens as free.
                Mode::Held(held) => held == family && !self.held_by_claim(index),
            }
    }

    /// Whether a ResourceClaim's grant charges accelerator `index`. Claim keys sort together
    /// (their "Pod UID" starts with [`CLAIM_PREFIX`]), so only the claims are read: a node
    /// without DRA pays one lookup per token.
    pub fn held_by_claim(&self, index: u32) -> bool {
        let first = GrantKey {
            pod_uid: CLAIM_PREFIX.to_string(),
            container: String::new(),
        };
        self.grants
            .range(first..)
            .take_while(|(key, _)| key.claim_uid().is_some())
            .any(|(_, grant)| grant.accelerators.contains(&index) && self.charges(grant))
    }

    /// Whether a container's grant (one the device plugin made) charges accelerator `index`:
    /// such a card is not offered through DRA.
    pub fn held_by_container(&self, index: u32) -> bool {
        self.grants.iter().any(|(key, grant)| {
            key.claim_uid().is_none() && grant.accelerators.contains(&index) && self.charges(grant)
        })
    }

    /// Records a claim, or refuses it. A retry of a recorded claim (same family, resource and
    /// device IDs) is answered without charging again; a claim that replaces the container's
    /// earlier one keeps that one in the receipt so a give-back restores it.
    pub fn allocate(&mut self, claim: Claim) -> Result<Receipt, Refusal> {
        self.place(claim, true)
    }

    /// Puts a grant read back from the journal (or the kubelet and the Pods) into the ledger.
    /// The same rules apply except health: a grant made while the accelerator was healthy stays
    /// held when it is not.
    pub fn restore(&mut self, key: GrantKey, grant: Grant) -> Result<(), Refusal> {
        let finished = grant.finished;
        let charges = self.charges(&grant);
        let claim = Claim {
            key: key.clone(),
            family: grant.family,
            resource: grant.resource,
            device_ids: grant.device_ids,
            accelerators: grant.accelerators,
            slice_units: grant.units,
            cores_percentage: grant.cores_percentage,
            partition: grant.partition,
        };
        if !charges {
            // A finished Pod's released grant takes no room; only its shape is checked.
            let mut device_ids = claim.device_ids.clone();
            device_ids.sort();
            let mut grant = self.check(&claim, device_ids, false)?;
            grant.finished = true;
            self.remove(&key);
            self.insert(key, grant);
            return Ok(());
        }
        self.place(claim, false)?;
        if finished {
            self.mark_finished(&key);
        }
        Ok(())
    }

    fn place(&mut self, claim: Claim, check_health: bool) -> Result<Receipt, Refusal> {
        let mut device_ids = claim.device_ids.clone();
        device_ids.sort();
        if let Some(held) = self.grants.get(&claim.key) {
            if held.family != claim.family {
                return Err(Refusal::SecondFamily {
                    key: claim.key,
                    held: held.family,
                });
            }
            if held.resource == claim.resource && held.device_ids == device_ids {
                return Ok(Receipt {
                    key: claim.key,
                    fresh: false,
                    previous: None,
                });
            }
        }
        let grant = self.check(&claim, device_ids, check_health)?;
        let previous = self.remove(&claim.key);
        if let Err(refusal) = self.check_room(&grant) {
            if let Some(previous) = previous {
                self.insert(claim.key, previous);
            }
            return Err(refusal);
        }
        self.insert(claim.key.clone(), grant);
        Ok(Receipt {
            key: claim.key,
            fresh: true,
            previous,
        })
    }

    /// The checks that do not depend on what others hold.
    fn check(
        &self,
        claim: &Claim,
        device_ids: Vec<String>,
        check_health: bool,
    ) -> Result<Grant, Refusal> {
        if claim.family == Family::Partitioned
            && (claim.accelerators.len() != 1 || claim.partition.is_none())
        {
            return Err(Refusal::PartitionShape {
                key: claim.key.clone(),
            });
        }
        if claim.accelerators.is_empty() {
            return Err(Refusal::Empty {
                key: claim.key.clone(),
            });
        }
        let mut seen = BTreeSet::new();
        for &index in &claim.accelerators {
            let Some(seat) = self.seats.get(&index) else {
                return Err(Refusal::UnknownAccelerator { index });
            };
            if !seen.insert(index) {
                return Err(Refusal::Repeated {
                    accelerator: self.describe(index),
                    family: claim.family,
                });
            }
            let why = match (seat.grantable, claim.family) {
                (Grantable::Whole, Family::Partitioned) => {
                    Some("it is not in MIG mode and feeds no partitions")
                }
                (Grantable::Whole, _) | (Grantable::PartitionsOnly, Family::Partitioned) => None,
                (Grantable::PartitionsOnly, _) => {
                    Some("it is in MIG mode and feeds only partitions")
                }
                (Grantable::Nothing, _) => Some("it is passed through to a virtual machine"),
                (Grantable::Unidentified, _) => {
                    Some("its driver's tool names no identity (UUID) for it")
                }
            };
            if let Some(why) = why {
                return Err(Refusal::NotGrantable {
                    accelerator: self.describe(index),
                    family: claim.family,
                    why,
                });
            }
            if claim.family == Family::Sliced && seat.slice_capacity == 0 {
                return Err(Refusal::NotGrantable {
                    accelerator: self.describe(index),
                    family: claim.family,
                    why: "it is not logically sliceable on this node",
                });
            }
            if check_health && !seat.healthy {
                return Err(Refusal::Unhealthy {
                    accelerator: self.describe(index),
                    why: "it fails the health rule".to_string(),
                });
            }
            if let (Family::Partitioned, Some(p)) = (claim.family, &claim.partition) {
                let offered = seat.partitions.iter().any(|s| {
                    s.name == p.profile && s.size == p.size && s.starts.contains(&p.start)
                });
                if !offered {
                    return Err(Refusal::NotOffered {
                        accelerator: self.describe(index),
                        profile: p.profile.clone(),
                        start: p.start,
                    });
                }
            }
        }
        let units = match claim.family {
            Family::Exclusive => UNITS_PER_ACCELERATOR,
            Family::Shared => UNITS_PER_SHARE,
            Family::Sliced | Family::Partitioned => {
                if claim.slice_units == 0 || claim.slice_units > UNITS_PER_ACCELERATOR {
                    return Err(Refusal::BadBudget {
                        key: claim.key.clone(),
                        units: claim.slice_units,
                    });
                }
                claim.slice_units
            }
        };
        Ok(Grant {
            family: claim.family,
            resource: claim.resource.clone(),
            device_ids,
            accelerators: seen.into_iter().collect(),
            units,
            cores_percentage: claim.cores_percentage,
            finished: false,
            partition: claim.partition.clone(),
        })
    }

    /// The checks against what others hold: cross-mode exclusion, shares, the slice gate.
    fn check_room(&self, grant: &Grant) -> Result<(), Refusal> {
        for &index in &grant.accelerators {
            let occupancy = self
                .occupancy
                .get(&index)
                .copied()
                .unwrap_or(Occupancy::FREE);
            self.fits(
                index,
                &occupancy,
                grant.family,
                grant.units,
                grant.cores_percentage,
            )?;
            if let Some(p) = &grant.partition {
                let taken = partitions::occupied(self, index);
                if taken
                    .iter()
                    .any(|o| partitions::overlaps((p.start, p.size), *o))
                {
                    return Err(Refusal::PlacementTaken {
                        accelerator: self.describe(index),
                        profile: p.profile.clone(),
                        start: p.start,
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether a grant of `family` charging `units` (and, for a slice, `cores_percentage`: `None`
    /// counts 100) fits on accelerator `index` as it stands. Allocation and the placement hint
    /// read this same room. The cores are weighed only where compute is not over-committed
    /// ([`Policy::cores_overcommit`]), and, like slots and units, only under the slice gate:
    /// `GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE=false` is the off switch of the one refusal
    /// of a slice its accelerator cannot hold, the manufacturer's responder staying the guard.
    pub fn fits(
        &self,
        index: u32,
        occupancy: &Occupancy,
        family: Family,
        units: u64,
        cores_percentage: Option<u32>,
    ) -> Result<(), Refusal> {
        let accelerator = || self.describe(index);
        match (occupancy.mode, family) {
            // Equivalent mutant: deleting this arm leaves a free accelerator to the `_` arm
            // below, which also lets it through (the arms between match only `Held`); kept
            // because it states the rule: a free accelerator takes any family.
            (Mode::Free, _) => {}
            (Mode::Held(Family::Exclusive), Family::Exclusive) => {
                return Err(Refusal::ExclusivelyHeld {
                    accelerator: accelerator(),
                });
            }
            (Mode::Held(held), requested) if held != requested => {
                return Err(Refusal::OtherMode {
                    accelerator: accelerator(),
                    held: occupancy.mode,
                    requested,
                });
            }
            _ => {}
        }
        match family {
            Family::Shared if occupancy.shares >= SHARES_PER_ACCELERATOR => Err(Refusal::NoShare {
                accelerator: accelerator(),
                used: occupancy.shares,
                total: SHARES_PER_ACCELERATOR,
            }),
            Family::Sliced if self.policy.slice_gate => {
                let capacity = self.seats.get(&index).map_or(0, |s| s.slice_capacity);
                if occupancy.slices >= capacity {
                    Err(Refusal::NoSlot {
                        accelerator: accelerator(),
                        used: occupancy.slices,
                        capacity,
                    })
                } else if occupancy.remaining_units() < units {
                    Err(Refusal::NoRoom {
                        accelerator: accelerator(),
                        remaining: occupancy.remaining_units(),
                        needed: units,
                    })
                } else if !self.policy.cores_overcommit
                    && occupancy
                        .cores_percentage
                        .saturating_add(slice_cores(cores_percentage))
                        > MAX_CORES_PERCENTAGE
                {
                    Err(Refusal::NoCompute {
                        accelerator: accelerator(),
                        used: occupancy.cores_percentage,
                        needed: slice_cores(cores_percentage),
                    })
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// Records the instance made for a reserved partition grant (its placement and charge stay
    /// as reserved). Returns false when `key` holds no partition grant.
    pub fn set_partition_instance(
        &mut self,
        key: &GrantKey,
        instance: partitions::PartitionInstance,
    ) -> bool {
        match self.grants.get_mut(key).and_then(|g| g.partition.as_mut()) {
            Some(placement) => {
                placement.instance = Some(instance);
                true
            }
            None => false,
        }
    }

    /// Moves a reserved partition grant to another start on its accelerator (it claims an
    /// instance found there), refused when the new placement overlaps another grant's; the
    /// grant is unchanged on a refusal.
    pub fn move_partition(&mut self, key: &GrantKey, start: u32) -> Result<(), Refusal> {
        let Some(mut grant) = self.remove(key) else {
            return Err(Refusal::PartitionShape { key: key.clone() });
        };
        let old = grant.clone();
        match grant.partition.as_mut() {
            Some(p) => p.start = start,
            None => {
                self.insert(key.clone(), old);
                return Err(Refusal::PartitionShape { key: key.clone() });
            }
        }
        if let Err(refusal) = self.check_room(&grant) {
            self.insert(key.clone(), old);
            return Err(refusal);
        }
        self.insert(key.clone(), grant);
        Ok(())
    }

    /// Undoes a recorded claim the responder refused: the grant goes, and a claim the container
    /// held before is restored. A retry's receipt gives nothing back (the earlier call's grant
    /// is still the container's).
    pub fn give_back(&mut self, receipt: &Receipt) {
        if !receipt.fresh {
            return;
        }
        self.remove(&receipt.key);
        if let Some(previous) = &receipt.previous {
            self.insert(receipt.key.clone(), previous.clone());
        }
    }

    /// The Pod reached Succeeded or Failed: its exclusive, shared and sliced grants stop
    /// charging (unless the switch is off). Returns the accelerators whose occupancy changed.
    pub fn pod_finished(&mut self, pod_uid: &str) -> BTreeSet<u32> {
        let keys: Vec<GrantKey> = self.keys_of(pod_uid);
        let mut changed = BTreeSet::new();
        for key in keys {
            changed.extend(self.mark_finished(&key));
        }
        changed
    }

    fn mark_finished(&mut self, key: &GrantKey) -> Vec<u32> {
        let Some(grant) = self.grants.get(key).cloned() else {
            return Vec::new();
        };
        if grant.finished {
            return Vec::new();
        }
        let before = self.charges(&grant);
        self.uncharge(&grant);
        let mut finished = grant;
        finished.finished = true;
        let after = self.charges(&finished);
        self.charge(&finished);
        let accelerators = finished.accelerators.clone();
        self.grants.insert(key.clone(), finished);
        if before != after {
            accelerators
        } else {
            Vec::new()
        }
    }

    /// The Pod is gone: every grant it held is released. Returns what was released.
    pub fn pod_gone(&mut self, pod_uid: &str) -> Vec<(GrantKey, Grant)> {
        self.keys_of(pod_uid)
            .into_iter()
            .filter_map(|key| self.remove(&key).map(|g| (key, g)))
            .collect()
    }

    /// Drops one grant (a disagreement settled against it). Returns it.
    pub fn release(&mut self, key: &GrantKey) -> Option<Grant> {
        self.remove(key)
    }

    /// The Pods that hold grants (a ResourceClaim's grant is the claim's, not a Pod's).
    pub fn pod_uids(&self) -> BTreeSet<String> {
        self.grants
            .keys()
            .filter(|k| k.claim_uid().is_none())
            .map(|k| k.pod_uid.clone())
            .collect()
    }

    /// The key of the grant ResourceClaim `claim_uid` holds.
    pub fn claim_key(&self, claim_uid: &str) -> Option<&GrantKey> {
        let first = GrantKey {
            pod_uid: format!("{CLAIM_PREFIX}{claim_uid}"),
            container: String::new(),
        };
        self.grants
            .range(first..)
            .map(|(k, _)| k)
            .take_while(|k| k.claim_uid() == Some(claim_uid))
            .next()
    }

    /// The ResourceClaims that hold grants, by UID.
    pub fn claim_uids(&self) -> BTreeSet<String> {
        self.grants
            .keys()
            .filter_map(GrantKey::claim_uid)
            .map(str::to_string)
            .collect()
    }

    fn keys_of(&self, pod_uid: &str) -> Vec<GrantKey> {
        self.grants
            .keys()
            .filter(|k| k.pod_uid == pod_uid)
            .cloned()
            .collect()
    }

    fn insert(&mut self, key: GrantKey, grant: Grant) {
        self.charge(&grant);
        self.grants.insert(key, grant);
    }

    fn remove(&mut self, key: &GrantKey) -> Option<Grant> {
        let grant = self.grants.remove(key)?;
        self.uncharge(&grant);
        Some(grant)
    }

    fn charge(&mut self, grant: &Grant) {
        if !self.charges(grant) {
            return;
        }
        let cores = self.cores_charged(grant);
        for index in &grant.accelerators {
            if let Some(occupancy) = self.occupancy.get_mut(index) {
                apply(occupancy, grant, cores, true);
            }
        }
    }

    fn uncharge(&mut self, grant: &Grant) {
        if !self.charges(grant) {
            return;
        }
        let cores = self.cores_charged(grant);
        for index in &grant.accelerators {
            if let Some(occupancy) = self.occupancy.get_mut(index) {
                apply(occupancy, grant, cores, false);
            }
        }
    }

    /// The occupancy of every accelerator counted from the grants alone, from scratch.
    pub fn recount(&self) -> BTreeMap<u32, Occupancy> {
        let mut counted: BTreeMap<u32, Occupancy> =
            self.seats.keys().map(|i| (*i, Occupancy::FREE)).collect();
        for grant in self.grants.values().filter(|g| self.charges(g)) {
            let cores = self.cores_charged(grant);
            for index in &grant.accelerators {
                if let Some(occupancy) = counted.get_mut(index) {
                    apply(occupancy, grant, cores, true);
                }
            }
        }
        counted
    }

    /// The cores percent a grant takes on each of its accelerators: a slice's own (100 when it
    /// names none) where compute is not over-committed, else nothing.
    fn cores_charged(&self, grant: &Grant) -> u32 {
        if self.policy.cores_overcommit || grant.family != Family::Sliced {
            0
        } else {
            slice_cores(grant.cores_percentage)
        }
    }

    /// Every invariant the ledger promises, checked from scratch: the running count equals the
    /// recount, no accelerator hosts two modes, an exclusive one has one holder, shares and slots
    /// and units are within bounds, and so are cores where compute is not over-committed (the
    /// slot, units and cores bounds only while the slice gate is on).
    pub fn verify(&self) -> Result<(), String> {
        let counted = self.recount();
        if counted != self.occupancy {
            return Err(format!(
                "running occupancy {:?} differs from the recount {:?}",
                self.occupancy, counted
            ));
        }
        for (index, occupancy) in &counted {
            let mut families = BTreeSet::new();
            for grant in self
                .grants
                .values()
                .filter(|g| self.charges(g) && g.accelerators.contains(index))
            {
                families.insert(grant.family);
            }
            if families.len() > 1 {
                return Err(format!("accelerator {index} hosts modes {families:?}"));
            }
            if occupancy.mode == Mode::Held(Family::Exclusive) && occupancy.holders != 1 {
                return Err(format!(
                    "accelerator {index} is exclusive with {} holders",
                    occupancy.holders
                ));
            }
            let placed = partitions::occupied(self, *index);
            for (n, a) in placed.iter().enumerate() {
                if placed[n + 1..].iter().any(|b| partitions::overlaps(*a, *b)) {
                    return Err(format!(
                        "accelerator {index} has overlapping partitions {placed:?}"
                    ));
                }
            }
            if occupancy.shares > SHARES_PER_ACCELERATOR {
                return Err(format!(
                    "accelerator {index} has {} shares",
                    occupancy.shares
                ));
            }
            if self.policy.slice_gate {
                let capacity = self.seats.get(index).map_or(0, |s| s.slice_capacity);
                if occupancy.slices > capacity {
                    return Err(format!(
                        "accelerator {index} hosts {} slices of {capacity}",
                        occupancy.slices
                    ));
                }
                if occupancy.mode == Mode::Held(Family::Sliced)
                    && occupancy.used_units > UNITS_PER_ACCELERATOR
                {
                    return Err(format!("accelerator {index} is over-committed"));
                }
                if occupancy.cores_percentage > MAX_CORES_PERCENTAGE {
                    return Err(format!(
                        "accelerator {index} has {} cores percent taken",
                        occupancy.cores_percentage
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Whether a finished Pod's grant of this family stops charging: a hardware partition stays
/// charged until the Pod is gone, because the reclaimer destroys it only then, and so does a
/// slice where the policy says its driver object is reclaimed the same way.
fn releases_on_finish(family: Family, policy: &Policy) -> bool {
    match family {
        Family::Partitioned => false,
        Family::Sliced => !policy.slices_held_until_gone,
        Family::Exclusive | Family::Shared => true,
    }
}

/// The cores percent one accelerator's slices may take together where compute is not
/// over-committed.
const MAX_CORES_PERCENTAGE: u32 = 100;

/// A slice's cores percentage as counted: the one it names, else 100 (DESIGN.md:
/// `.sliced.cores-percentage` defaults to 100).
fn slice_cores(cores_percentage: Option<u32>) -> u32 {
    cores_percentage.unwrap_or(MAX_CORES_PERCENTAGE)
}

/// Adds (`add`) or removes one grant's charge on one accelerator, `cores` being the cores
/// percent it takes there ([`Ledger::cores_charged`]). Used units and cores are counted, not
/// clamped, so an over-commit (slice gate off) is seen and undone exactly.
fn apply(occupancy: &mut Occupancy, grant: &Grant, cores: u32, add: bool) {
    occupancy.used_units = if add {
        occupancy.used_units.saturating_add(grant.units)
    } else {
        occupancy.used_units.saturating_sub(grant.units)
    };
    occupancy.cores_percentage = if add {
        occupancy.cores_percentage.saturating_add(cores)
    } else {
        occupancy.cores_percentage.saturating_sub(cores)
    };
    let step = |n: u32| if add { n + 1 } else { n.saturating_sub(1) };
    occupancy.holders = step(occupancy.holders);
    match grant.family {
        Family::Shared => occupancy.shares = step(occupancy.shares),
        Family::Sliced => occupancy.slices = step(occupancy.slices),
        Family::Exclusive | Family::Partitioned => {}
    }
    occupancy.mode = if occupancy.holders == 0 {
        Mode::Free
    } else {
        Mode::Held(grant.family)
    };
}

#[cfg(test)]
mod tests;
