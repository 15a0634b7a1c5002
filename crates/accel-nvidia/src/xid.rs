//! XIDs: the NVIDIA driver's error reports in the kernel log, read from one record or from log
//! text (dmesg, `dmesg --ctime`, `--time-format=iso`, `--decode`, journalctl, syslog, bare), and
//! which of them are the workload's fault rather than the GPU's.
//!
//! The driver writes `NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, <text>` (seed
//! 002, "XIDs from the kernel log"); the pid/name part has four forms and is absent for some
//! codes (HAZARDS.md 16–18). It also reports "GPU has fallen off the bus" without any XID, in a
//! three-line message: that is an event of its own ([`XidEvent::xid`] is `None`). Everything
//! else is not an XID, however close it looks (`GPU at PCI:…: GPU-<uuid>`, GSP RPC tables).
//! This module parses text; it must not read the machine or decide what a GPU's health is.

use std::collections::BTreeSet;

use accel_backend::health::{FaultClassifier, FaultScanner, KernelFault};
use accel_core::{BusId, Manufacturer};
use accel_host::kmsg::strip_prefixes;
use serde::Serialize;

/// The setting naming the application-class XIDs (comma list of codes; empty for none).
pub const XID_APPLICATION_ENV: &str = "GPUSTACK_NVIDIA_XID_APPLICATION";
/// The setting naming XIDs that are always hardware-class, even when also listed as
/// application-class (comma list of codes; default none).
pub const XID_HARDWARE_ENV: &str = "GPUSTACK_NVIDIA_XID_HARDWARE";
/// The XIDs the field counts as the workload's fault, not the GPU's (DESIGN.md, "Health"):
/// 13 graphics engine exception, 31 MMU fault, 43 channel stopped, 45 preemptive cleanup,
/// 68 video decoder exception, 109 context switch timeout.
pub const DEFAULT_APPLICATION_XIDS: [u32; 6] = [13, 31, 43, 45, 68, 109];

/// One XID (or fallen-off-the-bus) report found in the kernel log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct XidEvent {
    /// The XID code; `None` for "GPU has fallen off the bus" reported without one.
    pub xid: Option<u32>,
    /// The GPU's bus address (serialised in NVML's form, `00000000:18:00.0`).
    pub bus_id: BusId,
    /// The process the driver names, when it names one (`pid='<unknown>'` is `None`).
    pub pid: Option<u32>,
    /// The process's command name, when the driver names one.
    pub process: Option<String>,
    /// The driver's text after the code and the pid/name fields.
    pub message: String,
    /// The source: the whole kernel message or log line(s), prefix included.
    pub line: String,
    /// The earlier XID this one names as its cause (`… caused by previous Xid 149`).
    #[serde(skip)]
    pub caused_by: Option<u32>,
}

impl XidEvent {
    /// The condition this event raises: `Xid<n>`, or `FallenOffBus` when there is no code.
    pub fn condition(&self) -> String {
        match self.xid {
            Some(code) => format!("Xid{code}"),
            None => FALLEN_OFF_BUS_CONDITION.to_string(),
        }
    }

    /// A one-line summary for health reasons and logs: `Xid 79: GPU has fallen off the bus`.
    pub fn summary(&self) -> String {
        match self.xid {
            Some(code) => format!("Xid {code}: {}", self.message),
            None => format!("GPU has fallen off the bus: {}", self.message),
        }
    }
}

/// The condition raised by "GPU has fallen off the bus" reported without an XID.
pub const FALLEN_OFF_BUS_CONDITION: &str = "FallenOffBus";

const FALLEN_OFF: &str = "fallen off the bus";

/// Parses one kernel message (a `/dev/kmsg` record's text, or a log line with any of the known
/// prefixes). A multi-line message (lines joined by `\n`) is read whole.
pub fn parse_message(text: &str) -> Option<XidEvent> {
    let body = strip_prefixes(text.lines().next().unwrap_or(""));
    let nvrm = body.strip_prefix("NVRM:")?.trim_start();
    if let Some(rest) = nvrm.strip_prefix("Xid") {
        return parse_xid(rest.trim_start(), text);
    }
    // Not an XID: the only other NVRM report that is an event is the fallen-off-the-bus one.
    let joined = joined_message(text);
    if !joined.contains(FALLEN_OFF) {
        return None;
    }
    let bus_id = first_bus_id(&joined)?;
    Some(XidEvent {
        xid: None,
        bus_id,
        pid: None,
        process: None,
        message: joined,
        line: text.to_string(),
        caused_by: None,
    })
}

/// The lines of a multi-line message without their prefixes and `NVRM:` tags, joined by
/// spaces: `The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed … to commands.`
fn joined_message(text: &str) -> String {
    let parts: Vec<&str> = text
        .lines()
        .map(|line| {
            let line = strip_prefixes(line.trim_start());
            line.strip_prefix("NVRM:").unwrap_or(line).trim()
        })
        .filter(|part| !part.is_empty())
        .collect();
    parts.join(" ")
}

/// `(PCI:0000:18:00): 79, pid=…, name=…, text` after `Xid`.
fn parse_xid(rest: &str, source: &str) -> Option<XidEvent> {
    let inside = rest.strip_prefix('(')?;
    let close = inside.find(')')?;
    // The first word in the parentheses is the bus; a MIG-era driver may add instance words.
    let bus_id = inside[..close].split_whitespace().next()?.parse().ok()?;
    let after = inside[close + 1..].strip_prefix(':')?.trim_start();
    let digits = after.bytes().take_while(u8::is_ascii_digit).count();
    let xid: u32 = after[..digits].parse().ok()?;
    let mut tail = after[digits..].trim_start();
    if !(tail.is_empty() || tail.starts_with(',')) {
        return None;
    }
    tail = tail.trim_start_matches(',').trim_start();

    let mut pid = None;
    let mut process = None;
    if let Some(value) = tail.strip_prefix("pid=") {
        let (field, remainder) = split_field(value);
        pid = field.parse().ok();
        tail = remainder;
        if let Some(value) = tail.strip_prefix("name=") {
            let (field, remainder) = split_field(value);
            if field != "<unknown>" && !field.is_empty() {
                process = Some(field.to_string());
            }
            tail = remainder;
        }
    }
    let message = tail.trim().to_string();
    let caused_by = message.rfind("caused by previous Xid").and_then(|at| {
        message[at + "caused by previous Xid".len()..]
            .trim()
            .parse()
            .ok()
    });
    Some(XidEvent {
        xid: Some(xid),
        bus_id,
        pid,
        process,
        message,
        line: source.to_string(),
        caused_by,
    })
}

/// Splits `value, rest` at the first comma: the field and what follows it.
fn split_field(value: &str) -> (&str, &str) {
    match value.find(',') {
        Some(at) => (value[..at].trim(), value[at + 1..].trim_start()),
        None => (value.trim(), ""),
    }
}

/// The first word of `text` that reads as a bus address (`0000:b3:00.0`, `PCI:0000:b3:00:`).
fn first_bus_id(text: &str) -> Option<BusId> {
    text.split_whitespace()
        .map(|word| word.trim_end_matches([':', ',', '.', ')', ';']))
        .filter(|word| word.contains(':'))
        .find_map(|word| word.parse().ok())
}

/// Finds every event in kernel log text: one line per message, except the indented
/// continuation lines dmesg prints under a multi-line message, which are joined to it. The
/// three lines of a fallen-off-the-bus message printed one per record (each with its prefix)
/// are also read as one event.
pub fn parse_text(text: &str) -> Vec<XidEvent> {
    let mut scanner = XidScanner::default();
    let mut events = Vec::new();
    let mut record: Vec<&str> = Vec::new();
    for line in text.lines() {
        let continues = line.starts_with([' ', '\t']) && !record.is_empty();
        if !continues && !record.is_empty() {
            events.extend(scanner.push(&record.join("\n")));
            record.clear();
        }
        record.push(line);
    }
    if !record.is_empty() {
        events.extend(scanner.push(&record.join("\n")));
    }
    events
}

/// Reads kernel messages one at a time, remembering just enough to join a fallen-off-the-bus
/// report split over separate records (`The NVIDIA GPU <bus>` then, within two records,
/// `fallen off the bus`). The daemon's watcher pushes every record through one scanner.
#[derive(Debug, Default)]
pub struct XidScanner {
    /// The bus and text of a `The NVIDIA GPU <bus>` record, and how many records ago it was.
    opening: Option<(BusId, String, u8)>,
}

impl XidScanner {
    /// The event in this message, if any.
    pub fn push(&mut self, message: &str) -> Option<XidEvent> {
        if let Some(event) = parse_message(message) {
            self.opening = None;
            return Some(event);
        }
        let nvrm = strip_prefixes(message)
            .strip_prefix("NVRM:")
            .map(str::trim_start);
        if let Some(words) = nvrm.and_then(|n| n.strip_prefix("The NVIDIA GPU "))
            && let Some(bus_id) = first_bus_id(words)
        {
            self.opening = Some((bus_id, message.to_string(), 0));
            return None;
        }
        let (bus_id, opening, age) = self.opening.take()?;
        let source = format!("{opening}\n{message}");
        if nvrm.is_some_and(|n| n.contains(FALLEN_OFF)) {
            return Some(XidEvent {
                xid: None,
                bus_id,
                pid: None,
                process: None,
                message: joined_message(&source),
                line: source,
                caused_by: None,
            });
        }
        if age < 1 {
            self.opening = Some((bus_id, source, age + 1));
        }
        None
    }
}

/// Whether an XID is the workload's fault or the GPU's: the seam's class
/// ([`accel_backend::health::FaultClass`]), the same for every manufacturer.
pub use accel_backend::health::FaultClass as XidClass;

/// A setting's value that is not a list of XID codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{setting}={value:?}: {reason} (expected a comma-separated list of XID numbers such as 13,31,43)"
)]
pub struct XidSettingError {
    pub setting: &'static str,
    pub value: String,
    pub reason: String,
}

/// Which XIDs are application-class (`GPUSTACK_NVIDIA_XID_APPLICATION`, default
/// [`DEFAULT_APPLICATION_XIDS`]) and which are forced hardware-class
/// (`GPUSTACK_NVIDIA_XID_HARDWARE`, default none, and winning over the first). Every other
/// code, and a GPU fallen off the bus, is hardware-class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidClasses {
    application: BTreeSet<u32>,
    hardware: BTreeSet<u32>,
}

impl Default for XidClasses {
    fn default() -> Self {
        XidClasses {
            application: DEFAULT_APPLICATION_XIDS.into_iter().collect(),
            hardware: BTreeSet::new(),
        }
    }
}

impl XidClasses {
    /// Reads both settings' values (`None`: not set, the default applies).
    pub fn from_settings(
        application: Option<&str>,
        hardware: Option<&str>,
    ) -> Result<Self, XidSettingError> {
        let mut classes = XidClasses::default();
        if let Some(value) = application {
            classes.application = parse_codes(XID_APPLICATION_ENV, value)?;
        }
        if let Some(value) = hardware {
            classes.hardware = parse_codes(XID_HARDWARE_ENV, value)?;
        }
        Ok(classes)
    }

    /// Reads both settings from the process environment.
    pub fn from_env() -> Result<Self, XidSettingError> {
        let application = std::env::var(XID_APPLICATION_ENV).ok();
        let hardware = std::env::var(XID_HARDWARE_ENV).ok();
        Self::from_settings(application.as_deref(), hardware.as_deref())
    }

    /// The class of an XID code; `None` (fallen off the bus) is hardware.
    pub fn class_of(&self, xid: Option<u32>) -> XidClass {
        match xid {
            Some(code) if self.application.contains(&code) && !self.hardware.contains(&code) => {
                XidClass::Application
            }
            _ => XidClass::Hardware,
        }
    }

    /// The class of an event.
    pub fn classify(&self, event: &XidEvent) -> XidClass {
        self.class_of(event.xid)
    }

    /// The event as the seam's fault record takes it, classified.
    pub fn fault(&self, event: &XidEvent) -> KernelFault {
        KernelFault {
            manufacturer: Manufacturer::Nvidia,
            condition: event.condition(),
            code: event.xid,
            bus_id: Some(event.bus_id),
            pid: event.pid,
            process: event.process.clone(),
            message: event.message.clone(),
            line: event.line.clone(),
            class: self.classify(event),
        }
    }
}

/// NVIDIA's kernel-log faults behind the seam: the XID scanner, classified by the
/// `GPUSTACK_NVIDIA_XID_APPLICATION` and `GPUSTACK_NVIDIA_XID_HARDWARE` settings.
impl FaultClassifier for XidClasses {
    fn manufacturer(&self) -> Manufacturer {
        Manufacturer::Nvidia
    }

    fn scanner(&self) -> Box<dyn FaultScanner> {
        Box::new(ClassifiedScanner {
            scanner: XidScanner::default(),
            classes: self.clone(),
        })
    }

    fn parse_text(&self, text: &str) -> Vec<KernelFault> {
        parse_text(text).iter().map(|e| self.fault(e)).collect()
    }

    fn class_of(&self, condition: &str, code: Option<u32>) -> Option<XidClass> {
        let ours = code.is_some() || condition == FALLEN_OFF_BUS_CONDITION;
        ours.then(|| XidClasses::class_of(self, code))
    }

    fn counted_by_code(&self) -> bool {
        true
    }
}

/// An [`XidScanner`] whose events come out classified.
struct ClassifiedScanner {
    scanner: XidScanner,
    classes: XidClasses,
}

impl FaultScanner for ClassifiedScanner {
    fn push(&mut self, message: &str) -> Option<KernelFault> {
        self.scanner.push(message).map(|e| self.classes.fault(&e))
    }
}

fn parse_codes(setting: &'static str, value: &str) -> Result<BTreeSet<u32>, XidSettingError> {
    let mut codes = BTreeSet::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let code = part.parse::<u32>().map_err(|_| XidSettingError {
            setting,
            value: value.to_string(),
            reason: format!("{part:?} is not an XID number"),
        })?;
        codes.insert(code);
    }
    Ok(codes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> XidEvent {
        parse_message(line).unwrap_or_else(|| panic!("no event in {line:?}"))
    }

    #[test]
    fn every_prefix_variant() {
        let body =
            "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.";
        for prefix in [
            "",
            "[ 1843.308145] ",
            "[Sun Feb 23 16:24:18 2025] ",
            "2024-11-15T12:02:03,470068+00:00 ",
            "kern  :warn  : 2025-01-21T03:16:32,156031+00:00 ",
            "<4>[ 1126.6] ",
            "Nov 29 11:28:11 zeus kernel: ",
            "Nov  9 11:28:11 zeus kernel: [ 12.5] ",
            "kernel: ",
            "2024-11-15T12:02:03+0000 zeus kernel: ",
        ] {
            let event = one(&format!("{prefix}{body}"));
            assert_eq!(event.xid, Some(79), "{prefix:?}");
            assert_eq!(event.bus_id.nvml(), "00000000:18:00.0");
            assert_eq!(event.pid, Some(1234));
            assert_eq!(event.process.as_deref(), Some("python"));
            assert_eq!(event.message, "GPU has fallen off the bus.");
            assert_eq!(event.line, format!("{prefix}{body}"));
        }
    }

    #[test]
    fn every_payload_variant() {
        let e = one(
            "NVRM: Xid (PCI:0000:0a:00): 62, pid='<unknown>', name=<unknown>, 2023b230 00000000",
        );
        assert_eq!((e.pid, e.process.as_deref()), (None, None));
        assert_eq!(e.message, "2023b230 00000000");

        let e =
            one("NVRM: Xid (PCI:0000:c1:00): 31, pid=12890, Ch 0000003b, intr 00000000. MMU Fault");
        assert_eq!((e.pid, e.process.as_deref()), (Some(12890), None));
        assert_eq!(e.message, "Ch 0000003b, intr 00000000. MMU Fault");

        let e = one("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus");
        assert_eq!(
            (e.xid, e.pid, e.message.as_str()),
            (Some(79), None, "GPU has fallen off the bus")
        );

        let e = one(
            "NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link -1 (0x021425c6 0x00000000)",
        );
        assert_eq!(e.bus_id.nvml(), "00000009:01:00.0");
        assert_eq!(
            e.message,
            "NETIR_LINK_EVT  Fatal   XC0 i0 Link -1 (0x021425c6 0x00000000)"
        );

        let e = one("NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000010 intr 00040000");
        assert_eq!((e.xid, e.pid), (Some(32), None));

        let e = one(
            "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
        );
        assert_eq!(e.caused_by, Some(149));
        assert_eq!(e.xid, Some(45));

        let e = one("NVRM: Xid (PCI:0018:01:00): 154, GPU recovery action changed");
        assert_eq!(e.bus_id.nvml(), "00000018:01:00.0");

        let e = one("NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 43, pid=7, name=a");
        assert_eq!((e.xid, e.message.as_str()), (Some(43), ""));
    }

    #[test]
    fn fallen_off_the_bus_without_an_xid() {
        let text = "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.";
        let e = one(text);
        assert_eq!(e.xid, None);
        assert_eq!(e.bus_id.nvml(), "00000000:B3:00.0");
        assert_eq!(e.condition(), "FallenOffBus");
        assert_eq!(
            e.message,
            "The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen off the bus and is not responding to commands."
        );
        let e = one("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.");
        assert_eq!(e.bus_id.nvml(), "00000000:3B:00.0");

        // The same three lines as separate records, each with its prefix.
        let split = "[ 1.0] NVRM: The NVIDIA GPU 0000:b3:00.0\n[ 1.0] NVRM: (PCI ID: 10de:26b5) installed in this system has\n[ 1.0] NVRM: fallen off the bus and is not responding to commands.\n";
        let events = parse_text(split);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].bus_id.nvml(), "00000000:B3:00.0");
        assert_eq!(events[0].line.lines().count(), 3);

        // An opening line not followed by the report is forgotten after two records.
        let stale = "NVRM: The NVIDIA GPU 0000:b3:00.0\nx\ny\nNVRM: fallen off the bus and is not responding to commands.\n";
        assert!(parse_text(stale).is_empty());
    }

    #[test]
    fn nothing_else_is_an_xid() {
        for line in [
            "NVRM: GPU at PCI:0000:0a:00: GPU-760d0170-b7c5-6817-9414-6cc7112645de",
            "NVRM: GPU Board Serial Number: 1650124014249",
            "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01",
            "NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing 1 of every 30).",
            "NVRM: Xid (PCI:0000:9b:00) 79",
            "NVRM: Xid (PCI:0000:9b:00): x79",
            "NVRM: Xid (PCI:zz): 79, text",
            "NVRM: Xid: 79",
            "python: NVRM: Xid (PCI:0000:18:00): 79, fake",
            "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context",
            "sched: RT throttling activated",
            "GPU has fallen off the bus (no bus and no NVRM tag)",
            "",
        ] {
            assert_eq!(parse_message(line), None, "{line:?}");
        }
    }

    #[test]
    fn classes_default_and_settings() {
        let classes = XidClasses::default();
        for code in DEFAULT_APPLICATION_XIDS {
            assert_eq!(classes.class_of(Some(code)), XidClass::Application);
        }
        for code in [48, 63, 79, 94, 119, 149, 154] {
            assert_eq!(classes.class_of(Some(code)), XidClass::Hardware);
        }
        assert_eq!(classes.class_of(None), XidClass::Hardware);

        let classes = XidClasses::from_settings(Some(" 13, 94 ,"), Some("13")).unwrap();
        assert_eq!(classes.class_of(Some(94)), XidClass::Application);
        assert_eq!(
            classes.class_of(Some(13)),
            XidClass::Hardware,
            "hardware wins"
        );
        assert_eq!(classes.class_of(Some(31)), XidClass::Hardware);
        let none = XidClasses::from_settings(Some(""), None).unwrap();
        assert_eq!(none.class_of(Some(13)), XidClass::Hardware);

        let e = XidClasses::from_settings(Some("13,x"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GPUSTACK_NVIDIA_XID_APPLICATION=\"13,x\": \"x\" is not an XID number (expected a comma-separated list of XID numbers such as 13,31,43)"
        );
        assert!(XidClasses::from_settings(None, Some("-1")).is_err());
    }

    #[test]
    fn serialises_the_contract_shape() {
        let e = one(
            "[ 1.0] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "xid": 79, "busId": "00000000:18:00.0", "pid": null, "process": null,
                "message": "GPU has fallen off the bus.",
                "line": "[ 1.0] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
            })
        );
        assert_eq!(e.summary(), "Xid 79: GPU has fallen off the bus.");
        assert_eq!(e.condition(), "Xid79");
    }
}
