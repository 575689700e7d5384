package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/diskimport/engine/importer"
)

// runProfile runs one import in-process under the CPU profiler, to find
// which stage of the pipeline limits a case that misses its target:
//
//	benchtool profile -o cpu.prof URL DEST
//	go tool pprof -top cpu.prof
func runProfile(args []string) error {
	fs := flag.NewFlagSet("profile", flag.ExitOnError)
	out := fs.String("o", "cpu.prof", "CPU profile to write")
	fs.Parse(args)
	if fs.NArg() != 2 {
		usage()
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	start := time.Now()
	res, err := importer.Import(context.Background(), importer.Options{Source: fs.Arg(0), Target: fs.Arg(1)})
	pprof.StopCPUProfile()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "imported %s in %v: %+v\n", fs.Arg(0), time.Since(start), *res)
	return nil
}
