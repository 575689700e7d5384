package sandbox

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"
)

// init turns this process into the sandbox launcher when the parent asked
// for one (the package doc tells how); otherwise it does nothing. It never returns in the
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
	if p.Landlock && p.LoadProgram {
		rules, err := programRules(p.Program)
		if err != nil {
			return err
		}
		p.Rules = append(p.Rules, rules...)
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

// loaderTimeout bounds the interpreter's listing of a program's libraries
// (a few milliseconds).
const loaderTimeout = 10 * time.Second

// programRules are the rules LoadProgram grants for program.
func programRules(program string) ([]Rule, error) {
	ctx, cancel := context.WithTimeout(context.Background(), loaderTimeout)
	defer cancel()
	libs, err := SharedLibraries(ctx, program)
	if err != nil {
		return nil, err
	}
	rules := []Rule{{Path: program, Read: true, Exec: true}}
	for _, l := range libs {
		rules = append(rules, Rule{Path: l, Read: true, Exec: true})
	}
	if len(libs) > 0 {
		rules = append(rules, Rule{Path: "/etc/ld.so.cache", Read: true, Optional: true})
	}
	return rules, nil
}
