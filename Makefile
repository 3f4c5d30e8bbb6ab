# `make test` is the project's test command: formatting, lints, every test
# (Rust unit and integration tests, then the chart, certificate-script and
# Dockerfile tests in a Python venv built from pinned requirements).
CARGO ?= cargo
PYTHON ?= python3
VENV ?= .venv

.PHONY: test e2e fmt-check clippy unit chart-test registry-test registry-tools skopeo container-tools image image-push image-test tools promtool build fetch release clean bench bench-container bench-load bench-instructions bench-audit bench-fleet bench-check bench-dump soak fuzz

test: fmt-check clippy unit chart-test registry-test image-test

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets --locked -- -D warnings

unit: tools
	$(CARGO) test --all-targets --locked
	$(CARGO) test --doc --locked

# The chart tests drive the debug binary and real Helm (helm-python-sdk),
# kubernetes-validate and hadolint from PyPI, at the versions pinned here.
$(VENV)/.installed: tests/chart/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/chart/requirements.txt
	touch $@

# openssl: the certificate tests verify chains with it and certs/ uses it.
# curl: the server's tests send early errors with it over HTTP/1.1 and
# HTTP/2, as people try the webhook.
tools:
	@command -v openssl >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq openssl; }
	@command -v curl >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq curl; }

# promtool runs the chart's alerting rules (tests/chart/test_alerts.py). Only
# the binary is taken out of Debian's prometheus package: installing the
# package would set up and try to start a Prometheus server.
PROMTOOL_DIR ?= $(HOME)/.cache/digest-gate-promtool
promtool:
	@command -v promtool >/dev/null 2>&1 || test -x $(PROMTOOL_DIR)/promtool || { \
		apt-get update -qq && rm -rf $(PROMTOOL_DIR) && mkdir -p $(PROMTOOL_DIR)/deb && \
		cd $(PROMTOOL_DIR)/deb && apt-get download -qq prometheus 2>/dev/null && \
		dpkg-deb -x prometheus_*.deb . && mv usr/bin/promtool $(PROMTOOL_DIR)/promtool && \
		rm -rf $(PROMTOOL_DIR)/deb; }

# The Dockerfile test resolves the lock file offline, which needs every
# platform's crates in the cache, not only those this machine builds.
fetch:
	$(CARGO) fetch --locked

chart-test: $(VENV)/.installed tools promtool build fetch
	cd tests/chart && PATH="$(abspath $(VENV))/bin:$$PATH:$(PROMTOOL_DIR)" $(abspath $(VENV))/bin/python -m pytest -q -p no:cacheprovider

build:
	$(CARGO) build --locked

# The registry-facing tests run real registries on loopback: Debian's
# docker-registry (the CNCF distribution registry 2.8; only the binary is
# taken out of the package, which would set up a service) and skopeo,
# which pushes the OCI layouts the tests build.
REGISTRY_DIR ?= $(HOME)/.cache/digest-gate-registry
skopeo:
	@command -v skopeo >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq skopeo; }

registry-tools: skopeo
	@test -x $(REGISTRY_DIR)/docker-registry || { \
		apt-get update -qq && rm -rf $(REGISTRY_DIR)/deb && mkdir -p $(REGISTRY_DIR)/deb && \
		cd $(REGISTRY_DIR)/deb && apt-get download -qq docker-registry 2>/dev/null && \
		dpkg-deb -x docker-registry_*.deb . && mv usr/bin/docker-registry $(REGISTRY_DIR)/docker-registry && \
		rm -rf $(REGISTRY_DIR)/deb; }

registry-test: $(VENV)/.installed tools registry-tools build
	cd tests/registry && DIGEST_GATE_REGISTRY_CACHE=$(REGISTRY_DIR) $(abspath $(VENV))/bin/python -m pytest -q -p no:cacheprovider

# The image tests (tests/image): the assembler on the debug binary, twice,
# with the Debian packages this machine's archive offers.
image-test: $(VENV)/.installed build
	cd tests/image && $(abspath $(VENV))/bin/python -m pytest -q -p no:cacheprovider

# A container runtime as a node has one: Debian's umoci unpacks an image
# into a runtime bundle and runc runs it (crun fails on this host's cgroup
# layout). skopeo's package brings the RuntimeDefault seccomp profile.
container-tools: skopeo
	@command -v umoci >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 || { \
		apt-get update -qq && apt-get install -y -qq umoci runc; }

# The e2e suite: the chart installed with real Helm on a real Kubernetes 1.20
# control plane (etcd, kube-apiserver, kube-controller-manager on loopback),
# the debug binary serving it, and for some tests the image `make image`
# builds, pushed to a registry and run as a container with runc.
# tests/e2e/control-plane.sh builds the control plane from Debian's packages
# on first use (~7-10 minutes on 2 cores) and caches it in
# ~/.cache/digest-gate-e2e (DIGEST_GATE_E2E_CACHE). The release build the
# image needs takes about 10 minutes more; nothing else in CI builds release.
e2e: $(VENV)/.installed tools registry-tools container-tools build image
	DIGEST_GATE_E2E_BIN="$$(sh tests/e2e/control-plane.sh)" && export DIGEST_GATE_E2E_BIN && \
	cd tests/e2e && DIGEST_GATE_REGISTRY_CACHE=$(REGISTRY_DIR) DIGEST_GATE_E2E_IMAGE=$(abspath $(IMAGE_DIR)) \
		PATH="$(abspath $(VENV))/bin:$$PATH" $(abspath $(VENV))/bin/python -m pytest -q -p no:cacheprovider

# Benchmarks are not part of `make test`; see BENCHMARKS.md.
bench:
	$(CARGO) bench --locked --bench admission
	$(PYTHON) bench/plot_criterion.py

# A 60-second soak at a steady rate; see SECURITY.md and BENCHMARKS.md.
soak: tools
	$(PYTHON) bench/soak.py

# libFuzzer via cargo fuzz (installed on first use), FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 60
fuzz:
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	for t in reference review manifest; do \
		mkdir -p fuzz/corpus/$$t && cp -n fuzz/seeds/$$t/* fuzz/corpus/$$t/ 2>/dev/null; \
		(cd fuzz && $(CARGO) fuzz run $$t --sanitizer none -- -max_total_time=$(FUZZ_SECONDS)) || exit 1; \
	done

bench-load: tools
	$(PYTHON) bench/load.py
	mkdir -p bench/results
	cp target/bench-load/report.md target/bench-load/results.json target/bench-load/latency.svg bench/results/

# Instructions per answered review under callgrind: stable where wall-clock
# figures on a shared VM are not.
bench-instructions:
	@command -v valgrind >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq valgrind; }
	$(PYTHON) bench/instructions.py
	mkdir -p bench/results
	cp target/bench-load/instructions.md target/bench-load/instructions.json bench/results/

# `digest-gate audit` of 5,000 Pods and 500 ServingRuntimes on the e2e control
# plane, against kubectl reading the same objects; see BENCHMARKS.md.
# SIZE: cluster sizes in objects, ascending (5500,55000: about 3 minutes more
# to create); BASELINE: an earlier digest-gate build measured beside this one.
SIZE ?= 5500
bench-audit: $(VENV)/.installed tools
	DIGEST_GATE_E2E_BIN="$$(sh tests/e2e/control-plane.sh)" $(VENV)/bin/python bench/audit_scale.py \
		--sizes $(SIZE) $(if $(BASELINE),--baseline $(BASELINE))
	mkdir -p bench/results
	cp target/bench-audit/report.md bench/results/audit.md

# audit over 2 and 4 clusters against the single-cluster runs (BENCHMARKS.md).
bench-fleet: $(VENV)/.installed tools
	DIGEST_GATE_E2E_BIN="$$(sh tests/e2e/control-plane.sh)" $(VENV)/bin/python bench/audit_fleet.py \
		$(if $(SIZE),--size $(SIZE))
	mkdir -p bench/results
	cp target/bench-fleet/report.md bench/results/audit-fleet.md

# The image's size, and its start to ready as a container (runc, the chart's
# securityContext) against the release binary on the host; see BENCHMARKS.md.
bench-container: $(VENV)/.installed container-tools image
	$(VENV)/bin/python bench/container_start.py
	mkdir -p bench/results
	cp target/bench-container/report.md bench/results/container-start.md

# Peak memory of `check` on long manifest streams; see BENCHMARKS.md.
bench-check:
	$(PYTHON) bench/check_stream.py
	mkdir -p bench/results
	cp target/bench-check/report.md bench/results/check-stream.md

# A cluster dump on standard input; BASELINE as for bench-audit.
bench-dump: $(VENV)/.installed
	$(VENV)/bin/python bench/check_dump.py $(if $(BASELINE),--baseline $(BASELINE))
	mkdir -p bench/results
	cp target/bench-dump/report.md bench/results/check-dump.md

release:
	$(CARGO) build --release --locked

# digest-gate's container image, with no container engine and no base-image
# pull: an OCI layout in $(IMAGE_DIR), its Debian packages' lock file and an
# SPDX SBOM beside it (image/assemble.py says what goes in and why).
# Reproducible: one binary at one state of the Debian archive, one digest.
IMAGE_DIR ?= target/image
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
image: release
	$(PYTHON) image/assemble.py --binary target/release/digest-gate --out $(IMAGE_DIR)

# Pushes $(IMAGE_DIR) to IMAGE (registry/repository), tagged with the
# version, digests preserved, and prints the pushed reference by digest, the
# one to pin the chart to. SKOPEO_FLAGS carries credentials and TLS options
# (--dest-creds, --dest-authfile, --dest-cert-dir).
image-push: skopeo
	@test -n "$(IMAGE)" || { echo "usage: make image-push IMAGE=registry.example.com/team/digest-gate" >&2; exit 2; }
	@test -f $(IMAGE_DIR)/index.json || { echo "no image in $(IMAGE_DIR): run make image first" >&2; exit 2; }
	skopeo copy --quiet --preserve-digests --digestfile $(IMAGE_DIR).pushed $(SKOPEO_FLAGS) \
		oci:$(IMAGE_DIR):$(VERSION) docker://$(IMAGE):$(VERSION)
	@echo "$(IMAGE)@$$(cat $(IMAGE_DIR).pushed)"

clean:
	$(CARGO) clean
	rm -rf $(VENV)
