//! The ledger's arithmetic: how much of an accelerator a grant takes, in units, shares and
//! slots, and the constants those counts come from.
//!
//! This module owns the ledger's per-accelerator counts of DESIGN.md ("Resource keys and units"):
//! shares, slice slots, visibility tokens, and units back to MiB. Budgets fold into units in one
//! place, [`crate::units::fold`], which the webhook uses too. It must not read the machine.

use crate::manufacturer::Manufacturer;

pub use crate::units::{UNITS_PER_ACCELERATOR, UNITS_PER_PERCENT};

/// Ownership shares per accelerator for the shared family.
pub const SHARES_PER_ACCELERATOR: u32 = 10;

/// What one share charges against the accelerator's units, so `remaining` stays meaningful for
/// every family.
pub const UNITS_PER_SHARE: u64 = UNITS_PER_ACCELERATOR / SHARES_PER_ACCELERATOR as u64;

/// Logical slices an NVIDIA accelerator hosts at most (`logicalSliced.count`).
pub const NVIDIA_SLICES_PER_ACCELERATOR: u32 = 128;

/// Logical slices a Hygon accelerator hosts at most (seed 000: "4 on Hygon").
pub const HYGON_SLICES_PER_ACCELERATOR: u32 = 4;

/// Logical slices an AMD accelerator hosts at most (`status.logicalSliced.count`: a loose token
/// pool, VRAM being what binds; compute-unit masks may overlap).
pub const AMD_SLICES_PER_ACCELERATOR: u32 = 128;

/// Logical slices an Ascend NPU hosts at most (spec/ascend.md §5.1: 63, vcann-rt's most user
/// processes per device; compute is over-committed across them).
pub const ASCEND_SLICES_PER_ACCELERATOR: u32 = 63;

/// Logical slices an Iluvatar accelerator hosts at most (spec iluvatar §2.4: 100, after
/// Iluvatar's own 1 %-granular vGPU model, where NVIDIA's HAMi-core build counts 128).
pub const ILUVATAR_SLICES_PER_ACCELERATOR: u32 = 100;

/// Logical slices a Moore Threads accelerator hosts at most (spec mthreads §2.4: 16).
pub const MTHREADS_SLICES_PER_ACCELERATOR: u32 = 16;

/// Logical slices a T-Head PPU hosts at most (spec/thead.md §1.2: `logicalSliced.count` 128,
/// compute over-committed).
pub const THEAD_SLICES_PER_ACCELERATOR: u32 = 128;

/// Tokens the visibility pool advertises per accelerator (`SlicedResourceMaxSize`).
pub const VISIBILITY_TOKENS_PER_ACCELERATOR: u32 = 512;

/// The logical slice count of a manufacturer's accelerator, where it is known.
pub fn slices_per_accelerator(manufacturer: Manufacturer) -> Option<u32> {
    match manufacturer {
        Manufacturer::Nvidia => Some(NVIDIA_SLICES_PER_ACCELERATOR),
        Manufacturer::Iluvatar => Some(ILUVATAR_SLICES_PER_ACCELERATOR),
        Manufacturer::Mthreads => Some(MTHREADS_SLICES_PER_ACCELERATOR),
        Manufacturer::Hygon => Some(HYGON_SLICES_PER_ACCELERATOR),
        Manufacturer::Amd => Some(AMD_SLICES_PER_ACCELERATOR),
        Manufacturer::Ascend => Some(ASCEND_SLICES_PER_ACCELERATOR),
        Manufacturer::Thead => Some(THEAD_SLICES_PER_ACCELERATOR),
        _ => None,
    }
}

/// The VRAM in MiB that `units` stand for on an accelerator of `vram_mib`, floored: what the
/// preload library is told the slice may use (`CUDA_DEVICE_MEMORY_LIMIT_<i>`).
pub fn mib_for_units(units: u64, vram_mib: u64) -> u64 {
    let mib = u128::from(units.min(UNITS_PER_ACCELERATOR)) * u128::from(vram_mib)
        / u128::from(UNITS_PER_ACCELERATOR);
    u64::try_from(mib).unwrap_or(vram_mib)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_back_to_mib_is_floored() {
        assert_eq!(mib_for_units(400_000, 81_559), 20_389);
        assert_eq!(mib_for_units(UNITS_PER_ACCELERATOR, 81_559), 81_559);
    }

    #[test]
    fn slice_counts_per_manufacturer() {
        assert_eq!(slices_per_accelerator(Manufacturer::Nvidia), Some(128));
        assert_eq!(slices_per_accelerator(Manufacturer::Hygon), Some(4));
        assert_eq!(slices_per_accelerator(Manufacturer::Amd), Some(128));
        assert_eq!(slices_per_accelerator(Manufacturer::Ascend), Some(63));
        assert_eq!(slices_per_accelerator(Manufacturer::Thead), Some(128));
    }
}
