# fairdispatch: the two commands a newcomer needs are `make run` and `make test`.
GO       ?= go
PKGS     ?= ./...
DEMO     ?= gateway
ARGS     ?=
BIN      ?= bin
BENCHTIME ?= 1s

.PHONY: run test vet fmt bench bench-e2e bench-quick bench-fleet build fuzz fuzz-short cover clean

## run: the dispatcher on an embedded NATS server, two mock workers and the OpenAI gateway on 127.0.0.1:8000
## (configs/gateway-demo.yaml): two tenants' streaming clients share the fleet, then it keeps serving any OpenAI
## client until stopped (DEMO=1: the seed's premium/regular burst instead, and exit; DEMO=0: the dispatcher alone;
## DEMO=keys: a flooding tenant against quiet ones in one class, on configs/policy-keys.yaml; ARGS: more flags). It builds $(BIN)/dispatcher and execs it, so that a signal to make reaches the dispatcher
## (`go run` does not pass SIGTERM on to its child, which then kept both ports after make was killed).
run:
	$(GO) build -o $(BIN)/dispatcher ./cmd/dispatcher
	exec $(BIN)/dispatcher $(if $(filter keys,$(DEMO)),--policy-config configs/policy-keys.yaml --demo --demo-scenario keys,$(if $(filter gateway,$(DEMO)),--policy-config configs/policy-classes.yaml --demo --demo-scenario gateway,--policy-config configs/policy-classes.yaml --demo=$(DEMO))) $(ARGS)

## test: vet, gofmt check, every test under the race detector, then each fuzz target briefly.
## The end-to-end package (test/e2e, the long pole: 9.5 to 11.5 minutes on 2 cores, much of it
## waiting on ack waits and lease TTLs) runs beside the others and the fuzz targets, which
## use the CPU it leaves; its output, kept in a file, follows theirs. The 30-minute limit:
## beside a CPU hog go test's default 10 minutes per package would fail it for time alone.
E2E := fairdispatch/test/e2e
test: vet fmt
	@pkgs=$$($(GO) list $(PKGS)); rest=$$(echo "$$pkgs" | grep -vx '$(E2E)' || true); \
	log=$$(mktemp); status=0; e2e=; \
	if echo "$$pkgs" | grep -qx '$(E2E)'; then \
		echo "test/e2e: started beside the rest; its output follows theirs"; \
		$(GO) test -race -count=1 -timeout 30m $(E2E) >$$log 2>&1 & e2e=$$!; \
	fi; \
	if [ -n "$$rest" ]; then $(GO) test -race -count=1 -timeout 30m $$rest || status=1; fi; \
	$(MAKE) --no-print-directory fuzz-short || status=1; \
	if [ -n "$$e2e" ]; then wait $$e2e || status=1; cat $$log; fi; \
	rm -f $$log; exit $$status

vet:
	$(GO) vet $(PKGS)

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

## bench: the core benchmarks
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./drr/ ./lanes/ ./ingest/ ./kvindex/

FUZZTIME ?= 60s
# package:target of every fuzz target; `go test -fuzz` takes one target at a time.
FUZZ_TARGETS ?= ingest:FuzzDecode workers:FuzzParseReport wire:FuzzDecodeLoadReport wire:FuzzDecodeDispatch configs:FuzzParse admin:FuzzBusyThresholdBody kvindex:FuzzParseEvent gateway:FuzzParseRequest

## fuzz: run each fuzz target for FUZZTIME (default 60s); findings land in each package's testdata/fuzz
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== $$fn in ./$$pkg/ for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$pkg/; \
	done

## fuzz-short: each fuzz target briefly, as CI runs them: bounded by executions,
## not time, since a time-bounded run can fail with "context deadline exceeded"
## when the time runs out in the middle of an input on a loaded machine
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=20000x

## bench-e2e: bare pipe vs direct work queue vs fairdispatch, with the scale curves, one run, embedded NATS (about 2 minutes)
bench-e2e:
	$(GO) run ./cmd/bench --requests 200000 --json

## bench-quick: the same, small (under a minute)
bench-quick:
	$(GO) run ./cmd/bench --quick

## bench-fleet: the Mooncake trace against 8 simulated Llama-3.3-70B engines behind round robin, least loaded,
## a queueless cache-aware router and four fairdispatch variants, at 50%, 80% and 110% of the fleet's measured
## capacity; prints the table and writes it with fleet.json and a PNG per metric into bench-out/ (about 6.5 minutes;
## docs/bench.md, What it buys a fleet). The trace is read from shared/traces/ beside the repository.
bench-fleet:
	$(GO) run ./cmd/bench --fleet $(ARGS)

## cover: coverage of the core packages
cover:
	$(GO) test -cover ./drr/ ./lanes/ ./filters/ ./workers/ ./configs/ ./scheduler/

build:
	$(GO) build -o $(BIN)/ ./cmd/...

clean:
	rm -rf bin data
