# Sourced by up.sh and down.sh: which netfilter rules and chains the cluster
# added, so that down.sh removes those and nothing that was there before.
# Works with no rule at all (a fresh machine, a new network namespace):
# awk, not grep, selects the lines, since grep's exit 1 on no match would
# end a script under set -e -o pipefail.

# nf_snapshot FILE: every table's chains (":CHAIN POLICY") and rules
# ("-A CHAIN ..."), counters removed, prefixed with the table ("nat
# -A KUBE-SVC ..."), sorted.
nf_snapshot() {
	iptables-save | awk '
		/^\*/ { table = substr($0, 2); next }
		/^:[^ ]+ / { sub(/ \[[0-9]+:[0-9]+\]$/, ""); print table " " $0; next }
		/^-A / { print table " " $0 }' | sort > "$1"
}

# nf_remove_new BEFORE: deletes the rules, then the chains, that are in the
# current rule set and not in the snapshot BEFORE. Prints what it removed
# and what it could not.
nf_remove_new() {
	local before=$1 now table rest
	now=$(mktemp)
	nf_snapshot "$now" || { rm -f "$now"; return 1; }
	# Rules first: a chain can be deleted only once no rule jumps to it.
	comm -13 "$before" "$now" | awk '$2 == "-A"' | while read -r table rest; do
		eval "iptables -t $table -D ${rest#-A }" 2>/dev/null || echo "netfilter: could not delete $table $rest" >&2
	done
	# User chains only (policy "-"): a built-in chain of a table first
	# loaded since the snapshot cannot be deleted, and is empty again.
	comm -13 "$before" "$now" | awk '$2 ~ /^:/ && $3 == "-" { print $1, substr($2, 2) }' | while read -r table rest; do
		iptables -t "$table" -F "$rest" 2>/dev/null
		iptables -t "$table" -X "$rest" 2>/dev/null || echo "netfilter: could not delete chain $table $rest" >&2
	done
	rm -f "$now"
}
