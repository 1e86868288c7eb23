# termlink — the commands the README names.
GO ?= go
# Every recipe line runs in bash with pipefail: a go test piped through
# testreport still fails the step when go test fails.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

# The version make build and make pi stamp into the binaries (--version).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X main.version=$(VERSION)
# termd's build tags as shipped: nethttpomithttp2 leaves net/http's
# bundled HTTP/2 out (about 260 KB of termd for ARMv6; issue 43). termd
# speaks HTTP/1.1 only: its WebSocket upgrade and its release downloads.
# termserver and termrig keep HTTP/2.
TERMD_TAGS := nethttpomithttp2

.PHONY: test vet race e2e check cross test-arm build pi demo fuzz

# The test command: vet, race-detector unit tests, the process-heavy
# end-to-end suites, the Raspberry Pi cross-builds and termd's
# architecture-sensitive tests executed on emulated ARM. Steps joined by +
# run at the same time: the cross-builds (pure compiling) fill the cores
# while race's tests wait on sockets and programs, qemu while the
# end-to-end suites wait on the programs they start (a fresh clone on
# the 2-core machine: 632 s with the cross-builds in the last group,
# 601 s with them beside race, which they slowed by 7 s), each
# step's output kept apart and printed when the group ends. Every step
# runs even when one fails; the end lists each failed test (its step,
# package and the first line of its failure), then every skipped test
# with its reason (a missing tool shows without -v), and the tests
# passed, failed and skipped in all. TESTREPORT_SKIPS, TESTREPORT_FAILS
# and TESTREPORT_COUNTS name the files the go test steps append to.
STEPS := vet race+cross e2e+test-arm
test:
	@skips=$$(mktemp); fails=$$(mktemp); counts=$$(mktemp); outs=$$(mktemp -d); trap 'rm -rf "$$skips" "$$fails" "$$counts" "$$outs"' EXIT; failed=; passed=; start=$$(date +%s); \
	for group in $(STEPS); do \
	  g0=$$(date +%s); pids=; \
	  for step in $${group//+/ }; do \
	    ( s0=$$(date +%s); \
	      if $(MAKE) --no-print-directory $$step TESTREPORT_SKIPS="$$skips" TESTREPORT_FAILS="$$fails" TESTREPORT_COUNTS="$$counts"; then echo ok >"$$outs/$$step.rc"; else echo failed >"$$outs/$$step.rc"; fi; \
	      echo "== make $$step: $$(( $$(date +%s) - s0 )) s" ) >"$$outs/$$step.out" 2>&1 & pids="$$pids $$!"; \
	  done; \
	  wait $$pids; \
	  for step in $${group//+/ }; do \
	    echo "== make $$step"; cat "$$outs/$$step.out"; \
	    if [ "$$(cat "$$outs/$$step.rc" 2>/dev/null)" = ok ]; then passed="$$passed $$step"; else failed="$$failed $$step"; fi; \
	  done; \
	  case $$group in *+*) echo "== make $$group (at once): $$(( $$(date +%s) - g0 )) s";; esac; \
	done; \
	echo; echo "== make test: summary ($$(( $$(date +%s) - start )) s, load average $$(cut -d' ' -f1-3 /proc/loadavg))"; \
	n=$$(wc -l <"$$fails"); \
	if [ "$$n" -gt 0 ]; then echo "failed ($$n):"; cat "$$fails"; fi; \
	n=$$(wc -l <"$$skips"); \
	if [ "$$n" -gt 0 ]; then echo "skipped ($$n):"; cat "$$skips"; else echo "no test skipped"; fi; \
	tests=$$(awk '{p+=$$1; f+=$$2; s+=$$3} END {printf "%d passed, %d failed, %d skipped", p, f, s}' "$$counts"); \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed (passed:$${passed:- none})"; echo "tests: $$tests"; exit 1; fi; \
	echo "make test: every step passed ($(STEPS))"; echo "tests: $$tests"

# Builds and tests leave the source's directory out of what they compile
# (-trimpath): a fresh clone elsewhere on the machine reuses the build
# cache of the last one instead of compiling everything again (vet and
# the race step took 60-80 s and 2-4 minutes more on a fresh clone).
# Test binaries are linked without DWARF (-w; a panic's stack trace does
# not need it): the race step links about 90 of them.
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)
TESTFLAGS := -ldflags=-w
# Test binaries run two per core at once (go test -p; its default is one
# per core): most unit packages spend their time waiting on sockets,
# child processes and timers, not on the CPU. On the 2-core machine the
# race step took 275 s at -p 2 and 183 s at -p 4, make check CHECK=all
# 167 s and 82 s (quiet; issue 37's note).
TESTP ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) * 2 )))

# go test -json through testreport: plain go test's output (ok/FAIL
# lines, failed tests' output), then the skipped and failed tests.
TESTREPORT = $(GO) run ./testrig/testreport $(if $(TESTREPORT_SKIPS),-skips $(TESTREPORT_SKIPS)) $(if $(TESTREPORT_FAILS),-fails $(TESTREPORT_FAILS)) $(if $(TESTREPORT_COUNTS),-counts $(TESTREPORT_COUNTS))

vet:
	$(GO) vet $(PKGS)

# PKGS narrows vet, race and e2e to a part (make race PKGS=./server/...).
PKGS ?= ./...
# The process-heavy suites: each test starts other programs (three
# nats-server nodes and termserver processes; headless Chromium) and what
# it checks happens in them, where the race detector of the test binary
# sees nothing. They run in a step of their own, without -race, their
# tests in parallel; every other package runs under -race.
E2E_PKGS := ./testrig/cluster/... ./testrig/kiosk/...
# pkgsOf lists the packages of PKGS in (e2e) or out of (unit) E2E_PKGS.
pkgsOf = e2e=$$($(GO) list $(E2E_PKGS)) && all=$$($(GO) list $(PKGS)) && \
	pkgs=$$(printf '%s\n' $$all | grep -$(if $(filter e2e,$(1)),,v)xF "$$e2e" || true)
# The race step's longest packages (each 40-160 s on the 2-core machine)
# go first: go test starts the packages in the order it is given them,
# and one of these started last kept the step running alone at its end.
RACE_FIRST := ./server ./cmd/termd ./server/console ./cmd/termrig ./cmd/termserver ./server/cluster \
	./device ./device/update ./server/agent/harness ./link ./testrig/load ./server/wschannel
race:
	@$(call pkgsOf,unit); if [ -z "$$pkgs" ]; then echo "race: no package of PKGS outside E2E_PKGS"; exit 0; fi; \
	first=$$($(GO) list $(RACE_FIRST) | grep -xF "$$pkgs" || true); \
	pkgs=$$(printf '%s\n' $$first $$pkgs | awk '!seen[$$0]++'); \
	echo "go test -race -count=1 -p $(TESTP) (every package but $(E2E_PKGS), the longest first)"; \
	$(GO) test $(TESTFLAGS) -p $(TESTP) -race -count=1 -json $$pkgs | $(TESTREPORT) -label race

e2e:
	@$(call pkgsOf,e2e); if [ -z "$$pkgs" ]; then echo "e2e: no package of PKGS in E2E_PKGS"; exit 0; fi; \
	echo "go test -count=1 $$(echo $$pkgs)"; \
	$(GO) test $(TESTFLAGS) -count=1 -json $$pkgs | $(TESTREPORT) -label e2e

# The inner loop for contributors (README): vet and the unit tests,
# without the race detector and the process-heavy suites, of the
# packages a change touches (the files changed against main's merge
# base, committed or not) and the packages that import them; all of
# them with CHECK=all. The suites that build the project's programs and
# run them (PROGRAM_PKGS) run when the change touches them, not for
# every change to what they import: make test runs them.
CHECK ?= changed
PROGRAM_PKGS := ./cmd/... ./testrig/demo/... ./testrig/load/... ./testrig/armtest/...
check:
	@e2e=$$($(GO) list $(E2E_PKGS)); progs=$$($(GO) list $(PROGRAM_PKGS)); \
	if [ "$(CHECK)" = all ]; then pkgs=$$($(GO) list ./... | grep -vxF "$$e2e$$(printf '\n%s' $$progs)"); else \
	  base=$$(git merge-base HEAD main 2>/dev/null || echo HEAD); \
	  dirs=$$( { git diff --name-only $$base; git ls-files --others --exclude-standard; } | grep '\.go$$' | xargs -r -n1 dirname | sort -u | sed 's|^|./|'); \
	  if [ -z "$$dirs" ]; then echo "check: no Go file changed against $$base (make check CHECK=all runs every unit test)"; exit 0; fi; \
	  own=$$($(GO) list $$dirs 2>/dev/null); \
	  skip="$$e2e$$(printf '\n%s' $$(printf '%s\n' $$progs | grep -vxF "$$own"))"; \
	  pkgs=$$($(GO) list -f '{{.ImportPath}} {{join .Deps " "}}' ./... | awk -v own="$$own" 'BEGIN{n=split(own,o,"\n"); for(i=1;i<=n;i++) w[o[i]]=1} {for(i=1;i<=NF;i++) if ($$i in w) {print $$1; next}}' | grep -vxF "$$skip"); \
	fi; \
	echo "go vet + go test -count=1: $$(echo $$pkgs | wc -w) packages (not: the suites make test runs apart, and the programs' own)"; \
	$(GO) vet $$pkgs && $(GO) test $(TESTFLAGS) -p $(TESTP) -count=1 $$pkgs

# Raspberry Pi Zero/1 (ARMv6) and 64-bit Pis; static, no cgo.
cross:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 $(GO) build -o /dev/null ./cmd/...
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -o /dev/null ./cmd/...
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 $(GO) build -tags $(TERMD_TAGS) -o /dev/null ./cmd/termd
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags $(TERMD_TAGS) -o /dev/null ./cmd/termd

# The unit tests of termd's architecture-sensitive packages executed on
# emulated ARM (qemu-user), ARMv6 as on a Pi Zero/1 and arm64, both at
# once. A package termd is built from is architecture-sensitive when it
# imports what depends on the word size, alignment or the kernel's ABI:
# sync/atomic (64-bit atomics on 32-bit ARM), unsafe, syscall or x/sys
# (struct layouts such as Statfs_t), encoding/binary, periph (I2C/GPIO
# ioctls) or the serial port; the rest is the same Go on every
# architecture and runs in the race step. cmd/termd imports syscall only
# for signal names: the real termd binary is run under qemu by
# testrig/armtest (race step) instead. TERMLINK_EMULATOR tells the tests
# they run under qemu (a test that starts a program built for its own
# architecture starts it under qemu too). Without qemu-user-static
# (apt-get install qemu-user-static) this is skipped, unless
# CI_REQUIRE_TOOLS=1.
ARM_IMPORTS := ^(sync/atomic|unsafe|syscall|golang\.org/x/sys/.*|encoding/binary|periph\.io/.*|go\.bug\.st/serial)$$
ARM_PKGS = $(GO) list -deps -f '{{if .Module}}{{if .Module.Main}}{{.ImportPath}} {{join .Imports " "}}{{end}}{{end}}' ./cmd/termd | \
	awk -v re='$(ARM_IMPORTS)' '$$1 != "termlink/cmd/termd" {for (i = 2; i <= NF; i++) if ($$i ~ re) {print $$1; next}}'
test-arm:
	@if ! command -v qemu-arm-static >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then \
	  if [ "$$CI_REQUIRE_TOOLS" = 1 ]; then echo "test-arm: qemu-user-static is not installed (CI_REQUIRE_TOOLS=1)" >&2; exit 1; fi; \
	  echo "test-arm: skipped: qemu-user-static is not installed (apt-get install qemu-user-static)"; \
	  if [ -n "$(TESTREPORT_SKIPS)" ]; then echo "test-arm: SKIP the whole step: qemu-user-static is not installed (apt-get install qemu-user-static)" >>"$(TESTREPORT_SKIPS)"; fi; exit 0; \
	fi; \
	pkgs=$$($(ARM_PKGS)) || exit 1; start=$$(date +%s); out6=$$(mktemp); out64=$$(mktemp); trap 'rm -f "$$out6" "$$out64"' EXIT; \
	echo "== termd's architecture-sensitive packages on ARMv6 (qemu-arm-static) and arm64 (qemu-aarch64-static) at once:" $$pkgs; \
	( CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 TERMLINK_EMULATOR=qemu-arm-static \
	  $(GO) test $(TESTFLAGS) -count=1 -json -exec qemu-arm-static $$pkgs | $(TESTREPORT) -label armv6 ) >"$$out6" 2>&1 & p6=$$!; \
	( CGO_ENABLED=0 GOOS=linux GOARCH=arm64 TERMLINK_EMULATOR=qemu-aarch64-static \
	  $(GO) test $(TESTFLAGS) -count=1 -json -exec qemu-aarch64-static $$pkgs | $(TESTREPORT) -label arm64 ) >"$$out64" 2>&1 & p64=$$!; \
	wait $$p6; s6=$$?; wait $$p64; s64=$$?; \
	echo "== ARMv6"; cat "$$out6"; echo "== arm64"; cat "$$out64"; \
	echo "test-arm: both architectures in $$(( $$(date +%s) - start )) s"; \
	[ $$s6 = 0 ] && [ $$s64 = 0 ]

# termd, termserver and termrig for this machine, in bin/ (the first build
# takes a minute or two on a small machine; later ones are quick).
build:
	mkdir -p bin && $(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

# The demo (README, "The demo"), from the build above.
demo: build
	bin/termrig demo

# termd, termserver and termrig for the Raspberry Pi: bin/linux-arm6/ for a
# Pi Zero / Zero W / Pi 1 (ARMv6), bin/linux-arm64/ for a Pi 3/4/5 or Zero 2
# with a 64-bit OS. Static, no cgo: copy them to the Pi as they are.
# Stamped with $(VERSION) (git describe; --version prints it) and stripped
# of the symbol table and DWARF (-s -w): panics still print their stack.
# termd is built apart, with $(TERMD_TAGS) (no HTTP/2 in net/http).
pi:
	mkdir -p bin/linux-arm6 bin/linux-arm64
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o bin/linux-arm6/ ./cmd/termserver ./cmd/termrig
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 $(GO) build -trimpath -tags $(TERMD_TAGS) -ldflags '-s -w $(LDFLAGS)' -o bin/linux-arm6/ ./cmd/termd
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o bin/linux-arm64/ ./cmd/termserver ./cmd/termrig
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -tags $(TERMD_TAGS) -ldflags '-s -w $(LDFLAGS)' -o bin/linux-arm64/ ./cmd/termd

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
