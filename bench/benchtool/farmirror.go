package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/diskimport/engine/internal/testkit/farmirror"
)

// runFarmirror serves a directory as a far mirror (internal/testkit/farmirror):
// each connection paced to -rate, each response delayed by -first-byte.
// It prints the base URL and serves until SIGTERM or SIGINT.
func runFarmirror(args []string) error {
	fs := flag.NewFlagSet("farmirror", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory to serve")
	rate := fs.String("rate", "8M", "bytes per second per connection (decimal units: 8M = 8,000,000); 0: no cap")
	first := fs.Duration("first-byte", 30*time.Millisecond, "delay before every response")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("farmirror: -dir is required")
	}
	r, err := parseRate(*rate)
	if err != nil {
		return err
	}
	s, err := farmirror.Start(http.FileServer(http.Dir(*dir)), farmirror.Options{Rate: r, FirstByte: *first})
	if err != nil {
		return err
	}
	fmt.Println(s.URL)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	fmt.Fprintf(os.Stderr, "farmirror: %d connections, %d requests\n", s.Connections.Load(), s.Requests.Load())
	return s.Close()
}

// parseRate reads 8M, 500K or a byte count per second (decimal units, as
// link speeds are quoted).
func parseRate(s string) (int64, error) {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K', 'k':
			mult, s = 1000, s[:n-1]
		case 'M', 'm':
			mult, s = 1000*1000, s[:n-1]
		case 'G', 'g':
			mult, s = 1000*1000*1000, s[:n-1]
		}
	}
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil || v < 0 {
		return 0, fmt.Errorf("rate %q: want e.g. 8M", s)
	}
	return v * mult, nil
}
