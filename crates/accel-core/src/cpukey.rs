//! The general (CPU) node key `${cpuManufacturer}-${id}` (seed 000, "Job 2 — CPU identity"),
//! computed from a Node's NFD CPU labels and the `feature.gpustack.ai/cpu-*` annotations the
//! `gpustack-cpu-info` NodeFeatureRule writes.
//!
//! Pure: it reads two string maps (the Node's labels and annotations) and returns the key. It
//! never fails and never returns an empty key: a node NFD tells nothing about is `generic`.
//! Reading a Node object, and publishing the key, belong to the callers (the `cpu-key` command and
//! the worker's controllers).

use std::collections::BTreeMap;

use crate::labels::NAME_MAX;

/// NFD's CPU vendor label (the `cpu` label source), e.g. `AMD`, `Intel`.
pub const VENDOR_LABEL: &str = "feature.node.kubernetes.io/cpu-model.vendor_id";
/// NFD's CPU family label, e.g. `25`.
pub const FAMILY_LABEL: &str = "feature.node.kubernetes.io/cpu-model.family";
/// NFD's CPU model id label, e.g. `1`.
pub const ID_LABEL: &str = "feature.node.kubernetes.io/cpu-model.id";
/// The prefix of every CPU-detail annotation the `gpustack-cpu-info` rule writes.
pub const ANNOTATION_PREFIX: &str = "feature.gpustack.ai/cpu-";
/// The CPU's model name annotation, e.g. `AMD EPYC 7763 64-Core Processor`.
pub const NAME_ANNOTATION: &str = "feature.gpustack.ai/cpu-name";
/// The key of a node NFD reports no CPU identity for, and the manufacturer part of a key whose
/// vendor is unknown or unreported.
pub const GENERIC: &str = "generic";
/// The longest suffix added to the key in a Kubernetes name (`${key}.capacity`); the key is cut so
/// that the key plus this suffix fits Kubernetes' 63 characters.
pub const LONGEST_SUFFIX: &str = ".capacity";
/// The longest key: 63 − `.capacity` = 54 characters.
pub const KEY_MAX: usize = NAME_MAX - LONGEST_SUFFIX.len();

/// Vendor values that name no vendor (what NFD's CPUID reader prints when it cannot tell).
const UNKNOWN_VENDORS: [&str; 2] = ["unknown", "vendorunknown"];

/// The CPU node key of a Node from its labels and annotations
/// ("AMD EPYC 7763 64-Core Processor" from vendor `AMD` → `amd-epyc-7763`).
pub fn cpu_node_key(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> String {
    let manufacturer = cpu_manufacturer(labels.get(VENDOR_LABEL).map(String::as_str));
    let id = annotations
        .get(NAME_ANNOTATION)
        .and_then(|name| cpu_name_id(name, manufacturer.as_deref()))
        .or_else(|| {
            model_id(
                labels.get(FAMILY_LABEL).map(String::as_str),
                labels.get(ID_LABEL).map(String::as_str),
            )
        });
    let key = match (manufacturer, id) {
        (m, Some(id)) => format!("{}-{id}", m.as_deref().unwrap_or(GENERIC)),
        (Some(m), None) => m,
        (None, None) => GENERIC.to_string(),
    };
    truncate(&key)
}

/// The lower-cased, sanitised vendor; `None` when it is absent, unreported (an unresolved `@…`
/// reference) or names no vendor.
pub fn cpu_manufacturer(vendor: Option<&str>) -> Option<String> {
    let vendor = reported(vendor?)?;
    let name = sanitize(vendor);
    if name.is_empty() || UNKNOWN_VENDORS.contains(&name.as_str()) {
        return None;
    }
    Some(name)
}

/// The `id` part from the CPU model name: trademark markers, the trailing frequency part
/// (` CPU @ 2.50GHz`), the word `Processor`, core counts (`64-Core`) and generation prefixes
/// (`11th Gen`) dropped, a leading manufacturer word dropped, then lower-case `[a-z0-9-]`.
/// `None` when the name is unreported or nothing is left of it.
pub fn cpu_name_id(name: &str, manufacturer: Option<&str>) -> Option<String> {
    let name = reported(name)?;
    let mut text = name.to_string();
    for marker in ["(r)", "(tm)", "(c)", "®", "™"] {
        text = replace_ignore_case(&text, marker, " ");
    }
    // The frequency part: everything from the `@`, and a `CPU` word right before it.
    if let Some(at) = text.find('@') {
        text.truncate(at);
    }
    let mut words: Vec<&str> = text.split_whitespace().collect();
    if words
        .last()
        .is_some_and(|w| w.eq_ignore_ascii_case("cpu") && name.contains('@'))
    {
        words.pop();
    }
    let mut kept: Vec<&str> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        if is_generation(word)
            && words
                .get(i + 1)
                .is_some_and(|w| w.eq_ignore_ascii_case("gen"))
        {
            i += 2;
            continue;
        }
        if !word.eq_ignore_ascii_case("processor") && !is_core_count(word) {
            kept.push(word);
        }
        i += 1;
    }
    let mut id = sanitize(&kept.join(" "));
    if let Some(m) = manufacturer {
        if id == m {
            id.clear();
        } else if let Some(rest) = id.strip_prefix(&format!("{m}-")) {
            id = rest.to_string();
        }
    }
    (!id.is_empty()).then_some(id)
}

/// The `<family>-<id>` fallback from NFD's cpu-model labels (`25`, `1` → `25-1`). The two are
/// used only together, as the described system uses them: a family without its model id (or an
/// id without its family) names no CPU, so the key is then the bare manufacturer.
fn model_id(family: Option<&str>, id: Option<&str>) -> Option<String> {
    let part = |p: Option<&str>| p.and_then(reported).map(sanitize).filter(|p| !p.is_empty());
    Some(format!("{}-{}", part(family)?, part(id)?))
}

/// A value NFD reported: not empty, and not an `@…` template reference it could not resolve.
fn reported(value: &str) -> Option<&str> {
    let value = value.trim();
    (!value.is_empty() && !value.starts_with('@')).then_some(value)
}

/// Lower-case `[a-z0-9-]`: anything else becomes a dash, runs of dashes collapse, and the ends
/// are trimmed.
fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

fn truncate(key: &str) -> String {
    if key.len() <= KEY_MAX {
        return key.to_string();
    }
    // The key is ASCII by construction, so any byte index is a character boundary.
    key[..KEY_MAX].trim_end_matches('-').to_string()
}

/// `64-Core`, `64-Cores`, `Eight-Core`: a core count.
fn is_core_count(word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    ["-core", "-cores"].iter().any(|suffix| {
        lower.strip_suffix(suffix).is_some_and(|count| {
            !count.is_empty() && count.chars().all(|c| c.is_ascii_alphanumeric())
        })
    })
}

/// `11th`, `2nd`, `3rd`, `1st`: the ordinal of a generation prefix (`11th Gen`).
fn is_generation(word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    ["st", "nd", "rd", "th"].iter().any(|suffix| {
        lower
            .strip_suffix(suffix)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    })
}

fn replace_ignore_case(text: &str, needle: &str, with: &str) -> String {
    let lower = text.to_lowercase();
    // Lower-casing may change byte lengths outside ASCII; fall back to an exact replace then.
    if lower.len() != text.len() {
        return text.replace(needle, with);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    while let Some(found) = lower[rest..].find(needle) {
        let start = rest + found;
        out.push_str(&text[rest..start]);
        out.push_str(with);
        rest = start + needle.len();
    }
    out.push_str(&text[rest..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> String {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let annotations = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        cpu_node_key(&labels, &annotations)
    }

    fn named(vendor: &str, name: &str) -> String {
        node(&[(VENDOR_LABEL, vendor)], &[(NAME_ANNOTATION, name)])
    }

    #[test]
    fn the_seeds_example() {
        let key = node(
            &[(VENDOR_LABEL, "AMD"), (FAMILY_LABEL, "25"), (ID_LABEL, "1")],
            &[
                (NAME_ANNOTATION, "AMD EPYC 7763 64-Core Processor"),
                ("feature.gpustack.ai/cpu-family", "25"),
                ("feature.gpustack.ai/cpu-physical-cores", "64"),
            ],
        );
        assert_eq!(key, "amd-epyc-7763");
    }

    #[test]
    fn names_are_normalised() {
        let table = [
            // Trademark markers and the ` CPU @ …` frequency part.
            (
                "Intel",
                "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
                "intel-xeon-gold-6248",
            ),
            (
                "Intel",
                "Intel(R) Core(TM) i7-8700K CPU @ 3.70GHz",
                "intel-core-i7-8700k",
            ),
            // A frequency part with `CPU` earlier in the name keeps that word.
            (
                "Intel",
                "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz",
                "intel-xeon-cpu-e5-2680-v4",
            ),
            // Lower-case trademark markers and the ™/® signs.
            (
                "Intel",
                "Intel(r) Xeon(tm) Silver 4210",
                "intel-xeon-silver-4210",
            ),
            (
                "Intel",
                "Intel® Xeon® Platinum 8480+",
                "intel-xeon-platinum-8480",
            ),
            // `Processor` and core counts, singular and plural.
            (
                "AMD",
                "AMD Ryzen Threadripper PRO 3995WX 64-Cores",
                "amd-ryzen-threadripper-pro-3995wx",
            ),
            (
                "AMD",
                "AMD Ryzen 9 5950X 16-Core Processor",
                "amd-ryzen-9-5950x",
            ),
            ("AMD", "AMD FX(tm)-8350 Eight-Core Processor", "amd-fx-8350"),
            // A generation prefix, before the manufacturer word.
            (
                "Intel",
                "11th Gen Intel(R) Core(TM) i7-1165G7 @ 2.80GHz",
                "intel-core-i7-1165g7",
            ),
            (
                "Intel",
                "13th Gen Intel(R) Core(TM) i9-13900K",
                "intel-core-i9-13900k",
            ),
            // The leading manufacturer word is dropped once, whatever the vendor's case.
            (
                "Hygon",
                "Hygon C86 7285 32-core Processor",
                "hygon-c86-7285",
            ),
            // A name not starting with the manufacturer keeps all its words.
            ("ARM", "Neoverse-N1", "arm-neoverse-n1"),
            ("Ampere", "Ampere Altra Q80-30", "ampere-altra-q80-30"),
        ];
        for (vendor, name, want) in table {
            assert_eq!(named(vendor, name), want, "{vendor} / {name}");
        }
    }

    #[test]
    fn only_a_numeric_ordinal_right_before_gen_is_a_generation_prefix() {
        let table = [
            // The prefix goes only as the pair `<n>th Gen`.
            (
                "Intel",
                "12th Gen Intel(R) Core(TM) i5-12400",
                "intel-core-i5-12400",
            ),
            // A word that is not a numeric ordinal keeps `Gen` after it.
            (
                "Intel",
                "Intel(R) Xeon(R) Next Gen 8592",
                "intel-xeon-next-gen-8592",
            ),
            (
                "Intel",
                "Intel(R) Xeon(R) Latest Gen 8592",
                "intel-xeon-latest-gen-8592",
            ),
            (
                "Intel",
                "Intel(R) Xeon(R) 2 Fourth Gen",
                "intel-xeon-2-fourth-gen",
            ),
            // A numeric ordinal not followed by `Gen` is part of the model.
            ("Acme", "Acme Vector 2nd Edition", "acme-vector-2nd-edition"),
        ];
        for (vendor, name, want) in table {
            assert_eq!(named(vendor, name), want, "{vendor} / {name}");
        }
    }

    #[test]
    fn only_one_word_before_core_is_a_core_count() {
        let table = [
            ("AMD", "AMD EPYC 9654 96-Core Processor", "amd-epyc-9654"),
            ("AMD", "AMD Opteron(tm) Quad-Core 8380", "amd-opteron-8380"),
            // `-Core` with no count, or with a count that is not one word, stays in the model.
            ("Acme", "Acme Z9 -Core", "acme-z9-core"),
            ("Acme", "Acme Z9 Multi-Die-Core", "acme-z9-multi-die-core"),
            ("Acme", "Acme Z9 8+8-Core", "acme-z9-8-8-core"),
        ];
        for (vendor, name, want) in table {
            assert_eq!(named(vendor, name), want, "{vendor} / {name}");
        }
    }

    #[test]
    fn unreported_names_fall_back_to_family_and_id() {
        let model = [(VENDOR_LABEL, "AMD"), (FAMILY_LABEL, "25"), (ID_LABEL, "1")];
        // Absent, an unresolved template reference, empty, or nothing left after cleaning.
        assert_eq!(node(&model, &[]), "amd-25-1");
        assert_eq!(
            node(&model, &[(NAME_ANNOTATION, "@cpu.model.name")]),
            "amd-25-1"
        );
        assert_eq!(node(&model, &[(NAME_ANNOTATION, "  ")]), "amd-25-1");
        assert_eq!(
            node(&model, &[(NAME_ANNOTATION, "AMD Processor")]),
            "amd-25-1"
        );
    }

    #[test]
    fn family_and_id_are_used_only_together() {
        // One of the two alone (absent, unresolved, or nothing left after cleaning) names no
        // CPU: the key is the bare manufacturer, never `amd-25` or `amd-1`.
        let table: [&[(&str, &str)]; 5] = [
            &[(VENDOR_LABEL, "AMD"), (FAMILY_LABEL, "25")],
            &[(VENDOR_LABEL, "AMD"), (ID_LABEL, "1")],
            &[
                (VENDOR_LABEL, "AMD"),
                (FAMILY_LABEL, "25"),
                (ID_LABEL, "@cpu.model.id"),
            ],
            &[
                (VENDOR_LABEL, "AMD"),
                (FAMILY_LABEL, "@cpu.model.family"),
                (ID_LABEL, "1"),
            ],
            &[(VENDOR_LABEL, "AMD"), (FAMILY_LABEL, "25"), (ID_LABEL, "+")],
        ];
        for labels in table {
            assert_eq!(node(labels, &[]), "amd", "{labels:?}");
        }
        // Without a vendor, one of the two alone is no identity at all.
        assert_eq!(node(&[(FAMILY_LABEL, "6")], &[]), "generic");
        assert_eq!(node(&[(ID_LABEL, "85")], &[]), "generic");
    }

    #[test]
    fn unknown_vendors_are_generic() {
        let name = [(NAME_ANNOTATION, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz")];
        assert_eq!(node(&[], &name), "generic-intel-xeon-gold-6248");
        assert_eq!(
            node(&[(VENDOR_LABEL, "@cpu.model.vendor_id")], &name),
            "generic-intel-xeon-gold-6248"
        );
        assert_eq!(
            node(&[(VENDOR_LABEL, "VendorUnknown")], &name),
            "generic-intel-xeon-gold-6248"
        );
        assert_eq!(
            node(&[(FAMILY_LABEL, "6"), (ID_LABEL, "85")], &[]),
            "generic-6-85"
        );
    }

    #[test]
    fn generic_alone_only_when_nothing_is_known() {
        assert_eq!(node(&[], &[]), "generic");
        assert_eq!(
            node(
                &[(VENDOR_LABEL, "@x"), (FAMILY_LABEL, "@y")],
                &[(NAME_ANNOTATION, "@cpu.model.name")]
            ),
            "generic"
        );
        // A known vendor with nothing else is still that vendor.
        assert_eq!(node(&[(VENDOR_LABEL, "Intel")], &[]), "intel");
    }

    #[test]
    fn long_keys_fit_with_their_longest_suffix() {
        let name = format!(
            "Intel(R) Xeon(R) {} 9999",
            "Extraordinarily Long Model ".repeat(4)
        );
        let key = named("Intel", &name);
        assert!(key.len() <= KEY_MAX, "{key}");
        assert!(key.len() + LONGEST_SUFFIX.len() <= 63);
        assert!(key.starts_with("intel-xeon-extraordinarily-long-model"));
        assert!(!key.ends_with('-'), "{key}");
        assert_eq!(key, named("Intel", &name), "deterministic");
    }

    proptest! {
        #[test]
        fn keys_are_always_valid_names(
            vendor in proptest::option::of(".{0,20}"),
            name in proptest::option::of(".{0,120}"),
            family in proptest::option::of(".{0,8}"),
            id in proptest::option::of(".{0,8}"),
        ) {
            let mut labels = BTreeMap::new();
            let mut annotations = BTreeMap::new();
            if let Some(v) = vendor { labels.insert(VENDOR_LABEL.to_string(), v); }
            if let Some(f) = family { labels.insert(FAMILY_LABEL.to_string(), f); }
            if let Some(i) = id { labels.insert(ID_LABEL.to_string(), i); }
            if let Some(n) = name { annotations.insert(NAME_ANNOTATION.to_string(), n); }
            let key = cpu_node_key(&labels, &annotations);
            prop_assert!(!key.is_empty());
            prop_assert!(key.len() <= KEY_MAX);
            prop_assert!(key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
            prop_assert!(!key.starts_with('-') && !key.ends_with('-'));
        }
    }
}
