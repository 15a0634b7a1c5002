//! `.units`: the one currency the webhook folds and the ledger charges (DESIGN.md, "Resource keys
//! and units").
//!
//! This module owns the arithmetic and nothing else: one accelerator is worth 1,600,000 units, a
//! memory percentage p is p × 16,000, a MiB budget m is floor(m × 1,600,000 ÷ VRAM MiB), and a
//! partition folds its profile's VRAM the same way, so the same VRAM costs the same units whether
//! it is sliced or partitioned. The webhook and the ledger both call [`fold`]; nothing else
//! computes units.

/// Units one whole accelerator is worth.
pub const UNITS_PER_ACCELERATOR: u64 = 1_600_000;

/// Units one percent of an accelerator is worth (1,600,000 ÷ 100).
pub const UNITS_PER_PERCENT: u64 = UNITS_PER_ACCELERATOR / 100;

/// The compute cap a slice gets when its request names none.
pub const DEFAULT_CORES_PERCENTAGE: u64 = 100;

/// A memory budget on one accelerator, as a request states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryBudget {
    /// `.sliced.memory-percentage`: a whole percentage of the accelerator's VRAM.
    Percentage(u64),
    /// `.sliced.memory-mib`: VRAM in MiB.
    Mib(u64),
    /// A partition profile's VRAM in MiB as the driver reports it for that profile.
    Profile(u64),
}

/// Why a budget cannot be folded into units.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitsError {
    /// A percentage outside (0, 100].
    #[error("a memory percentage must be from 1 to 100, got {0}")]
    Percentage(u64),
    /// A MiB budget (or profile VRAM) of zero.
    #[error("a memory budget must be at least 1 MiB")]
    Empty,
    /// The accelerator's VRAM is needed and not known.
    #[error("the accelerator's VRAM is not known")]
    VramUnknown,
    /// The accelerator's VRAM was reported as zero.
    #[error("the accelerator's VRAM is reported as 0 MiB")]
    VramZero,
    /// The budget is more VRAM than the accelerator has.
    #[error("a memory budget of {budget} MiB exceeds the accelerator's {vram} MiB")]
    OverVram { budget: u64, vram: u64 },
}

/// Fold a memory budget into units. `vram_mib` is the accelerator's VRAM as the driver reports
/// it; a percentage does not need it. The result never exceeds [`UNITS_PER_ACCELERATOR`].
pub fn fold(budget: MemoryBudget, vram_mib: Option<u64>) -> Result<u64, UnitsError> {
    match budget {
        MemoryBudget::Percentage(p) => {
            if p == 0 || p > 100 {
                return Err(UnitsError::Percentage(p));
            }
            Ok(p * UNITS_PER_PERCENT)
        }
        MemoryBudget::Mib(m) | MemoryBudget::Profile(m) => {
            if m == 0 {
                return Err(UnitsError::Empty);
            }
            let vram = vram_mib.ok_or(UnitsError::VramUnknown)?;
            if vram == 0 {
                return Err(UnitsError::VramZero);
            }
            if m > vram {
                return Err(UnitsError::OverVram { budget: m, vram });
            }
            // m ≤ vram < 2^64 and 1.6e6 < 2^21, so the product fits a u128 with room to spare.
            let units = u128::from(m) * u128::from(UNITS_PER_ACCELERATOR) / u128::from(vram);
            // units ≤ UNITS_PER_ACCELERATOR because m ≤ vram.
            Ok(u64::try_from(units).unwrap_or(UNITS_PER_ACCELERATOR))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn percentages_fold_at_16000_each() {
        assert_eq!(fold(MemoryBudget::Percentage(1), None), Ok(16_000));
        assert_eq!(fold(MemoryBudget::Percentage(50), None), Ok(800_000));
        assert_eq!(fold(MemoryBudget::Percentage(100), None), Ok(1_600_000));
        assert_eq!(
            fold(MemoryBudget::Percentage(0), None),
            Err(UnitsError::Percentage(0))
        );
        assert_eq!(
            fold(MemoryBudget::Percentage(101), None),
            Err(UnitsError::Percentage(101))
        );
    }

    #[test]
    fn mib_budgets_floor_against_the_vram() {
        // H100 80GB HBM3: 81559 MiB.
        assert_eq!(fold(MemoryBudget::Mib(81_559), Some(81_559)), Ok(1_600_000));
        assert_eq!(fold(MemoryBudget::Mib(1), Some(81_559)), Ok(19));
        assert_eq!(fold(MemoryBudget::Mib(40_000), Some(81_559)), Ok(784_708));
        assert_eq!(
            fold(MemoryBudget::Mib(81_560), Some(81_559)),
            Err(UnitsError::OverVram {
                budget: 81_560,
                vram: 81_559
            })
        );
        assert_eq!(
            fold(MemoryBudget::Mib(0), Some(81_559)),
            Err(UnitsError::Empty)
        );
        assert_eq!(
            fold(MemoryBudget::Mib(10), None),
            Err(UnitsError::VramUnknown)
        );
        assert_eq!(
            fold(MemoryBudget::Mib(10), Some(0)),
            Err(UnitsError::VramZero)
        );
        assert_eq!(
            fold(MemoryBudget::Mib(u64::MAX), Some(u64::MAX)),
            Ok(1_600_000)
        );
    }

    #[test]
    fn a_partition_costs_what_the_same_vram_costs_as_a_slice() {
        // 3g.40gb on an H100 80GB reports 40320 MiB.
        let partition = fold(MemoryBudget::Profile(40_320), Some(81_559));
        assert_eq!(partition, Ok(790_985));
        assert_eq!(partition, fold(MemoryBudget::Mib(40_320), Some(81_559)));
        assert_eq!(
            fold(MemoryBudget::Profile(9_984), Some(81_559)),
            Ok(195_863)
        );
    }

    proptest! {
        #[test]
        fn never_more_than_one_accelerator(m in any::<u64>(), vram in any::<u64>(), p in any::<u64>()) {
            for budget in [MemoryBudget::Mib(m), MemoryBudget::Profile(m), MemoryBudget::Percentage(p)] {
                if let Ok(units) = fold(budget, Some(vram)) {
                    prop_assert!(units <= UNITS_PER_ACCELERATOR);
                }
            }
        }
    }
}
