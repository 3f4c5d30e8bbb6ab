# The promoted-digest policy as a Gatekeeper/OPA user would write it, for the
# Rego peer in benches/admission.rs. data.promoted maps each repository to
# {"digests": {digest: true}, "tags": {tag: digest}}.
package digestgate

import rego.v1

images contains {"container": c.name, "image": c.image} if {
	some field in ["containers", "initContainers", "ephemeralContainers"]
	some c in input.spec[field]
}

# repo[:tag][@digest]: the tag is a ':' in the last path component.
reference(image) := {"repo": repo, "tag": tag, "digest": digest} if {
	at := split(image, "@")
	digest := digest_of(at)
	path := split(at[0], "/")
	last := split(path[count(path) - 1], ":")
	repo := concat("/", array.concat(array.slice(path, 0, count(path) - 1), [last[0]]))
	tag := tag_of(last)
}

digest_of(at) := at[1] if count(at) == 2
digest_of(at) := "" if count(at) == 1

tag_of(last) := last[1] if count(last) == 2
tag_of(last) := "" if count(last) == 1

promoted(ref) if data.promoted[ref.repo].digests[ref.digest]

suggestion(ref) := sprintf("%s@%s", [ref.repo, data.promoted[ref.repo].tags[ref.tag]]) if {
	data.promoted[ref.repo].tags[ref.tag]
} else := ""

violation contains v if {
	some img in images
	ref := reference(img.image)
	not promoted(ref)
	v := {"container": img.container, "image": img.image, "use": suggestion(ref)}
}
