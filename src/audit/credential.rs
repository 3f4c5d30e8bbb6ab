//! Exec credential plugins (a kubeconfig user's `exec`), run by digest-gate
//! for a command's one run against a cluster.
//!
//! kube runs the plugin with a blocking `Command::output()` while it builds
//! the client — three or four times, on the runtime's thread, with no
//! timeout and no bound on what the plugin prints. A plugin that hung for
//! 150 s stalled `audit --context good --context hung --cluster-deadline
//! 10s` for 150 s and lost the good cluster too; one printing 500 MB cost
//! 500 MB. Here the plugin runs once, as a child process the runtime awaits,
//! killed at the deadline, its output read up to [`MAX_OUTPUT`]; the
//! credential it gives takes the plugin's place in the client's config.
//!
//! What this gives up: kube would run the plugin again when the credential
//! expires. A command's run against one cluster is bounded by
//! `--cluster-deadline` (10 minutes by default), shorter than the tokens
//! plugins hand out (EKS 15 minutes, GKE an hour); a run that outlives one
//! ends with the cluster's 401, which says to log in again. `serve`, which
//! runs for days, leaves the plugin to kube.

use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use kube::config::{AuthInfo, ExecConfig, ExecInteractiveMode};
use serde::Deserialize;
use tokio::io::AsyncReadExt;

/// The most a plugin may print: an ExecCredential is a token or a key pair,
/// a few KB.
pub const MAX_OUTPUT: u64 = 1 << 20;

/// Why a plugin gave no credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("the exec credential plugin {command} cannot run: {why}")]
    Start { command: String, why: String },
    #[error("the exec credential plugin {command} gave no credential within {}", humantime::format_duration(*.within))]
    Time { command: String, within: Duration },
    #[error("the exec credential plugin {command} printed more than {} KiB", MAX_OUTPUT >> 10)]
    Output { command: String },
    #[error("the exec credential plugin {command} failed ({status})")]
    Failed { command: String, status: String },
    #[error("the exec credential plugin {command} printed no ExecCredential: {why}")]
    Shape { command: String, why: String },
}

/// What a plugin prints (client.authentication.k8s.io ExecCredential).
#[derive(Deserialize)]
struct ExecCredential {
    status: Option<Status>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    token: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
}

/// Runs `auth`'s exec plugin, if kube would (no token, basic auth, token
/// file or auth provider before it), within `within`, and puts the
/// credential it gives in its place.
pub async fn resolve(auth: &mut AuthInfo, within: Duration) -> Result<(), CredentialError> {
    let Some(exec) = auth.exec.as_ref() else {
        return Ok(());
    };
    let before = auth.auth_provider.is_some()
        || (auth.username.is_some() && auth.password.is_some())
        || auth.token.is_some()
        || auth.token_file.is_some();
    if before {
        return Ok(());
    }
    let command = exec.command.clone().unwrap_or_default();
    let printed = run(exec, within).await?;
    let shape = |why: String| CredentialError::Shape {
        command: command.clone(),
        why,
    };
    let credential: ExecCredential = serde_json::from_slice(&printed).map_err(|e| shape(e.to_string()))?;
    let status = credential.status.ok_or_else(|| shape("no status".into()))?;
    let b64 = |pem: String| base64::engine::general_purpose::STANDARD.encode(pem);
    match status {
        Status {
            client_certificate_data: Some(cert),
            client_key_data: Some(key),
            ..
        } => {
            // A kubeconfig's *-data fields are base64 of the PEM the
            // plugin gives.
            auth.client_certificate_data = Some(b64(cert));
            auth.client_key_data = Some(b64(key).into());
        }
        Status {
            token: Some(token), ..
        } => auth.token = Some(token.into()),
        _ => return Err(shape("neither a token nor a client certificate and key".into())),
    }
    auth.exec = None;
    Ok(())
}

/// What the plugin printed on standard output, once it exited 0 within
/// `within` and printed at most [`MAX_OUTPUT`].
async fn run(exec: &ExecConfig, within: Duration) -> Result<Vec<u8>, CredentialError> {
    let command = exec.command.clone().unwrap_or_default();
    let start = |why: String| CredentialError::Start {
        command: command.clone(),
        why,
    };
    if command.is_empty() {
        return Err(start("the kubeconfig names no command".into()));
    }
    let mut child = plugin(exec)
        .map_err(|e| start(e.to_string()))?
        .spawn()
        .map_err(|e| start(e.to_string()))?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let run = async {
        let mut printed = Vec::new();
        (&mut stdout)
            .take(MAX_OUTPUT + 1)
            .read_to_end(&mut printed)
            .await
            .map_err(|e| start(e.to_string()))?;
        if printed.len() as u64 > MAX_OUTPUT {
            return Err(CredentialError::Output {
                command: command.clone(),
            });
        }
        let status = child.wait().await.map_err(|e| start(e.to_string()))?;
        if !status.success() {
            return Err(CredentialError::Failed {
                command: command.clone(),
                status: status.to_string(),
            });
        }
        Ok(printed)
    };
    // Dropping the child at the deadline kills it.
    tokio::time::timeout(within, run)
        .await
        .map_err(|_| CredentialError::Time {
            command: command.clone(),
            within,
        })?
}

/// The plugin's command as client-go starts it: its arguments and
/// environment, and `KUBERNETES_EXEC_INFO` saying whether it may ask the
/// person anything and, if asked for, the cluster.
fn plugin(exec: &ExecConfig) -> Result<tokio::process::Command, serde_json::Error> {
    let interactive = exec.interactive_mode != Some(ExecInteractiveMode::Never);
    let mut spec = serde_json::json!({"interactive": interactive});
    if exec.provide_cluster_info
        && let Some(cluster) = &exec.cluster
    {
        spec["cluster"] = serde_json::to_value(cluster)?;
    }
    let info = serde_json::json!({"apiVersion": exec.api_version, "kind": "ExecCredential", "spec": spec});
    let mut cmd = tokio::process::Command::new(exec.command.as_deref().unwrap_or_default());
    cmd.args(exec.args.iter().flatten())
        .env("KUBERNETES_EXEC_INFO", info.to_string())
        .stdin(if interactive {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        // What a plugin says to the person (a login prompt, an error) is
        // theirs to read, and costs this process nothing.
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for pair in exec.env.iter().flatten() {
        if let (Some(name), Some(value)) = (pair.get("name"), pair.get("value")) {
            cmd.env(name, value);
        }
    }
    for name in exec.drop_env.iter().flatten() {
        cmd.env_remove(name);
    }
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(script: &str) -> AuthInfo {
        serde_json::from_value(serde_json::json!({
            "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "sh",
                     "args": ["-c", script], "interactiveMode": "Never"}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_token_takes_the_plugins_place() {
        let mut auth = plugin(
            r#"case "$KUBERNETES_EXEC_INFO" in *'"interactive":false'*) ;; *) exit 3;; esac
               echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t0k"}}'"#,
        );
        resolve(&mut auth, Duration::from_secs(10)).await.unwrap();
        assert!(auth.exec.is_none());
        // As a kubeconfig would be written with it.
        assert_eq!(serde_json::to_value(&auth).unwrap()["token"], "t0k");
    }

    #[tokio::test]
    async fn a_plugin_that_hangs_or_floods_is_stopped() {
        let mut hung = plugin("sleep 150");
        let err = resolve(&mut hung, Duration::from_millis(300)).await.unwrap_err();
        assert!(matches!(err, CredentialError::Time { .. }), "{err}");
        let mut chatty = plugin("yes");
        let err = resolve(&mut chatty, Duration::from_secs(10)).await.unwrap_err();
        assert_eq!(err, CredentialError::Output { command: "sh".into() });
        let mut failing = plugin("exit 7");
        let err = resolve(&mut failing, Duration::from_secs(10)).await.unwrap_err();
        assert!(err.to_string().contains("failed (exit status: 7)"), "{err}");
    }
}
