package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// podRow is one case of the pod table (a P line of the runs file): CDI's
// importer and ours in env mode, ours on the command line, and the case's
// limits: its decoder alone on this machine; for a compressed image, our own
// decoder stack into nothing (Decode: for gz and xz the child through our
// pipes, which no consumer of a child avoids); and, for a raw image, the
// decoder piped into dd onto the device (DevLimit), since a device target
// must also take the data.
type podRow struct {
	Case     string  `json:"case"`
	CDI      string  `json:"cdi"`
	OursEnv  string  `json:"ours_env"`
	OursCLI  string  `json:"ours_cli"`
	Limit    string  `json:"limit"`
	DevLimit string  `json:"limit_with_device,omitempty"`
	Decode   string  `json:"decode,omitempty"`
	Target   float64 `json:"target_speedup"`
	// Mode is the pods' limits (bench/pods.sh): "cdi", CDI's default pod
	// limits (750m CPU, 600M memory); "none", no CPU limit; "" in runs
	// files before both were in one run.
	Mode    string  `json:"mode,omitempty"`
	CDIS    float64 `json:"cdi_median_s,omitempty"`
	EnvS    float64 `json:"ours_env_median_s,omitempty"`
	CLIS    float64 `json:"ours_cli_median_s,omitempty"`
	LimitS  float64 `json:"limit_median_s,omitempty"`
	DevS    float64 `json:"limit_with_device_median_s,omitempty"`
	DecodeS float64 `json:"decode_median_s,omitempty"`
	Speedup float64 `json:"speedup,omitempty"`
	// RoundMin and RoundMax bound CDI s / ours s of each round (CDI's
	// run and ours side by side), when every run of both succeeded.
	RoundMin float64 `json:"speedup_round_min,omitempty"`
	RoundMax float64 `json:"speedup_round_max,omitempty"`
	Met      *bool   `json:"met,omitempty"`
	ToLimit  float64 `json:"ours_env_to_limit,omitempty"` // limit s / ours s: 1 is at the limit
	EnvPeak  int64   `json:"ours_env_cgroup_peak_bytes,omitempty"`
	CDIPeak  int64   `json:"cdi_cgroup_peak_bytes,omitempty"`
	EnvOOM   int64   `json:"ours_env_oom_kills,omitempty"`
	CDIOOM   int64   `json:"cdi_oom_kills,omitempty"`
	Verdict  string  `json:"verdict"`
	EnvRSSKi int64   `json:"ours_env_peak_rss_kib,omitempty"`
	EnvCPU   float64 `json:"ours_env_cgroup_cpu_s,omitempty"` // cpuacct.usage, median of the runs
	CDICPU   float64 `json:"cdi_cgroup_cpu_s,omitempty"`
	Cores    int     `json:"cores,omitempty"`
	EnvBusy  float64 `json:"ours_env_cpu_busy,omitempty"`  // EnvCPU / (Cores × EnvS): 1 is every core busy throughout
	HostBusy float64 `json:"ours_env_host_busy,omitempty"` // the machine's busy share while ours ran, median of the runs
	// QuotaCores is the pod's CFS quota in cores (0.75 for CDI's 750m), 0
	// without one.
	QuotaCores float64 `json:"quota_cores,omitempty"`
	// LimitCPU is the decoder alone's CPU-seconds (user + system, time(1)),
	// median of the runs; CPUToLimit is ours' CPU over it (issue 37: at
	// most cpuOverDecoder on the compressed rows).
	LimitCPU   float64 `json:"limit_cpu_s,omitempty"`
	CPUToLimit float64 `json:"ours_env_cpu_to_limit,omitempty"`
	bytes      int64   // the disk's virtual bytes
}

// cpuOverDecoder is how many times the decoder alone's CPU-seconds ours
// may spend on a compressed row (issue 37's bar under CDI's limits).
const cpuOverDecoder = 1.3

// compressed is whether case c is a compressed image (the decoder alone
// is a decompressor then).
func compressed(c string) bool {
	for _, x := range []string{".gz", ".xz", ".zst"} {
		if strings.HasSuffix(c, x) {
			return true
		}
	}
	return false
}

// podSetupLabel is bench/pods.sh's row of an empty pod (/bin/true).
const podSetupLabel = "pod setup alone (/bin/true)"

// maxExtra is the largest value of an extra over the runs (peaks are
// reported as the worst run, not the median).
func maxExtra(m *measure, k string) int64 {
	if m == nil || len(m.extras[k]) == 0 {
		return 0
	}
	return int64(slices.Max(m.extras[k]))
}

// hostSaturated is the machine's busy share (all cores, while ours ran, the
// loop device's kernel worker included) from which a miss that no limit
// explains is called bound by the CPU. At 1 GiB (3 runs, 2 cores) the rows
// where xz -T0 decodes on both cores had the machine 91-94 % busy, every
// other row 60-82 %; the pod's own cgroup share does not tell them apart
// (ours on raw.gz, 2.8x CDI, 69 %; on raw.zst, 4.5x, 63 %).
const hostSaturated = 0.9

// atLimit is how close to its binding limit ours must be for a miss to be
// the limit's (issue 24: every case at least 0.9x its decoder's limit).
const atLimit = 0.9

// medExtra is the median of an extra over the runs (0 when there is none).
func medExtra(m *measure, k string) float64 {
	if m == nil || len(m.extras[k]) == 0 {
		return 0
	}
	return median(m.extras[k])
}

// fillPodRows reads each row's numbers from the measurements and says, in
// one line, whether the row is at its target or why its limit stops it: the
// target needs CDI/target seconds, and a decoder that alone takes longer
// (or our decoder stack into nothing, or, with the device write, the
// decoder's pipe into dd) makes the target unreachable on this machine. The
// binding limit is the slowest of them, the pipe into dd only where ours
// does not beat it.
func fillPodRows(rows []podRow, byLabel map[string]*measure) {
	med := func(l string) float64 {
		if m := byLabel[l]; m != nil && len(m.Seconds) > 0 {
			return m.Median
		}
		return 0
	}
	for i := range rows {
		r := &rows[i]
		r.CDIS, r.EnvS, r.CLIS, r.LimitS = med(r.CDI), med(r.OursEnv), med(r.OursCLI), med(r.Limit)
		if r.DevLimit != "" {
			r.DevS = med(r.DevLimit)
		}
		if r.Decode != "" {
			r.DecodeS = med(r.Decode)
		}
		// Ours cannot be faster than its own decoder into nothing.
		bindName, bindS := r.Limit, r.LimitS
		if r.DecodeS > bindS {
			bindName, bindS = r.Decode, r.DecodeS
		}
		// The pipe into dd writes every byte, zeros too, one request at a
		// time: when ours is faster than it, it is not what binds ours.
		if r.DevS > bindS && r.DevS <= r.EnvS {
			bindName, bindS = r.DevLimit, r.DevS
		}
		env, cdi := byLabel[r.OursEnv], byLabel[r.CDI]
		if env != nil {
			r.bytes = env.Bytes
		}
		r.QuotaCores = medExtra(env, "cg_quota_cores")
		r.LimitCPU = medExtra(byLabel[r.Limit], "cpu_s")
		// In a pod with a CPU quota the decoder alone could go no faster
		// than its CPU-seconds at the quota: a limit the decoder, measured
		// outside the pod, does not show in its seconds.
		if r.QuotaCores > 0 && r.LimitCPU/r.QuotaCores > bindS {
			bindName = fmt.Sprintf("%s at %.0fm", r.Limit, 1000*r.QuotaCores)
			bindS = r.LimitCPU / r.QuotaCores
		}
		// What the decoder alone takes, said beside a limit of ours.
		alone := ""
		if bindName != r.Limit && r.LimitS > 0 {
			alone = fmt.Sprintf(" (%s %.2f s)", r.Limit, r.LimitS)
		}
		r.EnvPeak, r.EnvOOM = maxExtra(env, "cg_peak"), maxExtra(env, "cg_oom_kills")
		r.CDIPeak, r.CDIOOM = maxExtra(cdi, "cg_peak"), maxExtra(cdi, "cg_oom_kills")
		if env != nil {
			r.EnvRSSKi = env.PeakRSS
		}
		if r.EnvS > 0 && bindS > 0 {
			r.ToLimit = bindS / r.EnvS
		}
		r.EnvCPU, r.CDICPU = medExtra(env, "cg_cpu_s"), medExtra(cdi, "cg_cpu_s")
		r.HostBusy = medExtra(env, "host_busy")
		r.Cores = int(max(medExtra(env, "cg_cores"), 0))
		if r.EnvCPU > 0 && r.Cores > 0 && r.EnvS > 0 {
			r.EnvBusy = r.EnvCPU / (float64(r.Cores) * r.EnvS)
		}
		if r.EnvCPU > 0 && r.LimitCPU > 0 {
			r.CPUToLimit = r.EnvCPU / r.LimitCPU
		}
		// Under a quota, ours busy through the run on the CPU it had.
		quotaBound := r.QuotaCores > 0 && r.EnvS > 0 && r.EnvCPU/(r.QuotaCores*r.EnvS) >= hostSaturated
		switch {
		case r.EnvS == 0:
			r.Verdict = "ours failed or not run"
		case r.CDIS == 0 && cdi != nil && cdi.Failed > 0:
			r.Verdict = "CDI's importer failed (its error below)"
		case r.CDIS == 0:
			r.Verdict = "no CDI run"
		default:
			r.Speedup = r.CDIS / r.EnvS
			r.RoundMin, r.RoundMax = roundSpeedups(cdi, env)
			met := r.Speedup >= r.Target
			r.Met = &met
			need := r.CDIS / r.Target
			switch {
			case met:
				r.Verdict = "ok"
			case bindS > need:
				r.Verdict = fmt.Sprintf("limit: %s alone takes %.2f s, the target needs %.2f s%s", bindName, bindS, need, alone)
			case r.ToLimit >= atLimit:
				r.Verdict = fmt.Sprintf("at its limit: ours %.2f× %s (%.2f s), the target needs %.2f s%s",
					r.ToLimit, bindName, bindS, need, alone)
			case quotaBound && r.CPUToLimit > 0 && r.CPUToLimit <= cpuOverDecoder:
				r.Verdict = fmt.Sprintf("limit: CPU quota — ours used %.0f %% of its %.0fm through the run, %.2f CPU-s, %.2f× %s's %.2f; the target needs %.2f s, %.2f CPU-s",
					100*r.EnvCPU/(r.QuotaCores*r.EnvS), 1000*r.QuotaCores, r.EnvCPU, r.CPUToLimit, r.Limit, r.LimitCPU, need, need*r.QuotaCores)
			case r.HostBusy >= hostSaturated && r.QuotaCores == 0:
				r.Verdict = fmt.Sprintf("limit: CPU — the machine's cores were %.0f %% busy while ours ran (ours %.2f s of CPU on %d cores); the target needs %.2f s, the limit %.2f s%s",
					100*r.HostBusy, r.EnvCPU, r.Cores, need, bindS, alone)
			default:
				r.Verdict = fmt.Sprintf("MISSED: the target needs %.2f s, the limit %.2f s%s", need, bindS, alone)
				switch {
				case r.EnvCPU > 0 && r.QuotaCores > 0:
					r.Verdict += fmt.Sprintf("; ours used %.2f s of CPU, %.0f %% of its %.0fm quota (the target needs %.2f CPU-s)",
						r.EnvCPU, 100*r.EnvCPU/(r.QuotaCores*r.EnvS), 1000*r.QuotaCores, need*r.QuotaCores)
				case r.EnvCPU > 0:
					r.Verdict += fmt.Sprintf("; ours used %.2f s of CPU on %d cores (%.0f %%)", r.EnvCPU, r.Cores, 100*r.EnvBusy)
				}
				if r.HostBusy > 0 {
					r.Verdict += fmt.Sprintf("; the machine was %.0f %% busy", 100*r.HostBusy)
				}
			}
		}
		if r.ToLimit > 0 && r.ToLimit < atLimit && r.Met != nil && !*r.Met {
			r.Verdict += fmt.Sprintf("; ours at %.2f× its limit (goal ≥0.9×)", r.ToLimit)
		}
		if r.DevS > r.EnvS && r.EnvS > 0 && r.Met != nil && !*r.Met {
			r.Verdict += fmt.Sprintf("; ours beats %s (%.2f s)", r.DevLimit, r.DevS)
		}
		if r.Met != nil && !*r.Met && r.RoundMax >= r.Target {
			r.Verdict += fmt.Sprintf("; round by round %.2f–%.2f×: the target within the runs' spread", r.RoundMin, r.RoundMax)
		}
		if r.QuotaCores > 0 && compressed(r.Case) && r.CPUToLimit > cpuOverDecoder {
			r.Verdict += fmt.Sprintf("; ours' CPU %.2f× the decoder alone's (goal ≤%.1f×)", r.CPUToLimit, cpuOverDecoder)
		}
	}
}

// roundSpeedups is the least and the greatest CDI s / ours s over the
// rounds (the bench runs CDI's pod and ours one after the other in each
// round), or zeros unless every run of both succeeded.
func roundSpeedups(cdi, env *measure) (lo, hi float64) {
	if cdi == nil || env == nil || cdi.Failed > 0 || env.Failed > 0 || len(cdi.Seconds) != len(env.Seconds) || len(env.Seconds) < 2 {
		return 0, 0
	}
	for i, e := range env.Seconds {
		if e <= 0 {
			return 0, 0
		}
		x := cdi.Seconds[i] / e
		if i == 0 {
			lo, hi = x, x
		}
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// speedupCell is the speedup, with the rounds' range when there is one.
func speedupCell(r podRow) string {
	if r.RoundMax == 0 {
		return ratio(r.Speedup)
	}
	return fmt.Sprintf("%s (%.2f–%.2f)", ratio(r.Speedup), r.RoundMin, r.RoundMax)
}

// printPodTable prints a pod table for each of the pods' limits in rows
// (CDI's first, the table of record), then the notes.
func printPodTable(w io.Writer, rows []podRow, notes []string) {
	var modes []string
	for _, r := range rows {
		if !slices.Contains(modes, r.Mode) {
			modes = append(modes, r.Mode)
		}
	}
	// CDI's limits first: that table is the one of record.
	if i := slices.Index(modes, "cdi"); i > 0 {
		modes = slices.Insert(slices.Delete(modes, i, i+1), 0, "cdi")
	}
	for _, mode := range modes {
		var these []podRow
		for _, r := range rows {
			if r.Mode == mode {
				these = append(these, r)
			}
		}
		printPodModeTable(w, mode, these)
	}
	for _, n := range notes {
		fmt.Fprintln(w, "("+n+")")
	}
}

// printPodModeTable prints the pod table of one of the pods' limits.
func printPodModeTable(w io.Writer, mode string, rows []podRow) {
	if len(rows) == 0 {
		return
	}
	switch mode {
	case "cdi":
		fmt.Fprintln(w, "\nAs a pod under CDI's default pod limits (750m CPU, 600M memory; the table of record): CDI's env contract, /dev/cdi-block-volume")
	case "none":
		fmt.Fprintln(w, "\nAs a pod without a CPU limit: CDI's env contract, /dev/cdi-block-volume, 256 MiB memory cgroup each")
	default:
		fmt.Fprintln(w, "\nAs a pod: CDI's env contract, /dev/cdi-block-volume")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "case\tCDI s\tours env s\tspeedup\ttarget\tours CLI s\tlimit\tlimit s\tour decoder s\twith device s\tenv/limit\tcg peak MiB ours\tcg peak MiB CDI\tCPU s ours / CDI\tCPU s/GiB ours / CDI / limit\tours CPU / limit CPU\tmachine busy\tverdict\t")
	for _, r := range rows {
		target := fmt.Sprintf("≥%g×", r.Target)
		if r.Met != nil {
			target += map[bool]string{true: " ok", false: " MISSED"}[*r.Met]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s / %s\t%s\t%s\t%s\t%s\t\n", r.Case, sec(r.CDIS), sec(r.EnvS), speedupCell(r), target,
			sec(r.CLIS), r.Limit, sec(r.LimitS), sec(r.DecodeS), sec(r.DevS), ratio(r.ToLimit), peakMiB(r.EnvPeak, r.EnvOOM), peakMiB(r.CDIPeak, r.CDIOOM),
			sec(r.EnvCPU), sec(r.CDICPU), perGiB(r), ratio(r.CPUToLimit), percent(r.HostBusy), r.Verdict)
	}
	tw.Flush()
	fmt.Fprintln(w, "(speedup: CDI s / ours env s, medians, and in brackets the least and the greatest of the rounds' (CDI's run and ours side by side); our decoder s: our decoder stack alone into nothing (benchtool decode; for gz and xz the child through our pipes);"+
		" with device s: the decoder piped into dd onto the loop device (oflag=direct, bs=4M, every byte written);"+
		" env/limit: the binding limit s / ours env s. cg peak: memory.max_usage_in_bytes of the pod's"+
		" cgroup, the worst run, page cache included (reclaimed at the limit); \"OOM\": the kernel killed a process of it."+
		" CPU s: cpuacct.usage of the pod's cgroup, median of the runs: its processes and children (the decoder child included),"+
		" not the loop device's kernel worker, which writes outside it; a MISSED line gives it as a share of cores × ours env s;"+
		" CPU s/GiB: per GiB of the disk, the limit's its command's user + system time (time(1)) outside any pod;"+
		" machine busy: how busy the machine's cores were while ours ran (/proc/stat, every core, median of the runs)."+
		fmt.Sprintf(" \"at its limit\": ours within %.1f× its binding limit; \"limit: CPU\": the machine at least %.0f %% busy;", atLimit, 100*hostSaturated)+
		fmt.Sprintf(" under a quota, the decoder alone's CPU-seconds at the quota is a limit too, and \"limit: CPU quota\" is ours at least %.0f %% of its quota through the run, spending at most %.1f× the decoder alone's CPU.)", 100*hostSaturated, cpuOverDecoder))
}

// perGiB is the row's CPU-seconds per GiB of its disk: ours, CDI's, the
// decoder alone's.
func perGiB(r podRow) string {
	if r.bytes <= 0 {
		return "-"
	}
	gib := float64(r.bytes) / (1 << 30)
	f := func(s float64) string { return sec(s / gib) }
	return fmt.Sprintf("%s / %s / %s", f(r.EnvCPU), f(r.CDICPU), f(r.LimitCPU))
}

func percent(share float64) string {
	if share == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f %%", 100*share)
}

func sec(s float64) string {
	if s == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", s)
}

func peakMiB(b, oom int64) string {
	if b == 0 {
		return "-"
	}
	s := fmt.Sprintf("%.0f", float64(b)/(1<<20))
	if oom > 0 {
		s += fmt.Sprintf(" OOM×%d", oom)
	}
	return s
}
