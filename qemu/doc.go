// Package qemu runs qemu-img (info, check, convert, resize, create) inside
// resource limits, for images that may have been crafted by an attacker.
//
// Every run goes through util-linux prlimit, which sets RLIMIT_AS and
// RLIMIT_CPU on itself and then execs qemu-img. The limits are therefore in
// place before qemu-img parses a single byte, unlike setting them with
// prlimit(2) after fork, which races with the child. If prlimit is missing
// the Runner fails instead of running qemu-img without limits.
//
// The image format is always passed explicitly with -f: qemu-img's format
// probing is never used, because probing a raw image that happens to start
// with a qcow2 header would let the guest's data pick the format (and with it
// backing files) for us.
//
// MALLOC_ARENA_MAX=2 is set for the child. Without it glibc reserves up to
// 8 arenas of 64 MiB per core, so the address space qemu-img needs grows
// with the machine's core count (measured on 2 cores: convert needed about
// 720-820 MiB of address space without it, about 140-215 MiB with it). With
// the arena count fixed, one address-space cap works on every machine.
//
// Process handling: qemu-img runs in its own process group; cancelling the
// context kills the whole group with SIGKILL and the returned error wraps
// ctx.Err().
package qemu
