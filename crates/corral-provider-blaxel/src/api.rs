//! Blaxel's wire types, named as Blaxel names them: the control plane's `Sandbox` (as the
//! TypeScript SDK's generated `types.gen.ts` has it) and the sandbox API's `ProcessRequest`,
//! `ProcessResponse` and multipart-upload shapes (`sandbox-api/docs/openapi.yml`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Body of `POST /v0/sandboxes`.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxCreate {
    /// Name and labels.
    pub metadata: MetadataIn,
    /// Where and what to run.
    pub spec: SpecIn,
}

/// `metadata` of a create.
#[derive(Debug, Clone, Serialize)]
pub struct MetadataIn {
    /// Unique in the workspace; the sandbox's id in every later call.
    pub name: String,
    /// Free-form string labels.
    pub labels: BTreeMap<String, String>,
}

/// `spec` of a create.
#[derive(Debug, Clone, Serialize)]
pub struct SpecIn {
    /// Region, e.g. `us-pdx-1` (absent: Blaxel picks one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The container to run.
    pub runtime: RuntimeIn,
}

/// `spec.runtime` of a create.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeIn {
    /// Container image, e.g. `blaxel/base-image:latest`.
    pub image: String,
    /// Memory in MB (CPU follows: memory / 2048).
    pub memory: u32,
}

/// A sandbox as the control plane reports it.
#[derive(Debug, Clone, Deserialize)]
pub struct Sandbox {
    /// Name, labels, workspace, url.
    pub metadata: Metadata,
    /// Deployment status: `DELETING`, `TERMINATED`, `FAILED`, `DEACTIVATED`, `DEACTIVATING`,
    /// `UPLOADING`, `BUILDING`, `DEPLOYING`, `DEPLOYED`, `BUILT`.
    #[serde(default)]
    pub status: Option<String>,
    /// Runtime state: `RUNNING` or `STANDBY`.
    #[serde(default)]
    pub state: Option<String>,
}

/// `metadata` of a sandbox.
#[derive(Debug, Clone, Deserialize)]
pub struct Metadata {
    /// The name.
    pub name: String,
    /// Labels, if any.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
}

/// Body of the sandbox API's `POST /process`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessRequest {
    /// The command line (run by a shell).
    pub command: String,
    /// The process's name, to find it again with `GET /process/{name}`.
    pub name: String,
    /// Working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Extra environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Answer only when the process has finished.
    pub wait_for_completion: bool,
    /// Seconds the sandbox waits for a `waitForCompletion` process before answering `422
    /// process timed out` (the process goes on: without `keepAlive`, Blaxel kills nothing at
    /// this timeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// A process as the sandbox API reports it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessResponse {
    /// The process's name (given at start, or generated).
    #[serde(default)]
    pub name: String,
    /// The host pid, as a string (also an identifier of the process).
    #[serde(default)]
    pub pid: String,
    /// `failed`, `killed`, `stopped`, `running` or `completed`. `stopped` and `killed` are
    /// set when `DELETE /process/{identifier}` (SIGTERM) or `…/kill` (SIGKILL) was sent,
    /// even while the process is still exiting.
    pub status: String,
    /// When the process ended (`Mon, 02 Jan 2006 15:04:05 GMT`), empty while it runs.
    #[serde(default)]
    pub completed_at: Option<String>,
    /// The exit code once the process has ended: Go's `ExitCode()`, so `-1` for a process
    /// that died of a signal.
    pub exit_code: i32,
    /// Standard output (its tail, up to 64 KiB, on a `GET`).
    #[serde(default)]
    pub stdout: Option<String>,
    /// Standard error (likewise).
    #[serde(default)]
    pub stderr: Option<String>,
}

/// Body of `POST /filesystem-multipart/initiate/{path}`.
#[derive(Debug, Clone, Serialize)]
pub struct MultipartInitiateRequest {
    /// Octal permissions of the file, e.g. `0644`.
    pub permissions: String,
}

/// Answer of `POST /filesystem-multipart/initiate/{path}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MultipartInitiateResponse {
    /// The upload's id.
    pub upload_id: String,
}

/// Answer of `PUT /filesystem-multipart/{uploadId}/part`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MultipartPartInfo {
    /// The part's etag.
    pub etag: String,
    /// The part's number (1-10000).
    pub part_number: u32,
}

/// Body of `POST /filesystem-multipart/{uploadId}/complete`.
#[derive(Debug, Clone, Serialize)]
pub struct MultipartCompleteRequest {
    /// Every part, in order.
    pub parts: Vec<MultipartPartInfo>,
}

/// Body of the control plane's `POST /sandboxes/{name}/snapshots` (`SandboxSnapshotRequest`).
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotRequest {
    /// A human-readable name for the snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `SandboxSnapshot`: a point-in-time snapshot of a sandbox, usable to fork a new one.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSnapshot {
    /// Its id.
    pub id: String,
    /// `pending`, `ready` or `failed`.
    pub status: String,
    /// The sandbox it was taken of.
    #[serde(default)]
    pub sandbox_name: String,
}

/// Body of the control plane's `POST /sandboxes/{name}/fork` (`SandboxForkRequest`), as
/// Corral sends it: into a new sandbox, from a snapshot.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkRequest {
    /// The new sandbox's name (409 if it exists).
    pub target_name: String,
    /// `sandbox` (the other kind, `application`, is not used).
    pub target_type: String,
    /// The snapshot to fork from.
    pub snapshot_id: String,
}

/// `SandboxForkResponse`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkResponse {
    /// The created sandbox's name.
    #[serde(default)]
    pub name: Option<String>,
}
