//! The health rule: may this accelerator take work (seed 002, "Healthy", with DESIGN.md's
//! "Health" decision).
//!
//! An accelerator is unhealthy when it shows a failed or pending row remap, or uncorrectable
//! volatile ECC errors. Kernel-log faults (hardware-class XIDs this boot) are added by the node
//! daemon's fault record, which passes them in; application-class XIDs never take a GPU out of
//! service. Pure: it reads the facts and names every reason.

use crate::inventory::Accelerator;

/// Every reason the counters in `accelerator` fail the rule, empty when they pass.
pub fn counter_reasons(accelerator: &Accelerator) -> Vec<String> {
    let mut reasons = Vec::new();
    if let Some(rows) = &accelerator.remapped_rows {
        if rows.failure == Some(true) {
            reasons.push("row remapping failed".to_string());
        }
        if rows.pending == Some(true) {
            reasons.push("row remap pending (reset the GPU)".to_string());
        }
    }
    if let Some(n) = accelerator
        .ecc
        .as_ref()
        .and_then(|e| e.volatile_uncorrected)
        .filter(|n| *n > 0)
    {
        reasons.push(format!("{n} uncorrectable volatile ECC errors"));
    }
    reasons
}

/// Applies the rule to the counters plus any `faults` (one reason each) the caller holds.
pub fn assess(accelerator: &mut Accelerator, faults: &[String]) {
    let mut reasons = counter_reasons(accelerator);
    reasons.extend(faults.iter().cloned());
    accelerator.healthy = reasons.is_empty();
    accelerator.health_reasons = reasons;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{Ecc, RemappedRows, Source};

    #[test]
    fn each_counter_fails_the_rule() {
        let mut a = Accelerator::new(0, Source::Driver);
        assess(&mut a, &[]);
        assert!(a.healthy);

        a.ecc = Some(Ecc {
            volatile_uncorrected: Some(2),
            volatile_corrected: Some(9),
            ..Ecc::default()
        });
        assess(&mut a, &[]);
        assert!(!a.healthy);
        assert_eq!(
            a.health_reasons,
            vec!["2 uncorrectable volatile ECC errors"]
        );

        a.ecc = Some(Ecc {
            volatile_uncorrected: Some(0),
            aggregate_uncorrected: Some(5),
            ..Ecc::default()
        });
        a.remapped_rows = Some(RemappedRows {
            pending: Some(true),
            failure: Some(false),
            ..RemappedRows::default()
        });
        assess(&mut a, &[]);
        assert_eq!(a.health_reasons, vec!["row remap pending (reset the GPU)"]);

        a.remapped_rows = Some(RemappedRows {
            failure: Some(true),
            ..RemappedRows::default()
        });
        assess(&mut a, &["Xid 79: GPU has fallen off the bus".into()]);
        assert_eq!(a.health_reasons.len(), 2);
        assert!(!a.healthy);
    }
}
