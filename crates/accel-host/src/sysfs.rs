//! The value rules of the kernel attribute files the [`crate::drm`] and [`crate::kfd`] readers
//! read: NUL padding and whitespace trimmed, an empty file (or a driver's `N/A`) absent, hex with
//! or without `0x`, a unique id's "not reported" figures absent (the AMD fixtures' HAZARDS.md,
//! items 13–15).

/// An attribute's value: NULs and whitespace trimmed; empty or `N/A` (any case, with or without
/// a trailing note) is `None`.
pub(crate) fn attribute(text: &str) -> Option<String> {
    let t = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    if t.is_empty() || t.len() >= 3 && t.as_bytes()[..3].eq_ignore_ascii_case(b"n/a") {
        None
    } else {
        Some(t.to_string())
    }
}

/// A hex figure with or without `0x` (`0x687f`, `744C`), at most 16 digits.
pub(crate) fn hex(text: &str) -> Option<u64> {
    let t = attribute(text)?;
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(&t);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// A unique id in hex; 0 and the all-ones "unsupported" figure are `None`.
pub(crate) fn unique_id(text: &str) -> Option<u64> {
    hex(text).filter(|u| *u != 0 && *u != u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_and_placeholders_are_absent() {
        assert_eq!(attribute(" MI300X \0\0").as_deref(), Some("MI300X"));
        assert_eq!(attribute("\n"), None);
        assert_eq!(attribute(""), None);
        assert_eq!(attribute("n/a (secondary die)"), None);
        assert_eq!(attribute("NA").as_deref(), Some("NA"));
        // A multi-byte character where the placeholder would end is a value, not a panic.
        assert_eq!(attribute("1€").as_deref(), Some("1€"));
    }

    #[test]
    fn hex_and_unique_ids() {
        assert_eq!(hex("0x687f\n"), Some(0x687f));
        assert_eq!(hex("744C"), Some(0x744c));
        assert_eq!(hex("0X10"), Some(0x10));
        assert_eq!(hex("0x"), None);
        assert_eq!(hex("12345678901234567"), None);
        assert_eq!(hex("zz"), None);
        assert_eq!(
            unique_id("5c88007d760374f3\n\0\0"),
            Some(0x5c88_007d_7603_74f3)
        );
        assert_eq!(unique_id("0"), None);
        assert_eq!(unique_id("ffffffffffffffff"), None);
        assert_eq!(unique_id(""), None);
    }
}
