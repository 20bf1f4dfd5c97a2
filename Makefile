# Everyday commands; CI runs ./scripts/test (.ci/run), which `make test` wraps.
# Go is taken from PATH, falling back to /usr/local/go/bin.
export PATH := $(PATH):/usr/local/go/bin

.DEFAULT_GOAL := help
.PHONY: help test lint bench demo build release image tidy

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-7s %s\n", $$1, $$2}'

test: ## the whole suite as CI runs it: services, lint, go test -race (benchmarks once) over every module
	./scripts/test

lint: ## gofmt, go vet and golangci-lint, as CI runs them
	./scripts/lint

bench: ## the Go benchmarks, on PostgreSQL, MariaDB and SQLite (DEVELOPERS.md)
	go test -run '^$$' -bench . -benchmem github.com/outboxkit/outbox/...

tidy: ## go mod tidy in every module (go.work lists them)
	./scripts/tidy

demo: ## migrate, write, relay to stdout and show counts
	go run ./cmd/outbox demo

build: ## the outbox command, to bin/outbox
	go build -o bin/outbox ./cmd/outbox

release: ## cross-compile the CLI into dist/ with SHA256SUMS and module lists (VERSION=v1.2.3; docs/deploy.md)
	./scripts/release $(VERSION)

image: ## build the container image outbox:dev with buildah (scripts/image; docs/deploy.md)
	./scripts/image
