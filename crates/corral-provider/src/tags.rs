//! The tag keys adapters stamp on the sandboxes (and snapshots) they make at a provider:
//! defined here once, in the two spellings providers accept, so that every adapter, its fake
//! and the orphan reaper agree on them.
//!
//! Providers differ in which characters a tag key may hold (labels with dashes, metadata keys
//! with underscores); each adapter picks the spelling its provider takes, [`DASHED`] or
//! [`UNDERSCORED`], and never writes a key of its own.

use std::collections::BTreeMap;

use corral_domain::OperationId;

use crate::CallContext;

/// Corral's tag keys in one spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagKeys {
    /// The operation that created the resource: how a create whose answer was lost is found.
    pub operation_id: &'static str,
    /// The Corral deployment that made the sandbox: the orphan reaper lists by it.
    pub deployment: &'static str,
    /// The Corral project the sandbox belongs to, read back by the reaper's listing.
    pub project: &'static str,
    /// Corral's snapshot id, on a snapshot.
    pub snapshot_id: &'static str,
    /// The snapshot's name, when the client gave one.
    pub snapshot_name: &'static str,
    /// Marks a sandbox Corral stopped (where the provider has no stopped state of its own).
    pub stopped: &'static str,
    /// The lifetime Corral asked for, in seconds (where the provider does not report it).
    pub timeout: &'static str,
}

/// The keys with dashes (labels and tags: Daytona, Blaxel, Together, Vercel).
pub const DASHED: TagKeys = TagKeys {
    operation_id: "corral-operation-id",
    deployment: "corral-deployment",
    project: "corral-project",
    snapshot_id: "corral-snapshot-id",
    snapshot_name: "corral-snapshot-name",
    stopped: "corral-stopped",
    timeout: "corral-timeout",
};

/// The keys with underscores (metadata: E2B, Fly, Morph, Runloop).
pub const UNDERSCORED: TagKeys = TagKeys {
    operation_id: "corral_operation_id",
    deployment: "corral_deployment",
    project: "corral_project",
    snapshot_id: "corral_snapshot_id",
    snapshot_name: "corral_snapshot_name",
    stopped: "corral_stopped",
    timeout: "corral_timeout",
};

impl TagKeys {
    /// The tags a create stamps: the operation id always; the deployment and the project when
    /// the context names them.
    pub fn stamp(&self, ctx: &CallContext, operation_id: &OperationId) -> BTreeMap<String, String> {
        [
            Some((self.operation_id, operation_id.to_string())),
            ctx.deployment().map(|d| (self.deployment, d.to_owned())),
            ctx.project().map(|p| (self.project, p.to_owned())),
        ]
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_is_stamped_with_the_deployment_and_project_only_when_the_context_has_them() {
        let op = OperationId::new();
        let bare = DASHED.stamp(&CallContext::anonymous(), &op);
        assert_eq!(
            bare,
            BTreeMap::from([("corral-operation-id".to_owned(), op.to_string())])
        );
        let ctx = CallContext::anonymous()
            .with_deployment("dep_a")
            .with_project("prj_b");
        let full = UNDERSCORED.stamp(&ctx, &op);
        assert_eq!(
            full,
            BTreeMap::from([
                ("corral_operation_id".to_owned(), op.to_string()),
                ("corral_deployment".to_owned(), "dep_a".to_owned()),
                ("corral_project".to_owned(), "prj_b".to_owned()),
            ])
        );
    }
}
