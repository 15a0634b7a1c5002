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

/// Logical slices a MetaX card hosts at most (spec metax §2.4: 16 sGPU subdevices, indexes
/// 0..15; the fixed-share compute quota is a hard partition, so compute is not over-committed).
pub const METAX_SLICES_PER_ACCELERATOR: u32 = 16;

/// Logical slices a Cambricon MLU hosts at most (spec/cambricon.md §2.4: `logicalSliced.count`
/// 16, sMLU instances; compute is a hard per-card partition, so not over-committed; the driver's
/// own bound is UNSURE, §8: it keeps at most 16 profiles a card).
pub const CAMBRICON_SLICES_PER_ACCELERATOR: u32 = 16;

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
        Manufacturer::Metax => Some(METAX_SLICES_PER_ACCELERATOR),
        Manufacturer::Cambricon => Some(CAMBRICON_SLICES_PER_ACCELERATOR),
    }
}

/// The VRAM in MiB that `units` stand for on an accelerator of `vram_mib`: the most MiB whose
/// fold ([`crate::units::fold`], floored) is at most `units`, so a budget asked in MiB comes back
/// exactly (1024 MiB folds to units that return 1024, not 1023) and a percentage comes back
/// floored (25 % of 81,559 MiB is 20,389). What the preload library is told the slice may use
/// (`CUDA_DEVICE_MEMORY_LIMIT_<i>`); never more than the accelerator has.
pub fn mib_for_units(units: u64, vram_mib: u64) -> u64 {
    if vram_mib == 0 {
        return 0;
    }
    let units = u128::from(units.min(UNITS_PER_ACCELERATOR));
    let vram = u128::from(vram_mib);
    // fold(m) = floor(m·U/V) ≤ u  ⇔  m·U < (u+1)·V  ⇔  m ≤ ((u+1)·V − 1) / U.
    let mib = ((units + 1) * vram - 1) / u128::from(UNITS_PER_ACCELERATOR);
    u64::try_from(mib).map_or(vram_mib, |m| m.min(vram_mib))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::units::{MemoryBudget, fold};
    use proptest::prelude::*;

    #[test]
    fn units_back_to_mib() {
        // A percentage comes back floored.
        assert_eq!(mib_for_units(400_000, 81_559), 20_389);
        assert_eq!(mib_for_units(800_000, 24_564), 12_282);
        assert_eq!(mib_for_units(UNITS_PER_ACCELERATOR, 81_559), 81_559);
        // A budget in MiB comes back as asked (floor then floor again gave 1023).
        let units = fold(MemoryBudget::Mib(1024), Some(98_304)).unwrap();
        assert_eq!(mib_for_units(units, 98_304), 1024);
        assert_eq!(mib_for_units(0, 0), 0);
        assert_eq!(mib_for_units(u64::MAX, u64::MAX), u64::MAX);
    }

    proptest! {
        /// MiB → units → MiB is the identity, on any VRAM up to 1.5 TiB.
        #[test]
        fn a_budget_in_mib_survives_the_round_trip(vram in 1u64..1_600_000, at in 0.0f64..1.0) {
            let mib = ((vram as f64 * at) as u64).clamp(1, vram);
            let units = fold(MemoryBudget::Mib(mib), Some(vram)).unwrap();
            prop_assert_eq!(mib_for_units(units, vram), mib);
        }

        /// What comes back always fits the units, and one MiB more would not.
        #[test]
        fn the_most_mib_that_fits(vram in 1u64..10_000_000, units in 0u64..=UNITS_PER_ACCELERATOR) {
            let mib = mib_for_units(units, vram);
            prop_assert!(mib <= vram);
            let fold_of = |m: u64| u128::from(m) * u128::from(UNITS_PER_ACCELERATOR) / u128::from(vram);
            prop_assert!(fold_of(mib) <= u128::from(units));
            if mib < vram {
                prop_assert!(fold_of(mib + 1) > u128::from(units));
            }
        }
    }

    #[test]
    fn slice_counts_per_manufacturer() {
        assert_eq!(slices_per_accelerator(Manufacturer::Nvidia), Some(128));
        assert_eq!(slices_per_accelerator(Manufacturer::Hygon), Some(4));
        assert_eq!(slices_per_accelerator(Manufacturer::Amd), Some(128));
        assert_eq!(slices_per_accelerator(Manufacturer::Ascend), Some(63));
        assert_eq!(slices_per_accelerator(Manufacturer::Thead), Some(128));
        assert_eq!(slices_per_accelerator(Manufacturer::Cambricon), Some(16));
    }
}
