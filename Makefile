# `sam build`'s makefile build method (template.yaml: every function's Metadata names this file
# as its ContextPath). SAM runs `make build-<LogicalId>` once per function, in that function's
# CodeUri folder (functions/<crate>, or SAM's scratch copy of it), with ARTIFACTS_DIR set to the
# function's output folder.
#
# One `cargo lambda build` builds every function binary: one feature resolution, so every
# shared crate is compiled once, and the links run side by side. The first target pays for it;
# each later one finds the binaries built (cargo checks its fingerprints, a second or two) and
# copies its own `bootstrap`. After a one-line change in one function, only that crate is
# compiled and linked again. The crate is read from the folder's Cargo.toml, so the template's
# CodeUri stays the one place that says which crate a function runs. docs/history.md ("Lambda
# build, side by side") has the measurements behind this choice.

root := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
CARGO_LAMBDA ?= cargo lambda
# The build profile (Cargo.toml): by default `function` (no cross-crate LTO, 16 codegen units),
# a clean build of every function within 10 minutes on two cores and a one-line change within
# 2 (the goals ./infra/lambda-figures.sh asserts); LAMBDA_BUILD=small (e.g. `LAMBDA_BUILD=small sam build`) is `function-small`, fat LTO in
# one codegen unit: the smallest binaries, about twice the clean build's time.
# docs/results.md ("Lambda build, the default") has the measurements.
ifeq ($(LAMBDA_BUILD),)
profile := function
else ifeq ($(LAMBDA_BUILD),small)
profile := function-small
else
$(error LAMBDA_BUILD is "$(LAMBDA_BUILD)": leave it unset (the default build) or set it to small (the smallest binaries))
endif
target_dir := $(or $(CARGO_TARGET_DIR),$(root)target)
functions := $(notdir $(patsubst %/,%,$(wildcard $(root)functions/*/)))

.PHONY: lambda-binaries
lambda-binaries:
	cd "$(root)" && $(CARGO_LAMBDA) build --profile $(profile) --arm64 --locked $(addprefix -p ,$(functions))

build-%: lambda-binaries
	@test -n "$(ARTIFACTS_DIR)" || { echo "ARTIFACTS_DIR is not set (sam build sets it)" >&2; exit 1; }
	@crate=$$(sed -n 's/^name = "\(.*\)"$$/\1/p' Cargo.toml | head -n 1); \
	test -n "$$crate" || { echo "$@: no package name in $$(pwd)/Cargo.toml" >&2; exit 1; }; \
	case " $(functions) " in *" $$crate "*) ;; *) echo "$@: $$crate is not a crate under functions/" >&2; exit 1 ;; esac; \
	echo "cp $(target_dir)/lambda/$$crate/bootstrap $(ARTIFACTS_DIR)/bootstrap"; \
	cp "$(target_dir)/lambda/$$crate/bootstrap" "$(ARTIFACTS_DIR)/bootstrap"
