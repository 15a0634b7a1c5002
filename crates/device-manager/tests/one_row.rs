//! One row per manufacturer: outside the backends registry (`src/backends.rs`), no production
//! source of the binary, the device plugin, the cluster publisher or the webhook names a vendor
//! crate or matches on a manufacturer. A new manufacturer is then its crate plus one registry
//! line. Tests, the demo and the plugin's test kit (`testing.rs`) may name vendors; comments may
//! too (they explain), so both are left out of the scan.

use std::path::{Path, PathBuf};

/// The vendor crates' names as Rust paths, and the manufacturers table's variants.
const VENDORS: &[&str] = &[
    "nvidia",
    "amd",
    "ascend",
    "cambricon",
    "hygon",
    "iluvatar",
    "metax",
    "mthreads",
    "thead",
];

const VARIANTS: &[&str] = &[
    "Nvidia",
    "Amd",
    "Ascend",
    "Cambricon",
    "Hygon",
    "Iluvatar",
    "Metax",
    "Mthreads",
    "Thead",
];

/// Files that may name vendors: the registry, test-only modules and the demo.
fn exempt(path: &Path) -> bool {
    let text = path.to_string_lossy();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "backends.rs"
        || name == "testing.rs"
        || name == "test_support.rs"
        || name == "tests.rs"
        || name.ends_with("_tests.rs")
        || text.contains("/demo/")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !exempt(&path) {
            out.push(path);
        }
    }
}

/// What a source names that it must not: `(line number, line)` of each offence. An inline
/// `#[cfg(test)] mod tests` (at the end of a file, by this codebase's rule) and comment lines
/// are not scanned.
fn offences(text: &str) -> Vec<(usize, String)> {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        let crate_named = VENDORS.iter().any(|v| {
            let needle = format!("accel_{v}");
            line.match_indices(&needle).any(|(at, _)| {
                let after = line[at + needle.len()..].chars().next();
                !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        });
        let variant_matched = VARIANTS.iter().any(|v| {
            let needle = format!("Manufacturer::{v}");
            line.match_indices(&needle).any(|(at, _)| {
                let after = line[at + needle.len()..].chars().next();
                !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        });
        if crate_named || variant_matched {
            found.push((n + 1, trimmed.to_string()));
        }
    }
    found
}

#[test]
fn no_source_outside_the_registry_names_a_vendor_crate_or_a_manufacturer() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in [
        "device-manager/src",
        "accel-plugin/src",
        "accel-kube/src",
        "accel-webhook/src",
    ] {
        sources(&crates.join(dir), &mut files);
    }
    assert!(
        files.len() > 40,
        "the scan found only {} files",
        files.len()
    );
    let mut report = String::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, code) in offences(&text) {
            report.push_str(&format!("{}:{line}: {code}\n", file.display()));
        }
    }
    assert!(
        report.is_empty(),
        "vendor knowledge outside the registry (move it behind accel_backend::Backend):\n{report}"
    );
}

#[test]
fn the_scan_finds_what_it_is_for() {
    let offending = "use accel_nvidia::xid::XidClasses;\n\
                     fn f(m: Manufacturer) -> bool { m == Manufacturer::Amd }\n\
                     // accel_amd in a comment is fine\n\
                     let x = accel_nvidiax; let y = Manufacturer::Nvidias;\n\
                     #[cfg(test)]\nmod tests {\n use accel_amd::kmsg;\n}\n";
    let found: Vec<usize> = offences(offending).into_iter().map(|(n, _)| n).collect();
    assert_eq!(found, vec![1, 2]);
}
