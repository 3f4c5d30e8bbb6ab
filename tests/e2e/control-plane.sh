#!/bin/sh
# Builds the e2e suite's Kubernetes control plane from Debian packages only and
# prints the directory holding the binaries:
#
#   kube-apiserver, kube-controller-manager, kubectl   (Debian bookworm's
#       `kubernetes` source package, upstream 1.20.2, built with Debian's Go)
#   etcd                                               (Debian's etcd-server)
#
# Idempotent: the first run takes ~7-10 minutes on 2 cores; later runs find
# the cached binaries and return in well under a second. The cache lives
# outside the repository (DIGEST_GATE_E2E_CACHE, default
# ~/.cache/digest-gate-e2e) so `git clean` and fresh clones keep it.
#
# Why each step is here:
# - A deb-src entry: Debian's images ship binary sources only; it is made from
#   the machine's own bookworm entry.
# - dpkg-source -x, not the bare orig tarball: Debian's patches (a kubectl
#   CVE fix among them) are part of what Debian ships.
# - reflect2: the vendored github.com/modern-go/reflect2 1.0.1 makes the
#   apiserver crash under Go >= 1.18 (SIGSEGV in mapiterinit on the first
#   CRD write). Debian's golang-github-modern-go-reflect2-dev is 1.0.2,
#   which is API-compatible and fixed.
# - kubectl from the same tree: the test client then has the server's version
#   whatever the machine ships (and installing Debian's kubernetes-client would
#   collide with an image's own /usr/bin/kubectl).
# - CGO_ENABLED=0 and a writable HOME: as Debian's debian/rules builds it.
set -eu

SRC_PACKAGE=kubernetes
CACHE=${DIGEST_GATE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/digest-gate-e2e}
BINARIES="kube-apiserver kube-controller-manager kubectl"
APT_PACKAGES="golang-go etcd-server rsync jq golang-github-modern-go-reflect2-dev dpkg-dev"
SOURCES_FILE=/etc/apt/sources.list.d/digest-gate-e2e-src.sources

log() { echo "control-plane: $*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

have_packages() {
    for p in $APT_PACKAGES; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || return 1
    done
}

# The deb-src entry mirrors the machine's own bookworm main entry (same
# mirror, same keyring), so the source comes from wherever apt already gets
# its binaries. deb822 (.sources) files first, then one-line sources.list.
src_entry() {
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk 'BEGIN { RS = ""; FS = "\n" }
             {
                 uris = ""; signed = ""; suite = 0; main = 0; deb = 0
                 for (i = 1; i <= NF; i++) {
                     if ($i ~ /^URIs:/) uris = $i
                     if ($i ~ /^Signed-By:/) signed = $i
                     if ($i ~ /^Types:/ && $i ~ /[ \t]deb([ \t]|$)/) deb = 1
                     if ($i ~ /^Suites:/ && $i ~ /[ \t]bookworm([ \t]|$)/) suite = 1
                     if ($i ~ /^Components:/ && $i ~ /[ \t]main([ \t]|$)/) main = 1
                 }
                 if (deb && suite && main && uris != "") {
                     print "Types: deb-src"; print uris; print "Suites: bookworm"; print "Components: main"
                     if (signed != "") print signed
                     found = 1; exit
                 }
             }
             END { exit found ? 0 : 1 }' "$f" && return 0
    done
    [ -f /etc/apt/sources.list ] || return 1
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i == "bookworm") { for (j = i + 1; j <= NF; j++) if ($j == "main") {
             line = "deb-src"; for (k = 2; k <= i; k++) line = line " " $k; print line " main"; found = 1; exit } } }
         END { exit found ? 0 : 1 }' /etc/apt/sources.list
}

ensure_packages() {
    if have_packages && { [ -f "$SOURCES_FILE" ] || [ -f "${SOURCES_FILE%.sources}.list" ]; }; then
        return 0
    fi
    log "installing $APT_PACKAGES and a bookworm deb-src entry"
    entry=$(src_entry) || { log "no bookworm main entry in /etc/apt to derive a deb-src entry from"; exit 1; }
    case "$entry" in
        Types:*) printf '%s\n' "$entry" | as_root tee "$SOURCES_FILE" >/dev/null ;;
        *) SOURCES_FILE=${SOURCES_FILE%.sources}.list
           printf '%s\n' "$entry" | as_root tee "$SOURCES_FILE" >/dev/null ;;
    esac
    as_root apt-get update -qq
    # policy-rc.d on images like ours keeps the etcd service from starting;
    # where it does start, the tests' own etcd uses other ports.
    # shellcheck disable=SC2086 # a list of package names, split on purpose
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $APT_PACKAGES >/dev/null
}

# The binaries are keyed by the Debian source version, so a point release of
# the package builds afresh instead of reusing an older tree's output.
source_version() {
    apt-cache showsrc "$SRC_PACKAGE" 2>/dev/null | sed -n 's/^Version: //p' | head -n1
}

cached() {
    for b in $BINARIES; do [ -x "$1/$b" ] || return 1; done
    "$1/kube-apiserver" --version >/dev/null 2>&1
}

ensure_packages
VERSION=$(source_version)
[ -n "$VERSION" ] || { log "apt-cache showsrc $SRC_PACKAGE found nothing (deb-src entry missing?)"; exit 1; }
BIN=$CACHE/$VERSION/bin
if cached "$BIN"; then
    ln -sf /usr/bin/etcd "$BIN/etcd"
    echo "$BIN"
    exit 0
fi

WORK=$CACHE/$VERSION/build
log "building $SRC_PACKAGE $VERSION in $WORK (first run: ~7-10 minutes on 2 cores)"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
apt-get source --download-only "$SRC_PACKAGE=$VERSION" >/dev/null 2>&1 \
    || apt-get source --download-only "$SRC_PACKAGE=$VERSION"
# --no-check: apt already verified each file's checksum against the signed
# Sources index; the .dsc's own signature would need debian-keyring.
dpkg-source --no-check -x ./*.dsc tree >/dev/null
cd tree

rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
rm -rf vendor/github.com/modern-go/reflect2/.git* vendor/github.com/modern-go/reflect2/*_test.go

mkdir -p .go/src/k8s.io "$WORK/home"
[ -L .go/src/k8s.io/kubernetes ] || ln -s ../../.. .go/src/k8s.io/kubernetes
whats=""
for b in $BINARIES; do whats="$whats cmd/$b"; done
env GOPATH="$PWD/.go" HOME="$WORK/home" CGO_ENABLED=0 \
    make WHAT="${whats# }" >"$WORK/make.log" 2>&1 || {
    tail -n 40 "$WORK/make.log" >&2
    log "build failed; full log in $WORK/make.log"
    exit 1
}

# Publish atomically: a run interrupted above leaves no half-filled bin/.
mkdir -p "$CACHE/$VERSION/bin.new"
for b in $BINARIES; do cp "_output/bin/$b" "$CACHE/$VERSION/bin.new/$b"; done
rm -rf "$BIN"
mv "$CACHE/$VERSION/bin.new" "$BIN"
ln -sf /usr/bin/etcd "$BIN/etcd"
cd "$CACHE/$VERSION"
rm -rf "$WORK"
log "built $BINARIES in $BIN"
echo "$BIN"
