// Command importer imports a VM disk image from a URL, a file or standard
// input onto a block device or a file. Run with no arguments inside a
// container, it follows CDI's importer environment contract instead.
package main

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
)

// Exit codes of a run stopped by a signal, as the shell gives them (128 +
// the signal's number): SIGINT is Ctrl-C at a terminal, SIGTERM what
// kill, systemd and the kubelet send.
const (
	exitInterrupted = 130
	exitTerminated  = 143
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var got atomic.Value // os.Signal
	go func() {
		got.Store(<-sigs)
		cancel()
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	signal.Stop(sigs)
	sig, _ := got.Load().(os.Signal)
	os.Exit(interruptedCode(code, ctx.Err() != nil, sig))
}

// interruptedCode is the exit code of a run that may have been stopped by
// a signal: 130 after SIGINT, 143 after SIGTERM (temporary files are
// already removed by then). A run that exited 0 keeps it: it finished
// before the signal landed, or it is one of CDI's results read from the
// termination message (CDI's pods tell only 0 from not 0).
func interruptedCode(code int, stopped bool, sig os.Signal) int {
	if !stopped || code == cdi.ExitOK {
		return code
	}
	switch sig {
	case os.Interrupt:
		return exitInterrupted
	case syscall.SIGTERM:
		return exitTerminated
	}
	return code
}
