package main

import (
	"strings"
	"testing"
)

// labelled indexes measurements by their labels, as the report does.
func labelled(ms ...*measure) map[string]*measure {
	byLabel := map[string]*measure{}
	for _, m := range ms {
		byLabel[m.Label] = m
	}
	return byLabel
}

// rowOf is case c's pod row over the measurements "cdi c", "env c" and
// "lim c".
func rowOf(c string, target float64) podRow {
	return podRow{Case: c, CDI: "cdi " + c, OursEnv: "env " + c, Limit: "lim " + c, Target: target}
}

func TestPodRowVerdicts(t *testing.T) {
	m := func(l string, s float64, peaks ...float64) *measure {
		return &measure{Label: l, Seconds: []float64{s}, Median: s, extras: map[string][]float64{"cg_peak": peaks}}
	}
	byLabel := labelled(
		m("cdi a", 6, 200<<20, 210<<20), m("env a", 1.5, 60<<20, 70<<20), m("lim a", 0.5),
		m("cdi b", 10), m("env b", 4), m("lim b", 3.8), // the decoder alone needs more than 10/3.5 s
		m("cdi c", 10), m("env c", 4), m("lim c", 1),
		m("cdi e", 6), m("env e", 2.4), m("lim e", 0.5), m("dev e", 2.2), // the device write binds
		m("cdi f", 6), m("env f", 2.4), m("lim f", 0.5), m("dev f", 3), // ours beats the pipe into dd
	)
	d := rowOf("d", 3) // no CDI run, ours as in row a
	d.OursEnv, d.Limit = "env a", "lim a"
	e, f := rowOf("e", 3), rowOf("f", 3)
	e.DevLimit, f.DevLimit = "dev e", "dev f"
	rows := []podRow{rowOf("a", 3), rowOf("b", 3.5), rowOf("c", 3), d, e, f}
	fillPodRows(rows, byLabel)
	if r := rows[0]; r.Verdict != "ok" || r.Speedup != 4 || r.EnvPeak != 70<<20 || r.CDIPeak != 210<<20 {
		t.Errorf("row a: %+v", r)
	}
	if r := rows[1]; !strings.HasPrefix(r.Verdict, "limit: lim b alone takes 3.80 s, the target needs 2.86 s") {
		t.Errorf("row b: %q", r.Verdict)
	}
	if r := rows[2]; !strings.HasPrefix(r.Verdict, "MISSED") || !strings.Contains(r.Verdict, "0.25× its limit") {
		t.Errorf("row c: %q", r.Verdict)
	}
	if r := rows[3]; r.Verdict != "no CDI run" || r.Met != nil {
		t.Errorf("row d: %+v", r)
	}
	if r := rows[4]; !strings.HasPrefix(r.Verdict, "limit: dev e alone takes 2.20 s, the target needs 2.00 s") || r.DevS != 2.2 {
		t.Errorf("row e: %q %+v", r.Verdict, r)
	}
	if r := rows[5]; !strings.HasPrefix(r.Verdict, "MISSED: the target needs 2.00 s, the limit 0.50 s") || !strings.HasSuffix(r.Verdict, "; ours beats dev f (3.00 s)") {
		t.Errorf("row f: %q", r.Verdict)
	}
}

// A miss that no limit explains is "limit: CPU" when the machine's cores
// were saturated while ours ran, and otherwise stays MISSED with the pod's
// CPU time as a share of cores × wall and the machine's busy share (the
// pod's own share does not decide: raw.zst met its target at raw.gz's); the
// table shows both pods' CPU seconds.
func TestPodRowMissGivesCPU(t *testing.T) {
	m := func(l string, s, cpu, host float64) *measure {
		x := &measure{Label: l, Seconds: []float64{s}, Median: s, extras: map[string][]float64{}}
		if cpu > 0 {
			x.extras["cg_cpu_s"] = []float64{cpu}
			x.extras["cg_cores"] = []float64{2}
		}
		if host > 0 {
			x.extras["host_busy"] = []float64{host}
		}
		return x
	}
	byLabel := labelled(
		// raw.gz at 1 GiB: the decoder alone 0.71 s, the target needs 1.19 s.
		m("cdi g", 3.57, 5.1, 0), m("env g", 1.38, 2.3, 0.8), m("lim g", 0.71, 0, 0), // 2.3 / (2 × 1.38) = 83 %
		m("cdi i", 3.57, 5.1, 0), m("env i", 1.38, 0, 0), m("lim i", 0.71, 0, 0), // no cpuacct, no /proc/stat
		m("cdi j", 6, 5, 0), m("env j", 2.4, 4.7, 0.95), m("lim j", 2.5, 0, 0), // a decoder limit explains it
		// qcow2.xz at 1 GiB: xz -T0 on both cores, the machine 91 % busy.
		m("cdi k", 16.12, 14.58, 0), m("env k", 3.32, 5.57, 0.91), m("lim k", 2.69, 0, 0),
	)
	rows := []podRow{rowOf("g", 3), rowOf("i", 3), rowOf("j", 3), rowOf("k", 5)}
	fillPodRows(rows, byLabel)
	if r := rows[0]; !strings.HasPrefix(r.Verdict, "MISSED: the target needs 1.19 s, the limit 0.71 s; ours used 2.30 s of CPU on 2 cores (83 %); the machine was 80 % busy") ||
		r.EnvCPU != 2.3 || r.CDICPU != 5.1 || r.Cores != 2 || r.HostBusy != 0.8 {
		t.Errorf("row g: %q %+v", r.Verdict, r)
	}
	if r := rows[1]; !strings.HasPrefix(r.Verdict, "MISSED: the target needs 1.19 s, the limit 0.71 s;") || strings.Contains(r.Verdict, "CPU") || r.EnvBusy != 0 {
		t.Errorf("row i: %q %+v", r.Verdict, r)
	}
	if r := rows[2]; !strings.HasPrefix(r.Verdict, "limit: lim j alone takes 2.50 s, the target needs 2.00 s") {
		t.Errorf("row j: %q", r.Verdict)
	}
	if r := rows[3]; r.Verdict != "limit: CPU — the machine's cores were 91 % busy while ours ran (ours 5.57 s of CPU on 2 cores); the target needs 3.22 s, the limit 2.69 s; ours at 0.81× its limit (goal ≥0.9×)" {
		t.Errorf("row k: %q", r.Verdict)
	}
	var b strings.Builder
	printPodTable(&b, rows, nil)
	out := b.String()
	if !strings.Contains(out, "CPU s ours / CDI") || !strings.Contains(out, "2.30 / 5.10") || !strings.Contains(out, "- / 5.10") ||
		!strings.Contains(out, "not the loop device's kernel worker") || !strings.Contains(out, "machine busy|") || !strings.Contains(out, "80 %|") {
		t.Errorf("table:\n%s", out)
	}
}

// Our decoder stack into nothing (the xz child through our pipes) bounds ours
// from below: where it alone takes longer than the target allows, it is the
// row's limit, named with the decoder alone beside it; where ours is within
// 0.9x of it, the row is at its limit; and the table has its column.
func TestPodRowDecoderThroughOurPipes(t *testing.T) {
	m := func(l string, s float64) *measure {
		return &measure{Label: l, Seconds: []float64{s}, Median: s, extras: map[string][]float64{}}
	}
	byLabel := labelled(
		// single-block raw.xz at 2 GiB: the target needs 39.19 / 3.5 = 11.20 s.
		m("cdi k", 39.19), m("env k", 11.71), m("xz k", 9.99), m("ours k", 11.30),
		m("cdi l", 39.19), m("env l", 11.71), m("xz l", 9.99), m("ours l", 11.11),
		m("cdi n", 39.19), m("env n", 11.71), m("xz n", 9.99), m("ours n", 11.11), m("dd n", 11.5),
	)
	rows := []podRow{
		{Case: "k", CDI: "cdi k", OursEnv: "env k", Limit: "xz k", Decode: "ours k", Target: 3.5},
		{Case: "l", CDI: "cdi l", OursEnv: "env l", Limit: "xz l", Decode: "ours l", Target: 3.5},
		{Case: "n", CDI: "cdi n", OursEnv: "env n", Limit: "xz n", Decode: "ours n", DevLimit: "dd n", Target: 3.5},
	}
	fillPodRows(rows, byLabel)
	if r := rows[0]; r.Verdict != "limit: ours k alone takes 11.30 s, the target needs 11.20 s (xz k 9.99 s)" || r.DecodeS != 11.3 {
		t.Errorf("row k: %q %+v", r.Verdict, r)
	}
	if r := rows[1]; r.Verdict != "at its limit: ours 0.95× ours l (11.11 s), the target needs 11.20 s (xz l 9.99 s)" {
		t.Errorf("row l: %q", r.Verdict)
	}
	// The pipe into dd, slower than our decoder and not beaten by ours, binds.
	if r := rows[2]; r.Verdict != "limit: dd n alone takes 11.50 s, the target needs 11.20 s (xz n 9.99 s)" {
		t.Errorf("row n: %q", r.Verdict)
	}
	var b strings.Builder
	printPodTable(&b, rows, nil)
	if out := b.String(); !strings.Contains(out, "our decoder s|") || !strings.Contains(out, "11.30|") {
		t.Errorf("table:\n%s", out)
	}
}

// A row's speedup comes with the least and the greatest of its rounds,
// and a miss whose best round meets the target says that the target lies
// within the runs' spread; a row with a failed run has no range.
func TestPodRowRoundSpeedups(t *testing.T) {
	m := func(l string, failed int, s ...float64) *measure {
		return &measure{Label: l, Seconds: s, Median: median(s), Failed: failed}
	}
	byLabel := labelled(
		m("cdi h", 0, 3.4, 4.2, 3.5), m("env h", 0, 1.2, 1.3, 1.1), m("lim h", 0, 0.6, 0.6, 0.6), // rounds 2.83, 3.23, 3.18
		m("cdi j", 0, 3, 3, 3), m("env j", 0, 1.2, 1.1, 1.3), m("lim j", 0, 0.6, 0.6, 0.6), // every round short
		m("cdi k", 1, 3.4, 4.2), m("env k", 0, 1.2, 1.3, 1.1), m("lim k", 0, 0.6, 0.6, 0.6), // CDI failed once: 3.8 / 1.2
	)
	rows := []podRow{rowOf("h", 3), rowOf("j", 3), rowOf("k", 3)}
	fillPodRows(rows, byLabel)
	h, j, k := rows[0], rows[1], rows[2]
	if !strings.HasPrefix(h.Verdict, "MISSED") || !strings.HasSuffix(h.Verdict, "; round by round 2.83–3.23×: the target within the runs' spread") {
		t.Errorf("row h: %q", h.Verdict)
	}
	if !strings.HasPrefix(j.Verdict, "MISSED") || strings.Contains(j.Verdict, "round by round") {
		t.Errorf("row j: %q", j.Verdict)
	}
	if k.RoundMin != 0 || k.RoundMax != 0 || strings.Contains(k.Verdict, "round by round") {
		t.Errorf("row k: %+v", k)
	}
	var out strings.Builder
	printPodTable(&out, rows, nil)
	for _, cell := range []string{"2.92 (2.83–3.23)|", "2.50 (2.31–2.73)|", "  3.17|"} {
		if !strings.Contains(out.String(), cell) {
			t.Errorf("the table has no cell %q:\n%s", cell, out.String())
		}
	}
}

// Under CDI's 750m quota a pod's time follows its CPU-seconds: the decoder
// alone's CPU at the quota is a limit, a miss with ours busy on its quota
// and within 1.3× of the decoder's CPU is "limit: CPU quota", and a
// compressed row over 1.3× says so whatever its speedup. The table of the
// quota comes first, each pods' limits in a table of its own.
func TestPodRowUnderTheQuota(t *testing.T) {
	m := func(l string, s, cpu float64, quota bool) *measure {
		x := &measure{Label: l, Seconds: []float64{s}, Median: s, Bytes: 2 << 30, extras: map[string][]float64{}}
		if quota {
			x.extras["cg_cpu_s"] = []float64{cpu}
			x.extras["cg_cores"] = []float64{2}
			x.extras["cg_quota_cores"] = []float64{0.75}
		} else {
			x.extras["cpu_s"] = []float64{cpu}
		}
		return x
	}
	byLabel := labelled(
		// xz: the decoder alone 19 CPU-s, 25.3 s at 750m; 3.5x needs 24.1 s.
		m("cdi x.xz", 84.5, 62.7, true), m("env x.xz", 27.3, 20.4, true), m("lim x.xz", 19, 19, false),
		// gz: 2.2 CPU-s, 1.29x igzip's 1.7, 98 % of the quota; 3x needs 2.83 s.
		m("cdi g.gz", 8.5, 6.3, true), m("env g.gz", 3.0, 2.2, true), m("lim g.gz", 1.8, 1.7, false),
		// gz at 1.44x the decoder's CPU.
		m("cdi h.gz", 9, 6.3, true), m("env h.gz", 3.3, 2.45, true), m("lim h.gz", 1.8, 1.7, false),
		// the same CPU, and a speedup that meets the target
		m("cdi k.gz", 12, 6.3, true), m("env k.gz", 3.3, 2.45, true), m("lim k.gz", 1.8, 1.7, false),
		m("cdi n.gz", 6, 0, false), m("env n.gz", 1.5, 0, false), m("lim n.gz", 0.5, 0.5, false),
	)
	rows := []podRow{rowOf("n.gz", 3), rowOf("x.xz", 3.5), rowOf("g.gz", 3), rowOf("h.gz", 3), rowOf("k.gz", 3)}
	rows[0].Mode = "none"
	for i := 1; i < len(rows); i++ {
		rows[i].Mode = "cdi"
	}
	fillPodRows(rows, byLabel)
	if r := rows[1]; !strings.HasPrefix(r.Verdict, "limit: lim x.xz at 750m alone takes 25.33 s, the target needs 24.14 s (lim x.xz 19.00 s)") {
		t.Errorf("row x.xz: %q", r.Verdict)
	}
	if r := rows[2]; !strings.HasPrefix(r.Verdict, "limit: CPU quota — ours used 98 % of its 750m through the run, 2.20 CPU-s, 1.29× lim g.gz's 1.70; the target needs 2.83 s, 2.12 CPU-s") {
		t.Errorf("row g.gz: %q", r.Verdict)
	}
	if r := rows[3]; !strings.HasPrefix(r.Verdict, "MISSED: the target needs 3.00 s") ||
		!strings.Contains(r.Verdict, "; ours used 2.45 s of CPU, 99 % of its 750m quota (the target needs 2.25 CPU-s)") ||
		!strings.HasSuffix(r.Verdict, "; ours' CPU 1.44× the decoder alone's (goal ≤1.3×)") {
		t.Errorf("row h.gz: %q", r.Verdict)
	}
	if r := rows[4]; r.Verdict != "ok; ours' CPU 1.44× the decoder alone's (goal ≤1.3×)" {
		t.Errorf("row k.gz: %q", r.Verdict)
	}
	if r := rows[0]; r.Verdict != "ok" || r.QuotaCores != 0 {
		t.Errorf("row n.gz, no quota: %q", r.Verdict)
	}
	var b strings.Builder
	printPodTable(&b, rows, []string{"a note"})
	out := b.String()
	quota, none := strings.Index(out, "under CDI's default pod limits"), strings.Index(out, "without a CPU limit")
	if quota < 0 || none < quota || strings.Index(out, "x.xz") > none || strings.LastIndex(out, "n.gz") < none ||
		!strings.Contains(out, "1.10 / 3.15 / 0.85") || !strings.HasSuffix(out, "(a note)\n") {
		t.Errorf("tables:\n%s", out)
	}
}
