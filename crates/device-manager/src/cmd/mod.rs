//! One module per subcommand: its arguments and its `run`.

pub mod detect;
pub mod labels;
pub mod record;
pub mod serve;
