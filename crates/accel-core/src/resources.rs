//! The resource-key grammar and the family classifier (seed 003, "The resource keys";
//! DESIGN.md, "Resource keys and units").
//!
//! This module owns how a Kubernetes resource name maps to a typed [`ResourceKey`] and back. A key
//! parses into a typed value or is not an accelerator key at all: unknown suffixes, profiles that
//! are not valid resource-name segments (`+me`, `+gfx`) and the retired `<base>.sliced.mig-<profile>`
//! shape are recognised by nothing (seed 003, "Pre-release breaks"). It must not look at quantities.

use std::collections::BTreeMap;
use std::fmt;

use crate::labels::GroupNaming;
use crate::manufacturer::{Manufacturer, ManufacturerTable};

/// The domain of the internal keys that sit outside the manufacturers' bases.
pub const INTERNAL_DOMAIN: &str = "device.gpustack.ai";

/// How one accelerator is handed out (DESIGN.md, "Words"): the classifier's answer for a key
/// and the ledger's mode of an accelerator alike.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum Family {
    /// Whole accelerators (`<base>`).
    Exclusive,
    /// One of 10 ownership shares on each of N accelerators (`<base>.shared`).
    Shared,
    /// A logical slice with memory and compute caps (`<base>.sliced`).
    Sliced,
    /// A hardware instance such as a MIG profile (`<base>.partitioned`).
    Partitioned,
}

impl Family {
    /// The family's name as the seed's messages print it.
    pub fn name(self) -> &'static str {
        match self {
            Family::Exclusive => "exclusive",
            Family::Shared => "shared",
            Family::Sliced => "sliced",
            Family::Partitioned => "partitioned",
        }
    }

    /// Whether the family cuts one accelerator into pieces (rule 6's "slicing family").
    pub fn is_slicing(self) -> bool {
        matches!(self, Family::Sliced | Family::Partitioned)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The role of a key under a manufacturer's base.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AcceleratorKey {
    /// `<base>`: N whole accelerators.
    Exclusive,
    /// `<base>.shared`: N distinct accelerators, one share on each.
    Shared,
    /// `<base>.sliced`: always 1.
    Sliced,
    /// `<base>.sliced.memory-percentage`: the slice's VRAM as a percentage of the accelerator's.
    SlicedMemoryPercentage,
    /// `<base>.sliced.memory-mib`: the slice's VRAM in MiB.
    SlicedMemoryMib,
    /// `<base>.sliced.cores-percentage`: the compute cap, 100 when omitted.
    SlicedCoresPercentage,
    /// `<base>.sliced.units`: folded by the webhook, never written by hand.
    SlicedUnits,
    /// `<base>.partitioned`: always 1.
    Partitioned,
    /// `<base>.partitioned.<kind>-<profile>`: always 1.
    PartitionedProfile { kind: String, profile: String },
    /// `<base>.partitioned.units`: folded by the webhook from the profile's VRAM.
    PartitionedUnits,
}

impl AcceleratorKey {
    /// The family this key belongs to.
    pub fn family(&self) -> Family {
        match self {
            AcceleratorKey::Exclusive => Family::Exclusive,
            AcceleratorKey::Shared => Family::Shared,
            AcceleratorKey::Sliced
            | AcceleratorKey::SlicedMemoryPercentage
            | AcceleratorKey::SlicedMemoryMib
            | AcceleratorKey::SlicedCoresPercentage
            | AcceleratorKey::SlicedUnits => Family::Sliced,
            AcceleratorKey::Partitioned
            | AcceleratorKey::PartitionedProfile { .. }
            | AcceleratorKey::PartitionedUnits => Family::Partitioned,
        }
    }

    fn suffix(&self) -> String {
        match self {
            AcceleratorKey::Exclusive => String::new(),
            AcceleratorKey::Shared => ".shared".into(),
            AcceleratorKey::Sliced => ".sliced".into(),
            AcceleratorKey::SlicedMemoryPercentage => ".sliced.memory-percentage".into(),
            AcceleratorKey::SlicedMemoryMib => ".sliced.memory-mib".into(),
            AcceleratorKey::SlicedCoresPercentage => ".sliced.cores-percentage".into(),
            AcceleratorKey::SlicedUnits => ".sliced.units".into(),
            AcceleratorKey::Partitioned => ".partitioned".into(),
            AcceleratorKey::PartitionedProfile { kind, profile } => {
                format!(".partitioned.{kind}-{profile}")
            }
            AcceleratorKey::PartitionedUnits => ".partitioned.units".into(),
        }
    }
}

/// The RDMA keys: node-level, beside the accelerator families (seed 003, "The RDMA keys").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RdmaKey {
    /// `device.gpustack.ai/rdma`
    Exclusive,
    /// `device.gpustack.ai/rdma.shared`
    Shared,
    /// `device.gpustack.ai/rdma.partitioned`
    Partitioned,
}

/// A resource name this system knows, parsed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceKey {
    /// A key under a manufacturer's base.
    Accelerator {
        manufacturer: Manufacturer,
        key: AcceleratorKey,
    },
    /// `device.gpustack.ai/<manufacturer>.visibility`: the SSH sidecar's view, outside the families.
    Visibility(Manufacturer),
    /// An RDMA interface key, outside the families.
    Rdma(RdmaKey),
}

impl ResourceKey {
    /// The family classifier: `None` for visibility and RDMA, which no family rule counts.
    pub fn family(&self) -> Option<Family> {
        match self {
            ResourceKey::Accelerator { key, .. } => Some(key.family()),
            ResourceKey::Visibility(_) | ResourceKey::Rdma(_) => None,
        }
    }

    /// The manufacturer a key names, if any (RDMA keys name none).
    pub fn manufacturer(&self) -> Option<Manufacturer> {
        match self {
            ResourceKey::Accelerator { manufacturer, .. }
            | ResourceKey::Visibility(manufacturer) => Some(*manufacturer),
            ResourceKey::Rdma(_) => None,
        }
    }
}

/// The manufacturer's own word for hardware partitioning by default, where it has one: `mig` for
/// NVIDIA, T-Head and Hygon (seed 003, "Two families"); `GPUSTACK_<MANUFACTURER>_PARTITION_KIND`
/// replaces it ([`KeyGrammar::partition_kind`] is the kind in force). A manufacturer without one
/// has no `.partitioned*` keys at all.
pub fn partition_kind(manufacturer: Manufacturer) -> Option<&'static str> {
    match manufacturer {
        Manufacturer::Nvidia | Manufacturer::Thead | Manufacturer::Hygon => Some("mig"),
        _ => None,
    }
}

/// The key grammar: each manufacturer's base and partition kind, as the manufacturers table in
/// force has them, and the parser and printer of keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGrammar {
    bases: BTreeMap<Manufacturer, String>,
    /// Only the manufacturers with hardware partitioning.
    kinds: BTreeMap<Manufacturer, String>,
    /// Only the manufacturers with a runtime name: the RuntimeClass the mutating webhook attaches
    /// to a Pod asking for their keys when it exists (`…_ACCELERATABLE_RUNTIME_NAME`). Another
    /// name the table decides, carried here so that what checks a Pod's keys reads one value.
    runtimes: BTreeMap<Manufacturer, String>,
    /// How group ids are formed: the other name the deployment's settings decide, carried here
    /// so that whatever names resources and groups reads one value.
    naming: GroupNaming,
}

impl Default for KeyGrammar {
    fn default() -> Self {
        KeyGrammar::from_table(&ManufacturerTable::default())
    }
}

impl KeyGrammar {
    /// The grammar of a manufacturers table (its bases, partition kinds and runtime names).
    pub fn from_table(table: &ManufacturerTable) -> Self {
        KeyGrammar {
            bases: table
                .rows()
                .map(|(m, row)| (m, row.resource_base.clone()))
                .collect(),
            kinds: table
                .rows()
                .filter_map(|(m, row)| row.partition_kind.clone().map(|k| (m, k)))
                .collect(),
            runtimes: table
                .rows()
                .filter_map(|(m, row)| row.runtime_class.clone().map(|r| (m, r)))
                .collect(),
            naming: GroupNaming::default(),
        }
    }

    /// The same grammar with group ids formed as `naming` says
    /// (`GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY`).
    pub fn with_group_naming(mut self, naming: GroupNaming) -> Self {
        self.naming = naming;
        self
    }

    /// How group ids are formed.
    pub fn group_naming(&self) -> GroupNaming {
        self.naming
    }

    /// The partition kind in force for a manufacturer (`None`: no `.partitioned*` keys).
    pub fn partition_kind(&self, manufacturer: Manufacturer) -> Option<&str> {
        self.kinds.get(&manufacturer).map(String::as_str)
    }

    /// The runtime name in force for a manufacturer: the RuntimeClass a Pod asking for its keys
    /// is given when a RuntimeClass of that name exists (`None`: the manufacturer has none).
    pub fn runtime_class(&self, manufacturer: Manufacturer) -> Option<&str> {
        self.runtimes.get(&manufacturer).map(String::as_str)
    }

    /// Replace one manufacturer's base (the deployment renamed its device resource).
    pub fn with_base(mut self, manufacturer: Manufacturer, base: impl Into<String>) -> Self {
        self.bases.insert(manufacturer, base.into());
        self
    }

    /// The base in force for a manufacturer.
    pub fn base(&self, manufacturer: Manufacturer) -> &str {
        self.bases
            .get(&manufacturer)
            .map(String::as_str)
            .unwrap_or_else(|| manufacturer.default_resource_base())
    }

    /// The resource name of a key.
    pub fn render(&self, key: &ResourceKey) -> String {
        match key {
            ResourceKey::Accelerator { manufacturer, key } => {
                format!("{}{}", self.base(*manufacturer), key.suffix())
            }
            ResourceKey::Visibility(m) => format!("{INTERNAL_DOMAIN}/{}.visibility", m.name()),
            ResourceKey::Rdma(RdmaKey::Exclusive) => format!("{INTERNAL_DOMAIN}/rdma"),
            ResourceKey::Rdma(RdmaKey::Shared) => format!("{INTERNAL_DOMAIN}/rdma.shared"),
            ResourceKey::Rdma(RdmaKey::Partitioned) => {
                format!("{INTERNAL_DOMAIN}/rdma.partitioned")
            }
        }
    }

    /// Shorthand: the resource name of an accelerator key.
    pub fn accelerator_key(&self, manufacturer: Manufacturer, key: AcceleratorKey) -> String {
        self.render(&ResourceKey::Accelerator { manufacturer, key })
    }

    /// Parse a resource name. `None` means it is not a key of this system (`cpu`, a retired
    /// shape, a profile that is not a valid segment, a `.partitioned` key of a manufacturer with
    /// no hardware partitioning).
    pub fn parse(&self, name: &str) -> Option<ResourceKey> {
        if !is_qualified_name(name) {
            return None;
        }
        if let Some(rest) = name
            .strip_prefix(INTERNAL_DOMAIN)
            .and_then(|r| r.strip_prefix('/'))
        {
            match rest {
                "rdma" => return Some(ResourceKey::Rdma(RdmaKey::Exclusive)),
                "rdma.shared" => return Some(ResourceKey::Rdma(RdmaKey::Shared)),
                "rdma.partitioned" => return Some(ResourceKey::Rdma(RdmaKey::Partitioned)),
                _ => {}
            }
            if let Some(m) = rest
                .strip_suffix(".visibility")
                .and_then(|n| Manufacturer::ALL.into_iter().find(|m| m.name() == n))
            {
                return Some(ResourceKey::Visibility(m));
            }
        }
        self.bases_prefixing(name)
            .into_iter()
            .find_map(|(m, base)| parse_suffix(m, self.partition_kind(m), &name[base.len()..]))
            .map(|key| ResourceKey::Accelerator {
                manufacturer: key.0,
                key: key.1,
            })
    }
}

impl KeyGrammar {
    /// The manufacturers whose resource base `name` starts with, the longest base first, so an
    /// overridden base that prefixes another cannot steal its keys.
    fn bases_prefixing(&self, name: &str) -> Vec<(Manufacturer, &str)> {
        let mut candidates: Vec<(Manufacturer, &str)> = self
            .bases
            .iter()
            .filter(|(_, base)| name.starts_with(base.as_str()))
            .map(|(m, base)| (*m, base.as_str()))
            .collect();
        candidates.sort_by_key(|(_, base)| std::cmp::Reverse(base.len()));
        candidates
    }

    /// The manufacturer of a name that would be a `.partitioned*` key under its base, when that
    /// manufacturer has no hardware partitioning (`amd.com/gpu.partitioned`): not a key of this
    /// system ([`KeyGrammar::parse`] answers `None`), yet plainly an accelerator request no node
    /// can ever serve, so admission names it rather than letting it through unseen.
    pub fn unpartitioned_key(&self, name: &str) -> Option<Manufacturer> {
        if !is_qualified_name(name) || self.parse(name).is_some() {
            return None;
        }
        self.bases_prefixing(name)
            .into_iter()
            .find_map(|(m, base)| {
                let rest = name[base.len()..].strip_prefix(".partitioned")?;
                let partition_shaped = rest.is_empty() || rest.starts_with('.');
                (partition_shaped && self.partition_kind(m).is_none()).then_some(m)
            })
    }
}

fn parse_suffix(
    manufacturer: Manufacturer,
    partition_kind: Option<&str>,
    suffix: &str,
) -> Option<(Manufacturer, AcceleratorKey)> {
    let key = match suffix {
        "" => AcceleratorKey::Exclusive,
        ".shared" => AcceleratorKey::Shared,
        ".sliced" => AcceleratorKey::Sliced,
        ".sliced.memory-percentage" => AcceleratorKey::SlicedMemoryPercentage,
        ".sliced.memory-mib" => AcceleratorKey::SlicedMemoryMib,
        ".sliced.cores-percentage" => AcceleratorKey::SlicedCoresPercentage,
        ".sliced.units" => AcceleratorKey::SlicedUnits,
        _ => {
            let kind = partition_kind?;
            let rest = suffix.strip_prefix(".partitioned")?;
            match rest {
                "" => AcceleratorKey::Partitioned,
                ".units" => AcceleratorKey::PartitionedUnits,
                _ => {
                    let profile = rest
                        .strip_prefix('.')?
                        .strip_prefix(kind)?
                        .strip_prefix('-')?;
                    if !is_profile_segment(profile) {
                        return None;
                    }
                    AcceleratorKey::PartitionedProfile {
                        kind: kind.to_string(),
                        profile: profile.to_string(),
                    }
                }
            }
        }
    };
    Some((manufacturer, key))
}

/// A partition profile usable in a key: the characters of a resource-name segment, starting and
/// ending alphanumeric (so `1g.10gb` is one, `1g.10gb+me` is not).
pub fn is_profile_segment(profile: &str) -> bool {
    let bytes = profile.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last))
            if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() =>
        {
            bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Kubernetes' qualified-name rule for resource names: an optional DNS-subdomain prefix and `/`,
/// then a name of at most 63 characters, alphanumeric at both ends, `-_.` inside.
/// Whether a text can be a resource base: a qualified resource name with a domain.
pub(crate) fn is_resource_base(name: &str) -> bool {
    name.contains('/') && is_qualified_name(name)
}

fn is_qualified_name(name: &str) -> bool {
    let (prefix, local) = match name.split_once('/') {
        Some((p, l)) => (Some(p), l),
        None => (None, name),
    };
    if let Some(prefix) = prefix {
        let ok = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|label| {
                let b = label.as_bytes();
                !b.is_empty()
                    && b.len() <= 63
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                    && b[0] != b'-'
                    && b[b.len() - 1] != b'-'
            });
        if !ok {
            return false;
        }
    }
    local.len() <= 63 && is_profile_segment(local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(name: &str) -> Option<ResourceKey> {
        KeyGrammar::default().parse(name)
    }

    fn acc(m: Manufacturer, key: AcceleratorKey) -> Option<ResourceKey> {
        Some(ResourceKey::Accelerator {
            manufacturer: m,
            key,
        })
    }

    #[test]
    fn partition_keys_of_a_manufacturer_without_partitioning_are_named_not_parsed() {
        let grammar = KeyGrammar::default();
        for name in [
            "amd.com/gpu.partitioned",
            "amd.com/gpu.partitioned.units",
            "amd.com/gpu.partitioned.mig-1g.10gb",
            "huawei.com/npu.partitioned.vir02",
        ] {
            assert_eq!(parse(name), None, "{name}");
            assert!(grammar.unpartitioned_key(name).is_some(), "{name}");
        }
        assert_eq!(
            grammar.unpartitioned_key("amd.com/gpu.partitioned"),
            Some(Manufacturer::Amd)
        );
        for name in [
            "nvidia.com/gpu.partitioned",
            "amd.com/gpu",
            "amd.com/gpu.partitionedx",
            "amd.com/gpu.sliced.mig-1g.10gb",
            "cpu",
        ] {
            assert_eq!(grammar.unpartitioned_key(name), None, "{name}");
        }
    }

    #[test]
    fn every_base_parses_its_whole_family_keys() {
        let grammar = KeyGrammar::default();
        for m in Manufacturer::ALL {
            let base = m.default_resource_base();
            assert_eq!(parse(base), acc(m, AcceleratorKey::Exclusive));
            assert_eq!(
                parse(&format!("{base}.shared")),
                acc(m, AcceleratorKey::Shared)
            );
            assert_eq!(
                parse(&format!("{base}.sliced")),
                acc(m, AcceleratorKey::Sliced)
            );
            for (suffix, key) in [
                ("memory-percentage", AcceleratorKey::SlicedMemoryPercentage),
                ("memory-mib", AcceleratorKey::SlicedMemoryMib),
                ("cores-percentage", AcceleratorKey::SlicedCoresPercentage),
                ("units", AcceleratorKey::SlicedUnits),
            ] {
                let name = format!("{base}.sliced.{suffix}");
                assert_eq!(parse(&name), acc(m, key.clone()));
                assert_eq!(grammar.accelerator_key(m, key), name);
            }
            assert_eq!(
                parse(&format!("device.gpustack.ai/{}.visibility", m.name())),
                Some(ResourceKey::Visibility(m))
            );
        }
    }

    #[test]
    fn partitions_exist_only_where_the_manufacturer_has_a_kind() {
        for (base, m) in [
            ("nvidia.com/gpu", Manufacturer::Nvidia),
            ("alibabacloud.com/ppu", Manufacturer::Thead),
            ("hygon.com/dcu", Manufacturer::Hygon),
        ] {
            assert_eq!(
                parse(&format!("{base}.partitioned")),
                acc(m, AcceleratorKey::Partitioned)
            );
            assert_eq!(
                parse(&format!("{base}.partitioned.units")),
                acc(m, AcceleratorKey::PartitionedUnits)
            );
        }
        assert_eq!(
            parse("nvidia.com/gpu.partitioned.mig-3g.40gb"),
            acc(
                Manufacturer::Nvidia,
                AcceleratorKey::PartitionedProfile {
                    kind: "mig".into(),
                    profile: "3g.40gb".into()
                }
            )
        );
        assert_eq!(
            parse("hygon.com/dcu.partitioned.mig-2g.15gb").and_then(|k| k.family()),
            Some(Family::Partitioned)
        );
        for name in [
            "amd.com/gpu.partitioned",
            "huawei.com/npu.partitioned.units",
            "nvidia.com/gpu.partitioned.mps-1g.10gb",
            "nvidia.com/gpu.partitioned.mig-",
        ] {
            assert_eq!(parse(name), None, "{name}");
        }
    }

    #[test]
    fn only_a_qualified_resource_name_is_named_unpartitioned() {
        // The API server refuses a resource name that is not a qualified name before admission
        // sees it, so such a name is never reported as a partition key.
        let grammar = KeyGrammar::default();
        for name in ["amd.com/gpu.partitioned.1g+me", "amd.com/gpu.partitioned."] {
            assert_eq!(grammar.unpartitioned_key(name), None, "{name}");
        }
        assert!(
            grammar
                .unpartitioned_key("amd.com/gpu.partitioned.x")
                .is_some()
        );
    }

    #[test]
    fn a_profile_segment_starts_and_ends_alphanumeric() {
        for profile in ["1g.10gb", "3g.40gb", "a", "1g-10gb_x"] {
            assert!(is_profile_segment(profile), "{profile}");
        }
        for profile in ["", "-1g", ".1g", "1g.", "1g-", "1g.10gb+me", "1g 10gb"] {
            assert!(!is_profile_segment(profile), "{profile}");
        }
    }

    #[test]
    fn a_resource_name_is_a_qualified_name_of_at_most_63_characters() {
        let local = |n: usize| format!("example.com/{}", "a".repeat(n));
        assert!(is_qualified_name("nvidia.com/gpu"));
        assert!(is_qualified_name(&local(63)));
        assert!(!is_qualified_name(&local(64)));
        assert!(!is_qualified_name("example.com/gpu+x"));
        assert!(!is_qualified_name("example.com/-gpu"));
    }

    #[test]
    fn what_is_not_a_key() {
        for name in [
            "cpu",
            "memory",
            "nvidia.com/gpu.sliced.mig-1g.10gb",
            "nvidia.com/gpu.partitioned.mig-1g.10gb+me",
            "nvidia.com/gpu.partitioned.mig-1g.10gb+me.all",
            "nvidia.com/gpu.partitioned.mig-1g.10gb+gfx",
            "nvidia.com/gpu.foo",
            "nvidia.com/gpux",
            "nvidia.com/gpu.sliced.memory",
            "device.gpustack.ai/intel.visibility",
            "device.gpustack.ai/rdma.sliced",
            "example.com/gpu",
        ] {
            assert_eq!(parse(name), None, "{name}");
        }
    }

    #[test]
    fn classifier_leaves_visibility_and_rdma_outside_the_families() {
        assert_eq!(
            parse("device.gpustack.ai/rdma"),
            Some(ResourceKey::Rdma(RdmaKey::Exclusive))
        );
        assert_eq!(
            parse("device.gpustack.ai/rdma.shared"),
            Some(ResourceKey::Rdma(RdmaKey::Shared))
        );
        assert_eq!(
            parse("device.gpustack.ai/rdma.partitioned"),
            Some(ResourceKey::Rdma(RdmaKey::Partitioned))
        );
        for name in [
            "device.gpustack.ai/rdma",
            "device.gpustack.ai/rdma.shared",
            "device.gpustack.ai/rdma.partitioned",
            "device.gpustack.ai/nvidia.visibility",
        ] {
            assert_eq!(parse(name).and_then(|k| k.family()), None, "{name}");
        }
        assert_eq!(
            parse("nvidia.com/gpu").and_then(|k| k.family()),
            Some(Family::Exclusive)
        );
        assert_eq!(
            parse("nvidia.com/gpu.shared").and_then(|k| k.family()),
            Some(Family::Shared)
        );
        assert_eq!(
            parse("nvidia.com/gpu.sliced.units").and_then(|k| k.family()),
            Some(Family::Sliced)
        );
    }

    #[test]
    fn bases_are_overridable() {
        let grammar = KeyGrammar::default().with_base(Manufacturer::Nvidia, "example.com/cuda");
        assert_eq!(
            grammar.parse("example.com/cuda.sliced"),
            acc(Manufacturer::Nvidia, AcceleratorKey::Sliced)
        );
        assert_eq!(grammar.parse("nvidia.com/gpu"), None);
        assert_eq!(grammar.base(Manufacturer::Nvidia), "example.com/cuda");
    }

    #[test]
    fn render_round_trips_every_key() {
        let grammar = KeyGrammar::default();
        let mut keys = vec![
            ResourceKey::Rdma(RdmaKey::Exclusive),
            ResourceKey::Rdma(RdmaKey::Shared),
            ResourceKey::Rdma(RdmaKey::Partitioned),
        ];
        for m in Manufacturer::ALL {
            keys.push(ResourceKey::Visibility(m));
            keys.push(ResourceKey::Accelerator {
                manufacturer: m,
                key: AcceleratorKey::Exclusive,
            });
            if let Some(kind) = partition_kind(m) {
                keys.push(ResourceKey::Accelerator {
                    manufacturer: m,
                    key: AcceleratorKey::PartitionedProfile {
                        kind: kind.into(),
                        profile: "1g.10gb".into(),
                    },
                });
            }
        }
        for key in keys {
            assert_eq!(grammar.parse(&grammar.render(&key)), Some(key));
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(name in "\\PC{0,80}") {
            let _ = parse(&name);
        }

        #[test]
        fn parsed_keys_render_back(name in "(nvidia\\.com/gpu|hygon\\.com/dcu|device\\.gpustack\\.ai/)[a-z0-9.+-]{0,30}") {
            let grammar = KeyGrammar::default();
            if let Some(key) = grammar.parse(&name) {
                prop_assert_eq!(grammar.render(&key), name);
            }
        }
    }
}
