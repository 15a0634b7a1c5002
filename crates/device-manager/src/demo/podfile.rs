//! `demo --pods FILE`: the user's Pods, instead of the script.
//!
//! The file is one YAML (or JSON) document: a list of Pods, each as `kubectl` would take it
//! (`apiVersion: v1` and `kind: Pod` optional, `metadata.name` required, `metadata.namespace`
//! defaulting to `demo`, `spec.containers` a non-empty list of containers with a name). They are
//! submitted in order, each one step. A Pod reaches the webhook's checks and `.units` folding
//! only when it carries the label `kueue.x-k8s.io/queue-name` (the demo's cluster has one
//! queue, `demo`), as in a cluster. Anything else in a Pod is kept and passed on as is.
//!
//! A file that cannot be used is refused whole, in one line naming the file, the item and what
//! is wrong, before anything runs.

use std::path::Path;

use k8s_openapi::api::core::v1 as core;
use serde_json::Value;

/// The namespace of a Pod that names none.
pub const DEFAULT_NAMESPACE: &str = "demo";

/// Reads and checks `path`.
pub fn read(path: &Path) -> anyhow::Result<Vec<Value>> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("--pods {shown}: cannot read it: {e}"))?;
    parse(&text).map_err(|e| anyhow::anyhow!("--pods {shown}: {}", one_line(&e)))
}

/// Parses a Pod list; the error names the item (1-based) and what is wrong.
pub fn parse(text: &str) -> Result<Vec<Value>, String> {
    let mut documents = serde_yaml::Deserializer::from_str(text);
    let Some(first) = documents.next() else {
        return Err("empty: expected a YAML list of Pods".into());
    };
    let value: Value =
        serde::Deserialize::deserialize(first).map_err(|e| format!("not YAML or JSON: {e}"))?;
    if documents.next().is_some() {
        return Err(
            "holds several YAML documents: give one document, a list of Pods (- apiVersion: v1 …)"
                .into(),
        );
    }
    let items = match value {
        Value::Array(items) => items,
        Value::Null => return Err("empty: expected a YAML list of Pods".into()),
        Value::Object(_) => {
            return Err(
                "is a single object: expected a YAML list of Pods (start each Pod with `- `)"
                    .into(),
            );
        }
        other => {
            return Err(format!(
                "expected a YAML list of Pods, found {}",
                kind(&other)
            ));
        }
    };
    if items.is_empty() {
        return Err("holds no Pod: expected a YAML list of Pods".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let n = i + 1;
        let Value::Object(object) = item else {
            return Err(format!("item {n}: expected a Pod, found {}", kind(item)));
        };
        let name = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let label = if name.is_empty() {
            format!("item {n}")
        } else {
            format!("item {n} ({name})")
        };
        if let Some(k) = object.get("kind")
            && k.as_str() != Some("Pod")
        {
            return Err(format!("{label}: kind is {k}, not Pod"));
        }
        if name.is_empty() {
            return Err(format!("{label}: metadata.name is missing"));
        }
        let namespace = item
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_NAMESPACE);
        match item.pointer("/spec/containers") {
            Some(Value::Array(c)) if !c.is_empty() => {
                for (j, container) in c.iter().enumerate() {
                    let named = container
                        .get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| !n.is_empty());
                    if !named {
                        return Err(format!("{label}: spec.containers[{j}].name is missing"));
                    }
                }
            }
            Some(Value::Array(_)) => {
                return Err(format!("{label}: spec.containers is empty"));
            }
            Some(_) => return Err(format!("{label}: spec.containers must be a list")),
            None => return Err(format!("{label}: spec.containers is missing")),
        }
        serde_json::from_value::<core::Pod>(item.clone())
            .map_err(|e| format!("{label}: not a Pod: {e}"))?;
        if !seen.insert((namespace.to_string(), name.to_string())) {
            return Err(format!("{label}: a second Pod named {namespace}/{name}"));
        }
    }
    Ok(items)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_list_of_pods_is_read() {
        let pods = parse(
            "- metadata: {name: a}\n  spec: {containers: [{name: main}]}\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: b, namespace: x}\n  spec: {containers: [{name: main}]}\n",
        )
        .unwrap();
        assert_eq!(pods.len(), 2);
    }

    #[test]
    fn each_bad_file_is_named_in_one_line() {
        let cases = [
            ("", "empty: expected a YAML list of Pods"),
            ("metadata: {name: a}\n", "is a single object"),
            ("[]", "holds no Pod"),
            ("- 3\n", "item 1: expected a Pod, found a number"),
            (
                "- spec: {containers: [{name: m}]}\n",
                "item 1: metadata.name is missing",
            ),
            (
                "- metadata: {name: a}\n",
                "item 1 (a): spec.containers is missing",
            ),
            (
                "- metadata: {name: a}\n  spec: {containers: []}\n",
                "item 1 (a): spec.containers is empty",
            ),
            (
                "- kind: Deployment\n  metadata: {name: a}\n",
                "item 1 (a): kind is \"Deployment\", not Pod",
            ),
            (
                "- metadata: {name: a}\n  spec: {containers: [{image: x}]}\n",
                "item 1 (a): spec.containers[0].name is missing",
            ),
            (
                "- metadata: {name: a}\n  spec: {containers: [{name: m, resources: {limits: 3}}]}\n",
                "item 1 (a): not a Pod: ",
            ),
            (
                "- metadata: {name: a}\n  spec: {containers: [{name: m}]}\n- metadata: {name: a}\n  spec: {containers: [{name: m}]}\n",
                "item 2 (a): a second Pod named demo/a",
            ),
            ("- a\n---\n- b\n", "holds several YAML documents"),
            ("- [", "not YAML or JSON"),
        ];
        for (text, want) in cases {
            let got = parse(text).unwrap_err();
            assert!(got.starts_with(want), "{text:?}: {got}");
        }
    }
}
