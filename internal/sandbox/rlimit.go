package sandbox

import (
	"fmt"
	"runtime/debug"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// execImage is the program to exec, converted to what execve wants before
// the limits are set.
type execImage struct {
	path       *byte
	argv, envv []*byte
	limits     []rlimit
}

type rlimit struct {
	name     string
	resource int
	value    unix.Rlimit
}

func prepareExec(p *Policy) (*execImage, error) {
	img := &execImage{}
	var err error
	if img.path, err = syscall.BytePtrFromString(p.Program); err != nil {
		return nil, fmt.Errorf("program %q: %w", p.Program, err)
	}
	if img.argv, err = syscall.SlicePtrFromStrings(append([]string{p.Program}, p.Args...)); err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	if img.envv, err = syscall.SlicePtrFromStrings(p.Env); err != nil {
		return nil, fmt.Errorf("environment: %w", err)
	}
	if p.AddressSpace > 0 {
		img.limits = append(img.limits, rlimit{"RLIMIT_AS", unix.RLIMIT_AS, unix.Rlimit{Cur: p.AddressSpace, Max: p.AddressSpace}})
	}
	if p.CPUSeconds > 0 {
		img.limits = append(img.limits, rlimit{"RLIMIT_CPU", unix.RLIMIT_CPU, unix.Rlimit{Cur: p.CPUSeconds, Max: p.CPUSeconds}})
	}
	if p.OpenFiles > 0 {
		img.limits = append(img.limits, rlimit{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, unix.Rlimit{Cur: p.OpenFiles, Max: p.OpenFiles}})
	}
	if p.Processes > 0 {
		// Last: from here on this launcher cannot start a thread either.
		img.limits = append(img.limits, rlimit{"RLIMIT_NPROC", unix.RLIMIT_NPROC, unix.Rlimit{Cur: p.Processes, Max: p.Processes}})
	}
	return img, nil
}

// limitAndExec sets the limits and execs, with raw system calls and no
// allocation in between: this launcher's own Go runtime has already mapped
// more address space than qemu-img may use, so once RLIMIT_AS is set any
// heap growth here would crash it before qemu-img starts. The collector is
// switched off for the same reason. It returns only on failure.
func (img *execImage) limitAndExec() error {
	debug.SetGCPercent(-1)
	for i := range img.limits {
		l := &img.limits[i]
		_, _, errno := unix.RawSyscall6(unix.SYS_PRLIMIT64, 0, uintptr(l.resource), uintptr(unsafe.Pointer(&l.value)), 0, 0, 0)
		if errno != 0 {
			return fmt.Errorf("setrlimit %s=%d: %w", l.name, l.value.Cur, errno)
		}
	}
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(img.path)),
		uintptr(unsafe.Pointer(&img.argv[0])), uintptr(unsafe.Pointer(&img.envv[0])))
	return fmt.Errorf("execve: %w", errno)
}
