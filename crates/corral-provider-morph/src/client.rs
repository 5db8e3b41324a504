//! One method per Morph Cloud endpoint used by the adapter.

use std::time::Duration;

use corral_provider::{CallContext, Result};
use corral_provider_http::reqwest::Method;
use corral_provider_http::{ProviderHttp, path_segment as segment};

use crate::api::{
    ExecRequest, Instance, InstanceExecResponse, InstanceList, Snapshot, SnapshotInstanceRequest,
    StartInstanceRequest,
};

/// Morph's REST API at one base URL (`https://cloud.morph.so/api`).
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: ProviderHttp,
}

impl Client {
    pub(crate) fn new(http: ProviderHttp) -> Self {
        Self { http }
    }

    /// `POST /instance?snapshot_id=…`.
    pub(crate) async fn start_instance(
        &self,
        ctx: &CallContext,
        snapshot_id: &str,
        body: &StartInstanceRequest,
    ) -> Result<Instance> {
        let req = self
            .http
            .authed_query(
                ctx,
                Method::POST,
                "/instance",
                &[("snapshot_id", snapshot_id)],
            )?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /instance/{id}`.
    pub(crate) async fn get_instance(&self, ctx: &CallContext, id: &str) -> Result<Instance> {
        let req = self
            .http
            .authed(ctx, Method::GET, &format!("/instance/{}", segment(id)))?;
        self.http.send_json(ctx, req).await
    }

    /// `GET /instance?metadata[k]=v`.
    pub(crate) async fn list_instances(
        &self,
        ctx: &CallContext,
        metadata: &[(String, String)],
    ) -> Result<InstanceList> {
        let names: Vec<String> = metadata
            .iter()
            .map(|(k, _)| format!("metadata[{k}]"))
            .collect();
        let query: Vec<(&str, &str)> = names
            .iter()
            .zip(metadata)
            .map(|(n, (_, v))| (n.as_str(), v.as_str()))
            .collect();
        let req = self
            .http
            .authed_query(ctx, Method::GET, "/instance", &query)?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /instance/{id}` (the SDK's "stop": permanent).
    pub(crate) async fn delete_instance(&self, ctx: &CallContext, id: &str) -> Result<()> {
        let req = self
            .http
            .authed(ctx, Method::DELETE, &format!("/instance/{}", segment(id)))?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /instance/{id}/pause`: memory and disk are saved; an instance already paused is
    /// answered unchanged. The answer's body is not read (the SDK reads the instance again).
    pub(crate) async fn pause_instance(&self, ctx: &CallContext, id: &str) -> Result<()> {
        let path = format!("/instance/{}/pause", segment(id));
        let req = self.http.authed(ctx, Method::POST, &path)?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /instance/{id}/resume`. The answer's body is not read, as for pause.
    pub(crate) async fn resume_instance(&self, ctx: &CallContext, id: &str) -> Result<()> {
        let path = format!("/instance/{}/resume", segment(id));
        let req = self.http.authed(ctx, Method::POST, &path)?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /instance/{id}/snapshot` → the new `Snapshot` (possibly still `pending`).
    pub(crate) async fn snapshot_instance(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &SnapshotInstanceRequest,
    ) -> Result<Snapshot> {
        let path = format!("/instance/{}/snapshot", segment(id));
        let req = self.http.authed(ctx, Method::POST, &path)?.json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /snapshot/{id}`.
    pub(crate) async fn get_snapshot(&self, ctx: &CallContext, id: &str) -> Result<Snapshot> {
        let req = self
            .http
            .authed(ctx, Method::GET, &format!("/snapshot/{}", segment(id)))?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /snapshot/{id}`.
    pub(crate) async fn delete_snapshot(&self, ctx: &CallContext, id: &str) -> Result<()> {
        let req = self
            .http
            .authed(ctx, Method::DELETE, &format!("/snapshot/{}", segment(id)))?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /instance/{id}/exec`, allowed to take `limit` (the command's own deadline).
    pub(crate) async fn exec(
        &self,
        ctx: &CallContext,
        id: &str,
        body: &ExecRequest,
        limit: Duration,
    ) -> Result<InstanceExecResponse> {
        let req = self
            .http
            .authed(
                ctx,
                Method::POST,
                &format!("/instance/{}/exec", segment(id)),
            )?
            .json(body);
        self.http.send_json_within(ctx, req, limit).await
    }
}
