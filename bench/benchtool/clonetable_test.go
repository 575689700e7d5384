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
	printCloneTable(&out, runs, "v1.66.0", "", cloneHost{Cores: 2})
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
		{2, "| over 1.5× the local copy (needs 1.50 s): MISSED (ours' two halves spent 50 % of 2 cores through the run) |", true},
		{2, "short of", false},
		{3, "| 1gbit |", true},
		{3, "| goal met |", true},
	} {
		if strings.Contains(lines[c.line], c.want) != c.contains {
			t.Errorf("row %d, %q wanted %v:\n%s", c.line-1, c.want, c.contains, lines[c.line])
		}
	}
}

// A missed goal names the measured limit that prevents it when one does:
// the local copy between the volumes, the link's rate for the source's
// data, or the CPU ours' halves used through the whole run; otherwise it
// is MISSED.
func TestCloneVerdictNamesTheLimit(t *testing.T) {
	run := func(copier, link, limit string, secs, clonerCPU, serverCPU float64) cloneRun {
		return cloneRun{Copier: copier, Kind: "block", DataPct: 35, Link: link, Limit: limit, Seconds: secs,
			ClonerCPU: clonerCPU, ServerCPU: serverCPU, VirtualBytes: 2 << 30, DataBytes: 750e6}
	}
	host := cloneHost{Cores: 2}
	for _, c := range []struct {
		name   string
		row    cloneRow
		cdi    cloneRun
		ours   cloneRun
		localS float64
		want   string
	}{
		{"met", cloneRow{"block", 35, "fast", "none"},
			run("cdi", "fast", "none", 9, 4, 4), run("ours", "fast", "none", 2.5, 1, 1), 2.0, "goal met"},
		{"the local copy takes longer than 3x allows", cloneRow{"block", 35, "fast", "none"},
			run("cdi", "fast", "none", 4.5, 3, 3), run("ours", "fast", "none", 2.4, 1, 1), 2.1,
			"short of 3× CDI (needs 1.50 s): limit: the volumes — the local copy between them takes 2.10 s"},
		{"the link carries the data slower than 3x allows", cloneRow{"block", 35, "1gbit", "none"},
			run("cdi", "1gbit", "none", 7, 3, 3), run("ours", "1gbit", "none", 6.2, 1, 1), 2.1,
			"short of 3× CDI (needs 2.33 s): limit: the link — the source's 750 MB of data take 6.00 s at 125 MB/s"},
		{"both cores busy through the run", cloneRow{"block", 100, "fast", "none"},
			run("cdi", "fast", "none", 7, 5, 5), run("ours", "fast", "none", 4, 3.8, 3.6), 1.5,
			"short of 3× CDI (needs 2.33 s): limit: CPU — ours' two halves spent 92 % of 2 cores through the run; ours' CPU takes at least 3.70 s on it; " +
				"over 1.5× the local copy (needs 2.25 s): limit: CPU"},
		{"the busier half's quota through the run", cloneRow{"block", 100, "fast", "cdi"},
			run("cdi", "fast", "cdi", 9, 5, 5), run("ours", "fast", "cdi", 5, 3.6, 3.0), 1.5,
			"short of 3× CDI (needs 3.00 s): limit: CPU — ours' busier half spent 96 % of its 750m quota through the run; ours' CPU takes at least 4.80 s on it"},
		{"idle CPU is no limit", cloneRow{"block", 100, "fast", "none"},
			run("cdi", "fast", "none", 7, 5, 5), run("ours", "fast", "none", 4.8, 3.4, 3.4), 1.5,
			"short of 3× CDI (needs 2.33 s): MISSED (ours' two halves spent 71 % of 2 cores through the run)"},
		{"the machine busy with the kernel's work for the halves", cloneRow{"block", 100, "fast", "none"},
			run("cdi", "fast", "none", 7, 5, 5), busyHost(run("ours", "fast", "none", 4.8, 3.4, 3.4), 0.93), 1.5,
			"short of 3× CDI (needs 2.33 s): limit: CPU — the machine's 2 cores were 93 % busy while ours ran; ours' CPU takes at least 3.40 s on it"},
	} {
		got := cloneVerdict(c.row, []cloneRun{c.cdi}, []cloneRun{c.ours}, c.localS, host)
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s:\n got %s\nwant %s…", c.name, got, c.want)
		}
	}
}

// Where the volumes and the link both take longer than a goal allows, the
// verdict names the one that takes longest.
func TestCloneVerdictNamesTheMostBindingLimit(t *testing.T) {
	r := func(copier string, secs float64) cloneRun {
		return cloneRun{Copier: copier, Kind: "fs-block", DataPct: 35, Link: "1gbit", Limit: "none", Seconds: secs,
			ClonerCPU: 1, ServerCPU: 1, VirtualBytes: 2 << 30, DataBytes: 740e6}
	}
	got := cloneVerdict(cloneRow{"fs-block", 35, "1gbit", "none"}, []cloneRun{r("cdi", 7.25)}, []cloneRun{r("ours", 6.2)}, 2.48, cloneHost{Cores: 2})
	if want := "short of 3× CDI (needs 2.42 s): limit: the link — the source's 740 MB of data take 5.92 s at 125 MB/s"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// busyHost is r with the machine's busy share recorded.
func busyHost(r cloneRun, share float64) cloneRun {
	r.HostBusy = share
	return r
}
