#!/bin/bash
# The e2e tests in the cluster up.sh started: deploy/'s manifests, then CDI's
# controller driving our image when cdi-build.sh has built it. Writes the
# table of results to bin/e2e/results.md and prints it; exit 1 if a row failed.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
t0=$(date +%s)
mkdir -p "$(dirname "$E2E_RESULTS")"
printf '| test | result | s | what was checked |\n|---|---|---|---|\n' > "$E2E_RESULTS"
rc=0
"$(dirname "$0")/manifests.sh" || rc=1
if [ -x "$E2E_BIN/cdi-controller" ]; then "$(dirname "$0")/cdi.sh" || rc=1
else result "CDI's controller" BLOCKED "bin/e2e/cdi-controller not built (scripts/e2e/cdi-build.sh)"; fi
echo; cat "$E2E_RESULTS"
echo "e2e: tests took $(($(date +%s) - t0)) s"
exit $rc
