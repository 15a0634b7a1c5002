//! The manufacturers table: each supported manufacturer's name and constants (PCI vendor ids,
//! resource base, runtime class, partition kind, logical slice count, whether compute is
//! over-committed across slices), with the described
//! system's per-manufacturer overrides (`GPUSTACK_<MANUFACTURER>_PCI_VENDOR_ID`,
//! `…_ACCELERATABLE_RESOURCE_NAME`, `…_ACCELERATABLE_RUNTIME_NAME`, `…_PARTITION_KIND`).
//! This is the one place these facts live; nothing else spells a vendor id or a resource base.
//! It reads no environment itself: the caller hands it the variables.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An accelerator manufacturer the system knows (seed 000, "Detection and the accelerator feature
/// labels": NVIDIA, AMD, Ascend, Cambricon, Hygon, Iluvatar, MetaX, MThreads, T-Head).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Manufacturer {
    Nvidia,
    Amd,
    Ascend,
    Cambricon,
    Hygon,
    Iluvatar,
    Metax,
    Mthreads,
    Thead,
}

impl Manufacturer {
    /// Every manufacturer, in the seed's order.
    pub const ALL: [Manufacturer; 9] = [
        Manufacturer::Nvidia,
        Manufacturer::Amd,
        Manufacturer::Ascend,
        Manufacturer::Cambricon,
        Manufacturer::Hygon,
        Manufacturer::Iluvatar,
        Manufacturer::Metax,
        Manufacturer::Mthreads,
        Manufacturer::Thead,
    ];

    /// The lower-case name used in label keys, resource names and settings.
    pub fn name(self) -> &'static str {
        match self {
            Manufacturer::Nvidia => "nvidia",
            Manufacturer::Amd => "amd",
            Manufacturer::Ascend => "ascend",
            Manufacturer::Cambricon => "cambricon",
            Manufacturer::Hygon => "hygon",
            Manufacturer::Iluvatar => "iluvatar",
            Manufacturer::Metax => "metax",
            Manufacturer::Mthreads => "mthreads",
            Manufacturer::Thead => "thead",
        }
    }

    /// The default Kubernetes resource base (DESIGN.md, "Resource keys and units").
    pub fn default_resource_base(self) -> &'static str {
        match self {
            Manufacturer::Nvidia => "nvidia.com/gpu",
            Manufacturer::Amd => "amd.com/gpu",
            Manufacturer::Ascend => "huawei.com/npu",
            Manufacturer::Cambricon => "cambricon.com/mlu",
            Manufacturer::Hygon => "hygon.com/dcu",
            Manufacturer::Iluvatar => "iluvatar.com/gpu",
            Manufacturer::Metax => "metax-tech.com/gpu",
            Manufacturer::Mthreads => "mthreads.com/gpu",
            Manufacturer::Thead => "alibabacloud.com/ppu",
        }
    }

    /// The default PCI vendor ids, lower-case hex without `0x` (the PCI ID registry's entries:
    /// 10de NVIDIA, 1002 AMD/ATI, 19e5 Huawei, cabc Cambricon, 1d94 Chengdu Haiguang (Hygon),
    /// 1e3e Iluvatar CoreX, 9999 MetaX, 1ed5 Moore Threads, 1ded Alibaba T-Head).
    pub fn default_pci_vendor_ids(self) -> &'static [u16] {
        match self {
            Manufacturer::Nvidia => &[0x10de],
            Manufacturer::Amd => &[0x1002],
            Manufacturer::Ascend => &[0x19e5],
            Manufacturer::Cambricon => &[0xcabc],
            Manufacturer::Hygon => &[0x1d94],
            Manufacturer::Iluvatar => &[0x1e3e],
            Manufacturer::Metax => &[0x9999],
            Manufacturer::Mthreads => &[0x1ed5],
            Manufacturer::Thead => &[0x1ded],
        }
    }

    /// The manufacturer a PCI vendor id belongs to, from the default table.
    pub fn from_pci_vendor(vendor: u16) -> Option<Manufacturer> {
        Manufacturer::ALL
            .into_iter()
            .find(|m| m.default_pci_vendor_ids().contains(&vendor))
    }

    /// Words a product name may start with that repeat the manufacturer (dropped from model ids:
    /// "NVIDIA H100 80GB HBM3" → `h100-80gb-hbm3`).
    pub fn product_prefixes(self) -> &'static [&'static str] {
        match self {
            Manufacturer::Nvidia => &["nvidia"],
            Manufacturer::Amd => &["amd"],
            Manufacturer::Ascend => &["ascend", "huawei"],
            Manufacturer::Cambricon => &["cambricon"],
            Manufacturer::Hygon => &["hygon"],
            Manufacturer::Iluvatar => &["iluvatar"],
            Manufacturer::Metax => &["metax"],
            Manufacturer::Mthreads => &["mthreads", "moore threads"],
            Manufacturer::Thead => &["thead", "t-head"],
        }
    }
}

impl Manufacturer {
    /// Words a product name may end with that the manufacturer's group ids leave out (Hygon's
    /// `K100_AI` is the `hygon-k100` group of the described system's presets, spec/hygon.md §1.4).
    pub fn product_suffixes(self) -> &'static [&'static str] {
        match self {
            Manufacturer::Hygon => &["_ai"],
            _ => &[],
        }
    }
}

impl fmt::Display for Manufacturer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A manufacturer name that is not one of the nine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown manufacturer {0:?} (expected one of nvidia, amd, ascend, cambricon, hygon, iluvatar, metax, mthreads, thead)"
)]
pub struct UnknownManufacturer(pub String);

impl FromStr for Manufacturer {
    type Err = UnknownManufacturer;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Manufacturer::ALL
            .into_iter()
            .find(|m| m.name() == lower || (lower == "t-head" && *m == Manufacturer::Thead))
            .ok_or_else(|| UnknownManufacturer(s.to_string()))
    }
}

/// One PCI vendor id a manufacturer is recognised by, optionally narrowed to a PCI class prefix
/// (the setting's `${class}_${vendor}` form, e.g. `0302_10de`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciVendorId {
    /// Lower-case hex class prefix, when the setting names one.
    pub class: Option<String>,
    /// The vendor id.
    pub vendor: u16,
}

impl PciVendorId {
    /// The vendor id as NFD and sysfs spell it: four lower-case hex digits.
    pub fn vendor_hex(&self) -> String {
        format!("{:04x}", self.vendor)
    }
}

impl fmt::Display for PciVendorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.class {
            Some(class) => write!(f, "{class}_{:04x}", self.vendor),
            None => write!(f, "{:04x}", self.vendor),
        }
    }
}

/// One row of the manufacturers table: the constants the rest of the system reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constants {
    /// The PCI vendor ids NFD labels and the node's scan match (never empty).
    pub pci_vendor_ids: Vec<PciVendorId>,
    /// The Kubernetes resource base (`<base>`, DESIGN.md "Resource keys and units").
    pub resource_base: String,
    /// The RuntimeClass attached to a Pod when it exists in the cluster.
    pub runtime_class: Option<String>,
    /// The manufacturer's word for hardware partitioning (`<base>.partitioned.<kind>-<profile>`);
    /// `None`: no partitioned family at all.
    pub partition_kind: Option<String>,
    /// Logical slices one accelerator hosts at most; `None`: no sliced family.
    pub slice_count: Option<u32>,
    /// Whether the slices on one accelerator may ask for more than 100 cores percent together
    /// (`logicalSliced.coresPercentageOvercommit`; [`Manufacturer::cores_percentage_overcommit`]).
    /// Not a setting: the vendor's isolation decides it. It decides the node's
    /// `.sliced.cores-percentage` capacity (`crate::capacity`).
    pub cores_percentage_overcommit: bool,
}

impl Manufacturer {
    /// This manufacturer's built-in row (the described system's defaults; settings.md §3).
    pub fn default_constants(self) -> Constants {
        use crate::ledger::units::slices_per_accelerator;
        Constants {
            pci_vendor_ids: self
                .default_pci_vendor_ids()
                .iter()
                .map(|&vendor| PciVendorId {
                    class: None,
                    vendor,
                })
                .collect(),
            resource_base: self.default_resource_base().to_string(),
            // The RuntimeClasses the chart creates (seed 000 and the specs): NVIDIA's, Iluvatar's
            // (ix-container-runtime, which turns IX_VISIBLE_DEVICES into nodes and corex) and
            // Moore Threads' (the MT container runtime, the only way its user-space driver
            // reaches a container, the daemon's own included).
            runtime_class: match self {
                Manufacturer::Nvidia => Some("nvidia".to_string()),
                // spec/hygon.md §9: attached only where such a RuntimeClass exists.
                Manufacturer::Hygon => Some("hygon".to_string()),
                // The Ascend Docker Runtime's handler (spec/ascend.md §0; the chart creates it).
                Manufacturer::Ascend => Some("ascend".to_string()),
                Manufacturer::Iluvatar => Some("iluvatar".to_string()),
                Manufacturer::Mthreads => Some("mthreads".to_string()),
                // Attached only where a RuntimeClass of the name exists (spec/cambricon.md §1).
                Manufacturer::Cambricon => Some("cambricon".to_string()),
                // Likewise (spec/metax.md §1).
                Manufacturer::Metax => Some("metax".to_string()),
                _ => None,
            },
            partition_kind: crate::resources::partition_kind(self).map(str::to_string),
            slice_count: slices_per_accelerator(self),
            cores_percentage_overcommit: self.cores_percentage_overcommit(),
        }
    }

    /// Whether the cores percentages of the slices on one accelerator may add up past 100
    /// (`status.logicalSliced.coresPercentageOvercommit` of each spec, §2.4 or its equal): true
    /// where the compute cap is a per-process limit or a mask that may overlap, false where it
    /// is a hard per-card partition or a share of a whole, so the percentages on one card sum to
    /// at most 100.
    pub fn cores_percentage_overcommit(self) -> bool {
        match self {
            // No spec page records NVIDIA's flag; HAMi-core's SM limit is a per-process cap, as
            // on Iluvatar and T-Head, whose specs record `true` for the same library.
            Manufacturer::Nvidia => true,
            // spec/amd.md §2: `{count: 128, coresPercentageOvercommit: true}`, CU masks may overlap.
            Manufacturer::Amd => true,
            // spec/ascend.md §5.1: `{count: 63, coresPercentageOvercommit: true}`.
            Manufacturer::Ascend => true,
            // spec/cambricon.md §2.4: false, compute is a hard per-card partition.
            Manufacturer::Cambricon => false,
            // spec/hygon.md §1.5: false, CU masks are disjoint.
            Manufacturer::Hygon => false,
            // spec/iluvatar.md §2.4: `{count: 100, coresPercentageOvercommit: true}`.
            Manufacturer::Iluvatar => true,
            // spec/metax.md §2.4: false, the fixed-share compute quota is a hard partition.
            Manufacturer::Metax => false,
            // spec/mthreads.md §2.4: false, compute is a relative weight, not over-committed.
            Manufacturer::Mthreads => false,
            // spec/thead.md §1.2: `{count: 128, coresPercentageOvercommit: true}`.
            Manufacturer::Thead => true,
        }
    }

    /// The prefix of this manufacturer's settings (`GPUSTACK_` and the upper-case name).
    pub fn settings_prefix(self) -> String {
        format!("GPUSTACK_{}_", self.name().to_ascii_uppercase())
    }
}

/// The suffixes of the per-manufacturer settings the table reads.
pub const PCI_VENDOR_ID_SUFFIX: &str = "PCI_VENDOR_ID";
/// See [`PCI_VENDOR_ID_SUFFIX`].
pub const RESOURCE_NAME_SUFFIX: &str = "ACCELERATABLE_RESOURCE_NAME";
/// See [`PCI_VENDOR_ID_SUFFIX`].
pub const RUNTIME_NAME_SUFFIX: &str = "ACCELERATABLE_RUNTIME_NAME";
/// See [`PCI_VENDOR_ID_SUFFIX`].
pub const PARTITION_KIND_SUFFIX: &str = "PARTITION_KIND";

/// A per-manufacturer setting with a value the table cannot take; the message names the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: {expected}")]
pub struct TableError {
    /// The variable, e.g. `GPUSTACK_NVIDIA_PCI_VENDOR_ID`.
    pub name: String,
    pub value: String,
    /// What a valid value looks like.
    pub expected: String,
}

/// The manufacturers table in force: every manufacturer's [`Constants`], the defaults with the
/// deployment's overrides applied. Built once and handed to everything that needs a constant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManufacturerTable {
    /// One row per manufacturer, in [`Manufacturer::ALL`]'s order (the enum's declaration order).
    rows: [Constants; 9],
}

impl Default for ManufacturerTable {
    fn default() -> Self {
        ManufacturerTable {
            rows: Manufacturer::ALL.map(Manufacturer::default_constants),
        }
    }
}

impl ManufacturerTable {
    /// The defaults with the overrides among `vars` applied (the process environment, or a map
    /// in tests). An absent variable keeps the default; an empty one too (a chart passes unset
    /// values as empty), except `…_ACCELERATABLE_RUNTIME_NAME` and `…_PARTITION_KIND`, where
    /// empty means "none".
    pub fn from_vars(vars: &BTreeMap<String, String>) -> Result<Self, TableError> {
        let mut table = ManufacturerTable::default();
        for m in Manufacturer::ALL {
            let prefix = m.settings_prefix();
            let get = |suffix: &str| {
                let name = format!("{prefix}{suffix}");
                vars.get(&name).map(|v| (name, v.trim().to_string()))
            };
            let row = &mut table.rows[m as usize];
            if let Some((name, value)) = get(PCI_VENDOR_ID_SUFFIX)
                && !value.is_empty()
            {
                row.pci_vendor_ids = parse_vendor_ids(&value).ok_or_else(|| TableError {
                    name,
                    value: value.clone(),
                    expected: "expected a 4-digit hex PCI vendor id or CLASS_VENDOR (e.g. 10de or 0302_10de), comma-separated".into(),
                })?;
            }
            if let Some((name, value)) = get(RESOURCE_NAME_SUFFIX)
                && !value.is_empty()
            {
                if !crate::resources::is_resource_base(&value) {
                    return Err(TableError {
                        name,
                        value,
                        expected:
                            "expected a Kubernetes resource name DOMAIN/NAME (e.g. nvidia.com/gpu)"
                                .into(),
                    });
                }
                row.resource_base = value;
            }
            if let Some((name, value)) = get(RUNTIME_NAME_SUFFIX) {
                if !value.is_empty() && !is_dns_label(&value) {
                    return Err(TableError {
                        name,
                        value,
                        expected:
                            "expected a RuntimeClass name (lower-case letters, digits, '-', '.')"
                                .into(),
                    });
                }
                row.runtime_class = (!value.is_empty()).then_some(value);
            }
            if let Some((name, value)) = get(PARTITION_KIND_SUFFIX) {
                let ok = value
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
                if !ok {
                    return Err(TableError {
                        name,
                        value,
                        expected: "expected a lower-case word of letters and digits (e.g. mig), or empty for none".into(),
                    });
                }
                row.partition_kind = (!value.is_empty()).then_some(value);
            }
        }
        // Two manufacturers on one base could not tell their keys apart.
        let mut seen: BTreeMap<&str, Manufacturer> = BTreeMap::new();
        for (m, row) in table.rows() {
            if let Some(other) = seen.insert(row.resource_base.as_str(), m) {
                let (named, with) = if vars
                    .contains_key(&format!("{}{RESOURCE_NAME_SUFFIX}", m.settings_prefix()))
                {
                    (m, other)
                } else {
                    (other, m)
                };
                return Err(TableError {
                    name: format!("{}{RESOURCE_NAME_SUFFIX}", named.settings_prefix()),
                    value: row.resource_base.clone(),
                    expected: format!("{with} uses that resource base already"),
                });
            }
        }
        Ok(table)
    }

    /// One manufacturer's row.
    pub fn get(&self, manufacturer: Manufacturer) -> &Constants {
        &self.rows[manufacturer as usize]
    }

    /// Every row, in the table's order.
    pub fn rows(&self) -> impl Iterator<Item = (Manufacturer, &Constants)> {
        Manufacturer::ALL.into_iter().zip(self.rows.iter())
    }

    /// The manufacturer whose configured vendor ids include `vendor` (any class).
    pub fn from_pci_vendor(&self, vendor: u16) -> Option<Manufacturer> {
        self.rows()
            .find(|(_, c)| c.pci_vendor_ids.iter().any(|id| id.vendor == vendor))
            .map(|(m, _)| m)
    }

    /// Every configured vendor id as four lower-case hex digits, sorted, once each.
    pub fn vendor_ids_hex(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .rows
            .iter()
            .flat_map(|c| c.pci_vendor_ids.iter().map(PciVendorId::vendor_hex))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Replace one row (tests, and callers that build a table by hand).
    pub fn with(mut self, manufacturer: Manufacturer, constants: Constants) -> Self {
        self.rows[manufacturer as usize] = constants;
        self
    }
}

fn parse_vendor_ids(text: &str) -> Option<Vec<PciVendorId>> {
    let mut ids = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let entry = entry.to_ascii_lowercase();
        let (class, vendor) = match entry.rsplit_once('_') {
            Some((class, vendor)) => (Some(class.to_string()), vendor.to_string()),
            None => (None, entry.clone()),
        };
        let vendor = vendor.strip_prefix("0x").unwrap_or(&vendor);
        if vendor.len() != 4 || !vendor.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        if let Some(class) = &class
            && (class.is_empty()
                || class.len() > 6
                || !class.chars().all(|c| c.is_ascii_hexdigit()))
        {
            return None;
        }
        ids.push(PciVendorId {
            class,
            vendor: u16::from_str_radix(vendor, 16).ok()?,
        });
    }
    (!ids.is_empty()).then_some(ids)
}

fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Manufacturer::ALL {
            assert_eq!(m.name().parse::<Manufacturer>(), Ok(m));
        }
        assert_eq!("T-Head".parse::<Manufacturer>(), Ok(Manufacturer::Thead));
        assert!("intel".parse::<Manufacturer>().is_err());
    }

    #[test]
    fn nvidia_vendor_id() {
        assert_eq!(
            Manufacturer::from_pci_vendor(0x10de),
            Some(Manufacturer::Nvidia)
        );
        assert_eq!(Manufacturer::from_pci_vendor(0x8086), None);
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn rows_follow_the_declaration_order() {
        for (position, m) in Manufacturer::ALL.into_iter().enumerate() {
            assert_eq!(m as usize, position, "{m}");
        }
    }

    #[test]
    fn defaults_are_the_described_systems() {
        let table = ManufacturerTable::default();
        let nvidia = table.get(Manufacturer::Nvidia);
        assert_eq!(nvidia.resource_base, "nvidia.com/gpu");
        assert_eq!(nvidia.runtime_class.as_deref(), Some("nvidia"));
        assert_eq!(nvidia.partition_kind.as_deref(), Some("mig"));
        assert_eq!(nvidia.slice_count, Some(128));
        assert_eq!(table.get(Manufacturer::Hygon).slice_count, Some(4));
        assert_eq!(
            table.get(Manufacturer::Hygon).runtime_class.as_deref(),
            Some("hygon")
        );
        assert_eq!(table.get(Manufacturer::Amd).partition_kind, None);
        let ascend = table.get(Manufacturer::Ascend);
        assert_eq!(ascend.runtime_class.as_deref(), Some("ascend"));
        assert_eq!(
            (ascend.partition_kind.as_deref(), ascend.slice_count),
            (None, Some(63))
        );
        let iluvatar = table.get(Manufacturer::Iluvatar);
        assert_eq!(iluvatar.runtime_class.as_deref(), Some("iluvatar"));
        assert_eq!(iluvatar.slice_count, Some(100));
        let mthreads = table.get(Manufacturer::Mthreads);
        assert_eq!(mthreads.runtime_class.as_deref(), Some("mthreads"));
        assert_eq!(mthreads.slice_count, Some(16));
        assert_eq!(table.get(Manufacturer::Amd).runtime_class, None);
        let cambricon = table.get(Manufacturer::Cambricon);
        assert_eq!(cambricon.runtime_class.as_deref(), Some("cambricon"));
        assert_eq!(cambricon.partition_kind, None);
        assert_eq!(cambricon.slice_count, Some(16), "sMLU instances");
        assert_eq!(
            table.get(Manufacturer::Metax).runtime_class.as_deref(),
            Some("metax")
        );
        assert_eq!(
            table.vendor_ids_hex(),
            [
                "1002", "10de", "19e5", "1d94", "1ded", "1e3e", "1ed5", "9999", "cabc"
            ]
        );
        assert_eq!(ManufacturerTable::from_vars(&BTreeMap::new()), Ok(table));
    }

    #[test]
    fn cores_overcommit_is_each_specs_flag() {
        // Each spec's `logicalSliced.coresPercentageOvercommit` (NVIDIA's by HAMi-core, as
        // Iluvatar's and T-Head's): false where one card's cores percentages sum to at most 100.
        let table = ManufacturerTable::default();
        let over: Vec<(Manufacturer, bool)> = table
            .rows()
            .map(|(m, row)| (m, row.cores_percentage_overcommit))
            .collect();
        assert_eq!(
            over,
            [
                (Manufacturer::Nvidia, true),
                (Manufacturer::Amd, true),
                (Manufacturer::Ascend, true),
                (Manufacturer::Cambricon, false),
                (Manufacturer::Hygon, false),
                (Manufacturer::Iluvatar, true),
                (Manufacturer::Metax, false),
                (Manufacturer::Mthreads, false),
                (Manufacturer::Thead, true),
            ]
        );
        // No setting changes it (the name built, not spelled: see the next test).
        let hygon_base = format!(
            "{}{RESOURCE_NAME_SUFFIX}",
            Manufacturer::Hygon.settings_prefix()
        );
        let renamed =
            ManufacturerTable::from_vars(&vars(&[(hygon_base.as_str(), "example.com/dcu")]))
                .unwrap();
        assert!(!renamed.get(Manufacturer::Hygon).cores_percentage_overcommit);
    }

    #[test]
    fn every_setting_overrides_its_row() {
        // Other manufacturers' names are built, not spelled: the chart's settings test collects
        // every spelled `GPUSTACK_*` name as a setting the chart must pass.
        let amd_vendor = format!(
            "{}{PCI_VENDOR_ID_SUFFIX}",
            Manufacturer::Amd.settings_prefix()
        );
        let table = ManufacturerTable::from_vars(&vars(&[
            ("GPUSTACK_NVIDIA_PCI_VENDOR_ID", "0302_10DE"),
            (
                "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME",
                "example.com/gpu",
            ),
            ("GPUSTACK_NVIDIA_ACCELERATABLE_RUNTIME_NAME", "nvidia-cdi"),
            ("GPUSTACK_NVIDIA_PARTITION_KIND", ""),
            (amd_vendor.as_str(), "1022"),
        ]))
        .unwrap();
        let nvidia = table.get(Manufacturer::Nvidia);
        assert_eq!(
            nvidia.pci_vendor_ids,
            [PciVendorId {
                class: Some("0302".into()),
                vendor: 0x10de
            }]
        );
        assert_eq!(nvidia.pci_vendor_ids[0].to_string(), "0302_10de");
        assert_eq!(nvidia.resource_base, "example.com/gpu");
        assert_eq!(nvidia.runtime_class.as_deref(), Some("nvidia-cdi"));
        assert_eq!(nvidia.partition_kind, None);
        assert_eq!(table.from_pci_vendor(0x1022), Some(Manufacturer::Amd));
        assert_eq!(table.from_pci_vendor(0x1002), None);
    }

    #[test]
    fn a_bad_value_names_its_variable_on_one_line() {
        let amd = |suffix: &str| format!("{}{suffix}", Manufacturer::Amd.settings_prefix());
        let thead = format!(
            "{}{PARTITION_KIND_SUFFIX}",
            Manufacturer::Thead.settings_prefix()
        );
        for (name, value) in [
            ("GPUSTACK_NVIDIA_PCI_VENDOR_ID".to_string(), "nvidia"),
            (amd(RESOURCE_NAME_SUFFIX), "gpu"),
            (
                "GPUSTACK_NVIDIA_ACCELERATABLE_RUNTIME_NAME".to_string(),
                "Has Space",
            ),
            (thead, "m-i-g"),
            (amd(RESOURCE_NAME_SUFFIX), "nvidia.com/gpu"),
        ] {
            let name = name.as_str();
            let error = ManufacturerTable::from_vars(&vars(&[(name, value)])).unwrap_err();
            let text = error.to_string();
            assert!(text.starts_with(&format!("{name}=")), "{text}");
            assert!(!text.contains('\n'), "{text}");
        }
    }
}
