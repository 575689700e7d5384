#!/bin/sh
# pod.sh ROOT NDIRS DIR... [POD_PATH HOST_PATH]...: run in a private mount
# namespace (unshare --mount --propagation private), makes a pod's root at
# ROOT (an empty directory; a tmpfs there holding the host's system
# directories, a /dev of a few device nodes, an empty /tmp), the NDIRS
# directories DIR of its own, and each HOST_PATH (file, directory or
# device) mounted at POD_PATH, parents first; then execs /importer (a
# volume) chrooted there. CDI's pods see their volumes at fixed paths
# (/data, /scratch, /dev/cdi-block-volume): the pod tests and make bench's
# pod rows run an importer, ours or CDI's, this way.
set -e
R=$1; shift
ndirs=$1; shift
mount -t tmpfs -o mode=755 pod-root "$R"
for d in bin sbin lib lib32 lib64 libx32 usr etc proc sys; do
	[ -e "/$d" ] || continue
	if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$R/$d"; continue; fi
	mkdir "$R/$d"; mount --rbind "/$d" "$R/$d"
done
mkdir "$R/dev" "$R/tmp"
mount -t tmpfs -o mode=755 pod-dev "$R/dev"
mount -t tmpfs -o mode=1777 pod-tmp "$R/tmp"
for n in null zero full random urandom; do touch "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"; done
while [ "$ndirs" -gt 0 ]; do mkdir -p "$R$1"; shift; ndirs=$((ndirs - 1)); done
while [ $# -gt 0 ]; do
	in=$R$1 host=$2; shift 2
	if [ -d "$host" ]; then mkdir -p "$in"; else mkdir -p "$(dirname "$in")"; touch "$in"; fi
	mount --bind "$host" "$in"
done
exec chroot "$R" /importer
