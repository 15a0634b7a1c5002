//! Kernel-log faults behind the seam: what each manufacturer's driver writes when an
//! accelerator fails, recognised by the manufacturer ([`FaultClassifier`]), recorded by the
//! manufacturer-neutral fault record ([`crate::faults`]).
//!
//! A backend that reads the kernel log provides a [`FaultClassifier`]: a fresh streaming
//! [`FaultScanner`] per reader (the daemon pushes every `/dev/kmsg` record through one), a
//! parser of saved log text (`device-manager xids`), and the class of a recorded condition
//! under the settings in force now (they may change across a restart in the same boot).
//! NVIDIA's is the XID scanner (`Xid<n>`, `FallenOffBus`); AMD's the amdgpu message
//! classifier (`AmdRasUncorrectable`, `AmdAcaDeferred`, `AmdAcaCorrected`, `AmdGpuReset`,
//! `AmdRingTimeout`, `AmdPageFault`).
//! What a class means is the same for every manufacturer (DESIGN.md, "Health"): a
//! hardware-class fault takes the accelerator out of service until a reset that leaves it
//! healthy or a new boot; an application-class one (the workload's) raises a condition only.

use accel_core::{BusId, Manufacturer};
use serde::Serialize;

pub use accel_core::devices::FaultClass;

/// One fault a backend recognised in the kernel log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KernelFault {
    pub manufacturer: Manufacturer,
    /// The condition it raises on the accelerator: `Xid79`, `FallenOffBus`,
    /// `AmdRasUncorrectable` …; one condition per accelerator and name.
    pub condition: String,
    /// The driver's numeric code, where it has one (NVIDIA's XID); `None` for AMD.
    pub code: Option<u32>,
    /// The accelerator's bus address, when the line names one (a FreeBSD `drmn0:` line does
    /// not: such a fault is shown by `xids` but attributed to no accelerator).
    pub bus_id: Option<BusId>,
    pub pid: Option<u32>,
    pub process: Option<String>,
    /// The driver's text (after the device tag and code).
    pub message: String,
    /// The source: the whole kernel message or log line(s).
    pub line: String,
    /// Whose fault it is under the settings in force.
    pub class: FaultClass,
}

/// Reads kernel messages one at a time (a `/dev/kmsg` record's text, or one log line) and
/// says which of them is a fault. May remember earlier messages (a report split over
/// records).
pub trait FaultScanner: Send {
    /// The fault in this message, if any.
    fn push(&mut self, message: &str) -> Option<KernelFault>;
}

/// One manufacturer's knowledge of its driver's kernel-log faults.
pub trait FaultClassifier: Send + Sync + std::fmt::Debug {
    /// The manufacturer whose faults this classifier recognises.
    fn manufacturer(&self) -> Manufacturer;
    /// A fresh scanner for one stream of kernel messages.
    fn scanner(&self) -> Box<dyn FaultScanner>;
    /// Every fault in saved kernel-log text (dmesg, journalctl, syslog, a file), in order.
    fn parse_text(&self, text: &str) -> Vec<KernelFault>;
    /// The class of a recorded condition under the settings in force now; `None` for a
    /// condition this manufacturer does not raise (the recorded class is kept).
    fn class_of(&self, condition: &str, code: Option<u32>) -> Option<FaultClass>;
    /// Whether every fault it raises is also counted by the driver's code
    /// (`device_manager_xids_total`: NVIDIA's XIDs, a GPU fallen off the bus without one).
    fn counted_by_code(&self) -> bool {
        false
    }
}
