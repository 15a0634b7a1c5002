//! Placement preference: which accelerators the plugin offers back to the kubelet's
//! GetPreferredAllocation, read from the ledger's room.
//!
//! Slices and shares pack: the most-occupied accelerator that still fits comes first, ties broken
//! by position, so identical requests against identical state place identically (seed 000,
//! "Placement preference"). Beyond the seed, a multi-accelerator exclusive request prefers a set
//! on one NUMA node and, where the topology shows them, joined by direct links — NVLink, XGMI,
//! HCCS, whichever the manufacturer's detector recorded ([`PeerLink`]); a link either end
//! records counts, as a trimmed or one-sided topology names it on one end only. It stays a preference:
//! the allocation check is the guard. "Still fits" is [`Ledger::fits`], the function the
//! allocation refuses with, fed the slice's own units on each accelerator ([`prefer_by`]) and its
//! cores percentage, which the ledger weighs where compute is not over-committed (so a slice is
//! never pointed at an accelerator whose compute its earlier slices took); the caller folds those
//! from the container's budget as the allocation does. When the caller cannot tell the budget,
//! [`roomiest`] offers the most room instead. Pure and deterministic; no I/O.

use std::collections::{BTreeMap, BTreeSet};

use super::{Family, Ledger, Occupancy};
use crate::inventory::PeerLink;

/// Above this many candidate sets the exclusive search turns greedy (a node with dozens of
/// accelerators); below it every set is scored.
const MAX_SETS_SCORED: u64 = 20_000;

/// How good an exclusive set is; lower is better (NUMA nodes spanned, pairs without a direct link,
/// free accelerators left on the touched NUMA nodes, then the positions themselves).
type SetScore = (usize, usize, usize, Vec<u32>);

/// What the kubelet asks a preference for, in accelerators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub family: Family,
    /// Accelerators with at least one available token, in any order.
    pub candidates: &'a [u32],
    /// Accelerators that must be part of the answer.
    pub must_include: &'a [u32],
    /// How many distinct accelerators the answer should hold.
    pub size: usize,
    /// Units a slice needs on each accelerator (sliced only).
    pub slice_units: u64,
    /// The cores percentage a slice asks (sliced only; `None` counts 100, as the ledger counts
    /// it where compute is not over-committed).
    pub cores_percentage: Option<u32>,
}

/// The preferred accelerators, best first: `must_include`, then the best of the rest, at most
/// `size` distinct ones. Fewer come back when fewer fit; the kubelet then picks the rest.
pub fn prefer(ledger: &Ledger, request: &Request<'_>) -> Vec<u32> {
    prefer_by(ledger, request, &|_| request.slice_units)
}

/// [`prefer`], a slice's units read per accelerator (`units_on(index)`) instead of from
/// `request.slice_units`: a MiB budget folds to different units on accelerators of different
/// VRAM. An accelerator is offered only where those units and `request.cores_percentage` fit
/// ([`Ledger::fits`], the room the allocation itself reads).
pub fn prefer_by(
    ledger: &Ledger,
    request: &Request<'_>,
    units_on: &dyn Fn(u32) -> u64,
) -> Vec<u32> {
    let must: Vec<u32> = dedup(request.must_include);
    let must_set: BTreeSet<u32> = must.iter().copied().collect();
    let fitting: Vec<u32> = dedup(request.candidates)
        .into_iter()
        .filter(|i| !must_set.contains(i))
        .filter(|i| {
            fits(
                ledger,
                *i,
                request.family,
                units_on(*i),
                request.cores_percentage,
            )
        })
        .collect();
    let wanted = request.size.saturating_sub(must.len());
    let rest = match request.family {
        Family::Exclusive => exclusive_set(ledger, &must, &fitting, wanted),
        Family::Shared | Family::Sliced | Family::Partitioned => {
            let mut ordered = fitting;
            ordered.sort_by_key(|i| {
                let o = ledger.occupancy(*i).copied().unwrap_or(Occupancy::FREE);
                (
                    std::cmp::Reverse(o.used_units),
                    std::cmp::Reverse(o.holders),
                    *i,
                )
            });
            ordered.truncate(wanted);
            ordered
        }
    };
    must.into_iter().chain(rest).collect()
}

/// For a slice whose budget is unknown (the hint could not name its container): `must_include`,
/// then the accelerators with a free slot and any room (a unit, and a cores percent where the
/// ledger counts cores), the most room first (ties by position), where a slice of unknown size
/// is likeliest to fit. The allocation, which knows the budget, stays the guard.
pub fn roomiest(ledger: &Ledger, request: &Request<'_>) -> Vec<u32> {
    let must: Vec<u32> = dedup(request.must_include);
    let must_set: BTreeSet<u32> = must.iter().copied().collect();
    let mut fitting: Vec<u32> = dedup(request.candidates)
        .into_iter()
        .filter(|i| !must_set.contains(i))
        .filter(|i| fits(ledger, *i, request.family, 1, Some(1)))
        .collect();
    fitting.sort_by_key(|i| {
        let o = ledger.occupancy(*i).copied().unwrap_or(Occupancy::FREE);
        (o.used_units, o.cores_percentage, o.holders, *i)
    });
    fitting.truncate(request.size.saturating_sub(must.len()));
    must.into_iter().chain(fitting).collect()
}

fn dedup(list: &[u32]) -> Vec<u32> {
    let mut seen = BTreeSet::new();
    list.iter().copied().filter(|i| seen.insert(*i)).collect()
}

fn fits(ledger: &Ledger, index: u32, family: Family, units: u64, cores: Option<u32>) -> bool {
    let Some(occupancy) = ledger.occupancy(index) else {
        return false;
    };
    ledger.token_healthy(index, family)
        && ledger.fits(index, occupancy, family, units, cores).is_ok()
}

/// The best `wanted` accelerators from `fitting` to join `must`: fewest NUMA nodes spanned, then
/// fewest pairs without a direct link ([`linked`]), then the set that leaves the fewest free accelerators on the
/// NUMA nodes it touches (keeping other nodes whole), then the lowest positions.
fn exclusive_set(ledger: &Ledger, must: &[u32], fitting: &[u32], wanted: usize) -> Vec<u32> {
    // Equivalent mutant (`&&`): a shortcut only. Without it, no wanted accelerator scores just
    // the empty set and no fitting one is answered by the next check, both with nothing.
    if wanted == 0 || fitting.is_empty() {
        return Vec::new();
    }
    if wanted >= fitting.len() {
        return fitting.to_vec();
    }
    let mut sorted = fitting.to_vec();
    sorted.sort();
    if combinations(sorted.len() as u64, wanted as u64) > MAX_SETS_SCORED {
        return greedy(ledger, &sorted, wanted);
    }
    let free_per_numa = numa_counts(ledger, &sorted);
    let mut best: Option<(SetScore, Vec<u32>)> = None;
    let mut chosen = Vec::with_capacity(wanted);
    search(&sorted, 0, wanted, &mut chosen, &mut |set| {
        let whole: Vec<u32> = must.iter().chain(set.iter()).copied().collect();
        let score = score(ledger, &whole, set, &free_per_numa);
        // Equivalent mutant (`<=`): a score ends with the set itself, so two sets never tie.
        if best.as_ref().is_none_or(|(b, _)| score < *b) {
            best = Some((score, set.to_vec()));
        }
    });
    best.map(|(_, set)| set).unwrap_or_default()
}

fn score(
    ledger: &Ledger,
    whole: &[u32],
    set: &[u32],
    free_per_numa: &BTreeMap<Option<u32>, usize>,
) -> SetScore {
    let numa: BTreeSet<Option<u32>> = whole
        .iter()
        .map(|i| ledger.seat(*i).and_then(|s| s.numa_node))
        .collect();
    let mut unlinked = 0;
    for (n, a) in whole.iter().enumerate() {
        // Equivalent mutant (`n * 1`): counting each accelerator against itself adds the same
        // number (the set's size) to every candidate set, and all are one size; only a seat
        // linked to itself, which no topology shows, could tell.
        for b in &whole[n + 1..] {
            if linked(ledger, *a, *b).is_none() {
                unlinked += 1;
            }
        }
    }
    let left: usize = numa
        .iter()
        .map(|node| free_per_numa.get(node).copied().unwrap_or(0))
        .sum::<usize>()
        .saturating_sub(set.len());
    (numa.len(), unlinked, left, set.to_vec())
}

/// The direct link between `a` and `b` as either end records it: a topology may name a link on
/// one end only (a KFD tree that lists one GPU's links), and the link joins both.
pub fn linked(ledger: &Ledger, a: u32, b: u32) -> Option<PeerLink> {
    let one_way = |from: u32, to: u32| ledger.seat(from).and_then(|s| s.link_to(to));
    one_way(a, b).or_else(|| one_way(b, a))
}

fn numa_counts(ledger: &Ledger, fitting: &[u32]) -> BTreeMap<Option<u32>, usize> {
    let mut counts = BTreeMap::new();
    for i in fitting {
        *counts
            .entry(ledger.seat(*i).and_then(|s| s.numa_node))
            .or_insert(0) += 1;
    }
    counts
}

fn search(
    items: &[u32],
    start: usize,
    wanted: usize,
    chosen: &mut Vec<u32>,
    visit: &mut dyn FnMut(&[u32]),
) {
    if chosen.len() == wanted {
        visit(chosen);
        return;
    }
    for n in start..items.len() {
        // Equivalent mutant (`items.len() + n`): this only prunes branches too short to complete a
        // set; without it the same sets are visited, more slowly.
        if items.len() - n < wanted - chosen.len() {
            break;
        }
        chosen.push(items[n]);
        search(items, n + 1, wanted, chosen, visit);
        chosen.pop();
    }
}

fn combinations(n: u64, k: u64) -> u64 {
    let k = k.min(n - k.min(n));
    let mut c: u64 = 1;
    for i in 0..k {
        c = c.saturating_mul(n - i) / (i + 1);
        if c > MAX_SETS_SCORED {
            return c;
        }
    }
    c
}

/// For very large nodes: the NUMA node with the fewest free accelerators that still holds the
/// whole request, else positions in order.
fn greedy(ledger: &Ledger, sorted: &[u32], wanted: usize) -> Vec<u32> {
    let mut by_numa: BTreeMap<Option<u32>, Vec<u32>> = BTreeMap::new();
    for i in sorted {
        by_numa
            .entry(ledger.seat(*i).and_then(|s| s.numa_node))
            .or_default()
            .push(*i);
    }
    let best = by_numa
        .values()
        .filter(|group| group.len() >= wanted)
        .min_by_key(|group| (group.len(), group.first().copied()));
    match best {
        Some(group) => group[..wanted].to_vec(),
        None => sorted[..wanted].to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Grantable;
    use crate::ledger::{Policy, Seat};

    /// Four whole accelerators on one NUMA node, `peers` recorded on the seat of the first of
    /// each pair only (as a trimmed topology may).
    fn one_numa_node(links: &[(u32, u32, &str)]) -> Ledger {
        let mut seats: Vec<Seat> = (0..4)
            .map(|index| Seat {
                index,
                uuid: Some(format!("ACC-{index}")),
                numa_node: Some(0),
                peers: BTreeMap::new(),
                memory_mib: Some(65_536),
                grantable: Grantable::Whole,
                healthy: true,
                slice_capacity: 0,
                partitions: Vec::new(),
            })
            .collect();
        for (a, b, word) in links {
            seats[*a as usize].peers.insert(*b, (*word).to_string());
        }
        Ledger::new(seats, Policy::default())
    }

    fn pair(ledger: &Ledger, candidates: &[u32]) -> Vec<u32> {
        prefer(
            ledger,
            &Request {
                family: Family::Exclusive,
                candidates,
                must_include: &[],
                size: 2,
                slice_units: 0,
                cores_percentage: None,
            },
        )
    }

    #[test]
    fn a_pair_request_takes_the_directly_linked_pair_whichever_the_link() {
        // Without links the positions decide: 0 and 1. Each vendor's link between 2 and 3 wins,
        // recorded on 3 only, pointing back at 2, as AMD's trimmed KFD tree shows it.
        assert_eq!(pair(&one_numa_node(&[]), &[0, 1, 2, 3]), vec![0, 1]);
        for word in ["NV12", "XGMI", "HCCS"] {
            let ledger = one_numa_node(&[(3, 2, word), (0, 1, "SYS")]);
            assert_eq!(pair(&ledger, &[0, 1, 2, 3]), vec![2, 3], "{word}");
            assert_eq!(linked(&ledger, 2, 3), PeerLink::of(word), "{word}");
            assert_eq!(linked(&ledger, 0, 1), None, "SYS is a PCIe path");
        }
    }

    #[test]
    fn a_link_still_does_not_outweigh_the_numa_node() {
        // 0-1 on NUMA 0 unlinked; 1-2 across NUMA nodes over XGMI: one node is kept first.
        let mut ledger = one_numa_node(&[(1, 2, "XGMI")]);
        let mut seats: Vec<Seat> = ledger.seats().cloned().collect();
        seats[2].numa_node = Some(1);
        seats[3].numa_node = Some(1);
        ledger = Ledger::new(seats, Policy::default());
        assert_eq!(pair(&ledger, &[0, 1, 2]), vec![0, 1]);
    }

    #[test]
    fn topology_words_name_a_direct_link_or_none() {
        for (word, link) in [
            ("NV18", Some(PeerLink::NvLink)),
            ("NV4", Some(PeerLink::NvLink)),
            ("XGMI", Some(PeerLink::Xgmi)),
            (" HCCS ", Some(PeerLink::Hccs)),
            ("NV", None),
            ("NVX", None),
            ("NODE", None),
            ("SYS", None),
            ("PHB", None),
            ("PXB", None),
            ("PIX", None),
            ("X", None),
            ("", None),
            ("hccs", None),
        ] {
            assert_eq!(PeerLink::of(word), link, "{word:?}");
        }
    }

    #[test]
    fn candidate_sets_are_counted_exactly_up_to_the_scoring_limit() {
        assert_eq!(combinations(8, 3), 56);
        assert_eq!(combinations(17, 7), 19_448);
        assert_eq!(combinations(20, 17), 1_140, "20 choose 17 is 20 choose 3");
        assert_eq!(combinations(6, 0), 1);
        assert_eq!(combinations(6, 6), 1);
        assert_eq!(combinations(20_000, 1), 20_000, "exactly the limit");
        // Past the limit the count only has to say so.
        assert!(combinations(18, 7) > MAX_SETS_SCORED);
        assert!(combinations(20_000, 2) > MAX_SETS_SCORED);
    }
}
