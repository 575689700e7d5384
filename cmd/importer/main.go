// Command importer imports a VM disk image from a URL, a file or standard
// input onto a block device or a file. Run with no arguments inside a
// container, it follows CDI's importer environment contract instead.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
