//! The health rule: may this accelerator take work (seed 002, "Healthy", with DESIGN.md's
//! "Health" decision).
//!
//! An accelerator is unhealthy when it shows a failed or pending row remap, or uncorrectable
//! volatile ECC errors — or, where the manufacturer's rule says so
//! ([`crate::inventory::Ecc::corrected_is_fault`], Ascend), ECC errors of either kind while ECC
//! is enabled —, or when the manufacturer's tool itself states a fault
//! ([`crate::inventory::Accelerator::reported_faults`], worded by its crate: Cambricon's
//! `Health State`). Kernel-log faults (hardware-class XIDs this boot) are added by the node daemon's
//! fault record, which passes them in; application-class XIDs never take a GPU out of
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
    match accelerator.ecc.as_ref() {
        Some(ecc) if ecc.corrected_is_fault => {
            let single = ecc.volatile_corrected.unwrap_or(0);
            let double = ecc.volatile_uncorrected.unwrap_or(0);
            if ecc.enabled == Some(true) && (single > 0 || double > 0) {
                reasons.push(format!(
                    "ECC errors with ECC enabled: {single} single-bit, {double} double-bit"
                ));
            }
        }
        Some(ecc) => {
            if let Some(n) = ecc.volatile_uncorrected.filter(|n| *n > 0) {
                reasons.push(format!("{n} uncorrectable volatile ECC errors"));
            }
        }
        None => {}
    }
    if let Some(reported) = &accelerator.reported_faults {
        reasons.extend(reported.iter().cloned());
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

    /// What the vendor's tool states is passed through as worded, after the counters; stated
    /// healthy (`Some` and empty) or not stated (`None`) adds nothing.
    #[test]
    fn a_fault_the_tool_reports_fails_the_rule_as_worded() {
        let mut a = Accelerator::new(0, Source::Driver);
        a.reported_faults = Some(Vec::new());
        assess(&mut a, &[]);
        assert!(a.healthy);
        a.reported_faults = Some(vec!["cnmon reports Health State \"In Problem\"".into()]);
        a.ecc = Some(Ecc {
            volatile_uncorrected: Some(1),
            ..Ecc::default()
        });
        assess(&mut a, &["Xid 79: fallen off".into()]);
        assert!(!a.healthy);
        assert_eq!(
            a.health_reasons,
            [
                "1 uncorrectable volatile ECC errors",
                "cnmon reports Health State \"In Problem\"",
                "Xid 79: fallen off"
            ]
        );
    }

    /// Ascend's rule: single-bit errors count too, and only while ECC is enabled.
    #[test]
    fn a_rule_counting_corrected_errors_needs_ecc_enabled() {
        let mut a = Accelerator::new(0, Source::Driver);
        let ecc = |enabled, single, double| Ecc {
            enabled,
            volatile_corrected: Some(single),
            volatile_uncorrected: Some(double),
            corrected_is_fault: true,
            ..Ecc::default()
        };
        a.ecc = Some(ecc(Some(true), 3, 0));
        assess(&mut a, &[]);
        assert_eq!(
            a.health_reasons,
            vec!["ECC errors with ECC enabled: 3 single-bit, 0 double-bit"]
        );
        a.ecc = Some(ecc(Some(true), 0, 1));
        assess(&mut a, &[]);
        assert!(!a.healthy);
        for (enabled, single, double) in [(Some(false), 3, 1), (None, 3, 1), (Some(true), 0, 0)] {
            a.ecc = Some(ecc(enabled, single, double));
            assess(&mut a, &[]);
            assert!(a.healthy, "{enabled:?} {single} {double}");
        }
    }
}
