package sandbox

import (
	"fmt"
	"os"
	"runtime"
)

// init turns this process into the sandbox launcher when the parent asked
// for one (see doc.go); otherwise it does nothing. It never returns in the
// launcher: it execs the program or exits.
func init() {
	enc, ok := os.LookupEnv(policyEnv)
	if !ok {
		return
	}
	err := launch(enc)
	// Only reached on failure: stderr is the parent's bounded buffer.
	fmt.Fprintf(os.Stderr, "%s%v\n", childErrorPrefix, err)
	os.Exit(ChildFailedExit)
}

// launch applies the policy and execs the program; it returns only on error.
func launch(enc string) error {
	p, err := decodePolicy(enc)
	if err != nil {
		return err
	}
	// Never unlocked: the Landlock domain is this thread's, and this thread
	// execs.
	runtime.LockOSThread()
	if p.Landlock {
		abi := ABI()
		if abi == 0 {
			return fmt.Errorf("the policy asks for Landlock but the kernel has none")
		}
		if err := restrictThread(p, abi); err != nil {
			return err
		}
	}
	img, err := prepareExec(p)
	if err != nil {
		return err
	}
	if err := img.limitAndExec(); err != nil {
		return fmt.Errorf("exec %s: %w", p.Program, err)
	}
	return nil
}
