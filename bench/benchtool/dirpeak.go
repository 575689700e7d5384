package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// runDirpeak samples how much disk the files under DIR occupy (allocated
// blocks, so a sparse scratch file counts what it really holds) every
// -every until SIGTERM/SIGINT or standard input closes, then prints the
// peak in bytes. bench.sh runs it beside each of our imports on the
// --scratch directory: an independent check of the importer's own
// scratch figures, which cannot see a converter's temporary files.
func runDirpeak(args []string) error {
	fs := flag.NewFlagSet("dirpeak", flag.ExitOnError)
	every := fs.Duration("every", 10*time.Millisecond, "sampling interval")
	stdin := fs.Bool("stdin", false, "also stop when standard input closes")
	fs.Parse(args)
	if fs.NArg() != 1 {
		usage()
	}
	dir := fs.Arg(0)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *stdin {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	}
	var peak int64
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		peak = max(peak, allocatedUnder(dir))
		select {
		case <-ctx.Done():
			// One last sample: a file written just before the stop counts.
			peak = max(peak, allocatedUnder(dir))
			fmt.Println(peak)
			return nil
		case <-tick.C:
		}
	}
}

// allocatedUnder is the sum of st_blocks×512 of every file under dir.
// Files that vanish between the listing and the stat (the importer removes
// its scratch as it finishes) are skipped, not errors.
func allocatedUnder(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}
