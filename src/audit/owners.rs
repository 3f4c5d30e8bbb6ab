//! Owner chains: a Pod's finding names `ReplicaSet x ← Deployment y ←
//! ServingRuntime z`, because the Pod is not what a person edits. Chains
//! follow `ownerReferences` with `controller: true` through the objects the
//! audit listed; an owner it did not list (a kind digest-gate does not read,
//! or one `--kinds` left out) ends the chain, still named from the
//! reference.

use std::collections::HashMap;

use serde_json::Value;

use crate::report::Owner;

/// How far a chain is followed: real chains are 3–4 long, and a
/// (corrupt) cycle must end.
const MAX_DEPTH: usize = 8;

/// The listed objects that may own others, by uid, each with its own
/// controller reference (`None`: it has none, the chain ends there).
#[derive(Debug, Default)]
pub struct Index {
    listed: HashMap<String, Option<Reference>>,
}

/// An object's controller reference.
#[derive(Debug, Clone)]
struct Reference {
    uid: String,
    owner: Owner,
}

impl Index {
    /// Records `object` and its own controller, so objects it owns can
    /// follow their chain through it. Pods own nothing that is audited, so
    /// they are not recorded (a big cluster is mostly Pods).
    pub fn add(&mut self, kind: &str, object: &Value) {
        if kind == "Pod" {
            return;
        }
        if let Some(uid) = object.pointer("/metadata/uid").and_then(Value::as_str) {
            self.listed.insert(uid.to_owned(), controller(object));
        }
    }

    /// The chain from `first` (the object's own controller, owned by `uid`'s
    /// object), nearest first; `None` while a link may still be listed: an
    /// owner not met yet whose kind `to_come` says is still to be read.
    pub fn resolve(&self, first: &[Owner], uid: &str, to_come: impl Fn(&str) -> bool) -> Option<Vec<Owner>> {
        let mut chain = first.to_vec();
        let mut at = uid;
        while chain.len() < MAX_DEPTH {
            match self.listed.get(at) {
                Some(Some(next)) => {
                    chain.push(next.owner.clone());
                    at = &next.uid;
                }
                Some(None) => break,
                None if chain.last().is_some_and(|o| to_come(&o.kind)) => return None,
                None => break,
            }
        }
        Some(chain)
    }

    /// The chain from `first` through what was listed, once everything was.
    pub fn chain(&self, first: &[Owner], uid: &str) -> Vec<Owner> {
        self.resolve(first, uid, |_| false).unwrap_or_default()
    }
}

/// The uid of `object`'s controller, if it has one.
pub fn controller_uid(object: &Value) -> Option<String> {
    controller(object).map(|r| r.uid)
}

fn controller(object: &Value) -> Option<Reference> {
    let owner = crate::report::controller_of(object)?;
    let uid = crate::report::controller_reference(object)?
        .get("uid")?
        .as_str()?;
    Some(Reference {
        uid: uid.to_owned(),
        owner,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(uid: &str, owner: Option<(&str, &str, &str)>) -> Value {
        let refs: Vec<Value> = owner
            .into_iter()
            .map(|(kind, name, uid)| json!({"apiVersion": "x/v1", "kind": kind, "name": name, "uid": uid, "controller": true}))
            .collect();
        json!({"metadata": {"uid": uid, "ownerReferences": refs}})
    }

    #[test]
    fn chains_follow_controllers_through_listed_objects() {
        let mut index = Index::default();
        index.add("ReplicaSet", &object("rs", Some(("Deployment", "d", "dep"))));
        index.add(
            "Deployment",
            &object("dep", Some(("ServingRuntime", "ovms", "sr"))),
        );
        index.add("ServingRuntime", &object("sr", None));
        let pod = object("p", Some(("ReplicaSet", "d-1", "rs")));
        let first = crate::report::controller_of(&pod).into_iter().collect::<Vec<_>>();
        let chain = index.chain(&first, &controller_uid(&pod).unwrap());
        let names: Vec<String> = chain.iter().map(|o| format!("{} {}", o.kind, o.name)).collect();
        assert_eq!(names, ["ReplicaSet d-1", "Deployment d", "ServingRuntime ovms"]);
    }

    #[test]
    fn an_owner_not_listed_ends_the_chain_and_cycles_end() {
        let index = Index::default();
        let first = [Owner {
            kind: "ReplicaSet".into(),
            name: "x".into(),
        }];
        assert_eq!(index.chain(&first, "unknown").len(), 1);
        // Not listed yet, but ReplicaSets are still to be read: wait.
        assert!(index.resolve(&first, "unknown", |k| k == "ReplicaSet").is_none());
        assert!(index.resolve(&first, "unknown", |k| k == "Deployment").is_some());

        let mut index = Index::default();
        index.add("ReplicaSet", &object("a", Some(("ReplicaSet", "b", "b"))));
        index.add("ReplicaSet", &object("b", Some(("ReplicaSet", "a", "a"))));
        assert_eq!(index.chain(&[], "a").len(), MAX_DEPTH);
        // Non-controller references are not owners to fix.
        let shared =
            json!({"metadata": {"uid": "c", "ownerReferences": [{"kind": "X", "name": "y", "uid": "z"}]}});
        assert_eq!(controller_uid(&shared), None);
    }
}
