// Command benchtool is the Go half of `make bench` (bench/bench.sh): it
// generates the test disk, runs the engine's decoders alone, and turns the
// measured runs into the results table and JSON. It is a tool, not part of
// the engine.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = runGen(os.Args[2:])
	case "decode":
		err = runDecode(os.Args[2:])
	case "report":
		err = runReport(os.Args[2:])
	case "profile":
		err = runProfile(os.Args[2:])
	case "registry":
		err = runRegistry(os.Args[2:])
	case "dirpeak":
		err = runDirpeak(os.Args[2:])
	case "farmirror":
		err = runFarmirror(os.Args[2:])
	case "relay":
		err = runRelay(os.Args[2:])
	case "clonetable":
		err = runCloneTable(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtool:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  benchtool gen SIZE OUT.raw          write the sparse test disk; prints its layout as JSON
  benchtool decode [-goxz] FILE       decode FILE with the engine's decoders to nowhere
  benchtool report RUNS.tsv META.json OUT.json   print the table, write the JSON
  benchtool profile [-o cpu.prof] SOURCE DEST    one in-process import under the CPU profiler
  benchtool registry -dir IMGDIR [-listen 127.0.0.1:0]  serve the disk as containerdisks (prints HOST:PORT)
  benchtool dirpeak [-stdin] [-every 10ms] DIR     peak bytes allocated under DIR, printed on SIGTERM
  benchtool clonetable CLONE.json        print bench/clone.sh's table
  benchtool farmirror -dir DIR [-rate 8M] [-first-byte 30ms]  serve DIR as a far mirror: each connection paced, each response delayed (prints the URL)`)
	os.Exit(2)
}
