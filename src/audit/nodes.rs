//! The platforms a cluster's nodes run (`audit --registry` without
//! `--platform`), from the labels the kubelet sets on each Node.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use kube::core::params::ListParams;
use kube::core::{Request, Resource};
use serde_json::Value;

use super::{AuditError, Connection};
use crate::published::Platform;

/// Every distinct `kubernetes.io/os`/`kubernetes.io/arch` of the nodes, in
/// order. A Node without both labels is skipped; none at all, or a client
/// that may not list Nodes, is an error that says what to do.
pub async fn platforms(connection: &Connection) -> Result<Vec<Platform>, AuditError> {
    let mut found = BTreeSet::new();
    let mut params = ListParams::default().limit(500);
    let mut continues = super::Continues::default();
    loop {
        let request = Request::new(Node::url_path(&(), None))
            .list(&params)
            .map_err(|e| AuditError::Request(format!("cannot list nodes: {e}")))?;
        let page: Value = match connection.client.request(request).await {
            Ok(page) => page,
            Err(kube::Error::Api(s)) if s.code == 403 => {
                return Err(AuditError::Request(format!(
                    "--registry needs the nodes' platforms, but listing nodes is forbidden ({}): grant `list nodes` (cluster scope) to these credentials, or name the platforms with --platform linux/amd64",
                    s.message
                )));
            }
            Err(e) => {
                let why = crate::text::error_chain(&e);
                return Err(AuditError::Request(format!("cannot list nodes: {why}")));
            }
        };
        for node in page["items"].as_array().into_iter().flatten() {
            let labels = &node["metadata"]["labels"];
            let label = |k: &str| labels.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
            if let (Some(os), Some(arch)) = (label("kubernetes.io/os"), label("kubernetes.io/arch")) {
                found.insert(Platform {
                    os: os.to_owned(),
                    architecture: arch.to_owned(),
                    variant: None,
                });
            }
        }
        let next = continues
            .next(page["metadata"]["continue"].as_str())
            .map_err(|e| AuditError::Request(format!("cannot list nodes: {e}")))?;
        match next {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    if found.is_empty() {
        return Err(AuditError::Request(
            "--registry needs the nodes' platforms, but no Node carries kubernetes.io/os and kubernetes.io/arch labels: name them with --platform linux/amd64".into(),
        ));
    }
    Ok(found.into_iter().collect())
}
