//! A bounded run with one typed failure: what every vendor tool call goes through, so that "not
//! installed", "no answer", "exited non-zero" and "could not start" are each told one way.
//!
//! [`Commands::run`] answers any exit status as `Ok`; most callers want the output of a program
//! that succeeded and one error otherwise. [`run_bounded`] is that: status 0 is `Ok`, anything
//! else is a [`RunFailure`] naming the argv. Exit status 127 is "not installed" (the shell's
//! "command not found", and what the image's host-tool wrappers exit when the host lacks the
//! tool, `deploy/image/amd-smi`). A failure keeps what the program printed, so a caller that
//! reads a refusal (`nvidia-smi mig` answering "No GPU instances found" with exit 6) still can.
//! This module runs and words; it must not interpret a tool's output beyond its first line.

use std::time::Duration;

use crate::commands::{CommandError, CommandOutput, Commands};

/// The exit status of a program that was not found: the shell's, and the image's host-tool
/// wrappers' when the host lacks the tool.
pub const NOT_FOUND_STATUS: i32 = 127;

/// Why a bounded run gave no successful answer. Each variant is worded once; callers add their
/// subject in front (`amd-smi: …`) or map [`RunFailure::NotInstalled`] to their own hint.
#[derive(Debug, thiserror::Error)]
pub enum RunFailure {
    /// The program is not on the PATH, not recorded (a recorded host without this argv), or
    /// exited 127 (not found on the host). `looked` says where it was looked for, when the
    /// runner knows ([`Commands::search_note`]: a host tool's places under the host root).
    #[error("{argv}: {program}: not found{}", looked.as_ref().map(|l| format!(" ({l})")).unwrap_or_default())]
    NotInstalled {
        argv: String,
        program: String,
        looked: Option<String>,
    },
    /// No answer within the deadline; the program was killed. What it printed is kept.
    #[error("{argv}: no answer within {deadline:?}, killed")]
    TimedOut {
        argv: String,
        deadline: Duration,
        partial: CommandOutput,
    },
    /// The program ended with a status other than 0 (`None`: ended by a signal). `said` is the
    /// first non-blank line of its standard error, else of its standard output, else
    /// `no output`; `output` is everything it printed.
    #[error("{argv}: {}: {said}", ended(*status))]
    Exited {
        argv: String,
        status: Option<i32>,
        said: String,
        output: CommandOutput,
    },
    /// The program could not be started or waited for.
    #[error("{argv}: {source}")]
    Io {
        argv: String,
        #[source]
        source: std::io::Error,
    },
    /// The argv was empty (a caller's bug, never a host's state).
    #[error("empty command line")]
    Empty,
}

impl RunFailure {
    /// The failure of `argv` that answered `output` with a status other than 0, for a caller
    /// that ran it through [`Commands::run`] because it reads the refusal's text (exit 127 is
    /// [`RunFailure::NotInstalled`] here too).
    pub fn exited(argv: &[&str], output: CommandOutput) -> Self {
        let line = argv.join(" ");
        match output.status {
            Some(NOT_FOUND_STATUS) => RunFailure::NotInstalled {
                argv: line,
                program: argv.first().map_or_else(String::new, |p| p.to_string()),
                looked: None,
            },
            status => RunFailure::Exited {
                argv: line,
                status,
                said: first_said_line(&output),
                output,
            },
        }
    }

    /// What the program printed before it failed, when it ran at all.
    pub fn output(&self) -> Option<&CommandOutput> {
        match self {
            RunFailure::TimedOut { partial, .. } => Some(partial),
            RunFailure::Exited { output, .. } => Some(output),
            _ => None,
        }
    }

    /// The exit status of a program that ended non-zero (`None` for every other failure and for
    /// a signal).
    pub fn status(&self) -> Option<i32> {
        match self {
            RunFailure::Exited { status, .. } => *status,
            _ => None,
        }
    }

    /// Replaces what an [`RunFailure::Exited`] program is said to have printed (a caller that
    /// joins a multi-line explanation into one line); other failures are returned unchanged.
    pub fn with_said(self, text: String) -> Self {
        match self {
            RunFailure::Exited {
                argv,
                status,
                output,
                ..
            } => RunFailure::Exited {
                argv,
                status,
                said: text,
                output,
            },
            other => other,
        }
    }
}

/// "status 3", or "ended by a signal".
fn ended(status: Option<i32>) -> String {
    match status {
        Some(status) => format!("exited with status {status}"),
        None => "ended by a signal".to_string(),
    }
}

/// The first non-blank line of standard error, else of standard output, else `no output`.
pub fn first_said_line(output: &CommandOutput) -> String {
    let stderr = output.stderr_text();
    let stdout = output.stdout_text();
    stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output")
        .to_string()
}

/// Runs `argv` within `deadline`: the output when it exits 0, else the one typed failure.
pub fn run_bounded(
    commands: &dyn Commands,
    argv: &[&str],
    deadline: Duration,
) -> Result<CommandOutput, RunFailure> {
    let output = run_answered(commands, argv, None, deadline)?;
    if output.success() {
        return Ok(output);
    }
    Err(RunFailure::exited(argv, output))
}

/// Runs `argv` within `deadline` (`input`, when given, fed to its standard input) and answers
/// what it printed **whatever its exit status**, for a tool whose refusals exit 0 and are told
/// by their words (cnmon's `Permission denied.`): only a run that gave no answer is a failure —
/// not installed (exit 127 included), no answer in time, not started.
pub fn run_answered(
    commands: &dyn Commands,
    argv: &[&str],
    input: Option<&[u8]>,
    deadline: Duration,
) -> Result<CommandOutput, RunFailure> {
    if argv.is_empty() {
        return Err(RunFailure::Empty);
    }
    let line = argv.join(" ");
    let ran = match input {
        Some(input) => commands.run_with_input(argv, input, deadline),
        None => commands.run(argv, deadline),
    };
    let output = ran.map_err(|e| match e {
        CommandError::NotInstalled { program } => RunFailure::NotInstalled {
            argv: line.clone(),
            looked: commands.search_note(&program),
            program,
        },
        CommandError::TimedOut {
            deadline, partial, ..
        } => RunFailure::TimedOut {
            argv: line.clone(),
            deadline,
            partial,
        },
        CommandError::Io { source, .. } => RunFailure::Io {
            argv: line.clone(),
            source,
        },
        CommandError::Empty => RunFailure::Empty,
    })?;
    if output.status == Some(NOT_FOUND_STATUS) {
        return Err(RunFailure::exited(argv, output));
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordedCommands;

    /// A fake that answers every call with one scripted result.
    struct Answer(fn() -> Result<CommandOutput, CommandError>);

    impl Commands for Answer {
        fn run(&self, _: &[&str], _: Duration) -> Result<CommandOutput, CommandError> {
            (self.0)()
        }
        fn is_installed(&self, _: &str) -> bool {
            true
        }
    }

    fn exited(status: Option<i32>, stdout: &str, stderr: &str) -> CommandOutput {
        CommandOutput {
            status,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn status_zero_is_the_output() {
        let commands = Answer(|| Ok(exited(Some(0), "fine\n", "a warning\n")));
        let out = run_bounded(&commands, &["tool", "list"], SECOND).unwrap();
        assert_eq!(out.stdout_text(), "fine\n");
    }

    #[test]
    fn a_non_zero_exit_names_the_argv_status_and_first_line() {
        let commands = Answer(|| Ok(exited(Some(6), "No GPU instances found\n", "\n  \n")));
        let e = run_bounded(&commands, &["nvidia-smi", "mig", "-lgi"], SECOND).unwrap_err();
        assert_eq!(
            e.to_string(),
            "nvidia-smi mig -lgi: exited with status 6: No GPU instances found"
        );
        assert_eq!(e.status(), Some(6));
        assert_eq!(
            e.output().map(CommandOutput::stdout_text).as_deref(),
            Some("No GPU instances found\n")
        );
        // Standard error comes first when it says something; nothing at all is said so.
        let commands = Answer(|| Ok(exited(Some(2), "usage\n", "  bad flag  \nmore\n")));
        let e = run_bounded(&commands, &["tool"], SECOND).unwrap_err();
        assert_eq!(e.to_string(), "tool: exited with status 2: bad flag");
        let commands = Answer(|| Ok(exited(None, "", "")));
        let e = run_bounded(&commands, &["tool", "-x"], SECOND).unwrap_err();
        assert_eq!(e.to_string(), "tool -x: ended by a signal: no output");
        assert_eq!(e.status(), None);
    }

    #[test]
    fn exit_127_is_not_installed_like_a_missing_program() {
        let commands = Answer(|| Ok(exited(Some(127), "", "amd-smi: not on this host\n")));
        let e = run_bounded(&commands, &["amd-smi", "static"], SECOND).unwrap_err();
        assert!(
            matches!(&e, RunFailure::NotInstalled { program, .. } if program == "amd-smi"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "amd-smi static: amd-smi: not found");
        let e = run_bounded(&RecordedCommands::empty(), &["cnmon", "info"], SECOND).unwrap_err();
        assert!(matches!(&e, RunFailure::NotInstalled { program, .. } if program == "cnmon"));
        assert_eq!(e.to_string(), "cnmon info: cnmon: not found");
    }

    #[test]
    fn an_answered_run_is_read_whatever_its_status_but_127_is_not_installed() {
        let commands = Answer(|| Ok(exited(Some(1), "Permission denied.\n", "")));
        let out = run_answered(&commands, &["cnmon", "set"], None, SECOND).unwrap();
        assert_eq!(out.stdout_text(), "Permission denied.\n");
        let commands = Answer(|| Ok(exited(Some(127), "", "")));
        let e = run_answered(&commands, &["cnmon", "set"], None, SECOND).unwrap_err();
        assert!(matches!(e, RunFailure::NotInstalled { .. }), "{e:?}");
        // Input goes to the runner's input call; the plain fake cannot feed it.
        let e = run_answered(&commands, &["cnmon", "smlu"], Some(b"1\n"), SECOND).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cnmon smlu: this runner cannot feed a program's standard input"
        );
    }

    #[test]
    fn a_timeout_keeps_the_partial_output_and_says_the_deadline() {
        let commands = Answer(|| {
            Err(CommandError::TimedOut {
                argv: "ignored".into(),
                deadline: Duration::from_secs(30),
                partial: exited(None, "half", ""),
            })
        });
        let e = run_bounded(&commands, &["npu-smi", "info"], SECOND).unwrap_err();
        assert_eq!(e.to_string(), "npu-smi info: no answer within 30s, killed");
        assert_eq!(
            e.output().map(CommandOutput::stdout_text).as_deref(),
            Some("half")
        );
    }

    #[test]
    fn io_errors_and_empty_argvs_are_worded_once() {
        let commands = Answer(|| {
            Err(CommandError::Io {
                argv: "ignored".into(),
                source: std::io::Error::other("permission denied"),
            })
        });
        let e = run_bounded(&commands, &["mx-smi"], SECOND).unwrap_err();
        assert_eq!(e.to_string(), "mx-smi: permission denied");
        assert!(matches!(
            run_bounded(&commands, &[], SECOND),
            Err(RunFailure::Empty)
        ));
    }

    #[test]
    fn an_output_in_hand_is_worded_the_same() {
        let out = exited(Some(6), "No GPU instances found: Not Found\n", "");
        let e = RunFailure::exited(&["nvidia-smi", "mig", "-lgi"], out);
        assert_eq!(
            e.to_string(),
            "nvidia-smi mig -lgi: exited with status 6: No GPU instances found: Not Found"
        );
        let e = RunFailure::exited(&["hy-smi"], exited(Some(127), "", ""));
        assert_eq!(e.to_string(), "hy-smi: hy-smi: not found");
    }

    #[test]
    fn said_can_be_replaced_on_an_exit_only() {
        let commands = Answer(|| Ok(exited(Some(1), "line one\nline two\n", "")));
        let e = run_bounded(&commands, &["t"], SECOND).unwrap_err();
        let e = e.with_said("line one line two".into());
        assert_eq!(e.to_string(), "t: exited with status 1: line one line two");
        let missing = RunFailure::NotInstalled {
            argv: "t -x".into(),
            program: "t".into(),
            looked: None,
        }
        .with_said("x".into());
        assert_eq!(missing.to_string(), "t -x: t: not found");
        let looked = RunFailure::NotInstalled {
            argv: "t -x".into(),
            program: "t".into(),
            looked: Some("looked for in /usr/bin under the host root /host".into()),
        };
        assert_eq!(
            looked.to_string(),
            "t -x: t: not found (looked for in /usr/bin under the host root /host)"
        );
    }
}
