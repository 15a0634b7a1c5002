//! The plugin's settings: the seed's `GPUSTACK_*` switches, parsed once into one typed struct,
//! with a clear error per bad value. The binary maps flags onto the same names.

use std::collections::BTreeMap;

/// `GPUSTACK_DEVICE_PLUGIN_IDENTIFY_BY_KUBELET`.
pub const IDENTIFY_BY_KUBELET_ENV: &str = "GPUSTACK_DEVICE_PLUGIN_IDENTIFY_BY_KUBELET";
/// `GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE`.
pub const SLICED_ALLOCATE_GATE_ENV: &str = "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE";
/// `GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS`.
pub const RELEASE_TERMINATED_PODS_ENV: &str = "GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS";
/// `GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY`.
pub const NVIDIA_INJECTION_STRATEGY_ENV: &str = "GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY";

/// How NVIDIA grants reach the container (seed 000, "Exclusive and shared"); the backends' type.
pub use accel_backend::InjectionStrategy;

/// A setting with a value it cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{name}={value:?}: expected true or false")]
    NotABool { name: &'static str, value: String },
    #[error("{name}={value:?}: expected envvar, cdi-annotations or auto")]
    NotAStrategy { name: &'static str, value: String },
}

/// Every switch the plugin reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub identify_by_kubelet: bool,
    pub sliced_allocate_gate: bool,
    pub release_terminated_pods: bool,
    pub nvidia_injection: InjectionStrategy,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            identify_by_kubelet: true,
            sliced_allocate_gate: true,
            release_terminated_pods: true,
            nvidia_injection: InjectionStrategy::Envvar,
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
        if let Some(v) = vars.get(NVIDIA_INJECTION_STRATEGY_ENV) {
            s.nvidia_injection = match v.trim().to_ascii_lowercase().as_str() {
                "envvar" | "" => InjectionStrategy::Envvar,
                "cdi-annotations" => InjectionStrategy::CdiAnnotations,
                "auto" => InjectionStrategy::Auto,
                _ => {
                    return Err(SettingsError::NotAStrategy {
                        name: NVIDIA_INJECTION_STRATEGY_ENV,
                        value: v.clone(),
                    });
                }
            };
        }
        Ok(s)
    }

    /// The settings of this process's environment.
    pub fn from_env() -> Result<Settings, SettingsError> {
        Settings::from_vars(&std::env::vars().collect())
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
        let vars = BTreeMap::from([
            (IDENTIFY_BY_KUBELET_ENV.to_string(), "false".to_string()),
            (
                NVIDIA_INJECTION_STRATEGY_ENV.to_string(),
                "auto".to_string(),
            ),
        ]);
        let s = Settings::from_vars(&vars).unwrap();
        assert!(!s.identify_by_kubelet);
        assert!(s.sliced_allocate_gate);
        assert_eq!(s.nvidia_injection, InjectionStrategy::Auto);
        let bad = BTreeMap::from([(SLICED_ALLOCATE_GATE_ENV.to_string(), "maybe".to_string())]);
        assert_eq!(
            Settings::from_vars(&bad).unwrap_err().to_string(),
            "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE=\"maybe\": expected true or false"
        );
    }
}
