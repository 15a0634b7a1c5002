//! One module per subcommand: its arguments and its `run`.

pub mod admit;
pub mod cleanup;
pub mod cpu_key;
pub mod detect;
pub mod doctor;
pub mod labels;
pub mod monitor;
pub mod record;
pub mod refresh;
pub mod reset;
pub mod serve;
pub mod worker;
pub mod xids;
