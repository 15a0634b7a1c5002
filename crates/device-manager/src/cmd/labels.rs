//! `device-manager labels`: the label map the node's NodeFeature would carry, as JSON — the
//! accelerators' labels and the `feature.gpustack.ai/rdma.*` labels of the node's network, built
//! as the daemon builds them ([`crate::network::node_feature_labels`] over one round of the
//! daemon's own network watch).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

use crate::network::{Network, node_feature_labels};
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
    // The node's files, read as the daemon reads them: a host whose interfaces cannot be
    // enumerated has no rdma.* labels (the daemon publishes none before its first good read).
    let files = accel_host::HostRoot::classify(&args.node.host_root)?.files();
    let network = Network::new(Arc::new(accel_host::FsHost::new(files)));
    network.round(SystemTime::now());
    let interfaces = network.current();
    let places = match &interfaces {
        Some(_) => network.accelerator_places(&inventory),
        None => Vec::new(),
    };
    let labels = node_feature_labels(
        &inventory,
        settings.grammar().group_naming(),
        interfaces.as_deref().map(Vec::as_slice),
        &places,
    );
    println!("{}", serde_json::to_string_pretty(&labels)?);
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
