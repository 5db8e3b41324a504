//! Fly Machines' wire types, named as the Machines API's OpenAPI description names them
//! (`CreateMachineRequest`, `fly.MachineConfig`, `Machine`, `MachineExecRequest`,
//! `flydv1.ExecResponse`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Body of `POST /v1/apps/{app_name}/machines`.
#[derive(Debug, Clone, Serialize)]
pub struct CreateMachineRequest {
    /// Unique name in the app.
    pub name: String,
    /// Target region (absent: near the API's caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The machine's configuration.
    pub config: MachineConfig,
}

/// `fly.MachineConfig`, the fields Corral sets.
#[derive(Debug, Clone, Serialize)]
pub struct MachineConfig {
    /// The container image.
    pub image: String,
    /// String metadata, filterable on list with `metadata.{key}=value`.
    pub metadata: BTreeMap<String, String>,
    /// Overrides of the image's entrypoint and command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init: Option<MachineInit>,
    /// Whether the machine destroys itself when its main process exits.
    pub auto_destroy: bool,
}

/// `fly.MachineInit`.
#[derive(Debug, Clone, Serialize)]
pub struct MachineInit {
    /// Replaces the image's entrypoint and command.
    pub exec: Vec<String>,
}

/// A machine as the API reports it.
#[derive(Debug, Clone, Deserialize)]
pub struct Machine {
    /// The machine id.
    pub id: String,
    /// `created`, `starting`, `started`, `stopping`, `stopped`, `suspending`, `suspended`,
    /// `replacing`, `updating`, `destroying`, `destroyed`, `failed`, `launch_failed`.
    #[serde(default)]
    pub state: String,
    /// The configuration, with its metadata.
    #[serde(default)]
    pub config: Option<MachineConfigOut>,
}

/// The part of a machine's `config` Corral reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct MachineConfigOut {
    /// String metadata.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// Body of `POST /v1/apps/{app_name}/machines/{machine_id}/exec`.
#[derive(Debug, Clone, Serialize)]
pub struct MachineExecRequest {
    /// The argv to run.
    pub command: Vec<String>,
    /// Seconds before the command is stopped.
    pub timeout: u64,
}

/// `flydv1.ExecResponse`.
#[derive(Debug, Clone, Deserialize)]
pub struct ExecResponse {
    /// Exit code.
    #[serde(default)]
    pub exit_code: i32,
    /// The signal that ended the command, if one did.
    #[serde(default)]
    pub exit_signal: Option<i32>,
    /// Standard output.
    #[serde(default)]
    pub stdout: String,
    /// Standard error.
    #[serde(default)]
    pub stderr: String,
}
