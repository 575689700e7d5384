package main

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestVersionFlagAndCommand(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr, os.Getenv)
		if code != 0 {
			t.Fatalf("importer %s: exit %d: %s", args[0], code, stderr.String())
		}
		out := stdout.String()
		for _, want := range []string{"importer ", "\ncommit   ", "\ngo       " + runtime.Version() + "\n", "\nqemu-img "} {
			if !strings.Contains(out, want) {
				t.Errorf("importer %s printed\n%s\nwant %q", args[0], out, want)
			}
		}
	}
}
