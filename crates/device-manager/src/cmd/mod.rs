//! One module per subcommand.

pub mod admit;
pub mod worker;
