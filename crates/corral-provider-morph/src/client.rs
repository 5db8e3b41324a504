//! One method per Morph Cloud endpoint used by the adapter.

use std::time::Duration;

use corral_provider::{CallContext, ExposeSecret, Result, SecretString};
use corral_provider_http::reqwest::{Method, RequestBuilder};
use corral_provider_http::{ProviderHttp, path_segment as segment};

use crate::api::{ExecRequest, Instance, InstanceExecResponse, InstanceList, StartInstanceRequest};

/// Morph's REST API at one base URL (`https://cloud.morph.so/api`).
#[derive(Debug, Clone)]
pub(crate) struct Client {
    http: ProviderHttp,
}

impl Client {
    pub(crate) fn new(http: ProviderHttp) -> Self {
        Self { http }
    }

    fn req(&self, method: Method, path: &str, key: &SecretString) -> RequestBuilder {
        self.req_query(method, path, &[], key)
    }

    /// A request to `path` with the query pairs form-encoded (brackets included).
    fn req_query(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        key: &SecretString,
    ) -> RequestBuilder {
        let mut url = self.http.url(path);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        self.http
            .client()
            .request(method, url)
            .bearer_auth(key.expose_secret())
    }

    /// `POST /instance?snapshot_id=…`.
    pub(crate) async fn start_instance(
        &self,
        ctx: &CallContext,
        key: &SecretString,
        snapshot_id: &str,
        body: &StartInstanceRequest,
    ) -> Result<Instance> {
        let req = self
            .req_query(
                Method::POST,
                "/instance",
                &[("snapshot_id", snapshot_id)],
                key,
            )
            .json(body);
        self.http.send_json(ctx, req).await
    }

    /// `GET /instance/{id}`.
    pub(crate) async fn get_instance(
        &self,
        ctx: &CallContext,
        key: &SecretString,
        id: &str,
    ) -> Result<Instance> {
        let req = self.req(Method::GET, &format!("/instance/{}", segment(id)), key);
        self.http.send_json(ctx, req).await
    }

    /// `GET /instance?metadata[k]=v`.
    pub(crate) async fn list_instances(
        &self,
        ctx: &CallContext,
        key: &SecretString,
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
        let req = self.req_query(Method::GET, "/instance", &query, key);
        self.http.send_json(ctx, req).await
    }

    /// `DELETE /instance/{id}` (the SDK's "stop": permanent).
    pub(crate) async fn delete_instance(
        &self,
        ctx: &CallContext,
        key: &SecretString,
        id: &str,
    ) -> Result<()> {
        let req = self.req(Method::DELETE, &format!("/instance/{}", segment(id)), key);
        self.http.send_empty(ctx, req).await
    }

    /// `POST /instance/{id}/exec`, allowed to take `limit` (the command's own deadline).
    pub(crate) async fn exec(
        &self,
        ctx: &CallContext,
        key: &SecretString,
        id: &str,
        body: &ExecRequest,
        limit: Duration,
    ) -> Result<InstanceExecResponse> {
        let req = self
            .req(
                Method::POST,
                &format!("/instance/{}/exec", segment(id)),
                key,
            )
            .json(body);
        let resp = self.http.send_with_timeout(ctx, req, limit).await?;
        let body = corral_provider_http::read_capped(
            self.http.provider(),
            resp,
            self.http.config().max_response_bytes,
        )
        .await?;
        corral_provider_http::parse_json(self.http.provider(), &body)
    }
}
