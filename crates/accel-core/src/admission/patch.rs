//! RFC 6902 JSON Patch between two JSON documents: what the mutating webhook returns.
//!
//! This module owns the diff and the JSON-Pointer escaping (`/` → `~1`, `~` → `~0`, which every
//! resource key needs). It produces `add`, `remove` and `replace` only; arrays are compared by
//! index, which is exact for what mutation does (append to a list, set a key).

use serde_json::{Value, json};

/// Escape one JSON-Pointer reference token.
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The operations that turn `from` into `to`.
pub fn diff(from: &Value, to: &Value) -> Vec<Value> {
    let mut ops = Vec::new();
    diff_at(from, to, "", &mut ops);
    ops
}

fn diff_at(from: &Value, to: &Value, path: &str, ops: &mut Vec<Value>) {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, va) in a {
                let child = format!("{path}/{}", escape(key));
                match b.get(key) {
                    Some(vb) => diff_at(va, vb, &child, ops),
                    None => ops.push(json!({"op": "remove", "path": child})),
                }
            }
            for (key, vb) in b {
                if !a.contains_key(key) {
                    ops.push(json!({"op": "add", "path": format!("{path}/{}", escape(key)), "value": vb}));
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (va, vb)) in a.iter().zip(b.iter()).enumerate() {
                diff_at(va, vb, &format!("{path}/{i}"), ops);
            }
            for (i, vb) in b.iter().enumerate().skip(a.len()) {
                ops.push(json!({"op": "add", "path": format!("{path}/{i}"), "value": vb}));
            }
            for i in (b.len()..a.len()).rev() {
                ops.push(json!({"op": "remove", "path": format!("{path}/{i}")}));
            }
        }
        _ if from == to => {}
        _ => ops.push(json!({"op": "replace", "path": path, "value": to})),
    }
}

/// Apply operations produced by [`diff`] (add, remove, replace). Used by tests and by `admit` to
/// prove a patch reproduces the mutated Pod.
pub fn apply(doc: &Value, ops: &[Value]) -> Option<Value> {
    let mut doc = doc.clone();
    for op in ops {
        let path = op.get("path")?.as_str()?;
        let kind = op.get("op")?.as_str()?;
        if path.is_empty() {
            doc = op.get("value")?.clone();
            continue;
        }
        let (parent_path, last) = path.rsplit_once('/')?;
        let last = last.replace("~1", "/").replace("~0", "~");
        let parent = if parent_path.is_empty() {
            Some(&mut doc)
        } else {
            doc.pointer_mut(parent_path)
        }?;
        match (kind, parent) {
            ("add" | "replace", Value::Object(map)) => {
                map.insert(last, op.get("value")?.clone());
            }
            ("remove", Value::Object(map)) => {
                map.remove(&last)?;
            }
            ("add", Value::Array(list)) => {
                let i: usize = last.parse().ok()?;
                if i > list.len() {
                    return None;
                }
                list.insert(i, op.get("value")?.clone());
            }
            ("replace", Value::Array(list)) => {
                let i: usize = last.parse().ok()?;
                *list.get_mut(i)? = op.get("value")?.clone();
            }
            ("remove", Value::Array(list)) => {
                let i: usize = last.parse().ok()?;
                if i >= list.len() {
                    return None;
                }
                list.remove(i);
            }
            _ => return None,
        }
    }
    Some(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_with_slashes_are_escaped() {
        let from = json!({"limits": {"nvidia.com/gpu.sliced": "1"}});
        let to = json!({"limits": {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "800000"}});
        let ops = diff(&from, &to);
        assert_eq!(
            ops,
            vec![
                json!({"op": "add", "path": "/limits/nvidia.com~1gpu.sliced.units", "value": "800000"})
            ]
        );
        assert_eq!(apply(&from, &ops), Some(to));
        assert_eq!(escape("a~b/c"), "a~0b~1c");
    }

    #[test]
    fn an_add_into_a_list_inserts_at_its_index_and_never_past_the_end() {
        let list = json!({"terms": ["a", "b"]});
        let add = |path: &str| vec![json!({"op": "add", "path": path, "value": "x"})];
        assert_eq!(
            apply(&list, &add("/terms/0")),
            Some(json!({"terms": ["x", "a", "b"]}))
        );
        assert_eq!(
            apply(&list, &add("/terms/2")),
            Some(json!({"terms": ["a", "b", "x"]}))
        );
        assert_eq!(apply(&list, &add("/terms/3")), None);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            "[a-z/~]{0,3}".prop_map(Value::String)
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z/~]{0,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn applying_the_diff_gives_the_target(a in arb_json(), b in arb_json()) {
            let ops = diff(&a, &b);
            prop_assert_eq!(apply(&a, &ops), Some(b));
        }
    }
}
