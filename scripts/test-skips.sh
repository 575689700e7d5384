#!/usr/bin/env bash
# Printed at the end of make test and make test-short: the suites this
# machine could not run, which skipped (go test shows skips only with -v).
gobin="$(go env GOPATH 2>/dev/null)/bin"
missing=()
for tool in versitygw fake-gcs-server minio; do
  [ -x "$gobin/$tool" ] || command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] || echo "skipped: the S3/GCS suites that need ${missing[*]} (not installed; .ci/run installs them with go install)"
[ "$(id -u)" = 0 ] || echo "skipped: the loop-device and namespace tests (not root)"
command -v podman >/dev/null 2>&1 || echo "skipped: the container image tests (podman not installed)"
exit 0
