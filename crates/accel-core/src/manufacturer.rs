//! The manufacturers table: each supported manufacturer's name, PCI vendor ids and resource base.
//! This is the one place these facts live; nothing else spells a vendor id or a resource base.

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
