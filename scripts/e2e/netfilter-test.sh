#!/bin/bash
# Tests netfilter.sh in a network namespace of its own (unshare -n, root),
# which starts with no rule and no table, as a fresh machine does:
#   1. the snapshot of no rules succeeds under set -euo pipefail;
#   2. after rules and chains are added, nf_remove_new removes exactly
#      those: a chain and rule that were there before the snapshot stay.
# Prints one line per check; exit 1 if one failed.
set -euo pipefail
if [ "${NETFILTER_TEST_NETNS:-}" != 1 ]; then
	exec unshare -n env NETFILTER_TEST_NETNS=1 "$0" "$@"
fi
. "$(dirname "$0")/env.sh"
. "$(dirname "$0")/netfilter.sh"
say_failures netfilter-test.sh
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
check() { # description command...
	if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi
}
rules() { iptables-save | awk '/^(:|-A )/ { sub(/ \[[0-9]+:[0-9]+\]$/, ""); print }' | sort; }

check "a new network namespace has no rule" test -z "$(iptables-save | awk '/^-A /')"
nf_snapshot "$W/empty"
check "the snapshot of no rules succeeds and is empty" test ! -s "$W/empty"

# What was there before the cluster: a chain of its own, with a rule, in a
# table, and a rule in a built-in chain.
iptables -t filter -N PREEXISTING
iptables -t filter -A PREEXISTING -s 192.0.2.1/32 -j RETURN
iptables -t filter -A INPUT -s 192.0.2.2/32 -m comment --comment "there before" -j ACCEPT
rules > "$W/rules.before"
nf_snapshot "$W/before"
check "the snapshot lists the chain that was there" grep -qx 'filter :PREEXISTING -' "$W/before"
check "the snapshot lists the rules that were there" test "$(grep -c ' -A ' "$W/before")" = 2

# What a cluster adds: chains in two tables, a jump into one of them, a rule
# in a chain that was there, a rule with a quoted comment.
iptables -t nat -N KUBE-SERVICES
iptables -t nat -N KUBE-SVC-TEST
iptables -t nat -A KUBE-SVC-TEST -p tcp -j DNAT --to-destination 10.244.0.5:80
iptables -t nat -A KUBE-SERVICES -d 10.96.0.10/32 -p tcp --dport 80 -m comment --comment "e2e/test service" -j KUBE-SVC-TEST
iptables -t nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
iptables -t filter -N KUBE-FORWARD
iptables -t filter -A FORWARD -j KUBE-FORWARD
iptables -t filter -A PREEXISTING -s 192.0.2.3/32 -j DROP
check "the rules were added" test "$(iptables-save | grep -c "^-A ")" = 7

nf_remove_new "$W/before" 2>"$W/remove.err"
check "nothing was left that could not be removed" test ! -s "$W/remove.err"
rules > "$W/rules.after"
check "the rule set is the one before, the chain that was there kept" \
	diff <(grep -v -e '^:PREROUTING' -e '^:INPUT ' -e '^:OUTPUT ' -e '^:POSTROUTING' "$W/rules.after") \
	<(grep -v -e '^:PREROUTING' -e '^:INPUT ' -e '^:OUTPUT ' -e '^:POSTROUTING' "$W/rules.before")
[ $fail = 0 ] || { cat "$W/remove.err" >&2; diff "$W/rules.before" "$W/rules.after" >&2 || true; }
exit $fail
