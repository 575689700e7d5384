package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/diskimport/engine/internal/format"
)

// runDecode decodes a file with the engine's own decoder stack
// (format.Open, as the importer uses it) into io.Discard: the decoder's
// ceiling with no target and no network. -goxz forces the pure-Go xz
// decoder (what CDI uses) instead of the xz child process.
func runDecode(args []string) error {
	fs := flag.NewFlagSet("decode", flag.ExitOnError)
	goxz := fs.Bool("goxz", false, "decode xz in Go (ulikunitz/xz) instead of an xz child")
	fs.Parse(args)
	if fs.NArg() != 1 {
		usage()
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	o := format.Options{}
	if *goxz {
		o.ExternalXZ, o.InflateChild = "-", "-" // the ring child decodes xz too
	}
	s, err := format.Open(context.Background(), f, o)
	if err != nil {
		return err
	}
	defer s.Close()
	buf := make([]byte, 4<<20)
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{s}, buf)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "decoded %d bytes (%s, %v)\n", n, s.Format, s.Compressions)
	return nil
}
