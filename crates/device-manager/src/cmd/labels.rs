//! `device-manager labels`: the label map the node's NodeFeature would carry, as JSON.

use std::process::ExitCode;

use crate::node::NodeArgs;
use crate::settings::Settings;

/// Arguments of `labels`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub node: NodeArgs,
}

pub fn run(args: Args, settings: &Settings) -> anyhow::Result<ExitCode> {
    let (inventory, detections) = args.node.detect(settings)?;
    let mut failed = false;
    for detection in &detections {
        if let Err(e) = detection {
            eprintln!("device-manager: {e}");
            failed = true;
        }
    }
    let labels = accel_core::labels::labels_with(&inventory, settings.grammar().group_naming());
    println!("{}", serde_json::to_string_pretty(&labels)?);
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
