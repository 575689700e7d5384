package sandbox

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// setLimits sets RLIMIT_AS and RLIMIT_CPU (soft and hard) on the process.
// It runs last before execve: once the address space is capped, the Go
// runtime of the launcher itself may no longer be able to grow.
func setLimits(p *Policy) error {
	set := func(name string, res int, v uint64) error {
		if v == 0 {
			return nil
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setrlimit %s=%d: %w", name, v, err)
		}
		return nil
	}
	if err := set("RLIMIT_AS", unix.RLIMIT_AS, p.AddressSpace); err != nil {
		return err
	}
	return set("RLIMIT_CPU", unix.RLIMIT_CPU, p.CPUSeconds)
}
