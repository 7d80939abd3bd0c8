# fairdispatch: the two commands a newcomer needs are `make run` and `make test`.
GO       ?= go
PKGS     ?= ./...
DEMO     ?= 1
BENCHTIME ?= 1s

.PHONY: run test vet fmt bench build fuzz cover clean

## run: the dispatcher on an embedded NATS server with the seed's premium/regular demo (DEMO=0: the dispatcher alone)
run:
	$(GO) run ./cmd/dispatcher --policy-config configs/policy-classes.yaml --demo=$(DEMO)

## test: vet, gofmt check, and every test under the race detector
test: vet fmt
	$(GO) test -race -count=1 $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

## bench: the core benchmarks
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./drr/ ./lanes/ ./ingest/

## cover: coverage of the core packages
cover:
	$(GO) test -cover ./drr/ ./lanes/ ./filters/ ./workers/ ./configs/ ./scheduler/

build:
	$(GO) build -o bin/ ./cmd/...

clean:
	rm -rf bin data
