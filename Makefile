# cmbnode — the two commands users rely on are `make run` and `make test`.
GO       ?= go
BIN      := bin/cmbnode
PKGS     := ./...
# make install copies the binary to $GOBIN (go env GOBIN) when that is set,
# else to $(PREFIX)/bin; DESTDIR stages it for packaging.
PREFIX   ?= /usr/local
BINDIR   ?= $(or $(shell $(GO) env GOBIN),$(PREFIX)/bin)
FUZZTIME ?= 30s
BENCHTIME ?= 1s
# Durable put throughput is measured over PUTS puts per case: enough to
# cross several log checkpoints (one per ~16k 1 KB puts) and to amortise
# growing a fresh store's log, which a 1 s run of ~20k puts mostly measures.
PUTS ?= 100000x

.PHONY: all build run install uninstall test bench bench-delivery fuzz lint clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/cmbnode

# The daemon uses the home every client uses by default ($CMBNODE_HOME, else
# ~/.cmbnode), so `bin/cmbnode status` in another shell reaches it.
run: build
	$(BIN) daemon $(ARGS)

install: build
	install -d "$(DESTDIR)$(BINDIR)"
	install -m 0755 $(BIN) "$(DESTDIR)$(BINDIR)/cmbnode"
	@echo "installed $(DESTDIR)$(BINDIR)/cmbnode"

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/cmbnode"

test:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 20m $(PKGS)

bench: bench-delivery
	$(GO) test -run '^$$' -bench . -skip 'Put1KB|^BenchmarkDelivery$$' -benchmem -benchtime $(BENCHTIME) $(PKGS)
	$(GO) test -run '^$$' -bench 'Put1KB' -benchmem -benchtime $(PUTS) ./store

# The two-daemon delivery workload (cmd/cmbnode/delivery_bench_test.go):
# ramp, bisect to 15 %, fixed rates; CPU per CMB on each side beside a bare
# sign and verify. CMBNODE_BENCH_STEP=5s shortens the 20 s steps,
# CMBNODE_BENCH_RATES=1000,4000 runs only those rates, and
# CMBNODE_BENCH_PROFILE=DIR has both daemons write CPU profiles there.
bench-delivery:
	$(GO) test -run '^$$' -bench '^BenchmarkDelivery$$' -benchtime 1x -timeout 60m -v ./cmd/cmbnode

# Each fuzz target runs for $(FUZZTIME); go test allows one -fuzz target per run.
FUZZ_TARGETS := ./cmb:FuzzReadFrame ./cmb:FuzzParseFrame ./cmb:FuzzDecodeRecord ./cmb:FuzzObjectMembers ./cmb:FuzzValidJSON

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf bin
