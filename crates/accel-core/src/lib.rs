//! The pure domain of device-manager: what an accelerator is, what a node has, how it is named
//! and labelled. No I/O, no async, no filesystem: a function that needs the machine takes the data
//! the machine gave, and the caller (accel-host, a vendor crate, the binary) reads the machine.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod admission;
pub mod busid;
pub mod capacity;
pub mod cpukey;
pub mod devices;
pub mod health;
pub mod interfaces;
pub mod inventory;
pub mod labels;
pub mod ledger;
pub mod manufacturer;
pub mod pool;
pub mod quantity;
pub mod resources;
pub mod units;

pub use busid::BusId;
pub use inventory::{Accelerator, DetectError, Detection, Inventory, ManufacturerInventory};
pub use manufacturer::Manufacturer;
