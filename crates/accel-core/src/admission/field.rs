//! Kubernetes' field-error form, as the API server prints a webhook's refusal: `<path>: Invalid
//! value: "<value>": <detail>`, `<path>: Required value: <detail>`, `<path>: Forbidden: <detail>`,
//! `<path>: Unsupported value: "<value>": supported values: "a", "b"`, and the aggregate
//! `[first, second]` when there are several.
//!
//! This module owns the formatting only; which rule fired is carried alongside for metrics.

use std::fmt;

/// Which rule a violation belongs to (the label of the denial counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// Rule 1: one family, in exactly one container group.
    OneFamily,
    /// Rule 2: `.sliced` is exactly 1, with exactly one memory budget.
    SlicedIsOne,
    /// Rule 3: `.partitioned` is exactly 1 and names a profile.
    PartitionedIsOne,
    /// Rule 4: one partition profile per Pod.
    OneProfile,
    /// Rule 5: each per-profile key is exactly 1.
    ProfileIsOne,
    /// Rule 6: at most one container requests a slicing family.
    OneSlicingContainer,
    /// Rule 7: a native sidecar requests no accelerator.
    NoSidecarClaim,
    /// A memory budget out of range (percentage, MiB).
    Budget,
    /// A cores percentage out of range.
    Cores,
    /// A value that is not the whole number a count needs.
    Quantity,
    /// A sub-key without the key it qualifies, a profile the pool does not offer, or a partition
    /// key of a manufacturer with no hardware partitioning.
    Shape,
    /// A fact about the queue's pool was needed and could not be read.
    Pool,
}

impl Rule {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Rule::OneFamily => "rule1",
            Rule::SlicedIsOne => "rule2",
            Rule::PartitionedIsOne => "rule3",
            Rule::OneProfile => "rule4",
            Rule::ProfileIsOne => "rule5",
            Rule::OneSlicingContainer => "rule6",
            Rule::NoSidecarClaim => "rule7",
            Rule::Budget => "budget",
            Rule::Cores => "cores",
            Rule::Quantity => "quantity",
            Rule::Shape => "shape",
            Rule::Pool => "pool",
        }
    }

    /// Every rule, for pre-registering metrics.
    pub const ALL: [Rule; 12] = [
        Rule::OneFamily,
        Rule::SlicedIsOne,
        Rule::PartitionedIsOne,
        Rule::OneProfile,
        Rule::ProfileIsOne,
        Rule::OneSlicingContainer,
        Rule::NoSidecarClaim,
        Rule::Budget,
        Rule::Cores,
        Rule::Quantity,
        Rule::Shape,
        Rule::Pool,
    ];
}

/// The kind of a field error, as Kubernetes names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldErrorKind {
    Invalid {
        value: String,
    },
    Required,
    Forbidden,
    NotSupported {
        value: String,
        supported: Vec<String>,
    },
}

/// One violation, printed exactly as the API server prints a field error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub kind: FieldErrorKind,
    pub detail: String,
    pub rule: Rule,
}

impl FieldError {
    pub fn invalid(
        path: impl Into<String>,
        value: impl Into<String>,
        detail: impl Into<String>,
        rule: Rule,
    ) -> Self {
        FieldError {
            path: path.into(),
            kind: FieldErrorKind::Invalid {
                value: value.into(),
            },
            detail: detail.into(),
            rule,
        }
    }

    pub fn required(path: impl Into<String>, detail: impl Into<String>, rule: Rule) -> Self {
        FieldError {
            path: path.into(),
            kind: FieldErrorKind::Required,
            detail: detail.into(),
            rule,
        }
    }

    pub fn forbidden(path: impl Into<String>, detail: impl Into<String>, rule: Rule) -> Self {
        FieldError {
            path: path.into(),
            kind: FieldErrorKind::Forbidden,
            detail: detail.into(),
            rule,
        }
    }

    pub fn not_supported(
        path: impl Into<String>,
        value: impl Into<String>,
        supported: Vec<String>,
        rule: Rule,
    ) -> Self {
        FieldError {
            path: path.into(),
            kind: FieldErrorKind::NotSupported {
                value: value.into(),
                supported,
            },
            detail: String::new(),
            rule,
        }
    }
}

/// Go's `%q` for the plain strings these messages quote (JSON string escaping matches it there).
fn quote(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| format!("\"{value}\""))
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FieldErrorKind::Invalid { value } => {
                write!(
                    f,
                    "{}: Invalid value: {}: {}",
                    self.path,
                    quote(value),
                    self.detail
                )
            }
            FieldErrorKind::Required => write!(f, "{}: Required value: {}", self.path, self.detail),
            FieldErrorKind::Forbidden => write!(f, "{}: Forbidden: {}", self.path, self.detail),
            FieldErrorKind::NotSupported { value, supported } => {
                let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
                write!(
                    f,
                    "{}: Unsupported value: {}: supported values: {}",
                    self.path,
                    quote(value),
                    list.join(", ")
                )
            }
        }
    }
}

/// The API server's aggregate form: one message alone, several as `[a, b]`, repeats dropped.
pub fn aggregate(errors: &[FieldError]) -> Option<String> {
    let mut messages: Vec<String> = Vec::new();
    for error in errors {
        let message = error.to_string();
        if !messages.contains(&message) {
            messages.push(message);
        }
    }
    match messages.len() {
        0 => None,
        1 => messages.pop(),
        _ => Some(format!("[{}]", messages.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_as_the_api_server_does() {
        let e = FieldError::invalid(
            "spec.containers[0].resources.limits[nvidia.com/gpu.sliced]",
            "2",
            "d",
            Rule::SlicedIsOne,
        );
        assert_eq!(
            e.to_string(),
            "spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: \"2\": d"
        );
        assert_eq!(
            FieldError::required("spec", "r", Rule::Shape).to_string(),
            "spec: Required value: r"
        );
        assert_eq!(
            FieldError::forbidden("spec", "f", Rule::OneFamily).to_string(),
            "spec: Forbidden: f"
        );
        assert_eq!(
            FieldError::not_supported("p", "2g", vec!["1g".into(), "3g".into()], Rule::Shape)
                .to_string(),
            "p: Unsupported value: \"2g\": supported values: \"1g\", \"3g\""
        );
    }

    #[test]
    fn aggregates_several_and_drops_repeats() {
        let a = FieldError::forbidden("spec", "a", Rule::OneFamily);
        let b = FieldError::forbidden("spec", "b", Rule::OneProfile);
        assert_eq!(aggregate(&[]), None);
        assert_eq!(
            aggregate(std::slice::from_ref(&a)).as_deref(),
            Some("spec: Forbidden: a")
        );
        assert_eq!(
            aggregate(&[a.clone(), b, a]).as_deref(),
            Some("[spec: Forbidden: a, spec: Forbidden: b]")
        );
    }
}
