//! Readers of nvidia-smi's outputs: pure functions from the text a command printed to typed data.
//!
//! This module tree owns the formats (`-q -x` XML, `--format=csv`, `-L`, `topo -m`, the `mig`
//! listings) and the exact argv of the queries whose output it reads. It must not run
//! nvidia-smi, read the machine or merge facts into the inventory: the snapshot runner and
//! enrich do that. Every reader tolerates what it does not recognise (absent, not an error) and
//! errs only when the input is not that format at all; none panics on any input.

pub mod csv;
pub mod list;
pub mod topo;
pub mod value;
pub mod xml;

/// The `nvidia-smi mig` listings, in the dialect `ppu-smi` shares ([`accel_backend::mig_cli`]),
/// and the argv of the node-wide ones the detector runs.
pub mod mig {
    pub use accel_backend::mig_cli::listing::*;

    /// `nvidia-smi mig -lgip`.
    pub const PROFILES_ARGV: &[&str] = &["nvidia-smi", "mig", "-lgip"];
    /// `nvidia-smi mig -lgipp`.
    pub const PLACEMENTS_ARGV: &[&str] = &["nvidia-smi", "mig", "-lgipp"];
    /// `nvidia-smi mig -lgi`.
    pub const GPU_INSTANCES_ARGV: &[&str] = &["nvidia-smi", "mig", "-lgi"];
    /// `nvidia-smi mig -lci`.
    pub const COMPUTE_INSTANCES_ARGV: &[&str] = &["nvidia-smi", "mig", "-lci"];
}
