//! The namespaces the webhook's entries select or exclude by their
//! `kubernetes.io/metadata.name` label. Kubernetes sets that label on
//! every namespace from 1.21; on 1.20 nothing does, and an entry that
//! selects a namespace by it (the approval gate in the operators'
//! namespace, the ConfigMap entry in the applications') is then silently
//! never called there, while one that excludes by it (the release
//! namespace, kube-system) reviews what it should leave alone. Nothing in
//! the apiserver says so: this check does.

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::ListParams;

use super::{AuditError, Connection};

/// The label the entries select namespaces by.
pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Of the namespaces `names`, those that exist without `NAME_LABEL` set to
/// their name, in the order given. A namespace that does not exist needs
/// nothing (nothing of it can be reviewed) and is not named.
pub async fn without_name_label(
    connection: &Connection,
    names: &[String],
) -> Result<Vec<String>, AuditError> {
    let api: Api<Namespace> = Api::all(connection.client.clone());
    let mut missing = Vec::new();
    for name in names {
        // A list by name, not a get: the audit's role may list namespaces
        // and needs no more.
        let params = ListParams::default().fields(&format!("metadata.name={name}"));
        let found = api
            .list(&params)
            .await
            .map_err(|e| AuditError::from(connection.describe(&format!("list namespace \"{name}\""), &e)))?;
        for ns in &found.items {
            let labelled = ns
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(NAME_LABEL))
                .is_some_and(|value| value == name);
            if !labelled {
                missing.push(name.clone());
            }
        }
    }
    Ok(missing)
}
