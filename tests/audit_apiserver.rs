//! The audit's cluster code against a scripted apiserver, in process: kube's
//! `Client` over a `tower-test` mock service whose handle answers each
//! request from a table, as kube-rs' controller-rs tests its reconcilers. Each test plays one request
//! sequence: discovery, a list in two pages, a kind RBAC forbids, a
//! PolicyReport written once and then left alone, the CSV watch relisting
//! after `410 Gone`, `cleanup` deleting what audits wrote, the owner's uid,
//! Events created once, and the nodes' platforms. The paths asserted are
//! the ones kube derives from each type: none is written by hand in `src/`.
//!
//! What the real apiserver adds (tests/e2e, on Kubernetes 1.20): its own
//! discovery documents, paging, RBAC and watch semantics; here the test
//! decides the answers, so it can play the rare ones (a continue token, an
//! expired resource version) on every run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use digest_gate::audit::installed::{self, Csvs, Followed};
use digest_gate::audit::{self, Connection, Covered, Scope, Target};
use digest_gate::policy::Policy;
use digest_gate::testing::{BAD, GOOD, REPO, incident_allowlist};

/// One request as the apiserver saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    /// Path and query.
    uri: String,
    body: Option<Value>,
}

type Answer = (StatusCode, String);

/// A scripted apiserver: `answer` decides each reply from the request and
/// the requests before it; every request is kept.
#[derive(Clone)]
struct Apiserver {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Apiserver {
    fn connect(answer: impl Fn(&Seen, &[Seen]) -> Answer + Send + Sync + 'static) -> (Self, Connection) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (service, mut handle) =
            tower_test::mock::pair::<Request<kube::client::Body>, Response<Full<Bytes>>>();
        let log = seen.clone();
        // Answers each request as it comes, until the client is dropped.
        tokio::spawn(async move {
            while let Some((request, reply)) = handle.next_request().await {
                let method = request.method().to_string();
                let uri = request.uri().to_string();
                let bytes = request.into_body().collect().await.unwrap().to_bytes();
                let body = (!bytes.is_empty()).then(|| serde_json::from_slice(&bytes).unwrap());
                let now = Seen { method, uri, body };
                let before: Vec<Seen> = log.lock().unwrap().clone();
                let (status, text) = answer(&now, &before);
                log.lock().unwrap().push(now);
                let response = Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(text)))
                    .unwrap();
                reply.send_response(response);
            }
        });
        let connection = Connection {
            client: kube::Client::new(service, "default"),
            context: "scripted".into(),
            server: "https://scripted.invalid".into(),
            namespace: "default".into(),
        };
        (Self { seen }, connection)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn writes(&self) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.method != "GET").collect()
    }
}

fn ok(value: Value) -> Answer {
    (StatusCode::OK, value.to_string())
}

fn status(code: u16, reason: &str, message: &str) -> Answer {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason, "code": code});
    (StatusCode::from_u16(code).unwrap(), body.to_string())
}

fn resource(name: &str, kind: &str, namespaced: bool, verbs: &[&str]) -> Value {
    json!({"name": name, "singularName": kind.to_lowercase(), "namespaced": namespaced, "kind": kind, "verbs": verbs})
}

/// A cluster serving core/v1 (Pods; ConfigMaps, which RBAC will forbid;
/// PodTemplates without `list`), apps/v1 Deployments and KServe's
/// ServingRuntimes; nothing else digest-gate reads.
fn discovery(uri: &str) -> Option<Answer> {
    let path = uri.split('?').next().unwrap();
    let list = |gv: &str, resources: Vec<Value>| {
        ok(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
    };
    let group = |name: &str, version: &str| {
        let gv = format!("{name}/{version}");
        json!({"name": name, "versions": [{"groupVersion": gv, "version": version}],
               "preferredVersion": {"groupVersion": gv, "version": version}})
    };
    Some(match path {
        "/api" => ok(json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})),
        "/apis" => ok(json!({"kind": "APIGroupList", "apiVersion": "v1",
                             "groups": [group("apps", "v1"), group("serving.kserve.io", "v1alpha1")]})),
        "/api/v1" => list(
            "v1",
            vec![
                resource("pods", "Pod", true, &["get", "list"]),
                resource("configmaps", "ConfigMap", true, &["get", "list"]),
                resource("podtemplates", "PodTemplate", true, &["get"]),
                resource("namespaces", "Namespace", false, &["get", "list"]),
            ],
        ),
        "/apis/apps/v1" => list(
            "apps/v1",
            vec![resource("deployments", "Deployment", true, &["list"])],
        ),
        "/apis/serving.kserve.io/v1alpha1" => list(
            "serving.kserve.io/v1alpha1",
            vec![
                resource("servingruntimes", "ServingRuntime", true, &["list"]),
                resource(
                    "clusterservingruntimes",
                    "ClusterServingRuntime",
                    false,
                    &["list"],
                ),
            ],
        ),
        _ => return None,
    })
}

fn pod(name: &str, image: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "models", "uid": format!("uid-{name}")},
           "spec": {"containers": [{"name": "c", "image": image}]}})
}

fn page(items: Vec<Value>, next: Option<&str>) -> Answer {
    let mut metadata = json!({"resourceVersion": "7"});
    if let Some(next) = next {
        metadata["continue"] = next.into();
    }
    ok(json!({"kind": "List", "apiVersion": "v1", "metadata": metadata, "items": items}))
}

/// The cluster of the first test: discovery, Pods in two pages, ConfigMaps
/// forbidden, the incident's ServingRuntime, an empty Deployment list.
fn cluster(seen: &Seen, _: &[Seen]) -> Answer {
    if let Some(answer) = discovery(&seen.uri) {
        return answer;
    }
    let (path, query) = seen.uri.split_once('?').unwrap_or((&seen.uri, ""));
    match path {
        "/api/v1/pods" if query.contains("continue=page-2") => {
            page(vec![pod("stale", &format!("{REPO}@{BAD}"))], None)
        }
        "/api/v1/pods" => page(vec![pod("fine", &format!("{REPO}@{GOOD}"))], Some("page-2")),
        "/api/v1/configmaps" => status(
            403,
            "Forbidden",
            "configmaps is forbidden: User \"system:serviceaccount:x:auditor\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope",
        ),
        "/apis/serving.kserve.io/v1alpha1/servingruntimes" => page(
            vec![
                json!({"metadata": {"name": "ovms", "namespace": "models", "uid": "uid-ovms"},
                        "spec": {"containers": [{"name": "ovms", "image": format!("{REPO}@{BAD}")}]}}),
            ],
            None,
        ),
        "/apis/serving.kserve.io/v1alpha1/clusterservingruntimes" | "/apis/apps/v1/deployments" => {
            page(vec![], None)
        }
        _ => status(404, "NotFound", &format!("the server could not find {path}")),
    }
}

fn everything() -> Target {
    Target {
        scope: Scope::All {
            namespace_selector: None,
        },
        label_selector: None,
        kinds: None,
        break_glass_label: None,
    }
}

#[tokio::test]
async fn discovery_paging_and_a_forbidden_kind() {
    let (apiserver, connection) = Apiserver::connect(cluster);
    let allowlist = incident_allowlist();
    let found = audit::run(
        &connection,
        &everything(),
        rules(&Policy::default(), &allowlist),
        false,
        &audit::Writes::default(),
        None,
        &indicatif::ProgressBar::hidden(),
    )
    .await
    .unwrap();

    // Both pages of Pods were asked for, the second with the token.
    let pods: Vec<String> = apiserver
        .seen()
        .into_iter()
        .map(|s| s.uri)
        .filter(|u| u.starts_with("/api/v1/pods"))
        .collect();
    assert_eq!(pods.len(), 2, "{pods:?}");
    assert!(
        pods[0].contains("limit=") && !pods[0].contains("continue"),
        "{pods:?}"
    );
    assert!(pods[1].contains("continue=page-2"), "{pods:?}");

    // Read per kind, in table order, and nothing of what is not served.
    let read: BTreeMap<&str, usize> = found.read.iter().copied().collect();
    assert_eq!(read.get("Pod"), Some(&2));
    assert_eq!(read.get("ServingRuntime"), Some(&1));
    assert_eq!(read.get("Deployment"), Some(&0));
    assert!(
        !read.contains_key("Template") && !read.contains_key("PodTemplate"),
        "{read:?}"
    );
    let notes = found.report.notes.join("\n");
    assert!(
        notes.contains("PodTemplates (v1) cannot be listed on this cluster"),
        "{notes}"
    );
    assert!(notes.contains("the cluster does not serve Templates"), "{notes}");

    // The forbidden kind is an error naming the apiserver's reason, not a
    // stop: the other kinds were still read.
    let errors = found.report.errors.join("\n");
    assert!(errors.contains("cannot list ConfigMaps (v1)"), "{errors}");
    assert!(
        errors.contains("configmaps is forbidden") && errors.contains("403 Forbidden"),
        "{errors}"
    );

    // Judged as the webhook judges: the stale Pod and the runtime rewrite
    // (the order of an audit's results is not part of its contract).
    let mut stale: Vec<(&str, &str)> = found
        .report
        .results
        .iter()
        .filter(|r| r.verdict != digest_gate::judge::ObjectVerdict::Allow)
        .map(|r| (r.kind.as_deref().unwrap(), r.name.as_deref().unwrap()))
        .collect();
    stale.sort_unstable();
    assert_eq!(stale, [("Pod", "stale"), ("ServingRuntime", "ovms")]);
    assert!(apiserver.writes().is_empty(), "an audit alone writes nothing");
}

/// PolicyReports as the apiserver stores them: created, listed back, and
/// patched by merge.
fn reports(stored: Arc<Mutex<BTreeMap<String, Value>>>) -> impl Fn(&Seen, &[Seen]) -> Answer {
    move |seen, _| {
        let (path, _) = seen.uri.split_once('?').unwrap_or((&seen.uri, ""));
        let mut stored = stored.lock().unwrap();
        let list = "/apis/wgpolicyk8s.io/v1alpha2/namespaces/models/policyreports";
        match (seen.method.as_str(), path) {
            ("GET", p) if p == list => ok(
                json!({"kind": "PolicyReportList", "apiVersion": "wgpolicyk8s.io/v1alpha2",
                                                 "metadata": {}, "items": stored.values().cloned().collect::<Vec<_>>()}),
            ),
            ("POST", p) if p == list => {
                let mut body = seen.body.clone().unwrap();
                body["metadata"]["resourceVersion"] = "1".into();
                let name = body["metadata"]["name"].as_str().unwrap().to_owned();
                stored.insert(name, body.clone());
                (StatusCode::CREATED, body.to_string())
            }
            ("PATCH", p) if p.starts_with(list) => {
                let name = p.rsplit('/').next().unwrap();
                let report = stored.get_mut(name).unwrap();
                for (k, v) in seen.body.as_ref().unwrap().as_object().unwrap() {
                    report[k] = v.clone();
                }
                ok(report.clone())
            }
            _ => status(404, "NotFound", "not found"),
        }
    }
}

#[tokio::test]
async fn a_policy_report_is_created_then_left_alone_then_patched() {
    // The findings come from the first test's cluster.
    let (_, reading) = Apiserver::connect(cluster);
    let allowlist = incident_allowlist();
    let mut found = audit::run(
        &reading,
        &everything(),
        rules(&Policy::default(), &allowlist),
        false,
        &audit::Writes::default(),
        None,
        &indicatif::ProgressBar::hidden(),
    )
    .await
    .unwrap();
    // A report speaks for a namespace only from a complete read.
    found.report.errors.clear();
    found.covered = Covered {
        namespaces: Some(["models".to_owned()].into()),
        cluster: false,
    };
    let stored = Arc::new(Mutex::new(BTreeMap::new()));
    let (apiserver, connection) = Apiserver::connect(reports(stored.clone()));
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let gathered = audit::write::Gathered::of(&found.report.results, false);
    let written = audit::write::policy_reports(&connection, &gathered, &found.covered, None, now)
        .await
        .unwrap();
    assert_eq!((written.created, written.updated, written.unchanged), (1, 0, 0));
    let report = stored.lock().unwrap()["digest-gate"].clone();
    assert_eq!(report["summary"]["fail"], 2, "{report}");
    assert_eq!(report["summary"]["pass"], 1, "{report}");
    let rules: Vec<&str> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    assert!(
        rules
            .iter()
            .all(|r| ["promoted", "digest_not_promoted"].contains(r)),
        "{rules:?}"
    );

    // The same findings an hour later: nothing is sent.
    let later = now + Duration::from_secs(3600);
    let written = audit::write::policy_reports(&connection, &gathered, &found.covered, None, later)
        .await
        .unwrap();
    assert_eq!((written.created, written.updated, written.unchanged), (0, 0, 1));
    assert_eq!(apiserver.writes().len(), 1, "{:?}", apiserver.writes());

    // The stale Pod fixed: one merge patch, the runtime's result keeping
    // the time it was first found.
    found
        .report
        .results
        .retain(|r| r.name.as_deref() != Some("stale"));
    let gathered = audit::write::Gathered::of(&found.report.results, false);
    let written = audit::write::policy_reports(&connection, &gathered, &found.covered, None, later)
        .await
        .unwrap();
    assert_eq!((written.created, written.updated, written.unchanged), (0, 1, 0));
    let writes = apiserver.writes();
    assert_eq!(writes.len(), 2);
    assert_eq!(writes[1].method, "PATCH");
    assert!(
        writes[1].uri.contains("/policyreports/digest-gate"),
        "{}",
        writes[1].uri
    );
    let report = stored.lock().unwrap()["digest-gate"].clone();
    assert_eq!(report["summary"]["fail"], 1, "{report}");
    let seconds = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["result"] == "fail")
        .map(|r| r["timestamp"]["seconds"].as_u64().unwrap());
    assert_eq!(seconds, Some(1_800_000_000));
}

fn csv(name: &str, version: &str) -> Value {
    json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
           "metadata": {"name": name, "namespace": "redhat-ods-operator", "resourceVersion": version},
           "spec": {"version": "1.21.0",
                    "relatedImages": [{"name": "ovms", "image": format!("{REPO}@{GOOD}")}]}})
}

#[tokio::test]
async fn the_csv_watch_relists_after_410_gone() {
    // First list: one CSV; its watch ends with 410 Gone (the resource
    // version expired); the relist finds the upgrade's second CSV. Later
    // watches wait.
    let answer = |seen: &Seen, before: &[Seen]| -> Answer {
        let path = seen.uri.split('?').next().unwrap();
        assert_eq!(
            path,
            "/apis/operators.coreos.com/v1alpha1/namespaces/redhat-ods-operator/clusterserviceversions"
        );
        let lists = before.iter().filter(|s| !s.uri.contains("watch=true")).count();
        if seen.uri.contains("watch=true") {
            let watches = before.iter().filter(|s| s.uri.contains("watch=true")).count();
            if watches == 0 {
                let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                  "status": "Failure", "message": "too old resource version: 1 (5)",
                                  "reason": "Expired", "code": 410}});
                return (StatusCode::OK, format!("{gone}\n"));
            }
            // Nothing more happens: an empty stream, which kube watches
            // again (the test has what it needs by then).
            return (StatusCode::OK, String::new());
        }
        let items = if lists == 0 {
            vec![csv("rhods-operator.1.20.1", "1")]
        } else {
            vec![
                csv("rhods-operator.1.20.1", "1"),
                csv("rhods-operator.1.21.0", "6"),
            ]
        };
        ok(
            json!({"kind": "ClusterServiceVersionList", "apiVersion": "operators.coreos.com/v1alpha1",
                  "metadata": {"resourceVersion": if lists == 0 { "1" } else { "6" }}, "items": items}),
        )
    };
    let (apiserver, connection) = Apiserver::connect(answer);
    let specs = vec!["redhat-ods-operator/rhods-operator".parse::<Csvs>().unwrap()];
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let follow = installed::follow(&connection, &specs, |followed| {
        let _ = tx.send(followed);
    });
    let mut installed_sets = Vec::new();
    tokio::select! {
        () = follow => panic!("the watch ended"),
        () = async {
            while installed_sets.len() < 2 {
                match tokio::time::timeout(Duration::from_secs(20), rx.recv()).await {
                    Ok(Some(Followed::Installed(sources))) => installed_sets.push(sources),
                    Ok(Some(Followed::Failed(_) | Followed::Back)) => {}
                    other => panic!("no second set of CSVs: {:?}", other.is_ok()),
                }
            }
        } => {}
    }
    let names = |set: &Vec<digest_gate::allowlist::Source>| -> Vec<String> {
        set.iter().map(|s| s.name.clone()).collect()
    };
    assert_eq!(
        names(&installed_sets[0]),
        ["cluster:redhat-ods-operator/rhods-operator.1.20.1"]
    );
    assert_eq!(
        names(&installed_sets[1]),
        [
            "cluster:redhat-ods-operator/rhods-operator.1.20.1",
            "cluster:redhat-ods-operator/rhods-operator.1.21.0"
        ]
    );
    assert!(
        installed_sets[1]
            .iter()
            .all(|s| matches!(s.kind, digest_gate::allowlist::SourceKind::InstalledCsv { .. }))
    );
    // list, watch (410), list again: the relist came after the expiry.
    let order: Vec<bool> = apiserver
        .seen()
        .iter()
        .map(|s| s.uri.contains("watch=true"))
        .take(3)
        .collect();
    assert_eq!(order, [false, true, false]);
}

fn rules<'a>(
    policy: &'a Policy,
    allowlist: &'a digest_gate::allowlist::Allowlist,
) -> digest_gate::judge::Rules<'a> {
    digest_gate::judge::Rules {
        policy,
        allowlist,
        published: None,
    }
}

/// The path of a request, without its query.
fn path_of(seen: &Seen) -> &str {
    seen.uri.split('?').next().unwrap()
}

/// `cleanup --owner`: what audits wrote is found by its label in every
/// namespace, kept when it is an audit's (a report's name, an Event's
/// reason) and the owner's, and deleted with its uid as the precondition;
/// a report kind whose CRD is not served is passed over. Every path is the
/// one kube derives from the type.
#[tokio::test]
async fn cleanup_deletes_what_audits_wrote_with_its_uid_as_the_precondition() {
    let (apiserver, connection) = Apiserver::connect(|seen, _| {
        let query = seen.uri.split_once('?').map_or("", |(_, q)| q);
        match (seen.method.as_str(), path_of(seen)) {
            ("GET", _) if !query.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Ddigest-gate") => {
                status(400, "BadRequest", &format!("unselected list: {query}"))
            }
            ("GET", "/apis/wgpolicyk8s.io/v1alpha2/policyreports") => page(
                vec![
                    json!({"metadata": {"name": "digest-gate", "namespace": "m", "uid": "r-1",
                                        "ownerReferences": [{"uid": "role-1"}]}}),
                    json!({"metadata": {"name": "digest-gate", "namespace": "n", "uid": "r-2",
                                        "ownerReferences": [{"uid": "role-2"}]}}),
                    json!({"metadata": {"name": "cpol-require-labels", "namespace": "m", "uid": "r-3",
                                        "ownerReferences": [{"uid": "role-1"}]}}),
                ],
                None,
            ),
            ("GET", "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports") => status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
            ("GET", "/api/v1/events") => page(
                vec![
                    json!({"metadata": {"name": "p.1", "namespace": "m", "uid": "e-1",
                                        "ownerReferences": [{"uid": "role-1"}]}, "reason": "UnpromotedImage"}),
                    json!({"metadata": {"name": "p.2", "namespace": "m", "uid": "e-2",
                                        "ownerReferences": [{"uid": "role-1"}]}, "reason": "Pulled"}),
                ],
                None,
            ),
            ("DELETE", _) => ok(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
            (_, path) => status(404, "NotFound", path),
        }
    });
    let removed = audit::write::remove(&connection, Some("role-1")).await.unwrap();
    assert_eq!((removed.reports, removed.events), (1, 1), "{:?}", removed.errors);
    assert!(removed.errors.is_empty(), "{:?}", removed.errors);
    let deletes: Vec<(String, Value)> = apiserver
        .writes()
        .iter()
        .map(|s| {
            (
                path_of(s).to_owned(),
                s.body.clone().unwrap_or_default()["preconditions"].clone(),
            )
        })
        .collect();
    assert_eq!(
        deletes,
        [
            (
                "/apis/wgpolicyk8s.io/v1alpha2/namespaces/m/policyreports/digest-gate".to_owned(),
                json!({"uid": "r-1"})
            ),
            (
                "/api/v1/namespaces/m/events/p.1".to_owned(),
                json!({"uid": "e-1"})
            ),
        ]
    );
}

/// `cleanup --owner NAME` deletes by the ClusterRole's uid, read as
/// metadata only; a role that does not exist is an error naming it.
#[tokio::test]
async fn the_owner_is_the_cluster_roles_uid() {
    let (apiserver, connection) = Apiserver::connect(|seen, _| match path_of(seen) {
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/digest-gate-audit" => ok(json!({
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": "digest-gate-audit", "uid": "role-1"}})),
        _ => status(
            404,
            "NotFound",
            "clusterroles.rbac.authorization.k8s.io \"gone\" not found",
        ),
    });
    let uid = audit::write::cluster_role_uid(&connection, "digest-gate-audit").await;
    assert_eq!(uid.map_err(|f| f.message().to_owned()), Ok("role-1".to_owned()));
    let missing = audit::write::cluster_role_uid(&connection, "gone")
        .await
        .unwrap_err();
    assert!(
        missing.message().contains("ClusterRole \"gone\""),
        "{}",
        missing.message()
    );
    let paths: Vec<String> = apiserver.seen().iter().map(|s| path_of(s).to_owned()).collect();
    assert_eq!(
        paths,
        [
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/digest-gate-audit",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/gone"
        ]
    );
}

/// `audit --events`: one Warning Event per finding, in the object's
/// namespace, labelled as an audit's; a rerun's create is refused as
/// AlreadyExists (409) and counted unchanged, so nothing is written twice.
#[tokio::test]
async fn an_event_per_finding_is_created_once() {
    let (apiserver, connection) =
        Apiserver::connect(|seen, before| match (seen.method.as_str(), path_of(seen)) {
            ("POST", "/api/v1/namespaces/models/events") => {
                let name = &seen.body.as_ref().unwrap()["metadata"]["name"];
                if before
                    .iter()
                    .any(|b| b.body.as_ref().is_some_and(|v| &v["metadata"]["name"] == name))
                {
                    status(409, "AlreadyExists", "events already exists")
                } else {
                    (StatusCode::CREATED, seen.body.as_ref().unwrap().to_string())
                }
            }
            (_, path) => status(404, "NotFound", path),
        });
    let list = incident_allowlist();
    let policy = Policy::default();
    let object = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stale", "namespace": "models", "uid": "uid-stale"},
        "spec": {"containers": [{"name": "ovms", "image": format!("{REPO}@{BAD}")}]}});
    let j = digest_gate::judge::judge(&object, None, &policy, &list);
    let reports = vec![digest_gate::report::ObjectReport::new(
        "cluster:scripted".into(),
        &object,
        &j,
        &list,
        |_| None,
    )];
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let first = audit::write::events(&connection, &reports, None, now)
        .await
        .unwrap();
    let again = audit::write::events(&connection, &reports, None, now)
        .await
        .unwrap();
    assert_eq!((first.created, first.unchanged), (1, 0));
    assert_eq!((again.created, again.unchanged), (0, 1));
    let event = apiserver.writes()[0].body.clone().unwrap();
    assert_eq!(event["reason"], "UnpromotedImage");
    assert_eq!(event["type"], "Warning");
    assert_eq!(
        event["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "digest-gate"
    );
    assert_eq!(
        event["involvedObject"],
        json!({"apiVersion": "v1", "kind": "Pod", "name": "stale", "namespace": "models", "uid": "uid-stale"})
    );
}

/// `audit --registry` without `--platform`: every distinct os/arch of the
/// nodes, read page by page; a Node without both labels is passed over.
#[tokio::test]
async fn the_nodes_platforms_are_read_page_by_page() {
    let node = |name: &str, os: &str, arch: &str| json!({"metadata": {"name": name, "labels": {"kubernetes.io/os": os, "kubernetes.io/arch": arch}}});
    let (apiserver, connection) = Apiserver::connect(move |seen, _| match path_of(seen) {
        "/api/v1/nodes" if seen.uri.contains("continue=n-2") => page(vec![node("c", "linux", "arm64")], None),
        "/api/v1/nodes" => page(
            vec![
                node("a", "linux", "amd64"),
                node("b", "linux", "amd64"),
                json!({"metadata": {"name": "unlabelled"}}),
            ],
            Some("n-2"),
        ),
        path => status(404, "NotFound", path),
    });
    let platforms = audit::nodes::platforms(&connection).await.unwrap();
    let named: Vec<String> = platforms.iter().map(ToString::to_string).collect();
    assert_eq!(named, ["linux/amd64", "linux/arm64"]);
    assert_eq!(apiserver.seen().len(), 2);
}
