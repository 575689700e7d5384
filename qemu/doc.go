// Package qemu runs qemu-img (info, check, convert, compare, resize, create)
// confined and within resource limits, for images that may have been
// crafted by an attacker. It is for programs that run qemu-img on images
// they did not make (the importer runs every conversion through it) and
// want its answers without trusting the image.
//
// Every run goes through internal/sandbox: our own binary is re-executed,
// restricts itself with a Landlock ruleset, sets RLIMIT_AS and RLIMIT_CPU
// and execs qemu-img in place, so the confinement and the limits hold
// before qemu-img parses a single byte. The ruleset is derived from the
// filenames of each call: qemu-img may read the source (a file, a device,
// or the files named in a json: spec), connect to the Unix socket of an NBD
// export, read and write the target, and read its own binary and shared
// libraries — nothing else. A vmdk extent, backing file or external data
// file elsewhere on the host fails with "Permission denied", reported as
// errdefs.ErrUnsafeImage, and every TCP connect (nbd://, http:// backings)
// is denied. When Convert or Create gets a target that does not exist yet,
// the Runner creates the empty file first, so that the ruleset names that
// file rather than its directory. On a kernel without Landlock qemu-img
// runs with the limits only; Runner.Sandbox says which is in force and the
// Runner warns once.
//
// The image format is always passed explicitly with -f: qemu-img's format
// probing is never used, because probing a raw image that happens to start
// with a qcow2 header would let the guest's data pick the format (and with it
// backing files) for us.
//
// MALLOC_ARENA_MAX=2 is set for the child, whose environment is otherwise
// only LC_ALL=C. Without it glibc reserves up to 8 arenas of 64 MiB per
// core, so the address space qemu-img needs grows with the machine's core
// count (measured on 2 cores: convert needed about 720-820 MiB of address
// space without it, about 140-215 MiB with it). With the arena count fixed,
// one address-space cap works on every machine.
//
// Process handling: qemu-img runs in its own process group and dies with
// us (Pdeathsig, kept across the launcher's exec); cancelling the context
// kills the whole group with SIGKILL and the returned error wraps
// ctx.Err().
package qemu
