//! `device-manager cpu-key --node NODE.json|-`: the general (CPU) node key the worker computes for
//! a Node object (JSON or YAML, as `kubectl get node -o json|yaml` prints it), from its NFD CPU
//! labels and `feature.gpustack.ai/cpu-*` annotations (accel-core's `cpukey`). Exit 0 with the key
//! on standard output; 2 with one line naming what is wrong when the input is not a Node.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::process::ExitCode;

use accel_core::cpukey;
use anyhow::Context as _;
use serde_json::Value;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Node object, JSON or YAML; `-` reads standard input.
    #[arg(long, env = "CPU_KEY_NODE", value_name = "NODE.json|-")]
    node: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = if args.node == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the Node from standard input")?;
        text
    } else {
        std::fs::read_to_string(&args.node)
            .with_context(|| format!("cannot read the Node from {}", args.node))?
    };
    let what = if args.node == "-" {
        "the Node on standard input".to_string()
    } else {
        format!("the Node in {}", args.node)
    };
    let node = parse_node(&text, &what)?;
    let labels = string_map(&node, "labels", &what)?;
    let annotations = string_map(&node, "annotations", &what)?;
    println!("{}", cpukey::cpu_node_key(&labels, &annotations));
    Ok(ExitCode::SUCCESS)
}

/// One YAML (or JSON) document holding a Node object.
fn parse_node(text: &str, what: &str) -> anyhow::Result<Value> {
    let mut documents = serde_yaml::Deserializer::from_str(text);
    let first = documents
        .next()
        .with_context(|| format!("{what} is empty"))?;
    let value: Value = serde::Deserialize::deserialize(first)
        .with_context(|| format!("{what} is not YAML or JSON"))?;
    if documents.next().is_some() {
        anyhow::bail!("{what} holds several YAML documents; give one Node");
    }
    if value.is_null() {
        anyhow::bail!("{what} is empty");
    }
    let Value::Object(object) = &value else {
        anyhow::bail!(
            "{what} is not an object (expected a Node, as kubectl get node -o json prints it)"
        );
    };
    match object.get("kind") {
        Some(Value::String(kind)) if kind == "Node" => {}
        Some(Value::String(kind)) => anyhow::bail!("{what} is a {kind}, not a Node"),
        Some(_) => anyhow::bail!("{what} has a kind that is not a string"),
        None => anyhow::bail!("{what} has no kind (expected kind: Node)"),
    }
    match object.get("metadata") {
        Some(Value::Object(_)) => Ok(value),
        Some(_) => anyhow::bail!("{what}: metadata is not an object"),
        None => anyhow::bail!("{what} has no metadata"),
    }
}

/// `metadata.<field>` as a string map; absent or null is empty.
fn string_map(node: &Value, field: &str, what: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    match node.get("metadata").and_then(|m| m.get(field)) {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let Value::String(value) = value else {
                    anyhow::bail!("{what}: metadata.{field}.{key:?} is not a string");
                };
                out.insert(key.clone(), value.clone());
            }
        }
        Some(_) => anyhow::bail!("{what}: metadata.{field} is not an object"),
    }
    Ok(out)
}
