//! amdgpu faults in kernel log text, the AMD counterpart of NVIDIA's XID lines.
//!
//! The driver has no single fault code: a fault is recognised by its message. Four kinds are
//! read, each with the device it names (when it names one) and the process a page fault or a
//! ring timeout is attributed to (the line after the header):
//! - `ras-uncorrectable`: `uncorrectable hardware error(…) detected!`, and an ACA bank dump's
//!   `[Hardware Error]: aca entry[n].STATUS=` line whose status says the error was not corrected
//!   — **hardware**;
//! - `aca-deferred` / `aca-corrected`: an ACA bank dump's STATUS line whose status says the error
//!   was deferred (poisoned data, contained) or corrected — **condition only** (see
//!   [`AcaStatus`]);
//! - `gpu-reset`: `GPU reset begin!` — the whole device was reset and every tenant's VRAM is lost
//!   — **hardware**;
//! - `ring-timeout`: `ring <name> timeout` — a job hung; its ring reset recovers the device or
//!   escalates to a GPU reset (its own event) — **workload**;
//! - `page-fault`: `[gfxhub…]`/`[mmhub…]` `page fault` — a process touched memory it does not
//!   own — **workload**.
//!
//! Every prefix the fixtures show is stripped by accel-host's `kmsg::strip_prefixes`, written once
//! for every vendor (a record header, monotonic, ctime, syslog ISO, journalctl, none; HAZARDS.md
//! items 33–35); decode and continuation lines are skipped.
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
use accel_host::kmsg::strip_prefixes;
use serde::Serialize;

/// The kind of an amdgpu fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    RasUncorrectable,
    AcaDeferred,
    AcaCorrected,
    GpuReset,
    RingTimeout,
    PageFault,
}

impl FaultKind {
    /// The condition name it raises (`AmdRasUncorrectable` …).
    pub fn condition(self) -> &'static str {
        match self {
            FaultKind::RasUncorrectable => "AmdRasUncorrectable",
            FaultKind::AcaDeferred => "AmdAcaDeferred",
            FaultKind::AcaCorrected => "AmdAcaCorrected",
            FaultKind::GpuReset => "AmdGpuReset",
            FaultKind::RingTimeout => "AmdRingTimeout",
            FaultKind::PageFault => "AmdPageFault",
        }
    }

    /// Whether the fault takes the accelerator out of service (the hardware's, uncorrected)
    /// rather than raising a condition only (a workload's fault, or an error the hardware
    /// corrected or contained).
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

    const ALL: [FaultKind; 6] = [
        FaultKind::RasUncorrectable,
        FaultKind::AcaDeferred,
        FaultKind::AcaCorrected,
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
    let line = strip_prefixes(line);
    if let Some(rest) = line.strip_prefix("amdgpu ") {
        let (tag, message) = rest.split_once(": ")?;
        let bus: BusId = tag.parse().ok()?;
        let message = message.trim_start();
        let message = message.strip_prefix("amdgpu: ").unwrap_or(message);
        let message = message.strip_prefix("{1}").unwrap_or(message);
        return Some((Some(bus), message));
    }
    if line.starts_with("drmn") {
        let (tag, message) = line.split_once(": ")?;
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

/// The bits of an ACA (MCA) bank's STATUS register the classification reads: the standard
/// MCA_STATUS positions (the Linux kernel's `MCI_STATUS_*`, amdgpu's `ACA_REG__STATUS__*`).
pub mod status_bits {
    /// VAL: the bank holds a logged error.
    pub const VALID: u64 = 1 << 63;
    /// UC: the error was not corrected.
    pub const UNCORRECTED: u64 = 1 << 61;
    /// PCC: the processor (here the accelerator's) context is corrupt.
    pub const CONTEXT_CORRUPT: u64 = 1 << 57;
    /// Deferred: an uncorrected error the hardware contained, reported without an exception.
    pub const DEFERRED: u64 = 1 << 44;
    /// Poison: poisoned data was consumed (a deferred error's consequence).
    pub const POISON: u64 = 1 << 43;
}

/// What an ACA bank's STATUS value says about the error it logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcaStatus {
    /// VAL clear: the bank logs nothing; no fault.
    Invalid,
    /// VAL with UC or PCC: the error was not corrected — the board is out of service.
    Uncorrected,
    /// VAL, neither UC nor PCC, Deferred or Poison: contained (poisoned data, the consumer
    /// told) — a condition.
    Deferred,
    /// VAL and none of the above: corrected — a condition.
    Corrected,
}

impl AcaStatus {
    /// The class of the raw STATUS register value.
    pub fn of(status: u64) -> AcaStatus {
        use status_bits::*;
        if status & VALID == 0 {
            AcaStatus::Invalid
        } else if status & (UNCORRECTED | CONTEXT_CORRUPT) != 0 {
            AcaStatus::Uncorrected
        } else if status & (DEFERRED | POISON) != 0 {
            AcaStatus::Deferred
        } else {
            AcaStatus::Corrected
        }
    }

    /// The fault kind it raises; `None` for an entry that logs nothing.
    pub fn kind(self) -> Option<FaultKind> {
        match self {
            AcaStatus::Invalid => None,
            AcaStatus::Uncorrected => Some(FaultKind::RasUncorrectable),
            AcaStatus::Deferred => Some(FaultKind::AcaDeferred),
            AcaStatus::Corrected => Some(FaultKind::AcaCorrected),
        }
    }
}

/// The STATUS value of an ACA dump line (`… aca entry[00].STATUS=0x98000800003e0000`): `None`
/// when the line is no STATUS line, `Some(Err(text))` when its value is not a 64-bit hex
/// number.
fn aca_status(message: &str) -> Option<Result<u64, &str>> {
    if !message.contains("[Hardware Error]: aca entry") {
        return None;
    }
    let (_, value) = message.split_once(".STATUS=")?;
    let value = value.split_whitespace().next().unwrap_or("");
    let digits = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
        .unwrap_or(value);
    Some(u64::from_str_radix(digits, 16).map_err(|_| value))
}

/// Said once a process: an ACA STATUS value that is no hex number is not a fault.
static UNREADABLE_STATUS_SAID: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

fn kind_of(message: &str) -> Option<FaultKind> {
    if let Some(status) = aca_status(message) {
        return match status {
            Ok(status) => AcaStatus::of(status).kind(),
            Err(value) => {
                if !UNREADABLE_STATUS_SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::debug!(
                        "amdgpu ACA STATUS {value:?} is not a hex register value; the entry is not counted as a fault (said once)"
                    );
                }
                None
            }
        };
    }
    if message.contains("uncorrectable hardware error") {
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

    const ACA: &str =
        "[ 8390.823790] amdgpu 0000:9e:00.0: {1}[Hardware Error]: aca entry[00].STATUS=";

    fn aca_kind(status: &str) -> Option<FaultKind> {
        parse(&format!("{ACA}{status}\n")).first().map(|f| f.kind)
    }

    #[test]
    fn an_aca_entry_is_classified_by_its_status_bits() {
        use status_bits::*;
        // VAL + UC: not corrected — the board's fault.
        let uc = VALID | UNCORRECTED;
        assert_eq!(
            aca_kind(&format!("0x{uc:016x}")),
            Some(FaultKind::RasUncorrectable)
        );
        // VAL + PCC alone is as bad.
        let pcc = VALID | CONTEXT_CORRUPT;
        assert_eq!(
            aca_kind(&format!("0x{pcc:016x}")),
            Some(FaultKind::RasUncorrectable)
        );
        // UC wins over Deferred/Poison when both are set.
        let both = VALID | UNCORRECTED | DEFERRED | POISON;
        assert_eq!(
            aca_kind(&format!("0x{both:016X}")),
            Some(FaultKind::RasUncorrectable)
        );
        // Deferred, or Poison, without UC/PCC: contained — a condition only.
        for bits in [VALID | DEFERRED, VALID | POISON] {
            assert_eq!(
                aca_kind(&format!("0x{bits:016x}")),
                Some(FaultKind::AcaDeferred)
            );
        }
        // VAL alone (plus the bits that say nothing of correction): corrected — a condition.
        assert_eq!(
            aca_kind("0x9000000000000000"),
            Some(FaultKind::AcaCorrected)
        );
        // VAL clear: the bank logs nothing, whatever else is set.
        let invalid = UNCORRECTED | CONTEXT_CORRUPT | DEFERRED;
        assert_eq!(aca_kind(&format!("0x{invalid:016x}")), None);
        assert_eq!(aca_kind("0x0"), None);
        // The real capture (MI300X, legacyrocm-4021): VAL, EN, MISCV and Poison (bit 43),
        // no UC, no PCC — a deferred error, not an uncorrectable one.
        assert_eq!(aca_kind("0x98000800003e0000"), Some(FaultKind::AcaDeferred));
        assert_eq!(AcaStatus::of(0x9800_0800_003e_0000), AcaStatus::Deferred);
    }

    #[test]
    fn an_aca_status_that_is_no_hex_number_is_no_fault() {
        for bad in ["", "0x", "zz", "0x98000800003e0000ff", "-1", "0x9800_0800"] {
            assert_eq!(aca_kind(bad), None, "{bad:?}");
            assert!(AmdScanner.push(&format!("{ACA}{bad}")).is_none(), "{bad:?}");
        }
        // The dump's other registers are no faults either.
        assert!(
            parse(
                "amdgpu 0000:9e:00.0: {1}[Hardware Error]: aca entry[00].ADDR=0x0000000000000000\n"
            )
            .is_empty()
        );
    }

    #[test]
    fn only_an_uncorrected_aca_entry_is_the_hardwares() {
        let deferred = AmdScanner
            .push(&format!("{ACA}0x98000800003e0000"))
            .unwrap();
        assert_eq!(
            (deferred.condition.as_str(), deferred.class),
            ("AmdAcaDeferred", FaultClass::Application)
        );
        let uncorrected = AmdScanner
            .push(&format!("{ACA}0xb000000000000000"))
            .unwrap();
        assert_eq!(
            (uncorrected.condition.as_str(), uncorrected.class),
            ("AmdRasUncorrectable", FaultClass::Hardware)
        );
        assert_eq!(uncorrected.bus_id.unwrap().sysfs(), "0000:9e:00.0");
        let corrected = AmdScanner
            .push(&format!("{ACA}0x9000000000000000"))
            .unwrap();
        assert_eq!(
            (corrected.condition.as_str(), corrected.class),
            ("AmdAcaCorrected", FaultClass::Application)
        );
        for (condition, class) in [
            ("AmdAcaDeferred", FaultClass::Application),
            ("AmdAcaCorrected", FaultClass::Application),
            ("AmdRasUncorrectable", FaultClass::Hardware),
        ] {
            assert_eq!(AmdFaults.class_of(condition, None), Some(class));
        }
    }

    #[test]
    fn lines_of_other_drivers_are_not_faults() {
        assert!(parse("[ 1.0] nvidia 0000:01:00.0: GPU reset begin!\nrandom text\n").is_empty());
    }
}
