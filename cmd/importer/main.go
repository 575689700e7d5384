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

	"github.com/diskimport/engine/internal/cdi"
)

// exitInterrupted is the shell's code for a command ended by SIGINT
// (128 + 2): Ctrl-C at a terminal.
const exitInterrupted = 130

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
// a signal: 130 for a failure after SIGINT (temporary files are already
// removed by then); SIGTERM keeps the run's code (CDI's pods read 0 or
// not 0).
func interruptedCode(code int, stopped bool, sig os.Signal) int {
	if stopped && sig == os.Interrupt && code != cdi.ExitOK {
		return exitInterrupted
	}
	return code
}
