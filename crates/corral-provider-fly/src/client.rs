//! One method per Machines API endpoint used by the adapter (`https://api.machines.dev/v1`).

use std::time::Duration;

use corral_provider::{CallContext, Result};
use corral_provider_http::reqwest::Method;
use corral_provider_http::{ProviderHttp, path_segment as segment};

use crate::api::{CreateMachineRequest, ExecResponse, Machine, MachineExecRequest};

/// The Machines API at one base URL.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: ProviderHttp,
}

fn machines(app: &str) -> String {
    format!("/apps/{}/machines", segment(app))
}

fn machine(app: &str, id: &str) -> String {
    format!("{}/{}", machines(app), segment(id))
}

impl Client {
    pub(crate) fn new(http: ProviderHttp) -> Self {
        Self { http }
    }

    /// `POST /apps/{app}/machines`.
    pub(crate) async fn create_machine(
        &self,
        ctx: &CallContext,
        app: &str,
        body: &CreateMachineRequest,
    ) -> Result<Machine> {
        let req = self
            .http
            .authed(ctx, Method::POST, &machines(app))?
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /apps/{app}/machines/{id}`.
    pub(crate) async fn get_machine(
        &self,
        ctx: &CallContext,
        app: &str,
        id: &str,
    ) -> Result<Machine> {
        let req = self.http.authed(ctx, Method::GET, &machine(app, id))?;
        self.http.send_json(ctx, req).await
    }

    /// `GET /apps/{app}/machines?metadata.{key}=value`.
    pub(crate) async fn list_machines(
        &self,
        ctx: &CallContext,
        app: &str,
        key: &str,
        value: &str,
    ) -> Result<Vec<Machine>> {
        let filter = format!("metadata.{key}");
        let req = self
            .http
            .authed_query(ctx, Method::GET, &machines(app), &[(&filter, value)])?;
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /apps/{app}/machines/{id}?force=true` (a running machine is killed).
    pub(crate) async fn destroy_machine(
        &self,
        ctx: &CallContext,
        app: &str,
        id: &str,
    ) -> Result<()> {
        let req =
            self.http
                .authed_query(ctx, Method::DELETE, &machine(app, id), &[("force", "true")])?;
        self.http.send_empty(ctx, req).await
    }

    /// `POST /apps/{app}/machines/{id}/exec`, allowed to take `limit`.
    pub(crate) async fn exec(
        &self,
        ctx: &CallContext,
        app: &str,
        id: &str,
        body: &MachineExecRequest,
        limit: Duration,
    ) -> Result<ExecResponse> {
        let req = self
            .http
            .authed(ctx, Method::POST, &format!("{}/exec", machine(app, id)))?
            .json(body);
        self.http.send_json_within(ctx, req, limit).await
    }
}
