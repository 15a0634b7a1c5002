//! Plugin registration v1, the plugin's side: who the driver is (its [`DriverName`]), what
//! `GetInfo` tells the kubelet's plugin watcher, and the outcome the kubelet reports back. It
//! must not serve the DRA calls themselves (`plugin.rs`).

use std::fmt;
use std::path::PathBuf;

use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::api::registration as reg;

/// The plugin type a DRA driver registers as.
pub const DRA_PLUGIN_TYPE: &str = "DRAPlugin";
/// The DRA service version served: the gRPC service name of the DRA plugin API v1, which the
/// kubelet (1.34+) looks for in `supported_versions`.
pub const DRA_V1_SERVICE: &str = "v1.DRAPlugin";
/// The longest driver name the resource API accepts.
const DRIVER_NAME_MAX: usize = 63;

/// A DRA driver name: a lower-case DNS subdomain of at most 63 characters, the name its
/// ResourceSlices, DeviceClasses and sockets carry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DriverName(String);

/// A driver name the resource API would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "driver name {0:?} is not a lower-case DNS subdomain of at most 63 characters (like nvidia.gpustack.ai)"
)]
pub struct DriverNameError(pub String);

impl DriverName {
    /// Parses a driver name.
    pub fn parse(name: &str) -> Result<DriverName, DriverNameError> {
        let label_ok = |label: &str| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    label.len() <= 63
                        && (first.is_ascii_lowercase() || first.is_ascii_digit())
                        && (last.is_ascii_lowercase() || last.is_ascii_digit())
                        && bytes
                            .iter()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                }
                _ => false,
            }
        };
        if name.len() <= DRIVER_NAME_MAX && name.split('.').all(label_ok) {
            Ok(DriverName(name.to_string()))
        } else {
            Err(DriverNameError(name.to_string()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DriverName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the kubelet last said about the registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrationOutcome {
    /// The kubelet has not reported yet.
    Pending,
    /// The kubelet registered the driver and will call its DRA service.
    Registered,
    /// The kubelet refused the driver, in its words.
    Refused(String),
}

/// The `Registration` service: answers `GetInfo` with the driver and its DRA endpoint and
/// publishes what `NotifyRegistrationStatus` reports.
#[derive(Debug)]
pub struct RegistrationService {
    driver: DriverName,
    endpoint: PathBuf,
    outcome: watch::Sender<RegistrationOutcome>,
}

impl RegistrationService {
    /// The registration of `driver`, whose DRA service listens on `endpoint`; the receiver
    /// follows the kubelet's reports.
    pub fn new(
        driver: DriverName,
        endpoint: PathBuf,
    ) -> (RegistrationService, watch::Receiver<RegistrationOutcome>) {
        let (outcome, receiver) = watch::channel(RegistrationOutcome::Pending);
        (
            RegistrationService {
                driver,
                endpoint,
                outcome,
            },
            receiver,
        )
    }
}

#[tonic::async_trait]
impl reg::registration_server::Registration for RegistrationService {
    async fn get_info(
        &self,
        _request: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: DRA_PLUGIN_TYPE.to_string(),
            name: self.driver.to_string(),
            endpoint: self.endpoint.display().to_string(),
            supported_versions: vec![DRA_V1_SERVICE.to_string()],
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        let outcome = if status.plugin_registered {
            tracing::info!(driver = %self.driver, "the kubelet registered the DRA driver");
            RegistrationOutcome::Registered
        } else {
            tracing::warn!(driver = %self.driver, error = %status.error, "the kubelet refused the DRA driver");
            RegistrationOutcome::Refused(status.error)
        };
        self.outcome.send_replace(outcome);
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_names_are_dns_subdomains() {
        for good in ["nvidia.gpustack.ai", "gpu", "a-1.b2"] {
            assert_eq!(DriverName::parse(good).unwrap().as_str(), good);
        }
        let long = format!("{}.ai", "a".repeat(61));
        for bad in [
            "",
            "Nvidia.gpustack.ai",
            "a..b",
            "-a.b",
            "a-.b",
            "a/b",
            "a_b",
            ".a",
            &long,
        ] {
            assert_eq!(
                DriverName::parse(bad),
                Err(DriverNameError(bad.to_string())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_service_names_are_the_published_ones() {
        use tonic::server::NamedService;
        type Dra = crate::api::dra::dra_plugin_server::DraPluginServer<()>;
        type Reg = reg::registration_server::RegistrationServer<RegistrationService>;
        assert_eq!(
            <Dra as NamedService>::NAME,
            "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
        );
        assert_eq!(
            <Reg as NamedService>::NAME,
            "pluginregistration.Registration"
        );
    }
}
