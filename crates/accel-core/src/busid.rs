//! PCI bus addresses in every spelling the host uses, normalised to one value.
//!
//! nvidia-smi's XML says `00000000:18:00.0` (8-hex-digit domain), `-L`, procfs and sysfs say
//! `0000:18:00.0`, the kernel log says `PCI:0000:18:00` (no function), the legacy v8 DTD used a
//! 4-digit domain, and Hyper-V guests carry non-zero 32-bit domains (`00001580:00:00.0`). A GPU's
//! identity on the host is its bus address, so every reader turns its spelling into a [`BusId`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A PCI function address: domain, bus, device, function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BusId {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

/// A bus address that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid PCI bus id {0:?} (expected DOMAIN:BUS:DEVICE.FUNCTION such as 00000000:18:00.0)")]
pub struct InvalidBusId(pub String);

impl BusId {
    /// NVML's spelling: 8-hex-digit domain, upper-case hex, with the function.
    pub fn nvml(&self) -> String {
        self.to_string()
    }

    /// The kernel's (sysfs) spelling: lower-case, 4-hex-digit domain when it fits.
    pub fn sysfs(&self) -> String {
        format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl fmt::Display for BusId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl FromStr for BusId {
    type Err = InvalidBusId;

    /// Reads `00000000:18:00.0`, `0000:18:00.0`, `PCI:0000:18:00` (function 0), `18:00.0`
    /// (domain 0), in either case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidBusId(s.to_string());
        let text = s.trim();
        let text = text
            .strip_prefix("PCI:")
            .or_else(|| text.strip_prefix("pci:"))
            .unwrap_or(text);
        let (rest, function) = match text.rsplit_once('.') {
            Some((rest, f)) => (rest, u8::from_str_radix(f, 16).map_err(|_| bad())?),
            None => (text, 0),
        };
        if function > 7 {
            return Err(bad());
        }
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, dev] => (*d, *b, *dev),
            [b, dev] => ("0", *b, *dev),
            _ => return Err(bad()),
        };
        let hex_ok = |p: &str, max: usize| {
            !p.is_empty() && p.len() <= max && p.chars().all(|c| c.is_ascii_hexdigit())
        };
        if !hex_ok(domain, 8) || !hex_ok(bus, 2) || !hex_ok(device, 2) {
            return Err(bad());
        }
        let domain = u32::from_str_radix(domain, 16).map_err(|_| bad())?;
        let bus = u8::from_str_radix(bus, 16).map_err(|_| bad())?;
        let device = u8::from_str_radix(device, 16).map_err(|_| bad())?;
        if device > 0x1f {
            return Err(bad());
        }
        Ok(BusId {
            domain,
            bus,
            device,
            function,
        })
    }
}

impl Serialize for BusId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BusId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_reads_to_one_value() {
        let want = BusId {
            domain: 0,
            bus: 0x18,
            device: 0,
            function: 0,
        };
        for s in [
            "00000000:18:00.0",
            "0000:18:00.0",
            "PCI:0000:18:00",
            "18:00.0",
            " 0000:18:00.0\n",
        ] {
            assert_eq!(s.parse::<BusId>(), Ok(want), "{s}");
        }
        assert_eq!(want.to_string(), "00000000:18:00.0");
        assert_eq!(want.sysfs(), "0000:18:00.0");
    }

    #[test]
    fn non_zero_domains_and_case() {
        let id: BusId = "0000F8D6:00:00.0".parse().unwrap();
        assert_eq!(id.domain, 0xf8d6);
        assert_eq!(id.nvml(), "0000F8D6:00:00.0");
        assert_eq!(id.sysfs(), "f8d6:00:00.0");
        let id: BusId = "PCI:0018:01:00".parse().unwrap();
        assert_eq!(id.nvml(), "00000018:01:00.0");
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "GPU-1234",
            "0000:18:00.9",
            "0000:zz:00.0",
            "1:2:3:4",
            "000000000:18:00.0",
        ] {
            assert!(s.parse::<BusId>().is_err(), "{s}");
        }
    }

    #[test]
    fn a_pci_function_is_0_to_7() {
        let last: BusId = "0000:18:00.7".parse().unwrap();
        assert_eq!(last.function, 7);
        assert!("0000:18:00.8".parse::<BusId>().is_err());
    }

    #[test]
    fn a_pci_device_is_0_to_1f() {
        let last: BusId = "0000:18:1f.0".parse().unwrap();
        assert_eq!(last.device, 0x1f);
        assert!("0000:18:20.0".parse::<BusId>().is_err());
        let first: BusId = "0000:18:00.0".parse().unwrap();
        assert_eq!(first.device, 0);
    }

    #[test]
    fn each_field_has_at_most_its_hex_digits_and_nothing_else() {
        // The number parser alone would take `018` as 0x18 and `+1` as 1; a bus id that is
        // spelled wrong is refused, whichever field is wrong.
        for s in [
            "0000:018:00.0",
            "0000:+1:00.0",
            "0000:18:000.0",
            "0000:18:+1.0",
            "+000:18:00.0",
            "0000::00.0",
            "0000:18:.0",
        ] {
            assert!(s.parse::<BusId>().is_err(), "{s}");
        }
    }
}
