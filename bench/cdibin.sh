# cdibin.sh: sourced by the bench scripts that run CDI's own programs
# beside ours (clone.sh, upload.sh).

# cdi_program WHAT DEST: CDI's program WHAT (cloner, uploadserver) of
# $cdi_version copied to DEST: BENCH_CDI_<WHAT> names one, else it is the
# one built once into $cache/bin (scripts/e2e/cdi-build.sh, its log in
# DEST.log). On failure it says why in cdi_note and returns 1.
cdi_program() {
	local what=$1 dest=$2 var b
	var=BENCH_CDI_${what^^}
	b=${!var:-$cache/bin/cdi-$what-$cdi_version}
	if [[ ! -x $b ]]; then
		echo "bench: building CDI's $what $cdi_version (scripts/e2e/cdi-build.sh $what)" >&2
		if ! E2E_CDI_VERSION=$cdi_version scripts/e2e/cdi-build.sh "$what" "$b.$$" >"$dest.log" 2>&1; then
			cdi_note="could not build CDI's $what: $(tail -c 200 "$dest.log" | tr '\n' ' ')"
			return 1
		fi
		mv "$b.$$" "$b"
	fi
	cp "$b" "$dest"
}
