# termlink — the commands the README names.
GO ?= go
# Every recipe line runs in bash with pipefail: a go test piped through
# testreport still fails the step when go test fails.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

# The version make build and make pi stamp into the binaries (--version).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: test vet race cross test-arm build pi demo fuzz

# The test command: vet, race-detector tests, the Raspberry Pi cross-builds
# and termd's tests executed on emulated ARM. Every step runs even when
# one fails; the end says which failed and lists every skipped test with
# its reason (a missing tool shows without -v) and the tests passed,
# failed and skipped in all. TESTREPORT_SKIPS and TESTREPORT_COUNTS name
# the files the go test steps append skipped tests and counts to.
STEPS := vet race cross test-arm
test:
	@skips=$$(mktemp); counts=$$(mktemp); trap 'rm -f "$$skips" "$$counts"' EXIT; failed=; passed=; \
	for step in $(STEPS); do \
	  echo "== make $$step"; \
	  if $(MAKE) --no-print-directory $$step TESTREPORT_SKIPS="$$skips" TESTREPORT_COUNTS="$$counts"; then passed="$$passed $$step"; else failed="$$failed $$step"; fi; \
	done; \
	echo; echo "== make test: summary"; \
	n=$$(wc -l <"$$skips"); \
	if [ "$$n" -gt 0 ]; then echo "skipped ($$n):"; cat "$$skips"; else echo "no test skipped"; fi; \
	tests=$$(awk '{p+=$$1; f+=$$2; s+=$$3} END {printf "%d passed, %d failed, %d skipped", p, f, s}' "$$counts"); \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed (passed:$${passed:- none})"; echo "tests: $$tests"; exit 1; fi; \
	echo "make test: every step passed ($(STEPS))"; echo "tests: $$tests"

# go test -json through testreport: plain go test's output (ok/FAIL
# lines, failed tests' output), then the skipped tests with their reasons.
TESTREPORT = $(GO) run ./testrig/testreport $(if $(TESTREPORT_SKIPS),-skips $(TESTREPORT_SKIPS)) $(if $(TESTREPORT_COUNTS),-counts $(TESTREPORT_COUNTS))

vet:
	$(GO) vet $(PKGS)

# PKGS narrows vet and race to a part (make race PKGS=./server/...).
PKGS ?= ./...
race:
	$(GO) test -race -count=1 -json $(PKGS) | $(TESTREPORT) -label race

# Raspberry Pi Zero/1 (ARMv6) and 64-bit Pis; static, no cgo.
cross:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 $(GO) build -o /dev/null ./cmd/...
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -o /dev/null ./cmd/...

# The unit tests of every package of this module termd is built from,
# executed on emulated ARM (qemu-user): ARMv6 as on a Pi Zero/1, and arm64.
# This is where 64-bit atomics on 32-bit ARM, alignment and word size
# show. TERMLINK_EMULATOR tells the tests they run under qemu (a test that
# starts a program built for its own architecture starts it under qemu
# too). Without qemu-user-static (apt-get install qemu-user-static) this
# is skipped, unless CI_REQUIRE_TOOLS=1.
TERMD_PKGS = $(GO) list -deps -f '{{if .Module}}{{if .Module.Main}}{{.ImportPath}}{{end}}{{end}}' ./cmd/termd
test-arm:
	@if ! command -v qemu-arm-static >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then \
	  if [ "$$CI_REQUIRE_TOOLS" = 1 ]; then echo "test-arm: qemu-user-static is not installed (CI_REQUIRE_TOOLS=1)" >&2; exit 1; fi; \
	  echo "test-arm: skipped: qemu-user-static is not installed (apt-get install qemu-user-static)"; \
	  if [ -n "$(TESTREPORT_SKIPS)" ]; then echo "test-arm: SKIP the whole step: qemu-user-static is not installed (apt-get install qemu-user-static)" >>"$(TESTREPORT_SKIPS)"; fi; exit 0; \
	fi; \
	pkgs=$$($(TERMD_PKGS)) || exit 1; start=$$(date +%s); \
	echo "== termd's tests on ARMv6 (qemu-arm-static)"; \
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 TERMLINK_EMULATOR=qemu-arm-static \
	  $(GO) test -count=1 -json -exec qemu-arm-static $$pkgs | $(TESTREPORT) -label armv6 || exit 1; \
	echo "== termd's tests on arm64 (qemu-aarch64-static)"; \
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 TERMLINK_EMULATOR=qemu-aarch64-static \
	  $(GO) test -count=1 -json -exec qemu-aarch64-static $$pkgs | $(TESTREPORT) -label arm64 || exit 1; \
	echo "test-arm: both architectures in $$(( $$(date +%s) - start )) s"

# termd, termserver and termrig for this machine, in bin/ (the first build
# takes a minute or two on a small machine; later ones are quick).
build:
	mkdir -p bin && $(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

# The demo (README, Quick start), from the build above.
demo: build
	bin/termrig demo

# termd, termserver and termrig for the Raspberry Pi: bin/linux-arm6/ for a
# Pi Zero / Zero W / Pi 1 (ARMv6), bin/linux-arm64/ for a Pi 3/4/5 or Zero 2
# with a 64-bit OS. Static, no cgo: copy them to the Pi as they are.
# Stamped with $(VERSION) (git describe; --version prints it) and stripped
# of the symbol table and DWARF (-s -w): panics still print their stack.
pi:
	mkdir -p bin/linux-arm6 bin/linux-arm64
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o bin/linux-arm6/ ./cmd/...
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o bin/linux-arm64/ ./cmd/...

# Short fuzzing of every fuzz target in the tree (each parser, encoder and
# reader has one), found with grep so a new target is never left out
# (longer: FUZZTIME=5m make fuzz).
FUZZTIME ?= 20s
fuzz:
	@grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | while read -r pkg; do \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$pkg/*_test.go | cut -d' ' -f2); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg/ || exit 1; \
	  done; \
	done
