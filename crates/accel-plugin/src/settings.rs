//! The plugin's settings: the seed's `GPUSTACK_*` switches, parsed once into one typed struct,
//! with a clear error per bad value. The binary maps flags onto the same names.

use std::collections::BTreeMap;

/// `GPUSTACK_DEVICE_PLUGIN_IDENTIFY_BY_KUBELET`.
pub const IDENTIFY_BY_KUBELET_ENV: &str = "GPUSTACK_DEVICE_PLUGIN_IDENTIFY_BY_KUBELET";
/// `GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE`.
pub const SLICED_ALLOCATE_GATE_ENV: &str = "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE";
/// `GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS`.
pub const RELEASE_TERMINATED_PODS_ENV: &str = "GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS";
/// How grants reach the container where a manufacturer offers a choice (seed 000, "Exclusive
/// and shared"); the backends' type. Which manufacturers read
/// `GPUSTACK_<MANUFACTURER>_DEVICE_INJECTION_STRATEGY` is their backends' to say: the binary
/// reads the setting, with [`parse_strategy`].
pub use accel_backend::InjectionStrategy;

/// A setting with a value it cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{name}={value:?}: expected true or false")]
    NotABool { name: &'static str, value: String },
    #[error("{name}={value:?}: expected envvar, cdi-annotations or auto")]
    NotAStrategy { name: String, value: String },
}

/// Every switch the plugin reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub identify_by_kubelet: bool,
    pub sliced_allocate_gate: bool,
    pub release_terminated_pods: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            identify_by_kubelet: true,
            sliced_allocate_gate: true,
            release_terminated_pods: true,
        }
    }
}

impl Settings {
    /// Reads the settings from variables (the process environment, or a map in tests); an
    /// absent variable keeps its default.
    pub fn from_vars(vars: &BTreeMap<String, String>) -> Result<Settings, SettingsError> {
        let mut s = Settings::default();
        let flag = |name: &'static str, default: bool| match vars.get(name) {
            None => Ok(default),
            Some(v) => parse_bool(v).ok_or_else(|| SettingsError::NotABool {
                name,
                value: v.clone(),
            }),
        };
        s.identify_by_kubelet = flag(IDENTIFY_BY_KUBELET_ENV, s.identify_by_kubelet)?;
        s.sliced_allocate_gate = flag(SLICED_ALLOCATE_GATE_ENV, s.sliced_allocate_gate)?;
        s.release_terminated_pods = flag(RELEASE_TERMINATED_PODS_ENV, s.release_terminated_pods)?;
        Ok(s)
    }

    /// The settings of this process's environment.
    pub fn from_env() -> Result<Settings, SettingsError> {
        Settings::from_vars(&std::env::vars().collect())
    }
}

/// An injection strategy setting's value (`name` is the variable, for the error); blank is
/// the default `envvar`.
pub fn parse_strategy(name: &str, value: &str) -> Result<InjectionStrategy, SettingsError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "envvar" | "" => Ok(InjectionStrategy::Envvar),
        "cdi-annotations" => Ok(InjectionStrategy::CdiAnnotations),
        "auto" => Ok(InjectionStrategy::Auto),
        _ => Err(SettingsError::NotAStrategy {
            name: name.to_string(),
            value: value.to_string(),
        }),
    }
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_parse_and_bad_values_are_named() {
        let vars = BTreeMap::from([(IDENTIFY_BY_KUBELET_ENV.to_string(), "false".to_string())]);
        let s = Settings::from_vars(&vars).unwrap();
        assert!(!s.identify_by_kubelet);
        assert!(s.sliced_allocate_gate);
        assert_eq!(parse_strategy("X", " Auto "), Ok(InjectionStrategy::Auto));
        assert_eq!(parse_strategy("X", ""), Ok(InjectionStrategy::Envvar));
        assert_eq!(
            parse_strategy("GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY", "cdi")
                .unwrap_err()
                .to_string(),
            "GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY=\"cdi\": expected envvar, cdi-annotations or auto"
        );
        let bad = BTreeMap::from([(SLICED_ALLOCATE_GATE_ENV.to_string(), "maybe".to_string())]);
        assert_eq!(
            Settings::from_vars(&bad).unwrap_err().to_string(),
            "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE=\"maybe\": expected true or false"
        );
    }
}
