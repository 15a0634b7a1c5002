//! Hygon MIG's vendor calls: `hy-smi mig`, which mirrors `nvidia-smi mig` flag for flag (the
//! described system's Hygon MIG page says so; spec §6.6 names `-dci`/`-dgi` with `-i <card>`),
//! so it is one more tool of [`accel_backend::mig_cli`]'s dialect: `-lgip`, `-lgipp`,
//! `-cgi <id>:<start> -C`, `-lgi`, `-lci`, `-dci`, `-dgi`, every call with `-i <index>`.
//! What is Hygon's:
//!
//! - `-i` is the card's index in the driver's multi-instance numbering, the `N` of the
//!   registry's `dev<N>` file, which this build takes to be the detector's index (cards in bus
//!   order; the registry's `dev<N>` files are in the same order on the measured host);
//! - the MIG UUID of a compute instance is in no listing (the multi-instance library has no
//!   UUID call, spec §6.2): it is the `mig_uuid:` line of the driver's registry file
//!   `/etc/dmi_mig_config/ci/dev<N>gi<G>ci<C>.conf`, read on the node's files
//!   ([`Partitioner::on_host`](accel_backend::Partitioner::on_host));
//! - busy: no Hygon listing is known to place a process on a GPU instance, so none is reported
//!   busy here; the driver itself refuses to destroy an instance in use
//!   (`The device is exist and may be in use.`, spec §6.5), which the destroy reads as in use
//!   and leaves for the next pass;
//! - the ownership record is the described system's marker, `hygon-mig-<card UUID>.json` in the
//!   container's directory (spec §6.4).
//!
//! None of `hy-smi mig`'s listings is in a capture: their shape is nvidia-smi's, by the
//! flag-for-flag statement, and unmeasured.

use std::collections::BTreeMap;
use std::sync::Arc;

use accel_backend::mig_cli::partitioner::{Cli, CliPartitioner, MigTool};
use accel_backend::partition::{
    MarkerSpelling, PartitionError, PartitionErrorKind, PartitionGpu, RecordLayout,
};
use accel_host::Host;

use crate::registry;

/// The detector's reading of every card's profiles (`hy-smi mig -lgip`).
pub const LGIP_ARGV: &[&str] = &["hy-smi", "mig", "-lgip"];
/// ... and of their placements (`hy-smi mig -lgipp`).
pub const LGIPP_ARGV: &[&str] = &["hy-smi", "mig", "-lgipp"];

/// `hy-smi mig`, one card at a time.
pub type HySmiPartitioner = CliPartitioner<HySmi>;

/// The prefix of Hygon's ownership marker, `hygon-mig-<card UUID>.json` (spec §6.4).
pub const MARKER_PREFIX: &str = "hygon-mig-";

/// The marker's key for the card's PCI address (spec §6.4).
pub const PCI_BUS_ID: &str = "pciBusID";
/// The marker's key for the partition's registry file (spec §6.4).
pub const CONF_PATH: &str = "confPath";

/// The value prefix a container selects its partition with (`DMI_MIG_VISIBLE_DEVICE`): a bare
/// UUID silently selects the first instance (spec §6.3).
pub const MIG_PREFIX: &str = "MIG-";

/// hy-smi's side of the MIG dialect; `registry` reads the driver's registry files (none until
/// the partitioner is put on the node's files).
#[derive(Clone, Default)]
pub struct HySmi {
    registry: Option<Arc<dyn Host>>,
}

impl std::fmt::Debug for HySmi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HySmi")
            .field(
                "registry",
                &self.registry.as_ref().map(|h| h.root().to_path_buf()),
            )
            .finish()
    }
}

/// A profile name as published (spec §6.1, `NormalizePartitionedProfileName`): lower case.
pub fn published_profile(listed: &str) -> String {
    listed.to_ascii_lowercase()
}

fn same(profile: &str) -> String {
    profile.to_string()
}

/// The registry file of compute instance `ci` of GPU instance `gi` on card `dev`.
pub fn conf_path(dev: u32, gi: u32, ci: u32) -> String {
    format!("{}/dev{dev}gi{gi}ci{ci}.conf", registry::CI_DIR)
}

/// `MIG-<uuid>` of a registry's `mig_uuid` value (a prefix it already carries is kept once).
pub fn mig_id(uuid: &str) -> String {
    match uuid.get(..4) {
        Some(p) if p.eq_ignore_ascii_case(MIG_PREFIX) => format!("{MIG_PREFIX}{}", &uuid[4..]),
        _ => format!("{MIG_PREFIX}{uuid}"),
    }
}

impl HySmi {
    /// A tool reading the registry on `host`.
    pub fn on(host: Arc<dyn Host>) -> HySmi {
        HySmi {
            registry: Some(host),
        }
    }
}

impl MigTool for HySmi {
    fn program(&self) -> &'static str {
        "hy-smi"
    }

    fn record_layout(&self) -> RecordLayout {
        RecordLayout::PodMarker(MarkerSpelling {
            prefix: MARKER_PREFIX,
            vendor: same,
            published: same,
            required: &[PCI_BUS_ID, CONF_PATH],
        })
    }

    /// The card's PCI address (the registry's `dev<N>`) and the instance's registry file.
    fn marker_facts(
        &self,
        gpu: &PartitionGpu,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<Vec<(&'static str, String)>, PartitionError> {
        let unreadable =
            |why: String| PartitionError::new(gpu, PartitionErrorKind::Unreadable, why);
        let Some(host) = &self.registry else {
            return Err(unreadable(format!(
                "the card's PCI address is in the driver's registry {}, and this partitioner reads no node files",
                registry::DIR
            )));
        };
        let dev = format!("{}/dev{}", registry::DIR, gpu.index);
        let text = host
            .read_to_string(&dev)
            .map_err(|e| unreadable(format!("its registry entry: {e}")))?;
        let bus = registry::parse_dev(&text)
            .ok_or_else(|| unreadable(format!("registry file {dev} names no PCI address")))?;
        Ok(vec![
            (PCI_BUS_ID, bus.sysfs()),
            (
                CONF_PATH,
                conf_path(gpu.index, gpu_instance, compute_instance),
            ),
        ])
    }

    fn profile_name(&self, listed: &str) -> String {
        published_profile(listed)
    }

    fn on_host(&self, host: Arc<dyn Host>) -> Option<Self> {
        Some(HySmi::on(host))
    }

    fn mig_uuids(
        &self,
        _cli: &Cli<'_>,
        gpu: &PartitionGpu,
        computes: &[(u32, u32)],
    ) -> Result<BTreeMap<(u32, u32), String>, PartitionError> {
        let unreadable =
            |why: String| PartitionError::new(gpu, PartitionErrorKind::Unreadable, why);
        let Some(host) = &self.registry else {
            return Err(unreadable(format!(
                "the MIG UUIDs are in the driver's registry {}, and this partitioner reads no node files",
                registry::DIR
            )));
        };
        let mut uuids = BTreeMap::new();
        for &(gi, ci) in computes {
            let path = conf_path(gpu.index, gi, ci);
            let text = host.read_to_string(&path).map_err(|e| {
                unreadable(format!(
                    "GPU instance {gi} compute instance {ci}: its registry file: {e}"
                ))
            })?;
            let uuid = registry::parse_mig_uuid(&text).ok_or_else(|| {
                unreadable(format!(
                    "registry file {path} carries no mig_uuid: line: its MIG UUID is unknown"
                ))
            })?;
            uuids.insert((gi, ci), mig_id(&uuid));
        }
        Ok(uuids)
    }

    /// None known: the driver refuses to destroy a busy instance itself (spec §6.5).
    fn busy(&self, _cli: &Cli<'_>, _gpu: &PartitionGpu) -> Result<Vec<u32>, PartitionError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_paths_and_ids() {
        assert_eq!(published_profile("2G.15GB"), "2g.15gb");
        assert_eq!(conf_path(3, 4, 0), "/etc/dmi_mig_config/ci/dev3gi4ci0.conf");
        assert_eq!(mig_id("5f0c-aa"), "MIG-5f0c-aa");
        assert_eq!(mig_id("mig-5f0c-aa"), "MIG-5f0c-aa");
        assert_eq!(mig_id("MIG-5f0c-aa"), "MIG-5f0c-aa");
    }
}
