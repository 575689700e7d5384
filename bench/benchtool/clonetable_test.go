package main

import (
	"bytes"
	"strings"
	"testing"
)

// The clone table takes medians per row, and its verdict names each goal
// a row misses: 3× CDI's time, and on the fast link 1.5× the local copy.
func TestCloneTableVerdicts(t *testing.T) {
	var runs []cloneRun
	add := func(copier, link string, secs ...float64) {
		for _, s := range secs {
			runs = append(runs, cloneRun{Copier: copier, Kind: "block", DataPct: 35, Link: link, Limit: "none", Seconds: s, ClonerCPU: s / 2, ServerCPU: s / 2})
		}
	}
	add("local", "local", 1.0, 1.1, 0.9)
	add("cdi", "fast", 9, 10, 11)
	add("ours", "fast", 3.2, 3.0, 3.4) // 3.33× CDI, 3.0× the local copy
	add("delta", "fast", 0.6, 0.5, 0.7)
	add("cdi", "1gbit", 12, 12, 12)
	add("ours", "1gbit", 3.9, 4.0, 4.1) // 3.0× CDI; the local copy is no goal off the fast link
	var out bytes.Buffer
	printCloneTable(&out, runs, "v1.66.0", "")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header, a rule and 2 rows:\n%s", out.String())
	}
	for _, c := range []struct {
		line     int
		want     string
		contains bool
	}{
		{2, "| 10.00 | 3.20 | 1.00 | 3.12× | 3.20× |", true},
		{2, "| 0.60, 0.60 |", true}, // the delta pass's median seconds and CPU
		{2, "| over 1.5× the local copy |", true},
		{2, "short of", false},
		{3, "| 1gbit |", true},
		{3, "| goal met |", true},
	} {
		if strings.Contains(lines[c.line], c.want) != c.contains {
			t.Errorf("row %d, %q wanted %v:\n%s", c.line-1, c.want, c.contains, lines[c.line])
		}
	}
}
