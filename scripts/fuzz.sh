#!/usr/bin/env bash
# Runs every Fuzz* target in the module for FUZZTIME each (default 1m).
# `make fuzz` runs it; CI runs it with FUZZTIME=5s. New corpus entries that
# crash land in the package's testdata/fuzz/ directory, as go test does.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-1m}
# Go minimizes every new interesting input for up to a minute by default;
# with image-sized seeds (hundreds of KiB) that is the whole fuzz time, and
# the fuzzer then runs a few dozen inputs instead of thousands.
FUZZMINIMIZE=${FUZZMINIMIZE:-2s}
status=0
ran=0
# `go test -list` prints the matching names of a package, then "ok <pkg>".
names=()
while read -r line; do
	case "$line" in
	Fuzz*) names+=("$line") ;;
	ok*)
		pkg=$(awk '{print $2}' <<<"$line")
		for n in "${names[@]}"; do
			echo "== $pkg $n ($FUZZTIME)"
			ran=$((ran + 1))
			if ! "$GO" test -run '^$' -fuzz "^${n}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZE" "$pkg"; then
				echo "FAIL: $pkg $n" >&2
				status=1
			fi
		done
		names=()
		;;
	esac
done < <("$GO" test -list '^Fuzz' ./... 2>/dev/null)
echo "fuzz: $ran targets run, fuzztime $FUZZTIME each"
[ "$ran" -gt 0 ] || { echo "fuzz: no Fuzz targets found" >&2; exit 1; }
exit $status
