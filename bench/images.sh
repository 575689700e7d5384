#!/usr/bin/env bash
# images.sh BENCHTOOL SIZE DIR: builds the test disk and every derived image
# in DIR unless already there (bench/cache is never committed).
set -euo pipefail
bt=$1 size=$2 dir=$3
mkdir -p "$dir"
cd "$dir"
# Several bench.sh runs may share one image directory: an exclusive lock for
# the whole build makes a second run wait, then find every file already made,
# instead of two runs writing the same .tmp at once. fd 9 stays open (and the
# lock held) until this script exits.
exec 9>>.images.lock
if ! flock -n 9; then
	echo "bench: waiting for another build of $dir" >&2
	flock 9
fi
xzblock=${BENCH_XZ_BLOCK:-24MiB}

# make OUT CMD...: runs CMD (writing to $tmp) once, then renames.
make_one() {
	local out=$1; shift
	[[ -s $out ]] && return 0
	echo "bench: building $dir/$out" >&2
	tmp=$out.tmp
	"$@"
	mv "$tmp" "$out"
}
gen_raw() { "$bt" gen "$size" "$tmp.raw" >layout.json && mv "$tmp.raw" "$tmp"; }
make_one disk.raw gen_raw
make_one disk.raw.gz bash -c 'pigz -6 -p2 -c disk.raw >"$0"' "disk.raw.gz.tmp"
make_one disk.raw.zst bash -c 'zstd -q -3 -T0 -c disk.raw >"$0"' "disk.raw.zst.tmp"
# -T1 keeps xz single-threaded, so the whole file is one block.
make_one disk.raw.xz bash -c 'xz -1 -T1 -c disk.raw >"$0"' "disk.raw.xz.tmp"
make_one disk.raw.mt.xz bash -c 'xz -1 -T0 --block-size='"$xzblock"' -c disk.raw >"$0"' "disk.raw.mt.xz.tmp"
make_one disk.qcow2 qemu-img convert -q -f raw -O qcow2 disk.raw disk.qcow2.tmp
make_one disk.c.qcow2 qemu-img convert -q -c -f raw -O qcow2 disk.raw disk.c.qcow2.tmp
make_one disk.qcow2.gz bash -c 'pigz -6 -p2 -c disk.qcow2 >"$0"' "disk.qcow2.gz.tmp"
# Multi-block like disk.raw.mt.xz: what xz >= 5.6 writes by default.
make_one disk.qcow2.xz bash -c 'xz -1 -T0 --block-size='"$xzblock"' -c disk.qcow2 >"$0"' "disk.qcow2.xz.tmp"
make_one disk.qcow2.zst bash -c 'zstd -q -3 -T0 -c disk.qcow2 >"$0"' "disk.qcow2.zst.tmp"
# force_size keeps the virtual size exactly the raw disk's instead of the
# nearest CHS geometry, so every case fills the same loop device.
make_one disk.vhd qemu-img convert -q -f raw -O vpc -o subformat=dynamic,force_size=on disk.raw disk.vhd.tmp
make_one disk.vdi qemu-img convert -q -f raw -O vdi disk.raw disk.vdi.tmp
make_one disk.vhd.gz bash -c 'pigz -6 -p2 -c disk.vhd >"$0"' "disk.vhd.gz.tmp"
make_one disk.vdi.gz bash -c 'pigz -6 -p2 -c disk.vdi >"$0"' "disk.vdi.gz.tmp"
make_one disk.stream.vmdk qemu-img convert -q -f raw -O vmdk -o subformat=streamOptimized disk.raw disk.stream.vmdk.tmp
make_one disk.vhdx qemu-img convert -q -f raw -O vhdx -o subformat=dynamic disk.raw disk.vhdx.tmp
for f in disk.stream.vmdk disk.vhdx; do
	[[ -s $f.sha256 ]] || sha256sum "$f" | cut -d' ' -f1 >"$f.sha256"
done
[[ -s xzblocks.txt && $(wc -l <xzblocks.txt) -ge 3 ]] || for f in disk.raw.xz disk.raw.mt.xz disk.qcow2.xz; do
	printf '%s %s\n' "$f" "$(xz --robot -l "$f" | awk '$1=="totals"{print $3}')"
done >xzblocks.txt
