package sandbox

import (
	"errors"
	"fmt"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// newestABI is the newest Landlock ABI version go-landlock has a preset for.
const newestABI = 11

// abiConfig is go-landlock's preset for ABI version v (1..newestABI),
// which handles every access right that version knows.
func abiConfig(v int) landlock.Config {
	presets := [...]landlock.Config{{}, landlock.V1, landlock.V2, landlock.V3, landlock.V4,
		landlock.V5, landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}
	return presets[v]
}

// ABI is the Landlock ABI version the sandbox enforces: the kernel's,
// capped at the newest this package knows; 0 when the kernel has none.
func ABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0 // ENOSYS (not built in) or EOPNOTSUPP (disabled at boot)
	}
	return min(v, newestABI)
}

// Describe names the confinement a program started now gets: "landlock v7"
// or "rlimits only".
func Describe() string {
	if abi := ABI(); abi > 0 {
		return fmt.Sprintf("landlock v%d", abi)
	}
	return "rlimits only"
}

// accessRights turns a rule into Landlock rights, keeping only those that
// ABI's config handles (a right it does not handle is allowed anyway).
func accessRights(r Rule, handled landlock.AccessFSSet) landlock.AccessFSSet {
	var a landlock.AccessFSSet
	if r.Read {
		a |= ll.AccessFSReadFile
		if r.Dir {
			a |= ll.AccessFSReadDir
		}
	}
	if r.Write {
		a |= ll.AccessFSWriteFile | ll.AccessFSTruncate
	}
	if r.Exec {
		a |= ll.AccessFSExecute
	}
	if r.Ioctl {
		a |= ll.AccessFSIoctlDev
	}
	if r.Connect {
		a |= ll.AccessFSResolveUnix
	}
	return a & handled
}

// restrictThread applies the policy's rules to the calling OS thread, which
// the caller has locked and execs from next. abi is ABI().
func restrictThread(p *Policy, abi int) error {
	cfg := abiConfig(abi)
	if abi >= 7 {
		// Denials after execve are audit-logged only when asked for.
		cfg = cfg.EnableLoggingForSubprocesses()
	}
	var rules []landlock.Rule
	for _, r := range p.Rules {
		a := accessRights(r, cfg.HandledAccessFS)
		if a == 0 {
			continue // e.g. Connect on a kernel that never restricts sockets
		}
		if _, err := os.Stat(r.Path); err != nil {
			if r.Optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("rule for %s: %w", r.Path, err)
		}
		rules = append(rules, landlock.PathAccess(a, r.Path))
	}
	// No network rules: with the network rights handled, every TCP (and
	// from ABI 10 UDP) bind and connect is denied.
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return fmt.Errorf("creating the Landlock ruleset: %w", err)
	}
	if fd < 0 {
		return fmt.Errorf("Landlock ABI %d gave no ruleset", abi)
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}
