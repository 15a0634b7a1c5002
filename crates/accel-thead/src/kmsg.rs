//! The `alixpu` driver's kernel-log lines: `[alixpu]` tag, no PCI address, the card named as
//! `PPU00<NN>` (its driver index) where a line names one (HAZARDS.md item 7); what precedes the
//! tag (any log prefix) is dropped. What each line
//! is, as far as the captures and the spec show: the ICN routing table and its summary printed
//! while the driver loads, and a refused MIG mode switch (spec §6.6). None of them is a fault:
//! no captured `alixpu` line reports a hardware or workload fault, so this build watches none
//! (the PPU's health rule is ECC, spec §7) and the backend has no fault classifier.

/// The driver's tag.
pub const TAG: &str = "[alixpu]";

/// What an `alixpu` line reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlixpuEvent {
    /// `PPU0015 ppuid:15, target ppu:N, icl:0x.., mini_path:N` (driver load).
    IcnRoute { target: Option<u32> },
    /// `total 16 devices in ICN topo!`.
    IcnTotal { devices: Option<u32> },
    /// `PPU00<N> contains <k> active process, please try reset later ...`.
    BusyForModeSwitch { processes: Option<u32> },
    /// `PPU00<N> set MIG mode failed`.
    ModeSwitchFailed,
    /// Any other `alixpu` line.
    Other,
}

/// One `alixpu` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlixpuLine {
    /// The card's driver index, from `PPU00<NN>`.
    pub ppu: Option<u32>,
    pub event: AlixpuEvent,
    /// The driver's text after the tag.
    pub message: String,
}

fn number_after(text: &str, label: &str) -> Option<u32> {
    let rest = &text[text.find(label)? + label.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// One line, when it is the driver's.
pub fn parse_line(line: &str) -> Option<AlixpuLine> {
    // After the tag: whatever prefixes the log put in front of it (`dmesg -T`'s ctime, a
    // `/dev/kmsg` record header) are left behind with it.
    let message = line[line.find(TAG)? + TAG.len()..].trim();
    let (ppu, rest) = match message.split_once(' ') {
        Some((word, rest)) if word.len() > 3 && word.starts_with("PPU") => {
            (word[3..].parse::<u32>().ok(), rest.trim())
        }
        _ => (None, message),
    };
    let event = if rest.contains("target ppu:") {
        AlixpuEvent::IcnRoute {
            target: number_after(rest, "target ppu:"),
        }
    } else if rest.contains("devices in ICN topo") {
        AlixpuEvent::IcnTotal {
            devices: number_after(rest, "total"),
        }
    } else if rest.contains("active process") {
        AlixpuEvent::BusyForModeSwitch {
            processes: number_after(rest, "contains"),
        }
    } else if rest.contains("set MIG mode failed") {
        AlixpuEvent::ModeSwitchFailed
    } else {
        AlixpuEvent::Other
    };
    Some(AlixpuLine {
        ppu,
        event,
        message: message.to_string(),
    })
}

/// Every `alixpu` line of a log text.
pub fn parse(text: &str) -> Vec<AlixpuLine> {
    text.lines().filter_map(parse_line).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_switch_refusal_names_the_card_and_its_processes() {
        let busy = parse_line(
            "[ 1843.308145] [alixpu] PPU0003 contains 2 active process, please try reset later ...",
        )
        .unwrap();
        assert_eq!(busy.ppu, Some(3));
        assert_eq!(
            busy.event,
            AlixpuEvent::BusyForModeSwitch { processes: Some(2) }
        );
        let failed = parse_line("[alixpu] PPU0003 set MIG mode failed").unwrap();
        assert_eq!(failed.event, AlixpuEvent::ModeSwitchFailed);
        assert_eq!(parse_line("NVRM: Xid 79"), None);
    }
}
