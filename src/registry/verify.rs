//! Whether each promoted digest can be pulled: where a node would pull it,
//! present there, runnable, and there for the nodes' platforms.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures::StreamExt;
use serde::Serialize;
use tokio::sync::OnceCell;

use super::client::{Answer, Registries};
use super::manifest::{self, Descriptor, Manifest};
use crate::allowlist::{Allowlist, MirrorRule};
use crate::published::{Platform, State, TagState};
use crate::reference::short_digest;

/// Which blobs of a platform's image are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blobs {
    /// The config: enough to tell a sparse mirror.
    Config,
    /// The config and every layer.
    All,
}

/// What to verify beyond presence.
#[derive(Debug, Clone)]
pub struct Options {
    /// Each must have a runnable image (the nodes' platforms).
    pub platforms: Vec<Platform>,
    /// Pull only from mirrors, for every mirror rule (`--mirrors-only`).
    pub mirrors_only: bool,
    pub blobs: Blobs,
}

/// One promoted (repository, digest) and where it was promoted.
#[derive(Debug, Clone)]
pub struct Subject {
    pub repository: String,
    pub digest: String,
    pub tags: Vec<String>,
    pub promotions: Vec<Promotion>,
}

/// Where a digest was promoted: the file and line, and by what.
#[derive(Debug, Clone, Serialize)]
pub struct Promotion {
    pub file: String,
    pub line: u32,
    #[serde(rename = "promotedBy")]
    pub by: String,
}

/// What was found for one subject.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    pub repository: String,
    pub digest: String,
    pub state: State,
    pub detail: String,
    /// Where the manifest was found: where a node pulls it from.
    pub location: Option<String>,
    #[serde(serialize_with = "rfc3339")]
    pub checked_at: SystemTime,
    pub tags: Vec<TagCheck>,
    pub platforms: Vec<PlatformCheck>,
    pub promotions: Vec<Promotion>,
    /// An index's images by platform (`os/arch[/variant]`, digest), its
    /// attestation entries left out: what `--write-platforms` records.
    #[serde(skip)]
    pub images: Vec<(String, String)>,
}

/// A tag the allowlist names for the digest.
#[derive(Debug, Clone, Serialize)]
pub struct TagCheck {
    pub tag: String,
    pub state: TagState,
    /// The digest it names now, when it moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One platform asked for.
#[derive(Debug, Clone, Serialize)]
pub struct PlatformCheck {
    pub platform: Platform,
    /// The image for it (an index's child, or the image itself).
    pub digest: Option<String>,
    pub state: State,
    pub detail: String,
}

fn rfc3339<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_seconds(*t))
}

/// Every promoted (repository, digest) of an allowlist, in its order.
pub fn subjects(list: &Allowlist) -> Vec<Subject> {
    let mut out = Vec::new();
    for repo in list.repositories() {
        for promoted in repo.digests() {
            let promotions = promotions(list, &promoted);
            out.push(Subject {
                repository: repo.name().to_owned(),
                digest: promoted.digest().to_owned(),
                tags: promoted.tags().map(str::to_owned).collect(),
                promotions,
            });
        }
    }
    out
}

fn promotions(list: &Allowlist, promoted: &crate::allowlist::Promoted<'_>) -> Vec<Promotion> {
    promoted
        .promotions()
        .filter_map(|p| {
            let provenance = list.provenance(p.provenance)?;
            Some(Promotion {
                file: provenance.source.to_string(),
                line: p.line,
                by: provenance.origin.clone(),
            })
        })
        .collect()
}

/// Where `repository@digest` was promoted (it, or the source it mirrors),
/// if it was.
pub fn promotions_of(list: &Allowlist, repository: &str, digest: &str) -> Vec<Promotion> {
    let candidates = list.candidates(repository);
    let found = candidates.promoted().into_iter().find(|p| p.digest() == digest);
    found.map(|p| promotions(list, &p)).unwrap_or_default()
}

/// Where a node pulls `repository` from, in CRI-O's order: each mirror of
/// the rule with the longest source prefixing it, then the source itself
/// unless the rule (or `mirrors_only`) says never.
pub fn locations(rules: &[MirrorRule], repository: &str, mirrors_only: bool) -> Vec<String> {
    let rule = rules
        .iter()
        .filter(|r| {
            repository == r.source
                || repository
                    .strip_prefix(r.source.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
        .max_by_key(|r| r.source.len());
    let Some(rule) = rule else {
        return vec![repository.to_owned()];
    };
    let rest = &repository[rule.source.len()..];
    let mut out: Vec<String> = rule.mirrors.iter().map(|m| format!("{m}{rest}")).collect();
    if !(rule.never_contact_source || mirrors_only) {
        out.push(repository.to_owned());
    }
    out
}

/// Verifies subjects, `in_flight` at a time, in their order; `done` is
/// called after each.
pub async fn verify(
    registries: &Registries,
    rules: &[MirrorRule],
    subjects: Vec<Subject>,
    options: &Options,
    in_flight: usize,
    done: &(dyn Fn(&Verification) + Sync),
) -> Vec<Verification> {
    let verifier = Verifier {
        registries,
        options,
        blobs: Mutex::default(),
    };
    futures::stream::iter(subjects)
        .map(|subject| {
            let locations = locations(rules, &subject.repository, options.mirrors_only);
            let verifier = &verifier;
            async move {
                let v = verifier.one(subject, locations).await;
                done(&v);
                v
            }
        })
        .buffered(in_flight.max(1))
        .collect()
        .await
}

type BlobAnswer = Arc<OnceCell<Answer<()>>>;

struct Verifier<'a> {
    registries: &'a Registries,
    options: &'a Options,
    /// Each distinct blob is asked once, whichever images share it.
    blobs: Mutex<HashMap<(String, String), BlobAnswer>>,
}

/// A state and why, before tags and platforms are attached.
struct Found {
    state: State,
    detail: String,
    platforms: Vec<PlatformCheck>,
    images: Vec<(String, String)>,
}

impl Found {
    fn ok(detail: impl Into<String>, platforms: Vec<PlatformCheck>) -> Self {
        let state = platforms.iter().map(|p| p.state).max().unwrap_or(State::Ok);
        let detail = match platforms.iter().find(|p| p.state == state && state != State::Ok) {
            Some(p) => p.detail.clone(),
            None => detail.into(),
        };
        Self {
            state,
            detail,
            platforms,
            images: Vec::new(),
        }
    }

    fn not(state: State, detail: impl Into<String>) -> Self {
        Self {
            state,
            detail: detail.into(),
            platforms: Vec::new(),
            images: Vec::new(),
        }
    }
}

impl Verifier<'_> {
    async fn one(&self, subject: Subject, locations: Vec<String>) -> Verification {
        let Subject {
            repository,
            digest,
            tags,
            promotions,
        } = subject;
        let mut misses = Vec::new();
        let mut unverifiable = false;
        let mut served = None;
        for location in &locations {
            match self.registries.manifest(location, &digest).await {
                Answer::Found(bytes) => {
                    served = Some((location.clone(), bytes));
                    break;
                }
                Answer::Unknown(code) => {
                    misses.push(format!("{} does not have this manifest ({code})", host(location)))
                }
                Answer::Unverifiable(why) => {
                    unverifiable = true;
                    misses.push(why);
                }
            }
        }
        let (found, location) = match served {
            Some((location, bytes)) => (self.examine(&location, &bytes).await, Some(location)),
            None => {
                let state = if unverifiable {
                    State::Unverifiable
                } else {
                    State::Missing
                };
                (Found::not(state, misses.join("; ")), None)
            }
        };
        // Tags are read where the digest was found, else where a node
        // would try last.
        let tag_location = location.as_deref().or(locations.last().map(String::as_str));
        let tags = match tag_location {
            Some(at) => self.tags(at, &digest, tags).await,
            None => Vec::new(),
        };
        Verification {
            repository,
            digest,
            state: found.state,
            detail: found.detail,
            location,
            checked_at: SystemTime::now(),
            tags,
            platforms: found.platforms,
            promotions,
            images: found.images,
        }
    }

    /// A served manifest: runnable, and there for every platform?
    async fn examine(&self, location: &str, bytes: &[u8]) -> Found {
        match Manifest::parse(bytes) {
            Err(e) => Found::not(State::NotRunnable, e.to_string()),
            Ok(Manifest::Image(image)) => match image.runnable() {
                Err(why) => Found::not(State::NotRunnable, why.to_string()),
                Ok(()) if self.options.platforms.is_empty() => Found::ok("an image", Vec::new()),
                Ok(()) => self.single(location, &image).await,
            },
            Ok(Manifest::Index(entries)) => {
                let mut found = self.index(location, &entries).await;
                found.images = entries
                    .iter()
                    .filter(|e| manifest::is_candidate(e))
                    .filter_map(|e| Some((e.platform.as_ref()?.platform().to_string(), e.digest.clone())))
                    .collect();
                found
            }
        }
    }

    /// A single image, against the platforms asked for: its config says
    /// which platform it is for.
    async fn single(&self, location: &str, image: &manifest::Image) -> Found {
        let config = &image.config.digest;
        let own = match self.registries.blob(location, config).await {
            Answer::Found(bytes) => manifest::config_platform(&bytes),
            Answer::Unknown(code) => {
                let why = format!(
                    "its config blob {} is not at {location} ({code})",
                    short_digest(config)
                );
                return Found::not(State::PlatformMissing, why);
            }
            Answer::Unverifiable(why) => return Found::not(State::Unverifiable, why),
        };
        let mut checks = Vec::new();
        for platform in &self.options.platforms {
            let check = match &own {
                Some(p) if platform.accepts(p) => {
                    let blobs = self.layers(location, image).await;
                    platform_check(location, platform, None, blobs)
                }
                Some(p) => PlatformCheck {
                    platform: platform.clone(),
                    digest: None,
                    state: State::PlatformMissing,
                    detail: format!("a single {p} image, not an index: there is no {platform} image"),
                },
                None => PlatformCheck {
                    platform: platform.clone(),
                    digest: None,
                    state: State::PlatformMissing,
                    detail: format!("its config does not say which platform it is for, so not {platform}"),
                },
            };
            checks.push(check);
        }
        Found::ok("an image", checks)
    }

    /// An index: runnable when one of its images is; with platforms, each
    /// platform's image must be there and runnable, with its blobs.
    async fn index(&self, location: &str, entries: &[Descriptor]) -> Found {
        let candidates: Vec<&Descriptor> = entries.iter().filter(|e| manifest::is_candidate(e)).collect();
        if candidates.is_empty() {
            let why = format!(
                "an index of {} attestation manifest(s) and no image",
                entries.len()
            );
            return Found::not(State::NotRunnable, why);
        }
        if self.options.platforms.is_empty() {
            return self.any_runnable(location, &candidates).await;
        }
        let listed: Vec<String> = candidates
            .iter()
            .filter_map(|e| e.platform.as_ref().map(|p| p.platform().to_string()))
            .collect();
        let mut checks = Vec::new();
        for platform in &self.options.platforms {
            let entry = candidates.iter().find(|e| {
                e.platform
                    .as_ref()
                    .is_some_and(|p| platform.accepts(&p.platform()))
            });
            let check = match entry {
                None => PlatformCheck {
                    platform: platform.clone(),
                    digest: None,
                    state: State::PlatformMissing,
                    detail: format!("the index has no {platform} image (it has {})", listed.join(", ")),
                },
                Some(entry) => self.child(location, platform, entry).await,
            };
            checks.push(check);
        }
        Found::ok(format!("an index of {} image(s)", candidates.len()), checks)
    }

    async fn any_runnable(&self, location: &str, candidates: &[&Descriptor]) -> Found {
        let mut whys = Vec::new();
        let mut unverifiable = false;
        for entry in candidates {
            match self.registries.manifest(location, &entry.digest).await {
                Answer::Found(bytes) => match Manifest::parse(&bytes) {
                    Ok(Manifest::Image(image)) => match image.runnable() {
                        Ok(()) => {
                            return Found::ok(
                                format!("an index of {} image(s)", candidates.len()),
                                Vec::new(),
                            );
                        }
                        Err(why) => whys.push(format!("{}: {why}", short_digest(&entry.digest))),
                    },
                    Ok(Manifest::Index(_)) => {
                        whys.push(format!("{}: a nested index", short_digest(&entry.digest)))
                    }
                    Err(e) => whys.push(format!("{}: {e}", short_digest(&entry.digest))),
                },
                Answer::Unknown(code) => whys.push(format!(
                    "{}: not at {location} ({code})",
                    short_digest(&entry.digest)
                )),
                Answer::Unverifiable(why) => {
                    unverifiable = true;
                    whys.push(why);
                }
            }
        }
        let state = if unverifiable {
            State::Unverifiable
        } else {
            State::NotRunnable
        };
        Found::not(
            state,
            format!("an index with no runnable image: {}", whys.join("; ")),
        )
    }

    /// The image an index lists for `platform`.
    async fn child(&self, location: &str, platform: &Platform, entry: &Descriptor) -> PlatformCheck {
        let check = |state, detail: String| PlatformCheck {
            platform: platform.clone(),
            digest: Some(entry.digest.clone()),
            state,
            detail,
        };
        let short = short_digest(&entry.digest);
        let image = match self.registries.manifest(location, &entry.digest).await {
            Answer::Found(bytes) => match Manifest::parse(&bytes) {
                Ok(Manifest::Image(image)) => image,
                Ok(Manifest::Index(_)) => {
                    return check(
                        State::PlatformMissing,
                        format!("its {platform} entry {short} is a nested index"),
                    );
                }
                Err(e) => {
                    return check(
                        State::PlatformMissing,
                        format!("its {platform} entry {short}: {e}"),
                    );
                }
            },
            Answer::Unknown(code) => {
                let why = format!("its {platform} image {short} is not at {location} ({code})");
                return check(State::PlatformMissing, why);
            }
            Answer::Unverifiable(why) => return check(State::Unverifiable, why),
        };
        if let Err(why) = image.runnable() {
            return check(
                State::PlatformMissing,
                format!("its {platform} entry {short} is {why}"),
            );
        }
        let mut blobs = vec![(
            image.config.digest.clone(),
            "config",
            self.blob(location, &image.config.digest).await,
        )];
        blobs.extend(self.layers(location, &image).await);
        platform_check(location, platform, Some(entry.digest.clone()), blobs)
    }

    /// The layers' answers, with `--blobs all`.
    async fn layers(
        &self,
        location: &str,
        image: &manifest::Image,
    ) -> Vec<(String, &'static str, Answer<()>)> {
        let mut out = Vec::new();
        if self.options.blobs == Blobs::All {
            for layer in &image.layers {
                out.push((
                    layer.digest.clone(),
                    "layer",
                    self.blob(location, &layer.digest).await,
                ));
            }
        }
        out
    }

    /// A blob's presence, asked once per location and digest.
    async fn blob(&self, location: &str, digest: &str) -> Answer<()> {
        let cell = {
            let mut blobs = self.blobs.lock().unwrap_or_else(|p| p.into_inner());
            blobs
                .entry((location.to_owned(), digest.to_owned()))
                .or_default()
                .clone()
        };
        cell.get_or_init(|| self.registries.blob_exists(location, digest))
            .await
            .clone()
    }

    async fn tags(&self, location: &str, digest: &str, tags: Vec<String>) -> Vec<TagCheck> {
        let mut out = Vec::new();
        for tag in tags {
            let (state, now, detail) = match self.registries.tag(location, &tag).await {
                Answer::Found(d) if d == digest => (TagState::Ok, None, None),
                Answer::Found(d) => (TagState::Moved, Some(d), None),
                Answer::Unknown(code) => (
                    TagState::Missing,
                    None,
                    Some(format!("not at {location} ({code})")),
                ),
                Answer::Unverifiable(why) => (TagState::Unverifiable, None, Some(why)),
            };
            out.push(TagCheck {
                tag,
                state,
                digest: now,
                detail,
            });
        }
        out
    }
}

/// A platform's check from its blobs' answers.
fn platform_check(
    location: &str,
    platform: &Platform,
    digest: Option<String>,
    blobs: Vec<(String, &'static str, Answer<()>)>,
) -> PlatformCheck {
    let mut state = State::Ok;
    let mut whys = Vec::new();
    for (blob, what, answer) in blobs {
        match answer {
            Answer::Found(()) => {}
            Answer::Unknown(code) => {
                state = state.max(State::PlatformMissing);
                whys.push(format!(
                    "the {platform} image's {what} blob {} is not at {location} ({code})",
                    short_digest(&blob)
                ));
            }
            Answer::Unverifiable(why) => {
                state = state.max(State::Unverifiable);
                whys.push(why);
            }
        }
    }
    PlatformCheck {
        platform: platform.clone(),
        digest,
        state,
        detail: if whys.is_empty() {
            format!("{platform}: ok")
        } else {
            whys.join("; ")
        },
    }
}

/// A location's registry host, to name it.
pub fn host(location: &str) -> &str {
    location.split('/').next().unwrap_or(location)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(source: &str, mirrors: &[&str], never: bool) -> MirrorRule {
        MirrorRule {
            source: source.into(),
            mirrors: mirrors.iter().map(|m| (*m).to_owned()).collect(),
            never_contact_source: never,
        }
    }

    #[test]
    fn a_node_pulls_from_each_mirror_of_the_longest_rule_then_the_source() {
        let rules = [
            rule("registry.redhat.io", &["mirror.example/all"], false),
            rule(
                "registry.redhat.io/rhods",
                &["m1.example/rhods", "m2.example/x"],
                false,
            ),
            rule("quay.io/modh", &["m3.example/modh"], true),
        ];
        assert_eq!(
            locations(&rules, "registry.redhat.io/rhods/ovms", false),
            [
                "m1.example/rhods/ovms",
                "m2.example/x/ovms",
                "registry.redhat.io/rhods/ovms"
            ]
        );
        assert_eq!(
            locations(&rules, "registry.redhat.io/other/x", false),
            ["mirror.example/all/other/x", "registry.redhat.io/other/x"]
        );
        // A prefix matches whole path segments only.
        assert_eq!(
            locations(&rules, "registry.redhat.io/rhodsx/y", false)[0],
            "mirror.example/all/rhodsx/y"
        );
        assert_eq!(locations(&rules, "quay.io/modh/x", false), ["m3.example/modh/x"]);
        assert_eq!(
            locations(&rules, "registry.redhat.io/rhods/ovms", true),
            ["m1.example/rhods/ovms", "m2.example/x/ovms"]
        );
        // Not mirrored: pulled from where it is named, --mirrors-only or not.
        assert_eq!(
            locations(&rules, "docker.io/library/x", true),
            ["docker.io/library/x"]
        );
    }
}
