//! Hardware partitions (NVIDIA MIG; T-Head's and Hygon's MIG-named partitioning): the seam the
//! partitioned family will call to materialise and destroy an instance on an accelerator the
//! allocator chose. No backend implements it yet; a backend without it offers no
//! `.partitioned` pool.

use accel_core::ledger::Seat;

/// Why a partition could not be made or taken back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{accelerator}: {reason}")]
pub struct PartitionError {
    /// The accelerator's UUID or index.
    pub accelerator: String,
    pub reason: String,
}

/// One manufacturer's partitioner.
pub trait Partitioner: Send + Sync {
    /// Materialises one instance of `profile` on `accelerator`; answers the instance's id.
    fn create(&self, accelerator: &Seat, profile: &str) -> Result<String, PartitionError>;
    /// Destroys the instance `partition` on `accelerator`.
    fn destroy(&self, accelerator: &Seat, partition: &str) -> Result<(), PartitionError>;
}
