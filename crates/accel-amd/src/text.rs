//! Small text rules every AMD source shares: NUL padding and whitespace trimmed, empty and the
//! tools' placeholders (`N/A`) read as absent, unique ids normalised to one u64, and what is no
//! product name (a placeholder, a bare PCI id).

/// The value of a sysfs file or a tool's field: NULs and whitespace trimmed; empty or `N/A`
/// (any case, with or without a trailing note such as `N/A (Secondary die)`) is `None`.
pub fn clean(text: &str) -> Option<String> {
    let t = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    if t.is_empty() || t.len() >= 3 && t.as_bytes()[..3].eq_ignore_ascii_case(b"n/a") {
        None
    } else {
        Some(t.to_string())
    }
}

/// A product name from a tool's field or a sysfs file: [`clean`], and `None` for the other
/// placeholders (`NA`, `-`) and for a bare PCI id (`0x1002`, `0x74a1`, `1002`, `74A1`), which a
/// tool prints where it knows no name; the caller then takes the next source's name.
pub fn product_name(text: &str) -> Option<String> {
    clean(text)
        .filter(|t| !t.eq_ignore_ascii_case("na") && !t.chars().all(|c| c == '-') && !is_pci_id(t))
}

/// A PCI id as the tools print one: `0x` and up to 8 hex digits, or exactly 4 hex digits.
fn is_pci_id(text: &str) -> bool {
    let hex = |d: &str| d.chars().all(|c| c.is_ascii_hexdigit());
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(digits) => (1..=8).contains(&digits.len()) && hex(digits),
        None => text.len() == 4 && hex(text),
    }
}

/// A hex figure with or without `0x` (`0x687f`, `744C`): [`clean`], then the shared rule
/// (`accel_backend::text::hex`, at most 16 digits).
pub fn hex_u64(text: &str) -> Option<u64> {
    accel_backend::text::hex(&clean(text)?)
}

/// A unique id (ASIC serial) in any of its spellings — sysfs hex without `0x`, rocm-smi `0x`-
/// prefixed with leading zeros dropped, amd-smi upper-case `0x…` — as a u64; 0 and the
/// all-ones "unsupported" sentinel are `None` (`accel_backend::text::unique_id`).
pub fn unique_id(text: &str) -> Option<u64> {
    accel_backend::text::unique_id(&clean(text)?)
}

/// The accelerator's UUID in the form ROCr takes in `ROCR_VISIBLE_DEVICES` (and HSA reports as
/// the agent's UUID): `GPU-` and the unique id as 16 lower-case hex digits.
pub fn rocr_uuid(unique_id: u64) -> String {
    format!("GPU-{unique_id:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_in_every_spelling_meet() {
        assert_eq!(unique_id("0x28246CE5673B4AA0"), Some(0x2824_6ce5_673b_4aa0));
        assert_eq!(unique_id("0x2150e7d042a1124"), Some(0x0215_0e7d_042a_1124));
        assert_eq!(
            rocr_uuid(unique_id("0x2150e7d042a1124").unwrap()),
            "GPU-02150e7d042a1124"
        );
        assert_eq!(
            unique_id("5c88007d760374f3\n\0\0"),
            Some(0x5c88_007d_7603_74f3)
        );
        assert_eq!(unique_id("N/A"), None);
        assert_eq!(unique_id("ffffffffffffffff"), None);
        assert_eq!(unique_id("0"), None);
        assert_eq!(unique_id("<redacted>"), None);
    }

    #[test]
    fn a_hex_figure_has_at_most_16_digits_even_with_leading_zeros() {
        assert_eq!(hex_u64("0000000000000001"), Some(1));
        assert_eq!(hex_u64("0x0000000000000001"), Some(1));
        assert_eq!(hex_u64("00000000000000001"), None);
        assert_eq!(hex_u64("0x"), None);
    }

    #[test]
    fn placeholders_and_bare_pci_ids_are_no_product_name() {
        for not_a_name in [
            "0x1002", "0x74a1", "0X74A1", "0xc1e", "1002", "74a1", "N/A", "NA", "na", "-", "--",
            "", " \0",
        ] {
            assert_eq!(product_name(not_a_name), None, "{not_a_name:?}");
        }
        for name in [
            "AMD Instinct MI300X",
            "MI308X",
            "Navi 32 [Radeon RX 7700 XT / 7800 XT]",
            // Not a PCI id: too long unprefixed, too long prefixed, not hex, a sign in it.
            "10020",
            "0x123456789",
            "0xMI50",
            "NAVI",
            "-1-",
            "RX 7900",
        ] {
            assert_eq!(product_name(name).as_deref(), Some(name), "{name:?}");
        }
    }

    #[test]
    fn placeholders_are_absent() {
        assert_eq!(clean("N/A (Secondary die)"), None);
        assert_eq!(clean("\n"), None);
        assert_eq!(clean(" MI300X \0").as_deref(), Some("MI300X"));
        // A character that straddles the third byte is a value, not a panic.
        assert_eq!(clean("1\u{20ac}").as_deref(), Some("1\u{20ac}"));
    }
}
