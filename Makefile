# `make test` is the project's test command: formatting, lints, every test.
CARGO ?= cargo

.PHONY: test fmt-check clippy unit build release clean

test: fmt-check clippy unit

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets --locked -- -D warnings

unit:
	$(CARGO) test --all-targets --locked
	$(CARGO) test --doc --locked

build:
	$(CARGO) build --locked

release:
	$(CARGO) build --release --locked

clean:
	$(CARGO) clean
