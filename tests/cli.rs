//! `digest-gate check` and `digest-gate allowlist` run as a developer or CI
//! runs them: the built binary, the real upstream manifests, every allowlist
//! format.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

mod common;

use common::{root, scratch};
use digest_gate::testing::{BAD as NEVER_PROMOTED, GOOD as PROMOTED, REPO as OVMS};

fn fixture(name: &str) -> String {
    let dir = root().join("tests/fixtures/upstream/servingruntimes");
    let found = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(name))
        .unwrap_or_else(|| panic!("no fixture {name}"));
    found.display().to_string()
}

fn path(rel: &str) -> String {
    root().join(rel).display().to_string()
}

fn example_allowlist() -> String {
    path("examples/allowlist.yaml")
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

fn digest_gate(args: &[&str], stdin: Option<&str>) -> Run {
    run_with(args, stdin, &[])
}

/// `digest-gate` with `stdin` and the environment variables given, and
/// none of the `DIGEST_GATE_*` ones the tests' own environment may have.
fn run_with(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_digest-gate"));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("DIGEST_GATE_")) {
        cmd.env_remove(key);
    }
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("binary runs");
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().expect("exited"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn check(allowlist: &str, file: &str, extra: &[&str]) -> Run {
    let mut args = vec!["check", "--allowlist", allowlist, "-f", file];
    args.extend_from_slice(extra);
    digest_gate(&args, None)
}

#[test]
fn the_incident_configmap_is_rewritten_to_the_promoted_digest() {
    for allowlist in [
        example_allowlist(),
        path("tests/data/allowlists/rhods-operator.csv.yaml"),
    ] {
        let run = check(&allowlist, &fixture("01_"), &["-o", "json"]);
        assert_eq!(run.code, 1, "{}", run.stderr);
        let out = run.json();
        let result = &out["results"][0];
        assert_eq!(result["kind"], "ConfigMap");
        assert_eq!(result["verdict"], "rewrite");
        let image = &result["images"][0];
        assert_eq!(image["path"], "/data/default-config#/spec/containers/0/image");
        assert_eq!(image["container"], "ovms");
        assert_eq!(image["image"], format!("{OVMS}@{NEVER_PROMOTED}"));
        assert_eq!(image["rewrite"], format!("{OVMS}@{PROMOTED}"));
        assert_eq!(image["line"], 40);
        assert_eq!(
            out["summary"],
            serde_json::json!({"objects": 1, "allow": 0, "rewrite": 1, "deny": 0, "skipped": 0})
        );
    }
}

#[test]
fn fix_changes_only_the_image_line_and_the_result_passes() {
    let file = fixture("01_");
    let run = check(&example_allowlist(), &file, &["--fix"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("fixed: container \"ovms\""), "{}", run.stderr);
    let original = std::fs::read_to_string(&file).unwrap();
    let changed: Vec<(usize, &str, &str)> = original
        .lines()
        .zip(run.stdout.lines())
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| (i + 1, a, b))
        .collect();
    assert_eq!(original.lines().count(), run.stdout.lines().count());
    assert_eq!(changed.len(), 1, "{changed:#?}");
    assert_eq!(changed[0].0, 40);
    assert_eq!(changed[0].2, changed[0].1.replace(NEVER_PROMOTED, PROMOTED));
    let again = digest_gate(
        &["check", "--allowlist", &example_allowlist(), "-f", "-"],
        Some(&run.stdout),
    );
    assert_eq!(again.code, 0, "{}", again.stdout);
}

#[test]
fn fix_keeps_the_comment_after_a_quoted_image() {
    for (quoted, fixed) in [
        (
            format!("\"{OVMS}@{NEVER_PROMOTED}\""),
            format!("\"{OVMS}@{PROMOTED}\""),
        ),
        (
            format!("'{OVMS}@{NEVER_PROMOTED}'"),
            format!("'{OVMS}@{PROMOTED}'"),
        ),
    ] {
        let manifest = |image: &str| {
            format!(
                "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata:\n  name: ovms\n\
                 spec:\n  containers:\n    - name: ovms\n      image: {image}   # stale!\n\
                 \x20     args: ['--port=8001']  # kept\n"
            )
        };
        let run = digest_gate(
            &["check", "--allowlist", &example_allowlist(), "-f", "-", "--fix"],
            Some(&manifest(&quoted)),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.stdout, manifest(&fixed));
    }
}

#[test]
fn template_parameters_are_judged_and_fixed_where_they_are_set() {
    // odh-deployer's Template, its image made a parameter with a default,
    // as Templates that take the image from `oc process -p` write it.
    let upstream = std::fs::read_to_string(fixture("03_")).unwrap();
    let template = |default: &str| {
        upstream.replace("image: ovms-1", "image: ${OVMS_IMAGE}").replace(
            "parameters: []",
            &format!("parameters:\n  - name: OVMS_IMAGE\n    description: the model server image\n    value: {default}  # set by the release"),
        )
    };
    let stale = template(&format!("{OVMS}@{NEVER_PROMOTED}"));
    let line = stale.lines().position(|l| l.contains("value: ")).unwrap() + 1;
    let run = digest_gate(
        &["check", "--allowlist", &example_allowlist(), "-f", "-", "--fix"],
        Some(&stale),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, template(&format!("{OVMS}@{PROMOTED}")));
    assert!(
        run.stderr.starts_with(&format!(
            "-:{line}: Template ovms: fixed: objects[0] ServingRuntime ovms: container \"ovms\" (parameter OVMS_IMAGE): "
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn what_kubectl_reads_is_checked_and_fixed() {
    // A quoted value folded under its key (spec-invalid; go-yaml reads it)
    // and a tab after a colon (spec-valid; saphyr-parser refuses it).
    let manifest = |image: &str| {
        format!(
            "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata:\n  name: ovms\nspec:\n  containers:\n    - name: ovms\n      env:\n        - name: NOTE\n          value: 'a long value that goes on\n          and continues here'\n      image:\t{image}\n"
        )
    };
    let run = digest_gate(
        &["check", "--allowlist", &example_allowlist(), "-f", "-", "--fix"],
        Some(&manifest(&format!("{OVMS}@{NEVER_PROMOTED}"))),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, manifest(&format!("{OVMS}@{PROMOTED}")));
    assert!(
        run.stderr
            .contains("note: -: line 10: the quoted value continues on lines indented less than its key"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("-:12: ServingRuntime ovms: fixed:"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_helm_template_is_named_as_one_with_the_pipe_to_use() {
    // The chart's own Deployment template: `{{- if ... }}` lines are not YAML.
    let run = check(
        &example_allowlist(),
        &path("charts/digest-gate/templates/deployment.yaml"),
        &[],
    );
    assert_eq!(run.code, 2, "{}", run.stdout);
    let out = run.stdout + &run.stderr;
    assert!(
        out.contains("it looks like a Helm template ('{{' on line 1)"),
        "{out}"
    );
    assert!(
        out.contains("helm template RELEASE CHART | digest-gate check --allowlist ... -f -"),
        "{out}"
    );
    // Broken YAML without template braces gets no such hint.
    let run = digest_gate(
        &["check", "--allowlist", &example_allowlist(), "-f", "-"],
        Some("a: [1\n"),
    );
    assert_eq!(run.code, 2);
    assert!(!(run.stdout + &run.stderr).contains("Helm"));
}

/// Each upstream fixture's placeholder image, denied with what it is.
#[rstest::rstest]
#[case::angle_bracket_placeholder(
    "02_",
    "image '<openvino_image>' is an unsubstituted placeholder (a name in angle brackets that a script replaces)"
)]
#[case::short_name(
    "03_",
    "image 'ovms-1' has no registry domain: Docker and containerd pull it from docker.io/library/ovms-1, CRI-O from its configured search registries; write the registry, e.g. docker.io/library/ovms-1@sha256:..."
)]
#[case::short_name_in_a_template("04_", "image 'ovms-kserve' has no registry domain")]
#[case::replace_suffix(
    "07_",
    "image 'ovms-1:replace' is an unsubstituted placeholder (the tag ':replace', which a build step replaces)"
)]
#[case::replace_suffix_triton("08_", "image 'tritonserver-2:replace' is an unsubstituted placeholder")]
#[case::worker_container(
    "09_",
    "worker container \"worker-container\": image 'huggingfaceserver-gpu:replace' is an unsubstituted placeholder"
)]
#[case::replace_suffix_sklearn("10_", "image 'kserve-sklearnserver:replace' is an unsubstituted placeholder")]
#[case::kubernetes_variable(
    "11_",
    "image '$(vllm-cuda-image)' is an unsubstituted placeholder (a kustomize or Tekton variable, $(...))"
)]
fn placeholders_and_short_names_are_denied_with_what_they_are(#[case] name: &str, #[case] want: &str) {
    let run = check(&example_allowlist(), &fixture(name), &[]);
    assert_eq!(run.code, 1, "{name}: {}", run.stdout);
    assert!(run.stdout.contains(": deny: "), "{name}: {}", run.stdout);
    assert!(
        run.stdout.contains(want),
        "{name}: want {want:?} in\n{}",
        run.stdout
    );
}

#[test]
fn digest_pinned_fixtures_pass_and_unlisted_ones_follow_the_flag() {
    for name in ["05_", "06_"] {
        let run = check(&example_allowlist(), &fixture(name), &[]);
        assert_eq!(run.code, 0, "{name}: {}", run.stdout);
        // Compliant objects make no noise: only the summary line.
        assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
    }
    let run = check(&example_allowlist(), &fixture("12_"), &[]);
    assert_eq!(run.code, 1);
    assert!(run.stdout.contains("repository quay.io/modh/odh-openvino-servingruntime-container is not in the promoted-digest allowlist"), "{}", run.stdout);
    let run = check(&example_allowlist(), &fixture("12_"), &["--unlisted", "allow"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

#[test]
fn kinds_without_images_are_skipped() {
    let run = check(&example_allowlist(), &fixture("03b_"), &["-o", "json"]);
    assert_eq!(run.code, 0);
    let out = run.json();
    assert_eq!(out["results"][0]["verdict"], "skipped");
    assert_eq!(out["summary"]["skipped"], 1);
}

#[test]
fn a_directory_of_manifests_is_checked_file_by_file() {
    let run = check(
        &example_allowlist(),
        &path("tests/fixtures/upstream/servingruntimes"),
        &["-o", "json"],
    );
    assert_eq!(run.code, 1);
    let out = run.json();
    assert_eq!(
        out["summary"],
        serde_json::json!({"objects": 12, "allow": 2, "rewrite": 1, "deny": 9, "skipped": 0})
    );
    // kustomization.yaml configures kustomize; it is never applied.
    let kustomization = path(
        "tests/fixtures/upstream/servingruntimes/03b_rhods-1.33_odh-deployer_modelserving.kustomization.yaml",
    );
    assert_eq!(
        out["skipped"],
        serde_json::json!([{"source": kustomization, "reason": "holds no Kubernetes object (a Kustomization for kustomize.config.k8s.io/v1beta1, read by a tool, not applied)"}])
    );
    assert_eq!(
        run.stderr,
        format!(
            "note: skipped {kustomization}: holds no Kubernetes object (a Kustomization for kustomize.config.k8s.io/v1beta1, read by a tool, not applied)\n"
        )
    );
}

/// A repository as CI checks it out: manifests in nested directories
/// beside files that are not manifests.
fn repository(dir: &Path) {
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    let upstream = std::fs::read_to_string(fixture("05_")).unwrap();
    write("base/ovms.yaml", &upstream);
    write(
        "overlays/prod/stale.yml",
        &format!(
            "apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata:\n  name: ovms\nspec:\n  containers:\n    - name: ovms\n      image: {OVMS}@{NEVER_PROMOTED}\n"
        ),
    );
    write("values.yaml", "replicas: 2\nimage:\n  tag: latest\n");
    write(
        "kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [base/ovms.yaml]\n",
    );
    write(
        "overlays/prod/patch.yaml",
        "- op: replace\n  path: /spec/containers/0/image\n  value: nginx\n",
    );
    // A template whose first document parses: its Pod must not count.
    write(
        "chart/templates/pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: nginx}]\n---\n{{- if .Values.extra }}\nkind: ConfigMap\n{{- end }}\n",
    );
    write(".github/workflows/ci.yaml", "on: [push]\njobs: {a: [\n");
    write("README.md", "not a manifest\n");
    // A link back up the tree is followed once.
    std::os::unix::fs::symlink(dir, dir.join("overlays/loop")).unwrap();
}

#[test]
fn directories_are_walked_recursively_and_files_that_are_not_manifests_skipped() {
    let dir = scratch("repository");
    repository(&dir);
    let run = check(&example_allowlist(), &dir.display().to_string(), &["-o", "json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let out = run.json();
    let at = |rel: &str| dir.join(rel).display().to_string();
    let sources: Vec<&str> = out["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, [at("base/ovms.yaml"), at("overlays/prod/stale.yml")]);
    assert_eq!(
        out["summary"],
        serde_json::json!({"objects": 2, "allow": 1, "rewrite": 1, "deny": 0, "skipped": 0})
    );
    let skipped: Vec<(String, String)> = out["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["source"].as_str().unwrap().to_owned(),
                s["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        skipped,
        [
            (
                at("chart/templates/pod.yaml"),
                "it looks like a Helm template ('{{' on line 7): render it and check the result, \
                 e.g. helm template RELEASE CHART | digest-gate check --allowlist ... -f -"
                    .to_owned()
            ),
            (
                at("kustomization.yaml"),
                "holds no Kubernetes object (a Kustomization for kustomize.config.k8s.io/v1beta1, read by a tool, not applied)".to_owned()
            ),
            (
                at("overlays/prod/patch.yaml"),
                "holds no Kubernetes object (found a list)".to_owned()
            ),
            (
                at("values.yaml"),
                "holds no Kubernetes object (a mapping without apiVersion and kind)".to_owned()
            ),
        ]
    );
    // One note per skipped file on stderr, nothing else.
    let notes: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(notes.len(), 4, "{}", run.stderr);
    assert!(
        notes.iter().all(|n| n.starts_with("note: skipped ")),
        "{}",
        run.stderr
    );

    // Named explicitly, a file is judged, not skipped.
    let run = check(&example_allowlist(), &at("values.yaml"), &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains(
            "values.yaml:1: document 0 is not a Kubernetes object (a mapping without apiVersion and kind)"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn a_recursive_check_of_the_fixtures_gives_each_file_its_own_verdicts() {
    let verdicts = |run: &Run| -> Vec<(String, Value, Value, Vec<Value>)> {
        run.json()["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let images = r["images"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| i["verdict"].clone())
                    .collect();
                (
                    r["source"].as_str().unwrap().to_owned(),
                    r["document"].clone(),
                    r["verdict"].clone(),
                    images,
                )
            })
            .collect()
    };
    let all = check(
        &example_allowlist(),
        &path("tests/fixtures/upstream"),
        &["-o", "json"],
    );
    assert_eq!(all.code, 1, "{}", all.stderr);
    let all = verdicts(&all);
    let files: std::collections::BTreeSet<String> = all.iter().map(|v| v.0.clone()).collect();
    assert!(files.len() >= 14, "{files:?}");
    let mut one_by_one = Vec::new();
    for file in &files {
        one_by_one.extend(verdicts(&check(&example_allowlist(), file, &["-o", "json"])));
    }
    assert_eq!(all, one_by_one);
}

#[test]
fn a_run_that_finds_no_kubernetes_object_fails() {
    let dir = scratch("no-objects");
    std::fs::write(dir.join("values.yaml"), "replicas: 2\n").unwrap();
    let run = check(&example_allowlist(), &dir.display().to_string(), &[]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(
        run.stderr.contains(
            "error: no Kubernetes object found in the 1 file read (1 skipped, see above); nothing was checked"
        ),
        "{}",
        run.stderr
    );
    std::fs::remove_file(dir.join("values.yaml")).unwrap();
    let run = check(&example_allowlist(), &dir.display().to_string(), &[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("error: no manifest found"), "{}", run.stderr);
    // `kubectl get ... -o json` on an empty namespace: a List that was read.
    let run = digest_gate(
        &["check", "--allowlist", &example_allowlist(), "-f", "-"],
        Some(r#"{"apiVersion": "v1", "kind": "List", "items": [], "metadata": {"resourceVersion": ""}}"#),
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(
        run.stdout,
        "note: the input held no object (an empty List): nothing to judge\n0 objects checked: 0 allowed, 0 to rewrite, 0 denied, 0 skipped\n"
    );
    let run = digest_gate(
        &["check", "--allowlist", &example_allowlist(), "-f", "-"],
        Some(""),
    );
    assert_eq!(run.code, 2, "{}", run.stdout);
}

#[test]
fn during_an_operator_upgrade_the_newest_release_is_rewritten_to_and_named() {
    let old = path("tests/data/allowlists/rhods-operator.1.20.1.csv.yaml");
    let new = path("tests/data/allowlists/rhods-operator.csv.yaml");
    let incident = path("examples/manifests/incident-servingruntime.yaml");
    let promoted = format!("{OVMS}@{PROMOTED}");
    // OLM holds both CSVs while it upgrades: two promoted digests.
    let run = digest_gate(
        &[
            "check",
            "--allowlist",
            &old,
            "--allowlist",
            &new,
            "-f",
            &incident,
            "-o",
            "json",
        ],
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let image = &run.json()["results"][0]["images"][0];
    assert_eq!(image["verdict"], "rewrite");
    assert_eq!(image["rewrite"], promoted.as_str());
    let reason = image["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "(the digest of the newest release promoting it, rhods-operator 1.21.0; promoted by ClusterServiceVersion rhods-operator.1.21.0 ({new}:17))"
        )),
        "{reason}"
    );
    // Every source promoting the target, newest first: 1.21.0 lists it in
    // relatedImages and in its operator's RELATED_IMAGE_* env.
    let promotions = &image["promotions"];
    assert_eq!(
        promotions,
        &serde_json::json!([
            {"source": new, "line": 17, "origin": "ClusterServiceVersion rhods-operator.1.21.0", "version": "1.21.0"},
            {"source": new, "line": 38, "origin": "ClusterServiceVersion rhods-operator.1.21.0", "version": "1.21.0"},
        ])
    );

    // A plain list beside the old release: no order between them; each
    // candidate says where it comes from.
    let dir = scratch("upgrade");
    let plain = dir.join("promoted.txt");
    std::fs::write(&plain, format!("{promoted}\n")).unwrap();
    let plain = plain.display().to_string();
    let run = digest_gate(
        &[
            "check",
            "--allowlist",
            &old,
            "--allowlist",
            &plain,
            "-f",
            &incident,
        ],
        None,
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .contains(&format!("{promoted} from plain list ({plain}:1)"))
            && run.stdout.contains(&format!(
                "from ClusterServiceVersion rhods-operator.1.20.1 ({old}:19)"
            )),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains(": deny: "), "{}", run.stdout);

    // lint says what each source promotes, and how the two digests resolve.
    let lint = digest_gate(&["allowlist", "lint", &old, &new], None);
    assert_eq!(lint.code, 0, "{}", lint.stderr);
    assert!(
        lint.stdout
            .contains("  ClusterServiceVersion rhods-operator.1.21.0 (release 1.21.0): 2 digest(s)\n"),
        "{}",
        lint.stdout
    );
    assert!(
        lint.stdout.contains(&format!(
            "note: {OVMS} is promoted with different digests by 2 sources (sha256:120100000000 by ClusterServiceVersion rhods-operator.1.20.1; sha256:8af20e48bb48 by ClusterServiceVersion rhods-operator.1.21.0): rewrites go to the newest release's, rhods-operator 1.21.0"
        )),
        "{}",
        lint.stdout
    );
    let lint = digest_gate(&["allowlist", "lint", "--strict", &old, &plain], None);
    assert_eq!(lint.code, 1);
    assert!(
        lint.stdout
            .contains("by plain list): no release order or rewriteTo picks one"),
        "{}",
        lint.stdout
    );
    // convert keeps the decision: the newest release's digest is written
    // out as rewriteTo.
    let convert = digest_gate(&["allowlist", "convert", &old, &new], None);
    assert!(
        convert.stdout.contains(&format!(
            "      # the newest release promoting it, rhods-operator 1.21.0\n      rewriteTo: {PROMOTED}"
        )),
        "{}",
        convert.stdout
    );
}

/// What `kubectl get servingruntimes,clusterservingruntimes -o json` prints:
/// a `kind: List` of the objects.
fn kubectl_list() -> String {
    let mut items = Vec::new();
    for name in ["05_", "06_", "07_", "12_"] {
        let text = std::fs::read_to_string(fixture(name)).unwrap();
        for doc in digest_gate::yaml::parse_stream(&text).unwrap() {
            items.push(doc.value);
        }
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items});
    serde_json::to_string_pretty(&list).unwrap()
}

#[test]
fn kubectl_lists_from_stdin() {
    let run = digest_gate(
        &[
            "check",
            "--allowlist",
            &example_allowlist(),
            "-f",
            "-",
            "-o",
            "json",
        ],
        Some(&kubectl_list()),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let out = run.json();
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["source"], "-");
        assert_eq!(r["document"], 0);
        assert_eq!(r["item"], i);
    }
    let verdicts: Vec<&str> = results.iter().map(|r| r["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts, ["allow", "allow", "deny", "deny"]);
    // Lines point into the JSON text.
    assert!(results[2]["images"][0]["line"].as_u64().unwrap() > 1);
}

#[test]
fn kubectl_lists_can_be_fixed_in_place() {
    let mut list: Value = serde_json::from_str(&kubectl_list()).unwrap();
    list["items"][0]["spec"]["containers"][0]["image"] = Value::String(format!("{OVMS}@{NEVER_PROMOTED}"));
    let text = serde_json::to_string_pretty(&list).unwrap();
    let run = digest_gate(
        &["check", "--allowlist", &example_allowlist(), "-f", "-", "--fix"],
        Some(&text),
    );
    assert_eq!(run.code, 1, "two items stay denied: {}", run.stderr);
    assert_eq!(run.stdout, text.replace(NEVER_PROMOTED, PROMOTED));
}

#[test]
fn each_allowlist_format_decides() {
    let csv = path("tests/data/allowlists/rhods-operator.csv.yaml");
    let isc = path("tests/data/allowlists/imageset.yaml");
    let plain = path("tests/data/allowlists/promoted.txt");
    let cases: [(&str, String, i32, &str); 7] = [
        ("native", fixture("06_"), 0, ""),
        ("CSV relatedImages", fixture("01_"), 1, "rewrite"),
        // TGIS is promoted only through RELATED_IMAGE_* env; caikit is not.
        (
            "CSV env",
            fixture("06_"),
            1,
            "caikit-tgis-serving is not in the promoted-digest allowlist",
        ),
        ("ImageSetConfiguration", fixture("05_"), 0, ""),
        (
            "ImageSetConfiguration",
            fixture("06_"),
            1,
            "text-generation-inference is not in the promoted-digest allowlist",
        ),
        (
            "plain list tag",
            path("examples/manifests/incident-servingruntime.yaml"),
            1,
            "rewrite",
        ),
        (
            "plain list",
            fixture("05_"),
            1,
            // quay.io/opendatahub's image of that name is another image.
            "repository quay.io/modh/openvino_model_server is not in the promoted-digest allowlist; to admit it, promote a digest of it",
        ),
    ];
    let lists = [
        example_allowlist(),
        csv.clone(),
        csv,
        isc.clone(),
        isc,
        plain.clone(),
        plain,
    ];
    for ((name, file, code, want), list) in cases.iter().zip(lists) {
        let run = check(&list, file, &[]);
        assert_eq!(run.code, *code, "{name}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stdout.contains(want),
            "{name}: want {want:?} in\n{}",
            run.stdout
        );
    }
}

#[test]
fn a_mounted_configmap_directory_merges_its_keys() {
    // The kubelet's layout: keys are symlinks into ..data, itself a symlink
    // to a timestamped directory.
    let dir = scratch("mounted");
    let stamp = dir.join("..2026_12_02_18_00_00.000000001");
    std::fs::create_dir(&stamp).unwrap();
    for (key, src) in [
        ("csv.yaml", "rhods-operator.csv.yaml"),
        ("isc.yaml", "imageset.yaml"),
    ] {
        std::fs::copy(root().join("tests/data/allowlists").join(src), stamp.join(key)).unwrap();
        std::os::unix::fs::symlink(Path::new("..data").join(key), dir.join(key)).unwrap();
    }
    std::os::unix::fs::symlink(stamp.file_name().unwrap(), dir.join("..data")).unwrap();
    let allowlist = dir.display().to_string();
    assert_eq!(check(&allowlist, &fixture("05_"), &[]).code, 0);
    let run = check(&allowlist, &fixture("01_"), &[]);
    assert!(run.stdout.contains(": rewrite: "), "{}", run.stdout);
    let lint = digest_gate(&["allowlist", "lint", &allowlist], None);
    assert_eq!(lint.code, 0, "{}", lint.stderr);
    assert!(
        lint.stdout
            .contains("csv.yaml: ClusterServiceVersion, 3 promoted image(s)"),
        "{}",
        lint.stdout
    );
    assert!(
        lint.stdout.contains("warning: ")
            && lint
                .stdout
                .contains("odh-must-gather-rhel8:latest' is not pinned by digest"),
        "{}",
        lint.stdout
    );
    assert_eq!(
        digest_gate(&["allowlist", "lint", "--strict", &allowlist], None).code,
        1
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn conflicting_or_broken_allowlists_are_refused_with_file_and_line() {
    let dir = scratch("conflict");
    let a = dir.join("a.txt");
    let b = dir.join("b.yaml");
    std::fs::write(&a, format!("quay.io/x/y:v1@{PROMOTED}\n")).unwrap();
    std::fs::write(
        &b,
        format!("apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec:\n  repositories:\n    - name: quay.io/x/y\n      digests:\n        - digest: {NEVER_PROMOTED}\n          tags: [v1]\n"),
    )
    .unwrap();
    let run = digest_gate(
        &[
            "allowlist",
            "lint",
            &a.display().to_string(),
            &b.display().to_string(),
        ],
        None,
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains(&format!(
            "{}:7: spec.repositories[0].digests[0]: tag 'v1' of quay.io/x/y names",
            b.display()
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!("{}:1 names", a.display())),
        "{}",
        run.stderr
    );

    std::fs::write(
        &b,
        "apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nspec:\n  repositories: [\n",
    )
    .unwrap();
    let run = check(&b.display().to_string(), &fixture("05_"), &[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("not valid YAML"), "{}", run.stderr);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn unusable_input_and_flags_exit_2() {
    let list = example_allowlist();
    let missing = check(&list, "/nonexistent/manifest.yaml", &[]);
    assert_eq!(missing.code, 2);
    assert!(
        missing
            .stderr
            .contains("error: /nonexistent/manifest.yaml: cannot read"),
        "{}",
        missing.stderr
    );
    let garbage = digest_gate(
        &["check", "--allowlist", &list, "-f", "-"],
        Some("kind: Pod\nspec: [\n"),
    );
    assert_eq!(garbage.code, 2);
    assert!(
        garbage.stderr.contains("error: -: not valid YAML or JSON: line"),
        "{}",
        garbage.stderr
    );
    assert_eq!(check(&list, &fixture("05_"), &["--mode", "strict"]).code, 2);
    assert_eq!(check(&list, &fixture("05_"), &["--kind-mode", "Pod"]).code, 2);
    assert_eq!(digest_gate(&["check", "-f", &fixture("05_")], None).code, 2);
    assert_eq!(digest_gate(&["check", "--allowlist", &list], None).code, 2);
}

#[test]
fn modes_and_env_vars() {
    let file = path("examples/manifests/incident-servingruntime.yaml");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_digest-gate"));
    let out = cmd
        .args(["check", "-f", &file])
        .env("DIGEST_GATE_ALLOWLIST", example_allowlist())
        .env("DIGEST_GATE_MODE", "audit")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains(": audit: would rewrite: container \"ovms\":"),
        "{stdout}"
    );

    let run = check(
        &example_allowlist(),
        &file,
        &["--kind-mode", "ServingRuntime=enforce", "-o", "json"],
    );
    assert_eq!(run.code, 1);
    let image = &run.json()["results"][0]["images"][0];
    assert_eq!(image["verdict"], "deny");
    assert_eq!(image["rewrite"], format!("{OVMS}@{PROMOTED}"));
    assert!(
        image["reason"]
            .as_str()
            .unwrap()
            .contains("enforce mode does not rewrite it")
    );
}

#[test]
fn fix_in_place_writes_only_changed_files() {
    let dir = scratch("inplace");
    let bad = dir.join("incident.yaml");
    let good = dir.join("promoted.yaml");
    std::fs::copy(path("examples/manifests/incident-servingruntime.yaml"), &bad).unwrap();
    std::fs::copy(path("examples/manifests/promoted-servingruntime.yaml"), &good).unwrap();
    let before = std::fs::metadata(&good).unwrap().modified().unwrap();
    let run = digest_gate(
        &[
            "check",
            "--allowlist",
            &example_allowlist(),
            "--fix",
            "--in-place",
            "-f",
            &dir.display().to_string(),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.is_empty());
    let fixed = std::fs::read_to_string(&bad).unwrap();
    assert!(fixed.contains(&format!("{OVMS}@{PROMOTED}")) && fixed.contains("# never promoted"));
    assert_eq!(std::fs::metadata(&good).unwrap().modified().unwrap(), before);
    assert_eq!(
        check(&example_allowlist(), &dir.display().to_string(), &[]).code,
        0
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn several_inputs_fix_into_one_stream() {
    let run = digest_gate(
        &[
            "check",
            "--allowlist",
            &example_allowlist(),
            "--fix",
            "-f",
            &path("examples/manifests/incident-servingruntime.yaml"),
            "-f",
            &path("examples/manifests/promoted-servingruntime.yaml"),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("# Source: "));
    let docs = digest_gate::yaml::parse_stream(&run.stdout).unwrap();
    assert_eq!(docs.len(), 2);
    assert_eq!(
        docs[0].value["spec"]["containers"][0]["image"],
        format!("{OVMS}@{PROMOTED}")
    );
}

#[test]
fn convert_produces_a_native_allowlist_that_decides_the_same() {
    let sources = [
        path("tests/data/allowlists/rhods-operator.csv.yaml"),
        path("tests/data/allowlists/imageset.yaml"),
        path("tests/data/allowlists/promoted.txt"),
    ];
    let mut args = vec!["allowlist", "convert", "--name", "merged"];
    args.extend(sources.iter().map(String::as_str));
    let run = digest_gate(&args, None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("kind: Allowlist") && run.stdout.contains("name: merged"));
    assert!(
        run.stderr.contains("is not pinned by digest") && run.stderr.contains("skipped"),
        "{}",
        run.stderr
    );
    let dir = scratch("convert");
    let native = dir.join("native.yaml");
    std::fs::write(&native, &run.stdout).unwrap();
    let native = native.display().to_string();
    for name in ["01_", "05_", "06_", "12_"] {
        let mut merged = vec![
            "check".to_owned(),
            "-o".into(),
            "json".into(),
            "-f".into(),
            fixture(name),
        ];
        for s in &sources {
            merged.push("--allowlist".into());
            merged.push(s.clone());
        }
        let merged: Vec<&str> = merged.iter().map(String::as_str).collect();
        let a = digest_gate(&merged, None);
        let b = check(&native, &fixture(name), &["-o", "json"]);
        assert_eq!(a.code, b.code, "{name}");
        // The same decisions; who promoted a digest differs (the sources,
        // then the converted file), so messages are compared without it.
        let without_provenance = |run: &Run| {
            let mut results = run.json()["results"].clone();
            for image in results
                .as_array_mut()
                .unwrap()
                .iter_mut()
                .flat_map(|r| r["images"].as_array_mut().unwrap())
            {
                let reason = image["reason"].as_str().unwrap();
                image["reason"] = Value::from(reason.split("; promoted by ").next().unwrap());
                image.as_object_mut().unwrap().remove("promotions");
            }
            results
        };
        assert_eq!(without_provenance(&a), without_provenance(&b), "{name}");
    }
    let lint = digest_gate(&["allowlist", "lint", &native], None);
    assert_eq!(lint.code, 0);
    assert!(
        lint.stdout
            .contains("native.yaml: Allowlist, 5 promoted image(s)"),
        "{}",
        lint.stdout
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// The YAML files under `dir`, recursively, sorted.
fn yaml_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(yaml_files(&path));
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// `(image, rewrite)` of every image `check -o json` would rewrite.
fn rewrites(report: &Value) -> Vec<(String, String)> {
    let images = report["results"].as_array().into_iter().flatten();
    images
        .flat_map(|r| r["images"].as_array().into_iter().flatten())
        .filter_map(|i| Some((i["image"].as_str()?.to_owned(), i["rewrite"].as_str()?.to_owned())))
        .collect()
}

/// `--fix` over every YAML fixture, with an allowlist that promotes another
/// digest (and each tag seen) for every repository in it, so every fully
/// qualified image is rewritten: each changed line must differ from the
/// original only where an image value was replaced. Comments, quoting and
/// layout are bytes outside image values, and must come through unchanged.
#[test]
fn fix_changes_nothing_but_image_values_in_any_fixture() {
    let dir = scratch("fix-corpus");
    let mut fixed = 0;
    for (n, file) in yaml_files(&root().join("tests/fixtures")).iter().enumerate() {
        let file = file.display().to_string();
        let found = check(
            &example_allowlist(),
            &file,
            &["-o", "json", "--unlisted", "allow"],
        );
        if found.code == 2 {
            continue;
        }
        let mut entries = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        let images = found.json()["results"].as_array().cloned().unwrap_or_default();
        for image in images
            .iter()
            .flat_map(|r| r["images"].as_array().cloned().unwrap_or_default())
        {
            let Some(text) = image["image"].as_str() else {
                continue;
            };
            let Ok(r) = digest_gate::reference::parse(text) else {
                continue;
            };
            // An image used twice (a worker like its leader) is promoted once.
            if r.registry().is_none() || seen.iter().any(|s| s == text) {
                continue;
            }
            seen.push(text.to_owned());
            let digest = format!("sha256:{:064x}", n * 1000 + entries.len() + 1);
            entries.push(match r.tag() {
                Some(tag) => format!("{}:{tag}@{digest}", r.name()),
                None => format!("{}@{digest}", r.name()),
            });
        }
        if entries.is_empty() {
            continue;
        }
        let allowlist = dir.join(format!("{n}.txt"));
        std::fs::write(&allowlist, entries.join("\n") + "\n").unwrap();
        let allowlist = allowlist.display().to_string();
        let judged = check(&allowlist, &file, &["-o", "json"]);
        assert_ne!(judged.code, 2, "{file}: {}", judged.stderr);
        let pairs = rewrites(&judged.json());
        let run = check(&allowlist, &file, &["--fix"]);
        assert_ne!(run.code, 2, "{file}: {}", run.stderr);
        let original = std::fs::read_to_string(&file).unwrap();
        if pairs.is_empty() || run.stdout == original {
            continue;
        }
        fixed += 1;
        assert_eq!(original.lines().count(), run.stdout.lines().count(), "{file}");
        for (i, (before, after)) in original.lines().zip(run.stdout.lines()).enumerate() {
            if before == after {
                continue;
            }
            let (mut b, mut a) = (before.to_owned(), after.to_owned());
            for (old, new) in &pairs {
                b = b.replace(old.as_str(), "\u{0}");
                a = a.replace(new.as_str(), "\u{0}");
            }
            assert_eq!(
                b,
                a,
                "{file}:{}: more than an image changed:\n-{before}\n+{after}",
                i + 1
            );
        }
    }
    // The incident ConfigMap, two ods-ci runtimes and the ModelMesh
    // quickstart; the others hold placeholders and short names, which are
    // denied, not fixed.
    assert!(fixed >= 4, "only {fixed} fixtures had something to fix");
}

/// A kubeconfig whose server refuses connections at once.
fn unreachable_kubeconfig(name: &str) -> String {
    let path = scratch(name).join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user: {token: t}\n",
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn the_cluster_timeout_has_its_own_flag_and_the_old_one_warns_once() {
    let kubeconfig = unreachable_kubeconfig("old-timeout");
    let allowlist = example_allowlist();
    for command in [vec!["audit", "--allowlist", allowlist.as_str()], vec!["cleanup"]] {
        let with = |extra: &[&str]| {
            let mut args = command.clone();
            args.extend(["--kubeconfig", kubeconfig.as_str()]);
            args.extend(extra);
            digest_gate(&args, None)
        };
        let new = with(&["--cluster-timeout", "2s"]);
        assert_eq!(new.code, 2, "{}", new.stderr);
        assert!(new.stderr.contains("cannot reach the cluster"), "{}", new.stderr);
        assert!(!new.stderr.contains("deprecated"), "{}", new.stderr);
        let old = with(&["--request-timeout", "2s"]);
        assert_eq!(old.code, 2, "{}", old.stderr);
        assert_eq!(old.stderr.matches("deprecated").count(), 1, "{}", old.stderr);
        assert!(old.stderr.contains("use --cluster-timeout"), "{}", old.stderr);
        assert!(old.stderr.contains("cannot reach the cluster"), "{}", old.stderr);
        // Help shows the new name only.
        let mut help = command[..1].to_vec();
        help.push("--help");
        let help = digest_gate(&help, None).stdout;
        assert!(help.contains("--cluster-timeout"), "{help}");
        assert!(!help.contains("--request-timeout"), "{help}");
    }
    // serve keeps --request-timeout for its webhook clients, and takes
    // --cluster-timeout for its background tasks.
    let help = digest_gate(&["serve", "--help"], None).stdout;
    assert!(
        help.contains("--request-timeout") && help.contains("--cluster-timeout"),
        "{help}"
    );
}

/// A Pod on a dashboard digest no bundle promotes, judged against the RHOAI
/// catalog fragment (tests/fixtures/olm/rhods).
const DASHBOARD_POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: dash, namespace: models}\nspec:\n  containers:\n    - name: dashboard\n      image: registry.redhat.io/rhoai/odh-dashboard-rhel9@sha256:0000000000000000000000000000000000000000000000000000000000000000\n    - name: on-3-3-0\n      image: registry.redhat.io/rhoai/odh-dashboard-rhel9@sha256:11c2454cd7265192c90223f7356aba9f4837f2ce1d497add0b1341c9a120932b\n";

#[test]
fn a_catalog_rewrites_to_the_digest_of_the_bundle_nearest_the_channel_head() {
    let catalog = path("tests/fixtures/olm/rhods");
    let run = digest_gate(
        &["check", "--allowlist", &catalog, "-o", "json", "-f", "-"],
        Some(DASHBOARD_POD),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let report = run.json();
    let images = &report["results"][0]["images"];
    assert_eq!(images[0]["verdict"], "rewrite", "{images}");
    assert_eq!(
        images[0]["rewrite"],
        "registry.redhat.io/rhoai/odh-dashboard-rhel9@sha256:dc1dc46e9eb9fe228effad2d8b27ef90c6d9b506a29c61f092da4f6140497bb5"
    );
    let reason = images[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the release nearest its channel's head promoting it, rhods-operator 3.3.1")
            && reason.contains(
                "promoted by catalog package rhods-operator bundle rhods-operator.3.3.1 (channel stable-3.x)"
            ),
        "{reason}"
    );
    // 3.3.0's digest is promoted: it runs as written, its bundle named.
    assert_eq!(images[1]["verdict"], "allow");
    assert_eq!(
        images[1]["promotions"][0]["origin"],
        "catalog package rhods-operator bundle rhods-operator.3.3.0 (channel stable-3.x)"
    );
    // Another package only, which names its images by tag: the allowlist
    // promotes nothing, which would deny every image, so it is refused.
    let foo = path("tests/fixtures/olm/foo.yaml");
    let run = digest_gate(
        &[
            "check",
            "--allowlist",
            &catalog,
            "--allowlist",
            &foo,
            "--catalog-package",
            "foo",
            "-f",
            "-",
        ],
        Some(DASHBOARD_POD),
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("error: the allowlist promotes no repository, so every image would be denied"),
        "{}",
        run.stderr
    );
    // A package no catalog has: the allowlist cannot be used.
    let run = digest_gate(
        &[
            "check",
            "--allowlist",
            &catalog,
            "--catalog-package",
            "rhods",
            "-f",
            "-",
        ],
        Some(DASHBOARD_POD),
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains(
            "--catalog-package: no catalog read has a package named 'rhods' (it has rhods-operator)"
        ),
        "{}",
        run.stderr
    );
    // lint names the channels, their heads and the ordering channel.
    let run = digest_gate(
        &["allowlist", "lint", &catalog, "--catalog-channel", "fast-3.x"],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    for line in [
        "catalog package rhods-operator: 4 bundle(s) read, 4 promoted; releases ordered by channel fast-3.x",
        "  channel fast-3.x: 4 entries, head rhods-operator.3.3.1, 3 skipRange(s) (read, not used to order)",
        "  channel stable-3.x: 6 entries, head rhods-operator.3.4.2, 5 skipRange(s) (read, not used to order)",
    ] {
        assert!(run.stdout.lines().any(|l| l == line), "{line}\n{}", run.stdout);
    }
    // convert writes the graph's target as rewriteTo, with where it came from.
    let run = digest_gate(&["allowlist", "convert", &catalog], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dashboard = run
        .stdout
        .split("\n    # from ")
        .find(|block| block.contains("- name: registry.redhat.io/rhoai/odh-dashboard-rhel9\n"))
        .unwrap();
    assert!(
        dashboard.contains(
            "# the release nearest its channel's head promoting it, rhods-operator 3.3.1\n      rewriteTo: sha256:dc1dc46e9eb9"
        ),
        "{dashboard}"
    );
}

/// The objects of a cluster dump: ServingRuntimes and the ConfigMaps that
/// embed runtimes in strings (the incident's), as `kubectl get` returns
/// them.
fn dump_objects() -> Vec<Value> {
    let mut items = Vec::new();
    for name in ["01_", "02_", "05_", "06_", "07_", "12_"] {
        let text = std::fs::read_to_string(fixture(name)).unwrap();
        for doc in digest_gate::yaml::parse_stream(&text).unwrap() {
            items.push(doc.value);
        }
    }
    items
}

/// `check -o json` of `text` on standard input, with the example allowlist.
fn check_json_from_stdin(text: &str) -> Run {
    let allowlist = example_allowlist();
    digest_gate(
        &["check", "--allowlist", &allowlist, "-f", "-", "-o", "json"],
        Some(text),
    )
}

/// An image's judgement: kind/name, path, verdict, rewrite.
type Finding = (String, String, String, String);

/// Each image of each result.
fn findings(report: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    for r in report["results"].as_array().unwrap() {
        for i in r["images"].as_array().unwrap() {
            out.push((
                format!("{}/{}", r["kind"].as_str().unwrap(), r["name"].as_str().unwrap()),
                i["path"].as_str().unwrap().to_owned(),
                i["verdict"].as_str().unwrap().to_owned(),
                i["rewrite"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    out
}

#[test]
fn a_list_an_array_a_json_stream_and_a_yaml_stream_are_judged_alike() {
    let items = dump_objects();
    let list = serde_json::json!({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}});
    let nested = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "List", "items": items[..3]}, {"apiVersion": "v1", "kind": "List", "items": items[3..]}]});
    let yaml: String = items
        .iter()
        .map(|i| format!("---\n{}", serde_json::to_string_pretty(i).unwrap()))
        .collect::<Vec<_>>()
        .join("\n");
    let forms = [
        ("kind: List", serde_json::to_string_pretty(&list).unwrap()),
        ("nested Lists", serde_json::to_string_pretty(&nested).unwrap()),
        ("bare array", serde_json::to_string_pretty(&items).unwrap()),
        (
            "JSON stream",
            items.iter().map(|i| format!("{i}\n")).collect::<String>(),
        ),
        ("YAML stream", yaml),
    ];
    let mut first: Option<Vec<_>> = None;
    for (form, text) in &forms {
        let run = check_json_from_stdin(text);
        assert_eq!(run.code, 1, "{form}: {}", run.stderr);
        let report = run.json();
        assert_eq!(report["summary"]["objects"], items.len(), "{form}");
        // Every position points at the image: the value itself, where the
        // column says it starts, or (no column) the line holding it in an
        // embedded runtime document.
        let lines: Vec<&str> = text.lines().collect();
        for r in report["results"].as_array().unwrap() {
            for i in r["images"].as_array().unwrap() {
                let what = format!("{form}: {} {}", r["name"], i["path"]);
                let line = i["line"].as_u64().unwrap_or_else(|| panic!("{what}: no line")) as usize;
                let (at, image) = (lines[line - 1], i["image"].as_str().unwrap());
                match i["column"].as_u64() {
                    Some(column) => {
                        let from: String = at.chars().skip(column as usize - 1).collect();
                        assert!(
                            from.trim_start_matches(['"', '\'']).starts_with(image),
                            "{what}: line {line} column {column} is {from:?}"
                        );
                    }
                    None => assert!(at.contains(image), "{what}: line {line} is {at:?}"),
                }
            }
        }
        let verdicts = findings(&report);
        assert!(
            verdicts
                .iter()
                .any(|(_, path, verdict, _)| path.contains('#') && verdict == "rewrite"),
            "{form}: the incident's embedded runtime is to rewrite: {verdicts:?}"
        );
        match &first {
            None => first = Some(verdicts),
            Some(want) => assert_eq!(&verdicts, want, "{form}"),
        }
        // The fixes are the same too: the fixed stream passes where the
        // rewrites applied, and the objects are the originals otherwise.
        let fixed = digest_gate(
            &["check", "--allowlist", &example_allowlist(), "-f", "-", "--fix"],
            Some(text),
        );
        assert!(fixed.stderr.contains("fixed"), "{form}: {}", fixed.stderr);
        let again = check_json_from_stdin(&fixed.stdout);
        let rewrites: Vec<_> = findings(&again.json())
            .into_iter()
            .filter(|(.., verdict, _)| verdict == "rewrite")
            .collect();
        assert!(
            rewrites.is_empty(),
            "{form}: still to rewrite after --fix: {rewrites:?}"
        );
    }
}

#[test]
fn a_truncated_list_reports_what_it_read_and_where_it_broke() {
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": dump_objects()});
    let text = serde_json::to_string_pretty(&list).unwrap();
    let cut = &text[..text.len() * 3 / 5];
    let run = check_json_from_stdin(cut);
    assert_eq!(run.code, 2, "never pass what was not read: {}", run.stdout);
    let report = run.json();
    let read = report["summary"]["objects"].as_u64().unwrap();
    assert!(read > 0 && read < dump_objects().len() as u64, "{read}");
    let error = report["errors"][0].as_str().unwrap();
    let lines = cut.lines().count();
    assert!(
        error.starts_with(&format!("-: line {lines} column "))
            && error.contains(&format!("the input ends in item {read} of document 0")),
        "{error}"
    );
}

// === never silently wrong (issue 41) ===

#[test]
fn a_per_kind_mode_takes_a_kind_or_its_resource_name_and_nothing_else() {
    let file = path("examples/manifests/incident-servingruntime.yaml");
    // kubectl's plural, in any case, enforces as the kind does.
    for given in ["ServingRuntimes=enforce", "servingruntime=ENFORCE"] {
        let run = check(&example_allowlist(), &file, &["--kind-mode", given, "-o", "json"]);
        assert_eq!(run.code, 1, "{given}: {}", run.stderr);
        assert_eq!(
            run.json()["results"][0]["images"][0]["verdict"],
            "deny",
            "{given}"
        );
    }
    let known = "it reads Pod, ServingRuntime, ClusterServingRuntime,";
    for args in [
        vec![
            "check",
            "--allowlist",
            "examples/allowlist.yaml",
            "-f",
            "examples/manifests",
            "--kind-mode",
            "Bogus=enforce",
        ],
        vec![
            "audit",
            "--allowlist",
            "examples/allowlist.yaml",
            "-A",
            "--kind-mode",
            "Bogus=enforce",
        ],
        vec!["serve", "--dev", "--kind-mode", "Bogus=enforce"],
    ] {
        let run = digest_gate(&args, None);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("'Bogus' is not a kind digest-gate reads; ") && run.stderr.contains(known),
            "{args:?}: {}",
            run.stderr
        );
    }
    // The variable is read with the same rule.
    let run = run_with(
        &["check", "--allowlist", &example_allowlist(), "-f", &file],
        None,
        &[("DIGEST_GATE_KIND_MODE", "Pod=audit,Bogus=enforce")],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("'Bogus' is not a kind"), "{}", run.stderr);
}

#[test]
fn an_admission_review_is_judged_as_the_webhook_judges_its_object() {
    let review = path("examples/review.json");
    let run = check(&example_allowlist(), &review, &["-o", "json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let out = run.json();
    let result = &out["results"][0];
    assert_eq!(result["kind"], "ServingRuntime");
    assert_eq!(result["verdict"], "rewrite");
    assert_eq!(result["images"][0]["rewrite"], format!("{OVMS}@{PROMOTED}"));
    // The line is the image's own, in the review.
    let text = std::fs::read_to_string(&review).unwrap();
    let line = result["images"][0]["line"].as_u64().unwrap() as usize;
    assert!(
        text.lines().nth(line - 1).unwrap().contains(NEVER_PROMOTED),
        "line {line}"
    );
    assert!(
        out["notes"][0]
            .as_str()
            .unwrap()
            .contains("read an AdmissionReview (CREATE of a ServingRuntime): its request.object judged"),
        "{out}"
    );

    // An UPDATE judges only what changed: the same never-promoted image
    // before and after is let through, as the webhook lets it.
    let mut update: Value = serde_json::from_str(&text).unwrap();
    update["request"]["operation"] = "UPDATE".into();
    update["request"]["oldObject"] = update["request"]["object"].clone();
    update["request"]["object"]["metadata"]["labels"] = serde_json::json!({"team": "models"});
    let run = check_json_from_stdin(&update.to_string());
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("only the images new or changed against its oldObject"),
        "{}",
        run.stdout
    );

    // A DELETE carries nothing to judge: refused, not passed.
    update["request"]["operation"] = "DELETE".into();
    let run = digest_gate(
        &["check", "--allowlist", &example_allowlist(), "-f", "-"],
        Some(&update.to_string()),
    );
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(
        run.stderr.contains("an AdmissionReview of a DELETE"),
        "{}",
        run.stderr
    );

    // --fix cannot edit what the apiserver sent.
    let run = check(&example_allowlist(), &review, &["--fix"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("--fix cannot edit an AdmissionReview"),
        "{}",
        run.stderr
    );
    assert!(!run.stdout.contains(PROMOTED), "nothing is fixed: {}", run.stdout);
}

#[test]
fn a_chart_is_refused_when_named_and_skipped_in_a_tree() {
    let run = check(&example_allowlist(), &path("charts/digest-gate"), &[]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(
        run.stderr.contains("a Helm chart (it holds Chart.yaml)")
            && run.stderr.contains("helm template RELEASE ")
            && run.stderr.contains("| digest-gate check --allowlist ... -f -"),
        "{}",
        run.stderr
    );

    // A tree with a chart and manifests: the chart is skipped with the
    // same advice, the manifests judged.
    let dir = scratch("tree-with-chart");
    let chart = dir.join("charts/app");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: app\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/pod.yaml"),
        "kind: Pod\nimage: {{ .Values.image }}\n",
    )
    .unwrap();
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::copy(
        path("examples/manifests/incident-servingruntime.yaml"),
        manifests.join("rt.yaml"),
    )
    .unwrap();
    let run = check(&example_allowlist(), &dir.display().to_string(), &[]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("note: skipped ") && run.stderr.contains("a Helm chart"),
        "{}",
        run.stderr
    );

    // Without the manifests, only objects of kinds digest-gate does not
    // read are left beside the skipped chart: nothing was judged, exit 2.
    std::fs::remove_file(manifests.join("rt.yaml")).unwrap();
    std::fs::copy(
        path("tests/fixtures/upstream/crds/kserve_serving.kserve.io_servingruntimes.minimal.yaml"),
        manifests.join("crd.yaml"),
    )
    .unwrap();
    let run = check(&example_allowlist(), &dir.display().to_string(), &[]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(
        run.stderr.contains(
            "error: none of the 1 object read is of a kind digest-gate reads, and 1 input was skipped (see above): nothing was judged"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn an_allowlist_that_promotes_nothing_has_one_answer() {
    let dir = scratch("promotes-nothing");
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "# emptied by mistake\n").unwrap();
    let empty = empty.display().to_string();
    let file = path("examples/manifests/incident-servingruntime.yaml");
    let refused = "error: the allowlist promotes no repository, so every image would be denied";
    // Where it would deny every listed image: an error, exit 2.
    for extra in [
        &[][..],
        &["--mode", "enforce"],
        &["--mode", "audit", "--kind-mode", "ServingRuntime=enforce"],
    ] {
        let run = check(&empty, &file, extra);
        assert_eq!(run.code, 2, "{extra:?}: {}", run.stderr);
        assert!(run.stderr.contains(refused), "{extra:?}: {}", run.stderr);
    }
    // Where it denies nothing: a warning, and the check runs.
    let run = check(&empty, &file, &["--mode", "audit"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("warning: the allowlist promotes no repository: every image is reported"),
        "{}",
        run.stderr
    );
    let run = check(&empty, &file, &["--unlisted", "allow"]);
    assert!(
        run.stderr
            .contains("warning: the allowlist promotes no repository: every image is allowed"),
        "{}",
        run.stderr
    );
    // The commands that take no mode refuse it.
    for command in ["lint", "convert", "verify"] {
        let run = digest_gate(&["allowlist", command, "--allowlist", &empty], None);
        assert_eq!(run.code, 2, "{command}: {}", run.stderr);
        assert!(
            run.stderr.contains(&format!(
                "error: the allowlist promotes no repository: nothing to {command}"
            )),
            "{command}: {}",
            run.stderr
        );
    }
}

#[test]
fn lint_convert_and_verify_take_the_allowlist_one_way_and_strict_names_its_warnings() {
    let csv = path("tests/data/allowlists/rhods-operator.csv.yaml");
    let positional = digest_gate(&["allowlist", "convert", &csv], None);
    let flagged = digest_gate(&["allowlist", "convert", "--allowlist", &csv], None);
    let from_env = run_with(
        &["allowlist", "convert"],
        None,
        &[("DIGEST_GATE_ALLOWLIST", &csv)],
    );
    assert_eq!(positional.code, 0, "{}", positional.stderr);
    assert_eq!(positional.stdout, flagged.stdout);
    assert_eq!(positional.stdout, from_env.stdout);
    let lint = digest_gate(&["allowlist", "lint", "--allowlist", &csv], None);
    assert_eq!(lint.code, 0, "{}", lint.stderr);
    // --strict fails on a warning, and names it.
    let dir = scratch("strict");
    let list = dir.join("list.txt");
    // Two digests of one repository and nothing to pick the rewrite target.
    std::fs::write(&list, format!("{OVMS}@{PROMOTED}\n{OVMS}@{NEVER_PROMOTED}\n")).unwrap();
    let run = digest_gate(
        &["allowlist", "lint", "--strict", &list.display().to_string()],
        None,
    );
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let warning = run
        .stdout
        .lines()
        .find(|l| l.starts_with("warning: "))
        .expect("a warning");
    assert!(
        run.stderr.contains("error: --strict: 1 warning fails the lint:") && run.stderr.contains(warning),
        "{}",
        run.stderr
    );
}

/// Issue 58: a report written to a file still says on standard error why
/// the run failed, whatever `-o` is; the document keeps the error too.
#[test]
fn errors_reach_stderr_whatever_the_output_format() {
    for format in ["text", "json", "sarif"] {
        let run = check(&example_allowlist(), "nope.yaml", &["-o", format]);
        assert_eq!(run.code, 2, "{format}: {}", run.stderr);
        let said: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(
            said,
            ["error: nope.yaml: cannot read: No such file or directory (os error 2)"],
            "{format}"
        );
        match format {
            "text" => assert!(
                !run.stdout.contains("error:"),
                "said once, on stderr: {}",
                run.stdout
            ),
            _ => assert!(
                run.stdout.contains("nope.yaml: cannot read"),
                "{format}: {}",
                run.stdout
            ),
        }
    }
}

/// Issue 58: a variable is named as the variable, and switches read what
/// environments write.
#[test]
fn variables_are_named_and_switches_read_as_environments_write_them() {
    let runtime = path("examples/manifests/incident-servingruntime.yaml");
    let list = example_allowlist();
    let args = ["check", "--allowlist", list.as_str(), "-f", runtime.as_str()];
    let run = run_with(&args, None, &[("DIGEST_GATE_MODE", "enforcee")]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.starts_with("error: DIGEST_GATE_MODE=enforcee (the variable of --mode): not one of rewrite, enforce, audit (did you mean enforce?)"),
        "{}",
        run.stderr
    );
    // Typed on the command line, the flag is what is named.
    let mut typed = args.to_vec();
    typed.extend(["--mode", "enforcee"]);
    let run = run_with(&typed, None, &[("DIGEST_GATE_MODE", "enforcee")]);
    assert!(run.stderr.contains("for '--mode <MODE>'"), "{}", run.stderr);
    let run = run_with(&args, None, &[("DIGEST_GATE_CLUSTER_DEADLINE", "soon")]);
    assert_eq!(
        run.code, 1,
        "a variable of another command is not read: {}",
        run.stderr
    );
    // With --fix the incident's runtime is fixed (exit 0); without, 1.
    let fix = |value: &str| run_with(&args, None, &[("DIGEST_GATE_FIX", value)]);
    for (value, fixed) in [
        ("1", true),
        ("yes", true),
        ("true", true),
        ("0", false),
        ("no", false),
        ("false", false),
    ] {
        let run = fix(value);
        assert_eq!(
            run.code,
            if fixed { 0 } else { 1 },
            "DIGEST_GATE_FIX={value}: {}",
            run.stderr
        );
    }
    let run = fix("maybe");
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .starts_with("error: DIGEST_GATE_FIX=maybe (the variable of --fix)"),
        "{}",
        run.stderr
    );
}

/// A kubeconfig whose contexts each name a server that accepts TCP
/// connections and never answers (a listener that is never accepted
/// from: the kernel completes the handshake, nothing more).
fn hanging_clusters(dir: &Path, contexts: &[&str]) -> (String, Vec<std::net::TcpListener>) {
    let mut clusters = String::new();
    let mut named = String::new();
    let mut held = Vec::new();
    for name in contexts {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        held.push(listener);
        clusters.push_str(&format!(
            "- name: {name}\n  cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}\n"
        ));
        named.push_str(&format!(
            "- name: {name}\n  context: {{cluster: {name}, user: u}}\n"
        ));
    }
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n{clusters}contexts:\n{named}current-context: {}\nusers:\n- name: u\n  user: {{token: t}}\n",
        contexts[0]
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, config).unwrap();
    (path.display().to_string(), held)
}

/// Runs `args` until it has waited on the hanging cluster for a moment,
/// sends SIGINT, and gives it a second to end.
fn interrupted(args: &[&str]) -> Run {
    let child = Command::new(env!("CARGO_BIN_EXE_digest-gate"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "{args:?} took {:?} to stop",
        started.elapsed()
    );
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// Issue 58: Ctrl-C ends a command waiting on a cluster within a second,
/// its document whole and saying why, exit 130; a fleet names the
/// clusters it did not finish.
#[test]
fn ctrl_c_ends_a_cluster_command_with_its_report_whole() {
    let dir = scratch("interrupt");
    let (kubeconfig, _held) = hanging_clusters(&dir, &["east", "west"]);
    let list = example_allowlist();
    let audit = ["audit", "-A", "--allowlist", &list, "--kubeconfig", &kubeconfig];
    let said = "interrupted (SIGINT or SIGTERM): only what was read before is reported";

    let run = interrupted(&[&audit[..], &["-o", "json"]].concat());
    assert_eq!(run.code, 130, "{}", run.stderr);
    let errors = run.json()["errors"].clone();
    assert!(errors[0].as_str().unwrap().starts_with(said), "{errors}");
    assert!(run.stderr.contains(said), "{}", run.stderr);

    let run = interrupted(&[&audit[..], &["-o", "sarif"]].concat());
    assert_eq!(run.code, 130, "{}", run.stderr);
    let notes = run.json()["runs"][0]["invocations"][0]["toolExecutionNotifications"].clone();
    assert!(notes.to_string().contains(said), "{notes}");

    let run = interrupted(&[&audit[..], &["--all-contexts", "-o", "json"]].concat());
    assert_eq!(run.code, 130, "{}", run.stderr);
    let statuses: Vec<Value> = run.json()["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["status"].clone())
        .collect();
    assert_eq!(statuses, ["interrupted", "interrupted"]);

    // One cluster in a fleet's text: counted as one.
    let (alone, _held_alone) = hanging_clusters(&scratch("interrupt-alone"), &["east"]);
    let run = interrupted(&[
        "audit",
        "-A",
        "--allowlist",
        &list,
        "--kubeconfig",
        &alone,
        "--all-contexts",
    ]);
    assert_eq!(run.code, 130, "{}", run.stderr);
    assert!(
        run.stdout.contains("\n1 cluster: 0 read wholly, 1 not: east\n"),
        "{}",
        run.stdout
    );

    let preflight = [
        "preflight",
        "--all-pending",
        "--allowlist",
        &list,
        "--kubeconfig",
        &kubeconfig,
        "-o",
        "json",
    ];
    let run = interrupted(&preflight);
    assert_eq!(run.code, 130, "{}", run.stderr);
    assert!(run.json()["errors"].to_string().contains(said), "{}", run.stdout);
}

/// Issue 58: what a newcomer types first gets an answer that names the
/// way on.
#[test]
fn first_commands_name_the_way_on() {
    let serve = digest_gate(&["serve"], None);
    assert_eq!(serve.code, 2);
    assert!(
        serve.stderr.contains("--tls-cert FILE --tls-key FILE") && serve.stderr.contains("or --dev"),
        "{}",
        serve.stderr
    );
    for (command, usage) in [
        (&["allowlist", "lint"][..], "Usage: digest-gate allowlist lint"),
        (&["allowlist", "verify"], "Usage: digest-gate allowlist verify"),
        (&["check", "-f", "x.yaml"], "Usage: digest-gate check"),
    ] {
        let run = digest_gate(command, None);
        assert_eq!(run.code, 2, "{command:?}");
        assert!(
            run.stderr.contains("--allowlist is required") && run.stderr.contains(usage),
            "{command:?}: {}",
            run.stderr
        );
    }
    let help = digest_gate(&["preflight", "--help"], None).stdout;
    assert!(
        help.contains("writes nothing unless --annotate or --policy-reports asks"),
        "{help}"
    );
}
