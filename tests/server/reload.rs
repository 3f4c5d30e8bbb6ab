//! The allowlist as the kubelet updates it: rotated by symlink swap, a
//! broken reload, a restart or a new Pod with a broken allowlist.

use super::*;

#[tokio::test]
async fn allowlist_rotation_by_symlink_swap_and_a_broken_reload() {
    let h = start("rotate-allowlist", Policy::default(), false).await;
    let list_dir = h.dir.join("allowlist");
    let mut client = h.client().await;
    let object = incident_runtime();
    let verdict = async |client: &mut Client, uid: &str| {
        let a = client
            .review("/validate", &review(uid, "CREATE", &object, None))
            .await;
        a["response"]["allowed"].as_bool().unwrap()
    };
    assert!(!verdict(&mut client, "before").await);

    // Promote the "never promoted" digest too; the same keep-alive connection
    // sees the new allowlist.
    let widened = format!("{OVMS}@{NEVER_PROMOTED}\n{OVMS}@{PROMOTED}\n");
    kubelet_write(&list_dir, &[("allowlist.yaml", &widened)], 1);
    let mut n = 0;
    eventually(
        "the swapped allowlist to take effect",
        Duration::from_secs(10),
        async || {
            n += 1;
            verdict(&mut client, &format!("poll-{n}")).await
        },
    )
    .await;

    // Garbage, then an emptied allowlist: both refused, the last good one stays.
    for (generation, content) in [
        (
            2,
            "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec: [\n",
        ),
        (3, ""),
    ] {
        kubelet_write(&list_dir, &[("allowlist.yaml", content)], generation);
        let want = format!(
            "digest_gate_reloads_total{{source=\"allowlist\",result=\"failure\"}} {}",
            generation - 1
        );
        eventually(
            "the failed reload to be counted",
            Duration::from_secs(10),
            async || {
                admin_get(h.running.admin_addr, "/metrics")
                    .await
                    .1
                    .contains(&want)
            },
        )
        .await;
        assert!(verdict(&mut client, &format!("after-bad-{generation}")).await);
        assert_eq!(admin_get(h.running.admin_addr, "/readyz").await.0, StatusCode::OK);
    }
    // A deleted allowlist file is refused too.
    std::fs::remove_file(list_dir.join("allowlist.yaml")).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(verdict(&mut client, "after-delete").await);
    h.running.drain();
    h.running.wait().await;
}

/// A server on `list_dir` and `state_dir` with fresh certificates, as a
/// container (re)starting in the same pod: the emptyDir survives.
async fn start_in(dir: &Path, list_dir: &Path, state_dir: &Path) -> Result<(Pki, server::Running), String> {
    let pki = Pki::new("test CA");
    let tls_dir = dir.join("tls");
    std::fs::create_dir_all(&tls_dir).unwrap();
    let issued = pki.server();
    std::fs::write(tls_dir.join("tls.crt"), &issued.cert_pem).unwrap();
    std::fs::write(tls_dir.join("tls.key"), &issued.key_pem).unwrap();
    let inputs = Inputs {
        cert: tls_dir.join("tls.crt"),
        key: tls_dir.join("tls.key"),
        allowlists: vec![list_dir.to_owned()],
        policy: Policy::default(),
        bound: None,
    };
    let mut config = loopback_config();
    config.reload_interval = Duration::from_millis(100);
    config.state_dir = Some(state_dir.to_owned());
    server::start(config, inputs)
        .await
        .map(|r| (pki, r))
        .map_err(|e| e.to_string())
}

/// A pod's directories: scratch, the mounted allowlist, the emptyDir; and
/// the example allowlist's text.
fn pod_dirs(name: &str) -> (PathBuf, PathBuf, PathBuf, String) {
    let dir = scratch(name);
    let (list_dir, state_dir) = (dir.join("allowlist"), dir.join("state"));
    std::fs::create_dir_all(&list_dir).unwrap();
    std::fs::create_dir_all(&state_dir).unwrap();
    let example = std::fs::read_to_string(example_allowlist_path()).unwrap();
    (dir, list_dir, state_dir, example)
}

/// Issue 15: a bad allowlist edit followed by a container restart (node
/// drain, OOM) must not take admission down. The running server keeps the
/// last allowlist that loaded in --state-dir; the restarted one serves it,
/// ready, and says loudly that it does; a good edit puts things right.
#[tokio::test]
async fn a_restart_with_a_broken_allowlist_serves_the_last_good_one() {
    let (dir, list_dir, state_dir, example) = pod_dirs("last-good");
    kubelet_write(&list_dir, &[("allowlist.yaml", &example)], 0);
    let (_, first) = start_in(&dir, &list_dir, &state_dir).await.unwrap();
    first.drain();
    first.wait().await;

    // The bad edit lands while no container runs; then it restarts.
    let broken = example.replace(PROMOTED, "sha256:abc");
    kubelet_write(&list_dir, &[("allowlist.yaml", &broken)], 1);
    let (pki, second) = start_in(&dir, &list_dir, &state_dir)
        .await
        .expect("starts on the last good copy");
    assert_eq!(admin_get(second.admin_addr, "/readyz").await.0, StatusCode::OK);
    assert_eq!(
        metric_line(&second, "digest_gate_allowlist_stale").await,
        "digest_gate_allowlist_stale 1"
    );
    assert!(
        metric_line(
            &second,
            "digest_gate_reloads_total{source=\"allowlist\",result=\"failure\"}"
        )
        .await
        .ends_with(" 1")
    );
    // It judges with what it kept: the incident's digest is rewritten.
    let mut client = Client::open(second.webhook_addr, &pki.ca_pem).await;
    let answer = client
        .review("/mutate", &review("kept", "CREATE", &incident_runtime(), None))
        .await;
    let patched = apply_patch(&answer, &incident_runtime());
    assert_eq!(
        patched["spec"]["containers"][0]["image"],
        format!("{OVMS}@{PROMOTED}")
    );

    // The fix arrives: in force, and no longer stale.
    kubelet_write(&list_dir, &[("allowlist.yaml", &example)], 2);
    eventually(
        "the fixed allowlist to load",
        Duration::from_secs(10),
        async || metric_line(&second, "digest_gate_allowlist_stale").await == "digest_gate_allowlist_stale 0",
    )
    .await;
    second.drain();
    second.wait().await;
}

/// A brand-new pod (nothing kept) with a broken allowlist neither exits
/// (a crash loop) nor serves: it is not ready, says why, and becomes ready
/// when the allowlist is fixed. Services keep routing to healthy replicas.
#[tokio::test]
async fn a_new_pod_with_a_broken_allowlist_waits_unready() {
    let (dir, list_dir, state_dir, example) = pod_dirs("no-last-good");
    kubelet_write(
        &list_dir,
        &[("allowlist.yaml", &example.replace(PROMOTED, "sha256:abc"))],
        0,
    );
    let (_, running) = start_in(&dir, &list_dir, &state_dir)
        .await
        .expect("waits instead of exiting");
    let (status, body) = admin_get(running.admin_addr, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("no last good copy"), "{body}");
    assert_eq!(
        metric_line(&running, "digest_gate_allowlist_stale").await,
        "digest_gate_allowlist_stale 1"
    );

    kubelet_write(&list_dir, &[("allowlist.yaml", &example)], 1);
    eventually(
        "ready once the allowlist loads",
        Duration::from_secs(10),
        async || admin_get(running.admin_addr, "/readyz").await.0 == StatusCode::OK,
    )
    .await;
    assert!(state_dir.join("last-good-allowlist").exists());
    running.drain();
    running.wait().await;

    // Without --state-dir (a developer's run) a broken allowlist still stops
    // the server with the loader's message.
    kubelet_write(
        &list_dir,
        &[("allowlist.yaml", &example.replace(PROMOTED, "sha256:abc"))],
        2,
    );
    let pki = Pki::new("test CA");
    let issued = pki.server();
    std::fs::write(dir.join("tls.crt"), &issued.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &issued.key_pem).unwrap();
    let inputs = Inputs {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        allowlists: vec![list_dir],
        policy: Policy::default(),
        bound: None,
    };
    let config = loopback_config();
    let error = server::start(config, inputs)
        .await
        .err()
        .expect("no state dir: exits")
        .to_string();
    assert!(
        error.contains("allowlist.yaml:") && error.contains("64 hex characters"),
        "{error}"
    );
}
