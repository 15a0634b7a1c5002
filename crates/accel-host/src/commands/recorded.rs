//! `RecordedCommands`: replays the programs of a recorded host (DESIGN.md, "A recorded host").
//!
//! `DIR/commands/NAME/` holds `argv` (one argument a line), `stdout` (absent: nothing), `stderr`
//! (optional), `status` (exit status as text, absent: 0; `signal` for a program ended by a
//! signal), `delay-ms` (optional; longer than the caller's deadline means the program hangs) and
//! `timed-out` (written by `record` when the program gave no answer in time: replay hangs and
//! returns what was recorded as partial output) and `stdin` (optional: what the program was fed
//! on its standard input, for a tool that asks its questions there, `cnmon smlu -CP`). Replay
//! matches the exact argv, and the exact input: a folder with `stdin` answers only
//! [`Commands::run_with_input`] with those bytes, one without answers only [`Commands::run`].
//! An argv (and input) not recorded behaves like a program that is not installed, and a program
//! counts as installed when any argv of it is recorded. Everything is read once, at load; a folder that cannot be read is
//! an error naming the file, never a silently missing program.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use super::system::argv_text;
use super::{CommandError, CommandOutput, Commands, TIMED_OUT_MARKER};

/// The folder of a recorded host that holds its programs.
pub const COMMANDS_DIR: &str = "commands";

/// The text a `status` file holds for a program ended by a signal (it has no exit status).
pub const SIGNAL_STATUS: &str = "signal";

/// A recorded host's programs that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ReplayLoadError {
    /// A file or folder could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A recorded command has no `argv` file, or it names no program.
    #[error("{path}: missing or empty argv (one argument a line, the program first)")]
    NoArgv { path: PathBuf },
    /// A `status` file holds neither an integer nor `signal`.
    #[error("{path}: bad exit status {text:?} (expected an integer such as 0, or \"signal\")")]
    BadStatus { path: PathBuf, text: String },
    /// A `delay-ms` file holds no whole number of milliseconds.
    #[error("{path}: bad delay {text:?} (expected whole milliseconds such as 1500)")]
    BadDelay { path: PathBuf, text: String },
    /// Two folders record the same argv (and the same input), so replay could not choose.
    #[error("{first} and {second}: both record the argv {argv:?}")]
    Duplicate {
        first: PathBuf,
        second: PathBuf,
        argv: String,
    },
    /// A file is not UTF-8 text where text is required.
    #[error("{path}: not UTF-8 text")]
    NotText { path: PathBuf },
}

/// How a recorded program ends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    /// It answers after `delay` (zero when none was recorded); past the caller's deadline it
    /// counts as hung, with nothing printed.
    After(Duration),
    /// It was recorded hanging: it never answers, and what it printed before is the partial
    /// output.
    Never,
}

/// One recorded program run.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recording {
    folder: PathBuf,
    argv: Vec<String>,
    /// What it was fed on standard input (`None`: nothing, the program was run without input).
    input: Option<Vec<u8>>,
    output: CommandOutput,
    ending: Ending,
}

/// Replays the programs recorded under `DIR/commands/`.
#[derive(Debug, Clone, Default)]
pub struct RecordedCommands {
    recordings: Vec<Recording>,
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, ReplayLoadError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReplayLoadError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn read_optional_text(path: &Path) -> Result<Option<String>, ReplayLoadError> {
    match read_optional(path)? {
        None => Ok(None),
        Some(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| ReplayLoadError::NotText {
                path: path.to_path_buf(),
            }),
    }
}

/// The arguments of an `argv` file: one a line, a final newline optional.
pub fn parse_argv(text: &str) -> Vec<String> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    if body.is_empty() {
        return Vec::new();
    }
    body.split('\n').map(str::to_string).collect()
}

/// An exit status as a `status` file spells it: an integer, or `signal` (`None`).
pub fn parse_status(text: &str) -> Option<Option<i32>> {
    let text = text.trim();
    if text == SIGNAL_STATUS {
        return Some(None);
    }
    text.parse::<i32>().ok().map(Some)
}

fn load_one(folder: &Path) -> Result<Recording, ReplayLoadError> {
    let argv_path = folder.join("argv");
    let argv = read_optional_text(&argv_path)?
        .map(|text| parse_argv(&text))
        .unwrap_or_default();
    if argv.first().is_none_or(|program| program.is_empty()) {
        return Err(ReplayLoadError::NoArgv { path: argv_path });
    }
    let status_path = folder.join("status");
    let status = match read_optional_text(&status_path)? {
        None => Some(0),
        Some(text) => parse_status(&text).ok_or_else(|| ReplayLoadError::BadStatus {
            path: status_path,
            text: text.trim().to_string(),
        })?,
    };
    let delay_path = folder.join("delay-ms");
    let delay = match read_optional_text(&delay_path)? {
        None => Duration::ZERO,
        Some(text) => text
            .trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| ReplayLoadError::BadDelay {
                path: delay_path,
                text: text.trim().to_string(),
            })?,
    };
    let ending = if read_optional(&folder.join(TIMED_OUT_MARKER))?.is_some() {
        Ending::Never
    } else {
        Ending::After(delay)
    };
    Ok(Recording {
        folder: folder.to_path_buf(),
        argv,
        input: read_optional(&folder.join("stdin"))?,
        output: CommandOutput {
            status,
            stdout: read_optional(&folder.join("stdout"))?.unwrap_or_default(),
            stderr: read_optional(&folder.join("stderr"))?.unwrap_or_default(),
        },
        ending,
    })
}

impl RecordedCommands {
    /// No programs at all: every program is not installed.
    pub fn empty() -> Self {
        RecordedCommands::default()
    }

    /// Loads the programs of the recorded host `dir` (its `commands/` folder; a host without
    /// one has no programs installed).
    pub fn load(dir: &Path) -> Result<Self, ReplayLoadError> {
        let commands_dir = dir.join(COMMANDS_DIR);
        let entries = match std::fs::read_dir(&commands_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::empty()),
            Err(source) => {
                return Err(ReplayLoadError::Io {
                    path: commands_dir,
                    source,
                });
            }
        };
        let mut folders = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| ReplayLoadError::Io {
                path: commands_dir.clone(),
                source,
            })?;
            let path = entry.path();
            let is_dir = std::fs::metadata(&path)
                .map_err(|source| ReplayLoadError::Io {
                    path: path.clone(),
                    source,
                })?
                .is_dir();
            // Loose files (a README, NOTES.md) sit beside the command folders.
            if is_dir {
                folders.push(path);
            }
        }
        folders.sort();
        let mut recordings: Vec<Recording> = Vec::with_capacity(folders.len());
        for folder in folders {
            let recording = load_one(&folder)?;
            if let Some(earlier) = recordings
                .iter()
                .find(|r| r.argv == recording.argv && r.input == recording.input)
            {
                return Err(ReplayLoadError::Duplicate {
                    first: earlier.folder.clone(),
                    second: recording.folder,
                    argv: recording.argv.join(" "),
                });
            }
            recordings.push(recording);
        }
        Ok(RecordedCommands { recordings })
    }

    /// The recorded argvs, in folder order.
    pub fn argvs(&self) -> impl Iterator<Item = &[String]> {
        self.recordings.iter().map(|r| r.argv.as_slice())
    }
}

impl Commands for RecordedCommands {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        self.replay(argv, None, deadline)
    }

    fn run_with_input(
        &self,
        argv: &[&str],
        input: &[u8],
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        self.replay(argv, Some(input), deadline)
    }

    fn is_installed(&self, program: &str) -> bool {
        self.recordings
            .iter()
            .any(|r| r.argv.first().is_some_and(|p| p == program))
    }
}

impl RecordedCommands {
    /// The recording of `argv` fed `input`, answered as it ended.
    fn replay(
        &self,
        argv: &[&str],
        input: Option<&[u8]>,
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        let Some(program) = argv.first() else {
            return Err(CommandError::Empty);
        };
        let Some(recording) = self
            .recordings
            .iter()
            .find(|r| r.argv == argv && r.input.as_deref() == input)
        else {
            return Err(CommandError::NotInstalled {
                program: program.to_string(),
            });
        };
        let timed_out = |partial| CommandError::TimedOut {
            argv: argv_text(argv),
            deadline,
            partial,
        };
        match recording.ending {
            // A hang is waited out for real, as the caller would on the node.
            Ending::Never => {
                thread::sleep(deadline);
                Err(timed_out(CommandOutput {
                    status: None,
                    ..recording.output.clone()
                }))
            }
            Ending::After(delay) if delay > deadline => {
                thread::sleep(deadline);
                Err(timed_out(CommandOutput::default()))
            }
            Ending::After(delay) => {
                thread::sleep(delay);
                Ok(recording.output.clone())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn command(dir: &Path, name: &str, files: &[(&str, &str)]) {
        let folder = dir.join(COMMANDS_DIR).join(name);
        std::fs::create_dir_all(&folder).unwrap();
        for (file, text) in files {
            std::fs::write(folder.join(file), text).unwrap();
        }
    }

    const LONG: Duration = Duration::from_secs(20);

    #[test]
    fn replays_the_exact_argv_only() {
        let dir = tempfile::tempdir().unwrap();
        command(
            dir.path(),
            "smi-xml",
            &[
                ("argv", "nvidia-smi\n-q\n-x\n"),
                ("stdout", "<xml/>"),
                ("stderr", "warn"),
            ],
        );
        command(
            dir.path(),
            "topo",
            &[("argv", "nvidia-smi\ntopo\n-m"), ("status", "3\n")],
        );
        std::fs::write(dir.path().join(COMMANDS_DIR).join("NOTES.md"), "x").unwrap();
        let commands = RecordedCommands::load(dir.path()).unwrap();

        let out = commands.run(&["nvidia-smi", "-q", "-x"], LONG).unwrap();
        assert_eq!(out.stdout_text(), "<xml/>");
        assert_eq!(out.stderr_text(), "warn");
        assert_eq!(out.status, Some(0), "no status file means 0");

        let topo = commands.run(&["nvidia-smi", "topo", "-m"], LONG).unwrap();
        assert_eq!(topo.status, Some(3));
        assert!(topo.stdout.is_empty(), "no stdout file means nothing");

        assert!(commands.is_installed("nvidia-smi"));
        assert!(!commands.is_installed("rocm-smi"));
        for unrecorded in [
            &["nvidia-smi", "-q"][..],
            &["nvidia-smi", "-q", "-x", "-i", "0"],
            &["nvidia-smi", "-x", "-q"],
        ] {
            assert!(
                matches!(
                    commands.run(unrecorded, LONG),
                    Err(CommandError::NotInstalled { ref program }) if program == "nvidia-smi"
                ),
                "{unrecorded:?}"
            );
        }
        assert!(matches!(
            commands.run(&["rocm-smi"], LONG),
            Err(CommandError::NotInstalled { .. })
        ));
        assert_eq!(commands.argvs().count(), 2);
    }

    #[test]
    fn a_recorded_input_is_part_of_what_is_matched() {
        let dir = tempfile::tempdir().unwrap();
        let argv = "cnmon\nsmlu\n-c\n0\n-CP\n";
        command(
            dir.path(),
            "cp-25",
            &[
                ("argv", argv),
                ("stdin", "25\n4096\n"),
                ("stdout", "profile 3"),
            ],
        );
        command(
            dir.path(),
            "cp-50",
            &[
                ("argv", argv),
                ("stdin", "50\n4096\n"),
                ("stdout", "profile 4"),
            ],
        );
        command(dir.path(), "cp-none", &[("argv", argv), ("stdout", "asks")]);
        let commands = RecordedCommands::load(dir.path()).unwrap();
        let cp = ["cnmon", "smlu", "-c", "0", "-CP"];
        let answer = |input: &[u8]| {
            commands
                .run_with_input(&cp, input, LONG)
                .map(|o| o.stdout_text())
        };
        assert_eq!(answer(b"25\n4096\n").unwrap(), "profile 3");
        assert_eq!(answer(b"50\n4096\n").unwrap(), "profile 4");
        assert_eq!(commands.run(&cp, LONG).unwrap().stdout_text(), "asks");
        assert!(
            matches!(
                answer(b"75\n4096\n"),
                Err(CommandError::NotInstalled { .. })
            ),
            "an input not recorded is not recorded"
        );
        // Only the input is told apart: the same argv and input twice cannot be chosen between.
        command(
            dir.path(),
            "cp-25-again",
            &[("argv", argv), ("stdin", "25\n4096\n")],
        );
        let message = RecordedCommands::load(dir.path()).unwrap_err().to_string();
        assert!(message.contains("both record the argv"), "{message}");
    }

    #[test]
    fn a_runner_that_cannot_feed_input_says_so_and_runs_nothing() {
        struct Plain;
        impl Commands for Plain {
            fn run(&self, _: &[&str], _: Duration) -> Result<CommandOutput, CommandError> {
                panic!("never run without its input")
            }
            fn is_installed(&self, _: &str) -> bool {
                true
            }
        }
        match Plain.run_with_input(&["cnmon", "smlu"], b"1\n", LONG) {
            Err(CommandError::Io { argv, source }) => {
                assert_eq!(argv, "cnmon smlu");
                assert_eq!(source.kind(), std::io::ErrorKind::Unsupported);
            }
            other => panic!("expected an unsupported input, got {other:?}"),
        }
    }

    #[test]
    fn a_host_without_commands_has_no_programs() {
        let dir = tempfile::tempdir().unwrap();
        let commands = RecordedCommands::load(dir.path()).unwrap();
        assert!(!commands.is_installed("nvidia-smi"));
        assert!(matches!(
            commands.run(&["nvidia-smi"], LONG),
            Err(CommandError::NotInstalled { .. })
        ));
    }

    #[test]
    fn a_delay_past_the_deadline_hangs_until_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        command(
            dir.path(),
            "hang",
            &[
                ("argv", "nvidia-smi\n-q\n-x\n"),
                ("stdout", "never seen"),
                ("delay-ms", "600000\n"),
            ],
        );
        let commands = RecordedCommands::load(dir.path()).unwrap();
        let started = Instant::now();
        let err = commands
            .run(&["nvidia-smi", "-q", "-x"], Duration::from_millis(150))
            .unwrap_err();
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(150), "did not wait: {took:?}");
        assert!(took < Duration::from_secs(5), "waited too long: {took:?}");
        match err {
            CommandError::TimedOut {
                deadline, partial, ..
            } => {
                assert_eq!(deadline, Duration::from_millis(150));
                assert_eq!(partial, CommandOutput::default());
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    #[test]
    fn a_delay_within_the_deadline_only_delays() {
        let dir = tempfile::tempdir().unwrap();
        command(
            dir.path(),
            "slow",
            &[
                ("argv", "nvidia-smi\n-L\n"),
                ("stdout", "GPU 0"),
                ("delay-ms", "100"),
            ],
        );
        let commands = RecordedCommands::load(dir.path()).unwrap();
        let started = Instant::now();
        let out = commands.run(&["nvidia-smi", "-L"], LONG).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(out.stdout_text(), "GPU 0");
    }

    #[test]
    fn a_recorded_hang_returns_its_partial_output() {
        let dir = tempfile::tempdir().unwrap();
        command(
            dir.path(),
            "hung",
            &[
                ("argv", "nvidia-smi\n-q\n-x\n"),
                ("stdout", "<?xml"),
                (TIMED_OUT_MARKER, "no answer within 30s, killed"),
            ],
        );
        let commands = RecordedCommands::load(dir.path()).unwrap();
        match commands.run(&["nvidia-smi", "-q", "-x"], Duration::from_millis(50)) {
            Err(CommandError::TimedOut { partial, .. }) => {
                assert_eq!(partial.stdout_text(), "<?xml");
                assert_eq!(partial.status, None);
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    #[test]
    fn signal_status_replays_as_no_status() {
        let dir = tempfile::tempdir().unwrap();
        command(dir.path(), "s", &[("argv", "x"), ("status", "signal")]);
        let commands = RecordedCommands::load(dir.path()).unwrap();
        assert_eq!(commands.run(&["x"], LONG).unwrap().status, None);
    }

    fn load_error(files: &[(&str, &str)]) -> String {
        let dir = tempfile::tempdir().unwrap();
        command(dir.path(), "bad", files);
        RecordedCommands::load(dir.path()).unwrap_err().to_string()
    }

    #[test]
    fn loading_errors_name_the_file() {
        let status = load_error(&[("argv", "nvidia-smi"), ("status", "zero")]);
        assert!(
            status.contains("bad/status: bad exit status \"zero\""),
            "{status}"
        );
        let delay = load_error(&[("argv", "nvidia-smi"), ("delay-ms", "1.5s")]);
        assert!(
            delay.contains("bad/delay-ms: bad delay \"1.5s\""),
            "{delay}"
        );
        let argv = load_error(&[("stdout", "x")]);
        assert!(argv.contains("bad/argv: missing or empty argv"), "{argv}");
        let empty = load_error(&[("argv", "\n")]);
        assert!(empty.contains("bad/argv"), "{empty}");
        for message in [status, delay, argv, empty] {
            assert!(!message.contains('\n'), "one line: {message}");
        }
    }

    #[test]
    fn an_unreadable_commands_folder_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the folder should be cannot be listed.
        std::fs::write(dir.path().join(COMMANDS_DIR), "not a folder").unwrap();
        let message = RecordedCommands::load(dir.path()).unwrap_err().to_string();
        assert!(message.contains(COMMANDS_DIR), "{message}");
    }

    #[test]
    fn two_recordings_of_one_argv_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        command(dir.path(), "a", &[("argv", "nvidia-smi\n-L")]);
        command(dir.path(), "b", &[("argv", "nvidia-smi\n-L\n")]);
        let message = RecordedCommands::load(dir.path()).unwrap_err().to_string();
        assert!(message.contains("both record the argv"), "{message}");
    }

    #[test]
    fn argv_lines_keep_empty_arguments() {
        assert_eq!(parse_argv("a\n\nb\n"), vec!["a", "", "b"]);
        assert_eq!(parse_argv("a"), vec!["a"]);
        assert!(parse_argv("").is_empty());
        assert_eq!(parse_status(" 6\n"), Some(Some(6)));
        assert_eq!(parse_status("-1"), Some(Some(-1)));
        assert_eq!(parse_status("x"), None);
    }

    proptest::proptest! {
        #[test]
        fn recorded_files_never_panic_and_argv_lines_round_trip(
            program in "[^\n]{1,12}",
            rest in proptest::collection::vec("[^\n]{0,12}", 0..5),
            status in ".{0,12}",
        ) {
            // A program is never empty (an empty argv file is refused at load).
            let args: Vec<String> = std::iter::once(program).chain(rest).collect();
            let mut text = String::new();
            for arg in &args {
                text.push_str(arg);
                text.push('\n');
            }
            proptest::prop_assert_eq!(parse_argv(&text), args);
            let _ = parse_status(&status);
        }
    }
}
