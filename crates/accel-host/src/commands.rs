//! `Commands`: running a program with a deadline, the one seam through which vendor tools run.
//! On a live node the vendor tools run as the host installed them ([`HostTools`]: found under
//! the host root, run inside it).
//!
//! Every call carries a deadline (a wedged GPU can hang nvidia-smi). The system runner kills what
//! overruns and returns what it captured; the recorded runner replays a recorded host's
//! `commands/NAME/{argv,stdout,stderr,status,delay-ms}` folders (DESIGN.md, "A recorded host").
//! This module runs programs; it must not interpret their output.

use std::time::Duration;

mod host_tools;
pub(crate) mod recorded;
mod system;

pub use host_tools::{
    CHROOT, HOST_SEARCH_PATH, HostTools, NotAHostDir, ToolPlaces, parse_search_path,
    resolve_in_root,
};
pub use recorded::{COMMANDS_DIR, RecordedCommands, ReplayLoadError, SIGNAL_STATUS};
pub use system::SystemCommands;

/// The name of the file, in a recorded command's folder, that marks a command which gave no
/// answer within its deadline when it was recorded: replay then hangs until the caller's
/// deadline and returns the recorded partial output.
pub const TIMED_OUT_MARKER: &str = "timed-out";

/// What a program printed and how it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandOutput {
    /// Exit status; `None` when the program was ended by a signal.
    pub status: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl CommandOutput {
    /// Whether the program exited with status 0.
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    /// Standard output as text (invalid UTF-8 replaced).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Standard error as text (invalid UTF-8 replaced).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// A program that could not be run to its end.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The program is not installed (not on the PATH, or not recorded).
    #[error("{program}: not found")]
    NotInstalled { program: String },
    /// The program ran past its deadline and was killed; what it printed until then is kept.
    #[error("{argv}: no answer within {deadline:?}, killed")]
    TimedOut {
        argv: String,
        deadline: Duration,
        partial: CommandOutput,
    },
    /// The program could not be started or waited for.
    #[error("{argv}: {source}")]
    Io {
        argv: String,
        #[source]
        source: std::io::Error,
    },
    /// The argv was empty.
    #[error("empty command line")]
    Empty,
}

impl CommandError {
    /// The answer of a runner that cannot feed a program's standard input.
    pub fn input_unsupported(argv: &[&str]) -> CommandError {
        CommandError::Io {
            argv: argv.join(" "),
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "this runner cannot feed a program's standard input",
            ),
        }
    }
}

/// Runs programs for the readers.
pub trait Commands: Send + Sync {
    /// Runs `argv` (program first) and waits at most `deadline`. A non-zero exit is an `Ok`
    /// output with that status, not an error.
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError>;

    /// Runs `argv` as [`Commands::run`] does, with `input` written to its standard input and
    /// the pipe then closed: a tool that asks its questions on stdin (`cnmon smlu -c 0 -CP`
    /// reads an MLU quota and a memory size). The default is a runner that cannot feed input:
    /// [`CommandError::Io`] of kind [`std::io::ErrorKind::Unsupported`], the program never run
    /// (run with nothing on stdin, such a tool could wait for ever).
    fn run_with_input(
        &self,
        argv: &[&str],
        input: &[u8],
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        let _ = (input, deadline);
        Err(CommandError::input_unsupported(argv))
    }

    /// Whether `program` is installed at all.
    fn is_installed(&self, program: &str) -> bool;

    /// Where `program` is looked for, in words, for a message saying it is not installed
    /// (`looked for in /usr/bin:/opt/hyhal/bin under the host root /host`); `None` where the
    /// runner has nothing to say beyond "not found".
    fn search_note(&self, _program: &str) -> Option<String> {
        None
    }
}
