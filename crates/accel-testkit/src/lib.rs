//! What the workspace's tests share, written once: where the real captures and the recorded
//! hosts are ([`shared_fixtures`], [`recorded_hosts`]), copying a tree with its links
//! ([`copy_tree`], [`copy_recorded`]), the check that a corpus test covers exactly the files on
//! disk ([`assert_same_files`]), and mutations of a real capture for "never panics" tests
//! ([`mutate`]), and a recorded host whose vendor tool fails the four ways a live node's does
//! ([`failing_tool`]), and a live-looking root made from one, its tool a stand-in at a host path
//! ([`live_root`]).
//!
//! Dev-only: a crate names it under `[dev-dependencies]`, never `[dependencies]` (this crate's
//! test `only_dev_dependencies_name_the_kit` scans every manifest). Its functions panic with a
//! message saying what is missing, as a test should.

pub mod failing_tool;
pub mod live_root;
pub mod mutate;

use std::collections::BTreeSet;
use std::fmt::Display;
use std::path::{Path, PathBuf};

/// The workspace's root directory (the checkout).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder of `manufacturer`'s real captures, `../shared/fixtures/<manufacturer>` beside
/// the checkout. Panics, saying where it looked, when the folder is not there.
pub fn shared_fixtures(manufacturer: &str) -> PathBuf {
    let dir = workspace_root()
        .join("../shared/fixtures")
        .join(manufacturer);
    assert!(
        dir.is_dir(),
        "fixture folder {} is missing: the corpus tests need ../shared/fixtures/{manufacturer} beside the checkout",
        dir.display()
    );
    dir
}

/// One folder of `manufacturer`'s captures (`smi-xml`, `kmsg`); panics when it is missing.
pub fn shared_fixture_folder(manufacturer: &str, folder: &str) -> PathBuf {
    let dir = shared_fixtures(manufacturer).join(folder);
    assert!(dir.is_dir(), "fixture folder {} is missing", dir.display());
    dir
}

/// The recorded hosts the project ships (`testdata/hosts`).
pub fn recorded_hosts() -> PathBuf {
    let dir = workspace_root().join("testdata/hosts");
    assert!(
        dir.is_dir(),
        "the recorded hosts {} are missing",
        dir.display()
    );
    dir
}

/// One recorded host, `testdata/hosts/<name>`; panics when it is not there.
pub fn recorded_host(name: &str) -> PathBuf {
    let dir = recorded_hosts().join(name);
    assert!(dir.is_dir(), "recorded host {} is missing", dir.display());
    dir
}

/// Copies the tree `from` into `to` (made if missing): directories recursively, files with
/// their permissions, symbolic links as links with the same target (recorded sysfs links are
/// relative, so they still resolve in the copy).
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// A temporary copy of the recorded host `testdata/hosts/<name>`, as recorded, for a test to
/// change.
pub fn copy_recorded(name: &str) -> tempfile::TempDir {
    let src = recorded_host(name);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
    copy_tree(&src, dir.path())
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", src.display(), dir.path().display()));
    dir
}

/// The names of the entries of `dir` (files and folders), sorted; panics when it cannot be
/// read or is empty.
pub fn file_names(dir: &Path) -> BTreeSet<String> {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("fixture folder {}: {e}", dir.display()));
    let names: BTreeSet<String> = entries
        .map(|e| {
            let e = e.unwrap_or_else(|e| panic!("fixture folder {}: {e}", dir.display()));
            e.file_name().to_string_lossy().into_owned()
        })
        .collect();
    assert!(
        !names.is_empty(),
        "fixture folder {} is empty",
        dir.display()
    );
    names
}

/// The files on disk and the ones a test has expectations (or snapshots) for, side by side:
/// what is on one side only. Empty on both when they match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unmatched {
    /// On disk, with no expectation.
    pub without_expectation: Vec<String>,
    /// Expected, with no file.
    pub without_file: Vec<String>,
}

impl Unmatched {
    pub fn is_empty(&self) -> bool {
        self.without_expectation.is_empty() && self.without_file.is_empty()
    }
}

/// Compares the files on disk with the ones covered.
pub fn unmatched<F, C>(on_disk: F, covered: C) -> Unmatched
where
    F: IntoIterator,
    F::Item: Display,
    C: IntoIterator,
    C::Item: Display,
{
    let on_disk: BTreeSet<String> = on_disk.into_iter().map(|f| f.to_string()).collect();
    let covered: BTreeSet<String> = covered.into_iter().map(|f| f.to_string()).collect();
    Unmatched {
        without_expectation: on_disk.difference(&covered).cloned().collect(),
        without_file: covered.difference(&on_disk).cloned().collect(),
    }
}

/// Fails, naming every unmatched file on either side, unless the files on disk and the ones
/// covered are the same set. `what` names the corpus in the message (`nvidia/smi-xml`).
pub fn assert_same_files<F, C>(what: &str, on_disk: F, covered: C)
where
    F: IntoIterator,
    F::Item: Display,
    C: IntoIterator,
    C::Item: Display,
{
    let u = unmatched(on_disk, covered);
    assert!(
        u.is_empty(),
        "{what}: files without expectations {:?}, expectations without files {:?}",
        u.without_expectation,
        u.without_file
    );
}

/// [`assert_same_files`] for the entries of one folder.
pub fn assert_folder_covered<C>(dir: &Path, covered: C)
where
    C: IntoIterator,
    C::Item: Display,
{
    assert_same_files(&dir.display().to_string(), file_names(dir), covered);
}

/// The bytes of every file under the folders `folders` of `dir` (recursively; a link to a file
/// is read, a link to a folder is not followed, so a link cycle ends),
/// in path order: the corpus a "never panics" test mutates. Panics when a folder is missing or
/// holds no file.
pub fn read_captures(dir: &Path, folders: &[&str]) -> Vec<Vec<u8>> {
    let mut paths = Vec::new();
    for folder in folders {
        let before = paths.len();
        collect_files(&dir.join(folder), &mut paths);
        assert!(
            paths.len() > before,
            "fixture folder {} holds no file",
            dir.join(folder).display()
        );
    }
    paths.sort();
    paths
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("fixture folder {}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|e| panic!("fixture folder {}: {e}", dir.display()));
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_files(&path, out);
        } else if path.is_file() {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_fixtures_and_recorded_hosts_are_found() {
        assert!(shared_fixtures("nvidia").join("smi-xml").is_dir());
        assert!(shared_fixture_folder("amd", "kfd-topology").is_dir());
        assert!(recorded_hosts().is_dir());
    }

    #[test]
    #[should_panic(expected = "fixture folder")]
    fn a_missing_manufacturer_fails_loudly() {
        shared_fixtures("no-such-manufacturer");
    }

    #[test]
    #[should_panic(expected = "recorded host")]
    fn a_missing_recorded_host_fails_loudly() {
        recorded_host("no-such-host");
    }

    #[test]
    fn copy_tree_keeps_links_as_links() {
        let tmp = tempfile::tempdir().unwrap();
        let from = tmp.path().join("from");
        std::fs::create_dir_all(from.join("sys/devices/x")).unwrap();
        std::fs::write(from.join("sys/devices/x/vendor"), "0x10de\n").unwrap();
        std::os::unix::fs::symlink("devices/x", from.join("sys/link")).unwrap();
        std::os::unix::fs::symlink("nowhere", from.join("dangling")).unwrap();
        std::fs::write(from.join(".hidden"), "h").unwrap();
        let to = tmp.path().join("to/deeper");
        copy_tree(&from, &to).unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("sys/devices/x/vendor")).unwrap(),
            "0x10de\n"
        );
        let link = to.join("sys/link");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("devices/x"));
        assert!(link.join("vendor").is_file());
        assert_eq!(
            std::fs::read_link(to.join("dangling")).unwrap(),
            Path::new("nowhere")
        );
        assert_eq!(std::fs::read_to_string(to.join(".hidden")).unwrap(), "h");
        assert!(copy_tree(&tmp.path().join("absent"), &tmp.path().join("x")).is_err());
    }

    #[test]
    fn a_copied_recorded_host_is_the_recording() {
        let name = file_names(&recorded_hosts()).into_iter().next().unwrap();
        let copy = copy_recorded(&name);
        assert_eq!(file_names(copy.path()), file_names(&recorded_host(&name)));
    }

    #[test]
    fn unmatched_files_are_named_on_either_side() {
        let u = unmatched(["a", "b", "c"], ["b", "c", "d"]);
        assert_eq!(u.without_expectation, vec!["a"]);
        assert_eq!(u.without_file, vec!["d"]);
        assert!(!u.is_empty());
        assert!(unmatched(["a"], ["a"]).is_empty());
        assert_same_files("same", ["x", "y"], ["y", "x"]);
    }

    #[test]
    fn a_file_without_expectation_fails_naming_it() {
        let result = std::panic::catch_unwind(|| {
            assert_same_files("corpus", ["new.txt", "old.txt"], ["old.txt"])
        });
        let message = result.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("corpus"), "{message}");
        assert!(message.contains("\"new.txt\""), "{message}");
    }

    #[test]
    fn an_expectation_without_file_fails_naming_it() {
        let result = std::panic::catch_unwind(|| {
            assert_same_files("corpus", ["old.txt"], ["gone.txt", "old.txt"])
        });
        let message = result.unwrap_err().downcast::<String>().unwrap();
        assert!(
            message.contains("expectations without files [\"gone.txt\"]"),
            "{message}"
        );
    }

    /// The `[section]` each line naming the kit is in, for every crate's manifest.
    fn kit_sections(manifest: &str) -> Vec<String> {
        let mut section = String::new();
        let mut found = Vec::new();
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_string();
            } else if line.starts_with("accel-testkit") {
                found.push(section.clone());
            }
        }
        found
    }

    #[test]
    fn only_dev_dependencies_name_the_kit() {
        assert_eq!(
            kit_sections("[dependencies]\naccel-testkit.workspace = true\n"),
            vec!["[dependencies]"]
        );
        let crates = workspace_root().join("crates");
        let mut users = 0;
        for name in file_names(&crates) {
            let Ok(manifest) = std::fs::read_to_string(crates.join(&name).join("Cargo.toml"))
            else {
                continue;
            };
            for section in kit_sections(&manifest) {
                assert!(
                    section.ends_with("dev-dependencies]"),
                    "crates/{name}/Cargo.toml names accel-testkit under {section}: the kit is for tests only"
                );
                users += 1;
            }
        }
        assert!(users > 0, "no crate uses the kit");
    }

    #[test]
    fn captures_are_read_recursively_in_path_order() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("a/tree/sub")).unwrap();
        std::fs::create_dir_all(tmp.path().join("b")).unwrap();
        std::fs::write(tmp.path().join("a/tree/sub/2"), "two").unwrap();
        std::fs::write(tmp.path().join("a/1"), "one").unwrap();
        std::fs::write(tmp.path().join("b/3"), "three").unwrap();
        std::os::unix::fs::symlink("..", tmp.path().join("a/tree/loop")).unwrap();
        let all = read_captures(tmp.path(), &["b", "a"]);
        assert_eq!(
            all,
            vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
        );
        std::fs::create_dir_all(tmp.path().join("empty")).unwrap();
        assert!(std::panic::catch_unwind(|| read_captures(tmp.path(), &["empty"])).is_err());
    }
}
