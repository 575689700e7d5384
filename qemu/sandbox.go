package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/sandbox"
)

// qemuEnv is qemu-img's whole environment. The C locale keeps its messages
// stable for the string matching in this package; the fixed arena count
// keeps the address space it needs independent of the core count (the
// package doc says why).
var qemuEnv = []string{"LC_ALL=C", "MALLOC_ARENA_MAX=2"}

// systemRules are what qemu-img needs to run, whatever the image, beyond
// its binary and shared libraries (the launcher grants those, and only
// those, by asking qemu-img's loader: Policy.LoadProgram): qemu's module
// directory (block drivers loaded on demand), /dev/null (it reopens stdio
// on it) and /dev/urandom (glib, gnutls). Nothing else of the host is
// readable: no other library, no /etc, no /proc, no /home, no other
// device. qemu-img needs no data files (firmware, keymaps are for the
// emulator). The modules it could load are network protocols (curl,
// iscsi, nfs, rbd, ssh, gluster): their own libraries are not granted and
// every TCP connect is denied anyway.
var systemRules = []sandbox.Rule{
	{Path: "/usr/lib/" + debianMultiarch(runtime.GOARCH) + "/qemu", Read: true, Exec: true, Dir: true, Optional: true},
	{Path: "/usr/lib64/qemu", Read: true, Exec: true, Dir: true, Optional: true},
	{Path: "/usr/lib/qemu", Read: true, Exec: true, Dir: true, Optional: true},
	{Path: "/dev/null", Read: true, Write: true},
	{Path: "/dev/urandom", Read: true, Optional: true},
}

// debianMultiarch names Debian's library directory for a GOARCH: qemu's
// module directory is /usr/lib/TRIPLET/qemu there (other distributions
// use /usr/lib64/qemu or /usr/lib/qemu).
func debianMultiarch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64-linux-gnu"
	case "arm64":
		return "aarch64-linux-gnu"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	case "riscv64":
		return "riscv64-linux-gnu"
	}
	return goarch + "-linux-gnu" // s390x
}

// qemuOpenFiles is qemu-img's RLIMIT_NOFILE, the usual soft limit: a
// convert opens its images, a backing chain, eventfds and an io_uring
// (a dozen descriptors measured); the launcher's Go runtime raised its own
// soft limit to the hard one, which qemu-img would otherwise inherit.
const qemuOpenFiles = 1024

// policy builds the sandbox for one run: the system rules, qemu-img
// itself, read access to what s reads and read-write access to what it
// writes (the target), derived from the very filenames qemu-img is given.
func (r *Runner) policy(qemuImg string, s runSpec, landlock bool) (*sandbox.Policy, error) {
	p := &sandbox.Policy{
		Program:      qemuImg,
		Args:         s.args,
		Env:          qemuEnv,
		AddressSpace: s.limits.AddressSpace,
		CPUSeconds:   s.limits.CPUSeconds,
		OpenFiles:    qemuOpenFiles,
		LoadProgram:  true,
		Landlock:     landlock,
	}
	p.Rules = append(p.Rules, systemRules...)
	for _, name := range s.reads {
		rules, err := imageRules(name, false)
		if err != nil {
			return nil, err
		}
		p.Rules = append(p.Rules, rules...)
	}
	for _, name := range s.writes {
		rules, err := imageRules(name, true)
		if err != nil {
			return nil, err
		}
		p.Rules = append(p.Rules, rules...)
	}
	return p, nil
}

// imageRules grants access to what one qemu-img filename names. A file
// that does not exist gets no rule (Optional): qemu-img then fails on it
// with its own "No such file or directory".
func imageRules(name string, write bool) ([]sandbox.Rule, error) {
	files, sockets, err := namedResources(name)
	if err != nil {
		return nil, err
	}
	var rules []sandbox.Rule
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, fmt.Errorf("qemu-img filename %q: %w", f, err)
		}
		fi, err := os.Stat(abs)
		isDevice := err == nil && fi.Mode()&os.ModeDevice != 0
		rules = append(rules, sandbox.Rule{Path: abs, Read: true, Write: write, Ioctl: isDevice, Optional: true})
		if queue, ok := blockQueueDir(fi); ok {
			rules = append(rules, sandbox.Rule{Path: queue, Read: true, Dir: true, Optional: true})
		}
	}
	for _, s := range sockets {
		abs, err := filepath.Abs(s)
		if err != nil {
			return nil, fmt.Errorf("NBD socket %q: %w", s, err)
		}
		rules = append(rules, sandbox.Rule{Path: abs, Connect: true, Optional: true})
	}
	return rules, nil
}

// blockQueueDir is the sysfs directory of a block device's request queue:
// qemu-img reads max_segments there to size its O_DIRECT requests. The
// rule follows the /sys/dev/block symlink to the device's own directory.
func blockQueueDir(fi os.FileInfo) (string, bool) {
	if fi == nil || fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return "", false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("/sys/dev/block/%d:%d/queue", unix.Major(st.Rdev), unix.Minor(st.Rdev)), true
}

// createTarget creates an empty file at dst when nothing is there yet, so
// that the sandbox can grant qemu-img that one file instead of the right
// to create files in its directory. It reports whether it created one
// (which the caller removes if qemu-img then fails).
func createTarget(dst string) (created bool, err error) {
	if strings.HasPrefix(dst, jsonPrefix) {
		return false, nil
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("creating the target %s for qemu-img: %w", dst, err)
	}
	return true, f.Close()
}

// sandboxDenied recognises a run that failed because the sandbox refused
// an open or a connect: with the image's own files granted, only an image
// that names another file, device or host gets there.
func sandboxDenied(confinement, stderr string) error {
	if !strings.HasPrefix(confinement, "landlock") || !strings.Contains(stderr, "Permission denied") {
		return nil
	}
	return fmt.Errorf("the sandbox (%s) denied qemu-img access to something outside the image and the target: the image refers to another file, device or host: %w",
		confinement, errdefs.ErrUnsafeImage)
}
