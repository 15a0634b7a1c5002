//! amdgpu faults in kernel log text, the AMD counterpart of NVIDIA's XID lines.
//!
//! The driver has no single fault code: a fault is recognised by its message. Four kinds are
//! read, each with the device it names (when it names one) and the process a page fault or a
//! ring timeout is attributed to (the line after the header):
//! - `ras-uncorrectable`: `uncorrectable hardware error(…) detected!`, and an ACA bank dump's
//!   `[Hardware Error]: aca entry[n].STATUS=` line — **hardware**;
//! - `gpu-reset`: `GPU reset begin!` — the whole device was reset and every tenant's VRAM is lost
//!   — **hardware**;
//! - `ring-timeout`: `ring <name> timeout` — a job hung; its ring reset recovers the device or
//!   escalates to a GPU reset (its own event) — **workload**;
//! - `page-fault`: `[gfxhub…]`/`[mmhub…]` `page fault` — a process touched memory it does not
//!   own — **workload**.
//!
//! Every prefix the fixtures show is tolerated (monotonic, ctime, syslog ISO, journalctl, none;
//! HAZARDS.md items 33–35); decode and continuation lines are skipped.
//!
//! Behind the seam ([`AmdFaults`], accel-backend's `FaultClassifier`) the kinds become the
//! daemon's conditions: the hardware ones take the accelerator out of service, the workload's
//! raise a condition only. A ring timeout is the workload's (the job hung; amdgpu's ring reset
//! usually recovers it); when the ring reset does not, the driver resets the GPU and that
//! `GPU reset begin!` is its own, hardware, event, so "a ring timeout followed by a reset"
//! takes the accelerator out of service through the reset. The daemon's streaming scanner
//! reports a fault at its header line: a process named only on the next record shows in
//! `xids` (which reads whole text), not in the condition.

use accel_backend::health::{FaultClass, FaultClassifier, FaultScanner, KernelFault};
use accel_core::Manufacturer;
use accel_core::busid::BusId;
use serde::Serialize;

/// The kind of an amdgpu fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    RasUncorrectable,
    GpuReset,
    RingTimeout,
    PageFault,
}

impl FaultKind {
    /// The condition name it raises (`AmdRasUncorrectable` …).
    pub fn condition(self) -> &'static str {
        match self {
            FaultKind::RasUncorrectable => "AmdRasUncorrectable",
            FaultKind::GpuReset => "AmdGpuReset",
            FaultKind::RingTimeout => "AmdRingTimeout",
            FaultKind::PageFault => "AmdPageFault",
        }
    }

    /// Whether the fault is the hardware's (the accelerator is taken out of service) rather
    /// than a workload's (a condition only).
    pub fn is_hardware(self) -> bool {
        matches!(self, FaultKind::RasUncorrectable | FaultKind::GpuReset)
    }

    /// The seam's class of the kind.
    pub fn class(self) -> FaultClass {
        if self.is_hardware() {
            FaultClass::Hardware
        } else {
            FaultClass::Application
        }
    }

    const ALL: [FaultKind; 4] = [
        FaultKind::RasUncorrectable,
        FaultKind::GpuReset,
        FaultKind::RingTimeout,
        FaultKind::PageFault,
    ];
}

/// One fault in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AmdFault {
    pub kind: FaultKind,
    /// The device the line names; `None` for a log without one (`drmn0:` on FreeBSD).
    pub bus_id: Option<BusId>,
    pub pid: Option<u32>,
    pub process: Option<String>,
    /// The driver's text after the device tag.
    pub message: String,
    /// The 1-based line number in the text.
    pub line: usize,
}

/// The device tag and the message after it, for a line the amdgpu driver wrote.
fn split_line(line: &str) -> Option<(Option<BusId>, &str)> {
    if let Some(at) = line.find("amdgpu ") {
        let rest = &line[at + "amdgpu ".len()..];
        let (tag, message) = rest.split_once(": ")?;
        let bus: BusId = tag.parse().ok()?;
        let message = message.trim_start();
        let message = message.strip_prefix("amdgpu: ").unwrap_or(message);
        let message = message.strip_prefix("{1}").unwrap_or(message);
        return Some((Some(bus), message));
    }
    if let Some(at) = line.find("drmn") {
        let rest = &line[at..];
        let (tag, message) = rest.split_once(": ")?;
        if tag[4..].chars().all(|c| c.is_ascii_digit()) {
            return Some((None, message.trim_start()));
        }
    }
    None
}

/// `pid N` after `word` in `text`: the name between (possibly empty) and the pid.
fn process_of(text: &str) -> Option<(Option<String>, Option<u32>)> {
    let lower = text.to_ascii_lowercase();
    let at = lower.find("process ")?;
    let rest = &text[at + "process ".len()..];
    let pid_at = rest.find("pid ")?;
    let name = rest[..pid_at].trim();
    let pid = rest[pid_at + 4..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|p| p.parse().ok());
    let name = (!name.is_empty()).then(|| name.to_string());
    Some((name, pid))
}

fn kind_of(message: &str) -> Option<FaultKind> {
    if message.contains("uncorrectable hardware error")
        || (message.contains("[Hardware Error]: aca entry") && message.contains(".STATUS="))
    {
        Some(FaultKind::RasUncorrectable)
    } else if message.starts_with("GPU reset begin") {
        Some(FaultKind::GpuReset)
    } else if message.starts_with("ring ") && message.contains(" timeout") {
        Some(FaultKind::RingTimeout)
    } else if message.starts_with('[') && message.contains("page fault") {
        Some(FaultKind::PageFault)
    } else {
        None
    }
}

impl AmdFault {
    /// The fault as the seam's record takes it; `line` is the source text.
    pub fn to_kernel_fault(&self, line: &str) -> KernelFault {
        KernelFault {
            manufacturer: Manufacturer::Amd,
            condition: self.kind.condition().to_string(),
            code: None,
            bus_id: self.bus_id,
            pid: self.pid,
            process: self.process.clone(),
            message: self.message.clone(),
            line: line.to_string(),
            class: self.kind.class(),
        }
    }
}

/// The fault one kernel message (a `/dev/kmsg` record, or one log line) opens, if any; its
/// process only when the same line names it.
pub fn parse_message(message: &str) -> Option<AmdFault> {
    message.lines().find_map(|line| {
        let (bus_id, text) = split_line(line)?;
        let kind = kind_of(text)?;
        let (process, pid) = if kind == FaultKind::PageFault {
            process_of(text).unwrap_or((None, None))
        } else {
            (None, None)
        };
        Some(AmdFault {
            kind,
            bus_id,
            pid,
            process,
            message: text.trim_end().to_string(),
            line: 1,
        })
    })
}

/// AMD's kernel-log faults behind the seam: the amdgpu messages above, classified by kind
/// (no setting moves them: the kinds are few and their owners clear).
#[derive(Debug, Clone, Copy, Default)]
pub struct AmdFaults;

/// The streaming side of [`AmdFaults`]: one message at a time, no memory.
#[derive(Debug, Clone, Copy, Default)]
pub struct AmdScanner;

impl FaultScanner for AmdScanner {
    fn push(&mut self, message: &str) -> Option<KernelFault> {
        parse_message(message).map(|f| f.to_kernel_fault(message))
    }
}

impl FaultClassifier for AmdFaults {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Amd
    }

    fn scanner(&self) -> Box<dyn FaultScanner> {
        Box::new(AmdScanner)
    }

    fn parse_text(&self, text: &str) -> Vec<KernelFault> {
        let lines: Vec<&str> = text.lines().collect();
        parse(text)
            .iter()
            .map(|f| {
                let line = lines.get(f.line.saturating_sub(1)).copied().unwrap_or("");
                f.to_kernel_fault(line)
            })
            .collect()
    }

    fn class_of(&self, condition: &str, _code: Option<u32>) -> Option<FaultClass> {
        FaultKind::ALL
            .iter()
            .find(|k| k.condition() == condition)
            .map(|k| k.class())
    }
}

/// Every amdgpu fault in `text`, in order.
pub fn parse(text: &str) -> Vec<AmdFault> {
    let mut out: Vec<AmdFault> = Vec::new();
    // The fault still waiting for its process line, by index into `out`.
    let mut awaiting: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let Some((bus_id, message)) = split_line(line) else {
            continue;
        };
        if let Some(kind) = kind_of(message) {
            let (process, pid) = if kind == FaultKind::PageFault {
                process_of(message).unwrap_or((None, None))
            } else {
                (None, None)
            };
            out.push(AmdFault {
                kind,
                bus_id,
                pid,
                process,
                message: message.trim_end().to_string(),
                line: n + 1,
            });
            awaiting = matches!(kind, FaultKind::PageFault | FaultKind::RingTimeout)
                .then(|| out.len() - 1)
                .filter(|i| out[*i].pid.is_none());
            continue;
        }
        if let Some(i) = awaiting.take()
            && out[i].bus_id == bus_id
            && let Some((process, pid)) = process_of(message)
        {
            out[i].process = process;
            out[i].pid = pid;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_timeout_takes_the_process_of_the_next_line() {
        let log = "[  312.522692] amdgpu 0000:28:00.0: ring gfx_0.0.0 timeout, signaled seq=57638, emitted seq=57641\n\
                   [  312.522700] amdgpu 0000:28:00.0:  Process cosmic-comp pid 2288 thread cosmic-com:cs0 pid 2316\n\
                   [  312.774536] amdgpu 0000:28:00.0: GPU reset begin!. Source:  1\n";
        let faults = parse(log);
        assert_eq!(faults.len(), 2);
        assert_eq!(faults[0].kind, FaultKind::RingTimeout);
        assert_eq!(faults[0].pid, Some(2288));
        assert_eq!(faults[0].process.as_deref(), Some("cosmic-comp"));
        assert_eq!(faults[1].kind, FaultKind::GpuReset);
        assert!(faults[1].kind.is_hardware());
        assert_eq!(faults[1].bus_id.unwrap().sysfs(), "0000:28:00.0");
    }

    #[test]
    fn the_seams_classifier_streams_one_record_at_a_time() {
        let mut scanner = AmdFaults.scanner();
        let ras = "amdgpu 0000:68:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!";
        let fault = scanner.push(ras).unwrap();
        assert_eq!(fault.condition, "AmdRasUncorrectable");
        assert_eq!(fault.class, FaultClass::Hardware);
        assert_eq!(fault.bus_id.unwrap().sysfs(), "0000:68:00.0");
        assert_eq!(fault.line, ras);
        let fault = scanner
            .push("amdgpu 0000:c6:00.0: amdgpu: [gfxhub0] no-retry page fault (src_id:0 ring:24 vmid:3 pasid:32769)")
            .unwrap();
        assert_eq!(
            (fault.condition.as_str(), fault.class),
            ("AmdPageFault", FaultClass::Application)
        );
        // The process line and the decode lines that follow are no faults of their own.
        assert!(scanner.push("amdgpu 0000:c6:00.0: amdgpu:  for process pt_main_thread pid 12924 thread pt_main_thread pid 12924)").is_none());
        assert!(
            scanner
                .push("amdgpu 0000:c6:00.0: amdgpu: VM_L2_PROTECTION_FAULT_STATUS:0x00301031")
                .is_none()
        );
        assert_eq!(
            AmdFaults.class_of("AmdGpuReset", None),
            Some(FaultClass::Hardware)
        );
        assert_eq!(
            AmdFaults.class_of("AmdRingTimeout", None),
            Some(FaultClass::Application)
        );
        assert_eq!(AmdFaults.class_of("Xid79", Some(79)), None);
    }

    #[test]
    fn lines_of_other_drivers_are_not_faults() {
        assert!(parse("[ 1.0] nvidia 0000:01:00.0: GPU reset begin!\nrandom text\n").is_empty());
    }
}
