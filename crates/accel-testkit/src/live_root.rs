//! A live-looking root made from a recorded host: what a node shows the daemon in its image
//! (the host's `/` mounted at `HOST_ROOT`), with the vendor's tool at a usual host path as a
//! stand-in executable that answers the recording's commands by argv.
//!
//! The daemon runs a vendor tool *inside* the host root (`chroot`), so the stand-in must run
//! there too: it is a `#!/bin/sh` script using only the shell's built-ins, and the root gets a
//! shell as every Linux host has one (this machine's `/bin/sh` and the libraries `ldd` lists
//! for it, at the same paths). Entering a root needs root: [`chroot_allowed`] says whether this
//! process may, and [`skip_unless_chroot`] skips a test that needs it outside CI and fails it in
//! CI (which runs as root).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A live-looking root in `into` made from the recorded host `recorded`: what the node showed
/// under `/` sits at the top (`proc/…`, `sys/…`, `dev/…`), beside an empty `root/` as on every
/// Linux; no recording mark, no `commands/`.
pub fn live_root_from(recorded: &Path, into: &Path) {
    crate::copy_tree(&recorded.join("root"), into).unwrap_or_else(|e| {
        panic!(
            "copy {} to {}: {e}",
            recorded.join("root").display(),
            into.display()
        )
    });
    std::fs::create_dir_all(into.join("root"))
        .unwrap_or_else(|e| panic!("{}: {e}", into.display()));
    assert!(!into.join("recorded-host.json").exists());
    assert!(!into.join("commands").exists());
}

/// Whether this process may enter another root (it runs as root).
pub fn chroot_allowed() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// `true` when the test may go on; otherwise prints one `SKIPPED:` line and returns `false`,
/// or panics when `CI` is set (CI runs as root: a skip there would hide a failure).
pub fn skip_unless_chroot(test: &str) -> bool {
    if chroot_allowed() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: needs to run as root (the daemon enters the host root with chroot), and CI is set"
    );
    eprintln!("SKIPPED: {test}: needs root to enter a live-looking host root with chroot");
    false
}

/// Puts this machine's `/bin/sh` into `root` at `/bin/sh`, with the dynamic loader and the
/// libraries it links at the paths `ldd` gives, so a `#!/bin/sh` script runs inside `root`.
pub fn install_shell(root: &Path) {
    let shell = std::fs::canonicalize("/bin/sh").unwrap_or_else(|e| panic!("/bin/sh: {e}"));
    copy_into(root, &shell, Path::new("/bin/sh"));
    for library in linked_libraries(&shell) {
        let real = std::fs::canonicalize(&library)
            .unwrap_or_else(|e| panic!("{}: {e}", library.display()));
        copy_into(root, &real, &library);
    }
}

/// The files `ldd` lists for `program` (absolute paths; the vDSO has none).
fn linked_libraries(program: &Path) -> Vec<PathBuf> {
    let out = std::process::Command::new("ldd")
        .arg(program)
        .output()
        .unwrap_or_else(|e| panic!("ldd {}: {e}", program.display()));
    let text = String::from_utf8_lossy(&out.stdout);
    let libraries: Vec<PathBuf> = text
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect();
    assert!(
        out.status.success() || libraries.is_empty(),
        "ldd {}: {text}",
        program.display()
    );
    libraries
}

/// Copies the file `from` to `host_path` inside `root` (made with its directories; a path
/// through a link of the root, such as `/bin` → `usr/bin`, is taken as a plain directory).
fn copy_into(root: &Path, from: &Path, host_path: &Path) {
    let to = root.join(host_path.strip_prefix("/").unwrap_or(host_path));
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    std::fs::copy(from, &to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
}

/// Writes a stand-in `program` at `host_path` inside `root` that answers every argv of it the
/// recorded host `recorded` recorded, as recorded (standard output, standard error, exit
/// status), and anything else with an error and status 2. The answers are in the script
/// itself: nothing outside the root is read when it runs. Returns how many argvs it answers.
pub fn stand_in_tool(root: &Path, recorded: &Path, program: &str, host_path: &str) -> usize {
    let mut script = format!(
        "#!/bin/sh\n# A stand-in {program}, answering what {} recorded.\n",
        recorded.display()
    );
    let mut answered = 0;
    for (folder, argv) in crate::failing_tool::recorded_commands(recorded, program) {
        let read = |name: &str| std::fs::read(folder.join(name)).unwrap_or_default();
        let status = String::from_utf8_lossy(&read("status")).trim().to_string();
        let status = if status.is_empty() {
            "0".into()
        } else {
            status
        };
        let args = &argv[1..];
        let mut test = format!("[ \"$#\" = {} ]", args.len());
        for (i, arg) in args.iter().enumerate() {
            test.push_str(&format!(
                " && [ \"${{{}}}\" = {} ]",
                i + 1,
                quoted(arg.as_bytes())
            ));
        }
        script.push_str(&format!(
            "if {test}; then\n  printf '%s' {}\n  printf '%s' {} >&2\n  exit {status}\nfi\n",
            quoted(&read("stdout")),
            quoted(&read("stderr")),
        ));
        answered += 1;
    }
    script.push_str(&format!(
        "echo \"{program} (stand-in): no recorded answer for: $*\" >&2\nexit 2\n"
    ));
    let path = root.join(host_path.trim_start_matches('/'));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    std::fs::write(&path, script).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    answered
}

/// `bytes` as one single-quoted shell word.
fn quoted(bytes: &[u8]) -> String {
    assert!(
        !bytes.contains(&0),
        "a recorded answer with a NUL byte cannot be a shell word"
    );
    let text = String::from_utf8_lossy(bytes);
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_quoted_word_keeps_every_byte() {
        assert_eq!(quoted(b"it's\n"), "'it'\\''s\n'");
        assert_eq!(quoted(b""), "''");
    }

    #[test]
    fn the_stand_in_answers_the_recorded_argv_exactly() {
        let recorded = tempfile::tempdir().unwrap();
        for (name, argv, stdout, status) in [
            ("a", "acme-smi\n-q\n", "it's a table\n", None),
            ("b", "acme-smi\n-q\n-i\n0\n", "card 0\n", Some("3")),
        ] {
            let folder = recorded.path().join("commands").join(name);
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::write(folder.join("argv"), argv).unwrap();
            std::fs::write(folder.join("stdout"), stdout).unwrap();
            if let Some(status) = status {
                std::fs::write(folder.join("status"), status).unwrap();
            }
        }
        let root = tempfile::tempdir().unwrap();
        let answered = stand_in_tool(
            root.path(),
            recorded.path(),
            "acme-smi",
            "/opt/acme/bin/acme-smi",
        );
        assert_eq!(answered, 2);
        let tool = root.path().join("opt/acme/bin/acme-smi");
        let run = |args: &[&str]| {
            std::process::Command::new(&tool)
                .args(args)
                .output()
                .unwrap()
        };
        let out = run(&["-q"]);
        assert_eq!(out.stdout, b"it's a table\n");
        assert_eq!(out.status.code(), Some(0));
        let out = run(&["-q", "-i", "0"]);
        assert_eq!(out.stdout, b"card 0\n");
        assert_eq!(out.status.code(), Some(3));
        let out = run(&["-q", "-i"]);
        assert_eq!(out.status.code(), Some(2), "an argv not recorded");
    }
}
