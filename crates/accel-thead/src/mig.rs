//! T-Head MIG's vendor calls: `ppu-smi mig`, which speaks nvidia-smi's MIG dialect
//! ([`accel_backend::mig_cli`]; the command forms and answers are those of T-Head's PPU-SMI
//! manual, §10: `-lgip`, `-lgipp`, `-cgi <id>:<start> -C`, `-lgi`, `-lci`, `-dci`, `-dgi`).
//! What is T-Head's:
//!
//! - `-i` names a card by its **UUID** (the manual's advice: indexes may change across
//!   restarts), so every row of a `-i` listing is that card's, whatever index it prints;
//! - profile names are published with the separator T-Head leaves out (spec §6.1:
//!   `MIG 4g48gb` → `4g.48gb`; other shapes as printed); a `+` variant is no resource-name
//!   segment and is left out;
//! - MIG UUIDs: `ppu-smi -L` lists a card's MIG devices as `Device <n> (UUID: MIG-…)`, and the
//!   `MIG devices:` table of `ppu-smi` names each device's GPU and compute instance
//!   (`PPU GI CI MIG DEV`); the two are joined by the device number, never by order;
//! - busy: the `Processes:` table of `ppu-smi` (`PPU GI CI PID Type`).
//!
//! - the ownership record is the described system's marker, `thead-mig-<card UUID>.json` in the
//!   container's directory (spec §6.4), its profile in the vendor's spelling;
//! - on the node's files ([`accel_backend::Partitioner::on_host`], as `serve` puts it), the
//!   card is proven **before** any create (spec §6.3 steps 1–2): the two control nodes are
//!   character devices, and `/dev/alixpu_ppu<ordinal>` carries the minor `ppu-smi -q` gives the
//!   card's UUID (the source the detection recorded it from). A card whose node fails is
//!   refused with nothing made: no create and destroy on every try of the kubelet. The
//!   responder proves the node again when it answers (and the capability nodes, whose minors
//!   exist only once the instance does).

use std::collections::BTreeMap;
use std::sync::Arc;

use accel_backend::mig_cli::partitioner::{Cli, CliPartitioner, MigTool, busy_instances};
use accel_backend::partition::{
    MarkerSpelling, PartitionError, PartitionErrorKind, PartitionGpu, RecordLayout,
};
use accel_host::Host;

use crate::devnode::{self, NodeError};
use crate::smi::{self, ListedCard};

use PartitionErrorKind as Kind;

/// `ppu-smi mig`, one card at a time.
pub type PpuSmiPartitioner = CliPartitioner<PpuSmi>;

/// ppu-smi's side of the MIG dialect.
#[derive(Clone, Default)]
pub struct PpuSmi {
    /// The node's files, where a card's device node is proven before a create; `None`: not
    /// put on a host (a bare partitioner proves nothing, as a responder without one).
    host: Option<Arc<dyn Host>>,
}

impl std::fmt::Debug for PpuSmi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PpuSmi")
            .field("proves_nodes", &self.host.is_some())
            .finish()
    }
}

/// A profile name as published (spec §6.1): `<a>g<b>gb` gains the dot T-Head omits
/// (`4g48gb` → `4g.48gb`); any other shape is kept as printed.
pub fn published_profile(listed: &str) -> String {
    let lower = listed.to_ascii_lowercase();
    let dotted = lower.strip_suffix("gb").and_then(|rest| {
        let (a, b) = rest.split_once('g')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
        (digits(a) && digits(b)).then(|| format!("{a}g.{b}gb"))
    });
    dotted.unwrap_or(lower)
}

/// A published profile name in T-Head's spelling, for the ownership marker (spec §6.1: below
/// the API the vendor spelling stays): `<a>g.<b>gb` loses its dot (`4g.48gb` → `4g48gb`);
/// any other shape is kept.
pub fn vendor_profile(published: &str) -> String {
    let undotted = published.strip_suffix("gb").and_then(|rest| {
        let (a, b) = rest.split_once("g.")?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
        (digits(a) && digits(b)).then(|| format!("{a}g{b}gb"))
    });
    undotted.unwrap_or_else(|| published.to_string())
}

/// The prefix of T-Head's ownership marker, `thead-mig-<card UUID>.json` (spec §6.4).
pub const MARKER_PREFIX: &str = "thead-mig-";

impl PpuSmi {
    /// The card of `gpu` in `ppu-smi -L`: by UUID when it has one, else by index.
    fn listed(
        &self,
        cli: &Cli<'_>,
        gpu: &PartitionGpu,
    ) -> Result<(ListedCard, String), PartitionError> {
        let out = cli.output(gpu, smi::LIST_ARGV)?;
        let listed = smi::parse_list(&out.stdout_text())
            .map_err(|e| PartitionError::new(gpu, Kind::Unreadable, e.to_string()))?;
        let card = listed.into_iter().find(|c| match &gpu.uuid {
            Some(uuid) => c.uuid.as_ref() == Some(uuid),
            None => c.index == gpu.index,
        });
        let card = card.ok_or_else(|| {
            PartitionError::new(gpu, Kind::Unreadable, "ppu-smi -L does not list this card")
        })?;
        let table = cli.output(gpu, smi::TABLE_ARGV)?.stdout_text();
        Ok((card, table))
    }

    /// Spec §6.3 steps 1–2 on `host`: the control nodes, then the card's node carrying the
    /// minor `ppu-smi -q` gives its UUID.
    fn prove(
        &self,
        host: &dyn Host,
        cli: &Cli<'_>,
        gpu: &PartitionGpu,
    ) -> Result<(), PartitionError> {
        let refused = |e: NodeError| PartitionError::new(gpu, Kind::Failed, e.to_string());
        devnode::require(host, devnode::CONTROL).map_err(refused)?;
        devnode::require(host, devnode::CONTROL_CTL).map_err(refused)?;
        let Some(uuid) = gpu.uuid.as_deref() else {
            return Err(refused(NodeError::Absent {
                card: format!("at ordinal {}", gpu.index),
            }));
        };
        let out = cli.output(gpu, smi::QUERY_ARGV)?;
        let query = smi::parse_query(&out.stdout_text()).map_err(|e| {
            PartitionError::new(
                gpu,
                Kind::Unreadable,
                format!("{}: {e}", smi::QUERY_ARGV.join(" ")),
            )
        })?;
        let minor = query
            .cards
            .iter()
            .find(|c| c.uuid.as_deref() == Some(uuid))
            .and_then(|c| c.minor);
        devnode::prove_card(host, uuid, gpu.index, minor)
            .map(|_| ())
            .map_err(refused)
    }
}

impl MigTool for PpuSmi {
    fn program(&self) -> &'static str {
        "ppu-smi"
    }

    fn record_layout(&self) -> RecordLayout {
        RecordLayout::PodMarker(MarkerSpelling {
            prefix: MARKER_PREFIX,
            vendor: vendor_profile,
            published: published_profile,
            required: &[],
        })
    }

    fn target(&self, gpu: &PartitionGpu) -> String {
        gpu.uuid.clone().unwrap_or_else(|| gpu.index.to_string())
    }

    /// A `-i <UUID>` listing holds that card's rows only; the index it prints is ppu-smi's.
    fn row_is(&self, _gpu: &PartitionGpu, _row: u32) -> bool {
        true
    }

    fn profile_name(&self, listed: &str) -> String {
        published_profile(listed)
    }

    fn on_host(&self, host: Arc<dyn Host>) -> Option<Self> {
        Some(PpuSmi { host: Some(host) })
    }

    fn before_create(&self, cli: &Cli<'_>, gpu: &PartitionGpu) -> Result<(), PartitionError> {
        match &self.host {
            Some(host) => self.prove(host.as_ref(), cli, gpu),
            None => Ok(()),
        }
    }

    fn mig_uuids(
        &self,
        cli: &Cli<'_>,
        gpu: &PartitionGpu,
        computes: &[(u32, u32)],
    ) -> Result<BTreeMap<(u32, u32), String>, PartitionError> {
        let (card, table) = self.listed(cli, gpu)?;
        let rows: Vec<smi::MigRow> = smi::parse_mig_table(&table)
            .into_iter()
            .filter(|r| r.card == Some(card.index))
            .collect();
        let mut uuids = BTreeMap::new();
        for &(gi, ci) in computes {
            let device = rows
                .iter()
                .find(|r| r.gpu_instance == Some(gi) && r.compute_instance == Some(ci))
                .and_then(|r| r.device);
            let uuid = device.and_then(|d| {
                card.mig
                    .iter()
                    .find(|m| m.device == Some(d))
                    .and_then(|m| m.uuid.clone())
            });
            match (device, uuid) {
                (Some(_), Some(uuid)) => {
                    uuids.insert((gi, ci), uuid);
                }
                (None, _) => {
                    return Err(PartitionError::new(
                        gpu,
                        Kind::Unreadable,
                        format!(
                            "ppu-smi's MIG devices table lists no device for GPU instance {gi} compute instance {ci}: its MIG UUID cannot be paired"
                        ),
                    ));
                }
                (Some(d), None) => {
                    return Err(PartitionError::new(
                        gpu,
                        Kind::Unreadable,
                        format!(
                            "ppu-smi -L lists no MIG device {d} (GPU instance {gi} compute instance {ci}) with a UUID"
                        ),
                    ));
                }
            }
        }
        Ok(uuids)
    }

    fn busy(&self, cli: &Cli<'_>, gpu: &PartitionGpu) -> Result<Vec<u32>, PartitionError> {
        let (card, table) = self.listed(cli, gpu)?;
        let processes = smi::parse_processes(&table);
        busy_instances(
            gpu,
            "ppu-smi",
            processes
                .iter()
                .filter(|p| p.card == Some(card.index) && p.is_compute())
                .map(|p| (p.gpu_instance, p.pid)),
        )
    }
}
