//! A recorded host whose vendor tool fails the way a live node's tool fails: not installed,
//! hanging past every deadline, exiting non-zero, or printing what no parser reads. The four
//! are what issue 42 item 3 asks of every manufacturer ("a failing tool never replaces what is
//! known"); a detector test copies a recorded host, breaks one program with [`fail_tool`] and
//! checks that the pass is not measured.
//!
//! The recording format is DESIGN.md's: `commands/NAME/{argv,stdout,stderr,status,delay-ms}`;
//! an argv that is not recorded behaves like a program that is not installed.

use std::path::{Path, PathBuf};

/// One way a vendor tool fails on a live node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFailure {
    /// Not installed: no argv of the program is recorded.
    Missing,
    /// Gives no answer within any deadline (`delay-ms` of an hour).
    Hangs,
    /// Exits with status 1, printing an error on standard error and nothing on standard output.
    ExitsNonZero,
    /// Exits 0 but prints text that is not the tool's output at all.
    Unreadable,
}

impl ToolFailure {
    /// The four, in the order the issue names them.
    pub const ALL: [ToolFailure; 4] = [
        ToolFailure::Missing,
        ToolFailure::Hangs,
        ToolFailure::ExitsNonZero,
        ToolFailure::Unreadable,
    ];
}

impl std::fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ToolFailure::Missing => "missing",
            ToolFailure::Hangs => "hangs",
            ToolFailure::ExitsNonZero => "exits non-zero",
            ToolFailure::Unreadable => "prints what cannot be read",
        })
    }
}

/// What [`ToolFailure::Unreadable`] prints: no vendor tool's table, JSON, key/value list or
/// XML, and no placeholder a parser could take for "nothing found".
pub const UNREADABLE_OUTPUT: &str =
    "\u{1b}[31m*** stack smashing detected ***: terminated\u{1b}[0m\n%%% 0x7f3a @@@ <<<\n";

/// What [`ToolFailure::ExitsNonZero`] prints on standard error.
pub const FAILED_STDERR: &str = "Error: failed to initialize the management library\n";

/// The recorded command folders of `program` under `host` (a recorded host folder), each with
/// its argv; panics when the host records none, which would make the test prove nothing.
pub fn recorded_commands(host: &Path, program: &str) -> Vec<(PathBuf, Vec<String>)> {
    let dir = host.join("commands");
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("recorded commands {}: {e}", dir.display()));
    let mut found = Vec::new();
    for entry in entries {
        let folder = entry
            .unwrap_or_else(|e| panic!("recorded commands {}: {e}", dir.display()))
            .path();
        let Ok(argv) = std::fs::read_to_string(folder.join("argv")) else {
            continue;
        };
        let argv: Vec<String> = argv.lines().map(str::to_string).collect();
        if argv.first().map(String::as_str) == Some(program) {
            found.push((folder, argv));
        }
    }
    found.sort();
    assert!(
        !found.is_empty(),
        "{} records no command of {program}: breaking it would prove nothing",
        host.display()
    );
    found
}

/// Makes every recorded command of `program` under `host` (a recorded host folder, changed in
/// place) fail as `failure` says. Other programs are left as recorded.
pub fn fail_tool(host: &Path, program: &str, failure: ToolFailure) {
    fail_commands(host, program, failure, |_| true);
}

/// As [`fail_tool`], for the recorded commands of `program` whose argv `which` accepts (a
/// test that breaks one query of a tool and keeps the others).
pub fn fail_commands(
    host: &Path,
    program: &str,
    failure: ToolFailure,
    which: impl Fn(&[String]) -> bool,
) {
    let mut changed = 0;
    for (folder, argv) in recorded_commands(host, program) {
        if !which(&argv) {
            continue;
        }
        changed += 1;
        let write = |name: &str, text: &str| {
            let path = folder.join(name);
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        };
        let remove = |name: &str| {
            let path = folder.join(name);
            if path.exists() {
                std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        };
        match failure {
            ToolFailure::Missing => std::fs::remove_dir_all(&folder)
                .unwrap_or_else(|e| panic!("{}: {e}", folder.display())),
            ToolFailure::Hangs => write("delay-ms", "3600000\n"),
            ToolFailure::ExitsNonZero => {
                write("status", "1\n");
                write("stdout", "");
                write("stderr", FAILED_STDERR);
                remove("delay-ms");
            }
            ToolFailure::Unreadable => {
                write("status", "0\n");
                write("stdout", UNREADABLE_OUTPUT);
                remove("stderr");
                remove("delay-ms");
            }
        }
    }
    assert!(
        changed > 0,
        "{}: no recorded command of {program} was chosen to fail",
        host.display()
    );
}

/// A temporary copy of the recorded host `testdata/hosts/<name>` whose `program` fails as
/// `failure` says.
pub fn copy_with_failing_tool(
    name: &str,
    program: &str,
    failure: ToolFailure,
) -> tempfile::TempDir {
    let copy = crate::copy_recorded(name);
    fail_tool(copy.path(), program, failure);
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_with(commands: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, argv) in commands {
            let folder = dir.path().join("commands").join(name);
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::write(folder.join("argv"), argv).unwrap();
            std::fs::write(folder.join("stdout"), "a real answer\n").unwrap();
        }
        dir
    }

    #[test]
    fn each_failure_changes_only_the_named_program() {
        for failure in ToolFailure::ALL {
            let host = host_with(&[("a", "cnmon\n"), ("b", "cnmon\ninfo\n"), ("c", "other\n")]);
            fail_tool(host.path(), "cnmon", failure);
            let a = host.path().join("commands/a");
            match failure {
                ToolFailure::Missing => {
                    assert!(!a.exists());
                    assert!(!host.path().join("commands/b").exists());
                }
                ToolFailure::Hangs => {
                    assert_eq!(
                        std::fs::read_to_string(a.join("delay-ms")).unwrap(),
                        "3600000\n"
                    )
                }
                ToolFailure::ExitsNonZero => {
                    assert_eq!(std::fs::read_to_string(a.join("status")).unwrap(), "1\n");
                    assert_eq!(std::fs::read_to_string(a.join("stdout")).unwrap(), "");
                }
                ToolFailure::Unreadable => assert_eq!(
                    std::fs::read_to_string(a.join("stdout")).unwrap(),
                    UNREADABLE_OUTPUT
                ),
            }
            let other = host.path().join("commands/c");
            assert_eq!(
                std::fs::read_to_string(other.join("stdout")).unwrap(),
                "a real answer\n",
                "{failure}: another program is left as recorded"
            );
        }
    }

    #[test]
    fn a_chosen_query_fails_alone() {
        let host = host_with(&[("a", "cnmon\n"), ("b", "cnmon\ninfo\n")]);
        fail_commands(host.path(), "cnmon", ToolFailure::ExitsNonZero, |argv| {
            argv.get(1).map(String::as_str) == Some("info")
        });
        assert!(!host.path().join("commands/a/status").exists());
        assert!(host.path().join("commands/b/status").exists());
    }

    #[test]
    #[should_panic(expected = "records no command of npu-smi")]
    fn a_program_never_recorded_is_refused() {
        let host = host_with(&[("a", "cnmon\n")]);
        fail_tool(host.path(), "npu-smi", ToolFailure::Hangs);
    }
}
