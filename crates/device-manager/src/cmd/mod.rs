//! One module per subcommand: its arguments and its `run`.

pub mod admit;
pub mod cleanup;
pub mod cpu_key;
pub mod demo;
pub mod detect;
pub mod doctor;
pub mod labels;
pub mod monitor;
pub mod preflight;
pub mod record;
pub mod refresh;
pub mod reset;
pub mod serve;
pub mod worker;
pub mod xids;

/// The output formats of the reporting subcommands (`detect`, `doctor`, `monitor`, `xids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For a person: a table, or lines under a header.
    Table,
    /// For a program: JSON.
    Json,
}
