# txbox build and test targets. `make test` is the one command that runs the
# whole suite; .ci/run calls it.

GO ?= go
TEST_TIMEOUT ?= 14m
PKGS ?= ./...
# The tests `make test` runs on every PostgreSQL version (pg-matrix).
PG_MATRIX_NARROW ?= ^(TestConformance|TestLockConformance|TestInboxConformance|TestInboxHelperProcess|TestWAL.*|TestStream.*|TestCreateStream.*)$$

.PHONY: test services vet fmt lint bench chaos demo build dlq-memory pg-matrix

build:
	$(GO) build ./...

services:
	./scripts/services.sh

# The default suite: services up, formatting and vet checks, then every test
# under the race detector, then the ORM examples' module.
test: services
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd bench/watermill && $(GO) vet ./...
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -p 2 $(PKGS)
	# The narrow version matrix: the store's conformance suites and WAL
	# mode's stream tests on PostgreSQL 14 (table mode), 16, 17 and 18.
	PG_MATRIX_FLAGS="-count=1 -p 1 -timeout 10m -run $(PG_MATRIX_NARROW)" ./scripts/pg-matrix.sh
	# The ORM examples are a module of their own (no ORM in txbox's go.mod);
	# their ent client is generated first (untracked: examples/orm/ent).
	cd examples/orm && $(GO) generate ./ent && $(GO) vet ./... && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

demo:
	$(GO) run ./cmd/txbox demo

# The whole suite with the long chaos and soak variants switched on
# (TXBOX_CHAOS=1: SIGKILL/SIGSTOP relays, minute-long broker outages, 1M-row
# plans, 10k-event inbox runs), then the whole version matrix: run by hand
# before resolving an issue that touches delivery.
chaos: services
	TXBOX_CHAOS=1 $(GO) test -race -count=1 -timeout 80m -p 1 ./...
	./scripts/pg-matrix.sh

# The version matrix: the PostgreSQL store's tests (its conformance suite
# included) under the race detector on PostgreSQL 14, 16, 17 and 18 from
# scripts/pg-versions.sh, each a fresh server of internal/pgcluster
# (`make test` runs PG_MATRIX_NARROW of them). PG_MATRIX_VERSIONS,
# PG_MATRIX_PKGS and PG_MATRIX_FLAGS narrow or widen it
# (scripts/pg-matrix.sh).
pg-matrix:
	./scripts/pg-matrix.sh

# The dead-letter admin's memory bars at full size: a real relay with 2,000
# dead letters of 1 MiB and 4 clients, and with 500,000 dead letters in 20
# failure groups, peak RSS under 150 MiB (docs/operations.md, "Bulk
# actions", "Failure groups"). The default suite runs them with 200 and
# 20,000.
dlq-memory: services
	TXBOX_CHAOS=1 $(GO) test -count=1 -timeout 40m -run '^(TestDeadLetterAdminMemory|TestDeadLetterGroupsMemory)$$' -v ./cmd/txbox

bench: services
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
