//! `doctor` for a T-Head node: what the detector and the responder need, each check `ok`,
//! `warn` or `fail` with a one-line reason and what to do. It reads the host through [`Host`]
//! and [`Commands`] and changes nothing.
//!
//! Checks: `alixpu-driver` (the two control nodes are character devices), `ppu-smi` (the device
//! table answers; the driver-not-loaded answer named), `device-nodes` (every detected card's
//! `/dev/alixpu_ppu<ordinal>` carries the minor `ppu-smi -q` records: the responder's
//! precondition), `mig-mode` (the cards in MIG mode and the partition profiles each offers;
//! one that offers none feeds no family),
//! `slicing-library` (`<library-dir>/thead` holds `ld.so.preload`, the shim pair and
//! `ppu-monitor`; none on arm64), then one row per health source: `health-ecc` (the table's
//! `Volatile Uncorr. ECC`, spec §7: for how many cards it was read, which it could not read, which
//! cards it takes out of service; a card out of service warns, the daemon already keeps it out)
//! and `health-kernel-log` (what the `alixpu` kernel log gives: no fault line, so it is not
//! watched).

use accel_backend::Deadlines;
use accel_backend::doctor::Check;
use accel_core::inventory::{Grantable, ManufacturerInventory};
use accel_host::{Commands, Host};

use crate::backend::hggc_built_for;
use crate::detector::{self, DetectOptions};
use crate::devnode;
use crate::responder::{STAGED, TheadResponder};

/// Runs every check. `library_dir` is the host path the shims are staged under (its `thead/`);
/// `arch` the CPU architecture the daemon's image is built for.
pub fn run(
    host: &dyn Host,
    commands: &dyn Commands,
    deadlines: Deadlines,
    library_dir: &str,
    arch: &str,
) -> Vec<Check> {
    let mut checks = vec![driver(host)];
    let options = DetectOptions {
        deadlines,
        ..DetectOptions::default()
    };
    let detected = detector::detect(host, commands, options);
    let section = match &detected {
        Ok(section) if !section.accelerators.is_empty() => {
            checks.push(Check::ok(
                "ppu-smi",
                format!(
                    "ppu-smi lists {} PPU(s); driver {}",
                    section.accelerators.len(),
                    section.driver_version.as_deref().unwrap_or("unknown")
                ),
            ));
            Some(section)
        }
        Ok(section) => {
            let why = section
                .notes
                .first()
                .cloned()
                .unwrap_or_else(|| "ppu-smi lists no PPU".into());
            checks.push(Check::fail(
                "ppu-smi",
                why,
                "install the PPU SDK and load the alixpu driver; verify with ppu-smi",
            ));
            None
        }
        Err(e) => {
            checks.push(Check::fail(
                "ppu-smi",
                e.to_string(),
                "ppu-smi must answer within its deadline: check the driver (dmesg | grep alixpu)",
            ));
            None
        }
    };
    if let Some(section) = section {
        checks.push(device_nodes(host, section));
        checks.push(mig_mode(section));
    }
    checks.push(slicing_library(host, library_dir, arch));
    checks.push(match section {
        Some(section) => health_ecc(section),
        None => Check::warn(
            "health-ecc",
            "no PPU detected to read health from",
            "fix the ppu-smi check first",
        ),
    });
    checks.push(health_kernel_log());
    checks
}

/// `health-ecc`: the device table's `Volatile Uncorr. ECC`, per detected card (spec §7).
fn health_ecc(section: &ManufacturerInventory) -> Check {
    const NAME: &str = "health-ecc";
    let cards = &section.accelerators;
    let name = |a: &accel_core::Accelerator| {
        format!(
            "accelerator {} ({})",
            a.index,
            a.uuid.as_deref().unwrap_or("no UUID")
        )
    };
    let read = cards.iter().filter(|a| a.ecc.is_some()).count();
    let out: Vec<String> = cards
        .iter()
        .filter_map(|a| {
            let n = a.ecc.as_ref()?.volatile_uncorrected.filter(|n| *n > 0)?;
            Some(format!("{} {n} uncorrected", name(a)))
        })
        .collect();
    let unread: Vec<String> = cards.iter().filter(|a| a.ecc.is_none()).map(name).collect();
    let mut reason = format!(
        "ppu-smi's Volatile Uncorr. ECC read for {read} of {} PPU(s)",
        cards.len()
    );
    let mut actions = Vec::new();
    if !out.is_empty() {
        reason.push_str(&format!("; out of service: {}", out.join(", ")));
        actions.push(
            "drain the node, reset those cards (reload the alixpu driver) or reboot; replace a card whose errors recur",
        );
    }
    if !unread.is_empty() {
        reason.push_str(&format!(
            "; not read (N/A or not printed): {}",
            unread.join(", ")
        ));
        actions.push(
            "a failed ECC read counts as healthy (spec §7), and the daemon keeps the card's last reading: run `ppu-smi` on the host",
        );
    }
    if actions.is_empty() {
        Check::ok(NAME, format!("{reason}: no uncorrected error"))
    } else {
        Check::warn(NAME, reason, actions.join("; "))
    }
}

/// `health-kernel-log`: the `alixpu` kernel log gives no health signal to watch.
fn health_kernel_log() -> Check {
    Check::ok(
        "health-kernel-log",
        "not watched: every captured [alixpu] kernel-log line is driver-load topology, none a fault (spec §7 watches ECC only), so ECC is the PPU's only health source",
    )
}

fn driver(host: &dyn Host) -> Check {
    let failures: Vec<String> = [devnode::CONTROL, devnode::CONTROL_CTL]
        .into_iter()
        .filter_map(|n| devnode::require(host, n).err())
        .map(|e| e.to_string())
        .collect();
    if failures.is_empty() {
        Check::ok(
            "alixpu-driver",
            format!(
                "{} and {} are character devices",
                devnode::CONTROL,
                devnode::CONTROL_CTL
            ),
        )
    } else {
        Check::fail(
            "alixpu-driver",
            failures.join("; "),
            "load the alixpu driver (the PPU SDK's kernel driver); in a container, mount the host's /dev",
        )
    }
}

fn device_nodes(host: &dyn Host, section: &ManufacturerInventory) -> Check {
    let refusals: Vec<String> = section
        .accelerators
        .iter()
        .filter_map(|a| {
            let name = a.uuid.clone().unwrap_or_else(|| a.index.to_string());
            devnode::prove_card(host, &name, a.index, a.minor_number).err()
        })
        .map(|e| e.to_string())
        .collect();
    if refusals.is_empty() {
        Check::ok(
            "device-nodes",
            format!(
                "every PPU's {}<ordinal> carries the minor ppu-smi records",
                devnode::CARD_PREFIX
            ),
        )
    } else {
        Check::fail(
            "device-nodes",
            refusals.join("; "),
            "those PPUs are refused every allocation: compare ls -l /dev/alixpu_ppu* with ppu-smi -q's Minor Number, and restart the device manager after the driver settles",
        )
    }
}

fn mig_mode(section: &ManufacturerInventory) -> Check {
    let in_mig: Vec<_> = section
        .accelerators
        .iter()
        .filter(|a| a.grantable == Grantable::PartitionsOnly)
        .collect();
    if in_mig.is_empty() {
        return Check::ok("mig-mode", "no PPU is in MIG mode");
    }
    let barren: Vec<String> = in_mig
        .iter()
        .filter(|a| a.partition_profiles.is_empty())
        .map(|a| a.index.to_string())
        .collect();
    if !barren.is_empty() {
        return Check::warn(
            "mig-mode",
            format!(
                "PPU(s) {} are in MIG mode but ppu-smi mig offers no partition profile for them, so they feed no family",
                barren.join(", ")
            ),
            "check ppu-smi mig -lgip and ppu-smi mig -lgipp on the node, or turn MIG off on them (ppu-smi -i <N> -mig 0) and restart the device manager to serve them whole",
        );
    }
    let served: Vec<String> = in_mig
        .iter()
        .map(|a| {
            let names: Vec<&str> = a
                .partition_profiles
                .iter()
                .map(|p| p.name.as_str())
                .collect();
            format!("{} ({})", a.index, names.join(", "))
        })
        .collect();
    Check::ok(
        "mig-mode",
        format!("PPU(s) in MIG mode serve partitions: {}", served.join("; ")),
    )
}

fn slicing_library(host: &dyn Host, library_dir: &str, arch: &str) -> Check {
    if !hggc_built_for(arch) {
        return Check::ok(
            "slicing-library",
            format!("no PPU shim on {arch} (the PPU SDK is x86_64-only)"),
        );
    }
    let dir = TheadResponder::shim_dir(std::path::Path::new(library_dir));
    let missing: Vec<String> = std::iter::once(accel_backend::chores::PRELOAD_FILE)
        .chain(STAGED)
        .map(|f| dir.join(f).display().to_string())
        .filter(|p| !host.exists(p))
        .collect();
    if missing.is_empty() {
        Check::ok(
            "slicing-library",
            format!(
                "{} holds the shim pair, ppu-monitor and ld.so.preload",
                dir.display()
            ),
        )
    } else {
        Check::warn(
            "slicing-library",
            format!("{} not staged: slices are not offered", missing.join(", ")),
            "let the device manager's init container stage <library-dir>/thead",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_backend::doctor::Status;
    use accel_core::Manufacturer;
    use accel_core::inventory::{Accelerator, PartitionProfile, Source};

    fn card(index: u32, profiles: &[&str]) -> Accelerator {
        let mut a = Accelerator::new(index, Source::Driver);
        a.grantable = Grantable::PartitionsOnly;
        a.partition_profiles = profiles
            .iter()
            .map(|name| PartitionProfile {
                name: name.to_string(),
                id: 5,
                memory_mib: None,
                instances_total: None,
                instances_free: None,
                multiprocessors: None,
                placements: Vec::new(),
            })
            .collect();
        a
    }

    #[test]
    fn mig_cards_with_profiles_pass_and_one_without_warns() {
        let mut section = ManufacturerInventory::empty(Manufacturer::Thead);
        section.accelerators = vec![card(14, &["8g.96gb", "4g.48gb"]), card(15, &["4g.48gb"])];
        let served = mig_mode(&section);
        assert_eq!(served.status, Status::Ok);
        assert_eq!(
            served.reason,
            "PPU(s) in MIG mode serve partitions: 14 (8g.96gb, 4g.48gb); 15 (4g.48gb)"
        );
        section.accelerators[1].partition_profiles.clear();
        let barren = mig_mode(&section);
        assert_eq!(barren.status, Status::Warn);
        assert!(
            barren.reason.starts_with("PPU(s) 15 are in MIG mode but"),
            "{}",
            barren.reason
        );
    }
}
