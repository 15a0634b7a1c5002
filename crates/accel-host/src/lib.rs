//! The edge to the machine: files under a root, programs with deadlines (and [`run_bounded`], the
//! one way a vendor tool's failure is told), the PCI bus, the kernel log.
//!
//! Everything that touches the node goes through this crate, behind small traits, so that every
//! reader runs against a recorded host in tests. No literal `/sys` or `/proc` appears outside
//! [`DEFAULT_ROOT`]-relative paths.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod atomic;
pub mod bounded;
pub mod commands;
pub mod drm;
pub mod host;
pub mod kfd;
pub mod kmsg;
pub mod pci;
pub mod realpath;
pub mod record;
pub mod recording;
mod sysfs;
pub mod writes;

pub use atomic::{AtomicWriteError, STATE_FILE_MODE, write_atomic};
pub use bounded::{NOT_FOUND_STATUS, RunFailure, run_answered, run_bounded};
pub use commands::{
    COMMANDS_DIR, CommandError, CommandOutput, Commands, HOST_SEARCH_PATH, HostTools,
    RecordedCommands, ReplayLoadError, SystemCommands, TIMED_OUT_MARKER, ToolPlaces,
};
pub use host::{DEFAULT_ROOT, DeviceNumber, EntryKind, FsHost, Host, HostError, Modified};
pub use kmsg::{
    ChannelKernelLog, KMSG_PATH, KernelLog, KernelLogEntry, KmsgError, KmsgReader, KmsgRecord,
    RecordSource,
};
pub use pci::{
    DEFAULT_PCI_CLASS_PREFIXES, PCI_CLASS_PREFIXES_ENV, PCI_DEVICES_DIR, PciClassPrefixes,
    PciError, PciFunction, PciScan, PciSetFingerprint, pci_set_fingerprint, scan_pci,
};
pub use record::{CommandRecord, ROOT_DIR, RecordError, Recorder};
pub use recording::{HostRoot, MARK_FILE, Mark, MarkError};
pub use writes::{FsWrites, HostWrites, RecordingWrites, WriteError};
