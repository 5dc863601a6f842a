#!/usr/bin/env bash
# CI entry point for the real-control-plane e2e tests (bench/e2e).
# Call it from the repository root:  bench/e2e/ci.sh
# Needs only Go (the version in bench/e2e/go.mod or a toolchain that can fetch
# it) and the Go module proxy. It builds etcd, kube-apiserver and
# kube-scheduler v1.37.2 from modules (cold: ~6-12 min on 2 cores, about
# 4 GB of build and module cache), then runs every test in the module.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

fail() { echo "bench/e2e/ci.sh: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || fail "the go command is not on PATH; install Go (see go.mod for the version)"
[ "$(uname -s)" = Linux ] || fail "the e2e harness runs on Linux only (it uses Pdeathsig and flock)"

# Loopback must work: every server listens on 127.0.0.1.
if command -v python3 >/dev/null 2>&1; then
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(1)' \
		|| fail "cannot listen on 127.0.0.1"
fi

# Warn (not fail) on little disk space: the build cache alone needs ~3.5 GB.
cache="$(go env GOCACHE)"
mkdir -p "$cache"
avail_kb="$(df -Pk "$cache" | awk 'NR==2 {print $4}')"
if [ -n "$avail_kb" ] && [ "$avail_kb" -lt $((5 * 1024 * 1024)) ]; then
	echo "bench/e2e/ci.sh: warning: only $((avail_kb / 1024)) MiB free for GOCACHE ($cache); the build needs ~4 GB" >&2
fi

# The harness builds into $E2E_BIN_DIR (default $TMPDIR/opa-scheduler-extender-e2e-bin).
: "${E2E_BIN_DIR:=${TMPDIR:-/tmp}/opa-scheduler-extender-e2e-bin}"
export E2E_BIN_DIR
unset E2E_SKIP_BUILD

echo "== go version: $(go version)"
echo "== GOFLAGS=$(go env GOFLAGS) GOCACHE=$cache GOMODCACHE=$(go env GOMODCACHE) E2E_BIN_DIR=$E2E_BIN_DIR"

t0=$(date +%s)
echo "== downloading modules"
go mod download
go mod verify >/dev/null
t1=$(date +%s)
echo "== modules ready in $((t1 - t0))s"

# Same command the harness runs (cluster/build.go), so its own build is a no-op.
echo "== building etcd, kube-apiserver, kube-scheduler into $E2E_BIN_DIR"
mkdir -p "$E2E_BIN_DIR"
go build -o "$E2E_BIN_DIR/" ./cmd/etcd ./cmd/kube-apiserver ./cmd/kube-scheduler
t2=$(date +%s)
echo "== binaries built in $((t2 - t1))s"

echo "== go vet"
go vet $(go list ./... | grep -v '/cmd/')

echo "== go test"
log="${E2E_TEST_LOG:-$(mktemp "${TMPDIR:-/tmp}/bench-e2e-test.XXXXXX.log")}"
set +e
go test -count=1 -timeout 40m -v ./... 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
t3=$(date +%s)
echo "== tests finished in $((t3 - t2))s (exit $status); total $((t3 - t0))s; log $log"
if grep -q -- '--- SKIP' "$log"; then
	grep -- '--- SKIP' "$log" >&2
	fail "some tests were skipped; the e2e suite must run everything (fix the missing prerequisite)"
fi
exit "$status"
