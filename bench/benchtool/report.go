package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The runs file (written by bench.sh) has tab-separated lines:
//
//	M label run seconds rss_kib virtual_bytes exit_code   one measured run
//	C ours_label ref_label min_ratio target_text          one table row
//	X label key value                                     an extra per-run number
//	P case cdi_label env_label cli_label limit_label target [device_limit_label [decode_label [mode]]]   one row of the pod table of the pods' limits mode
//	N text                                                a note printed under the pod table
//
// Our imports carry the extras scratch_peak (bytes allocated under the
// --scratch directory at most, sampled by benchtool dirpeak), scratchUsed
// (0/1 from the result JSON) and any scratch*Bytes field of that JSON.
//
// ratio = our MB/s / the reference's MB/s (of virtual size), so > 1 is better
// for us, and a target "≤ 1.1× the time" is min_ratio 1/1.1.

type measure struct {
	Label   string    `json:"label"`
	Seconds []float64 `json:"seconds"`
	RSSKiB  []int64   `json:"rss_kib,omitempty"`
	Bytes   int64     `json:"virtual_bytes"`
	Failed  int       `json:"failed_runs"`

	Median  float64            `json:"median_s"`
	Min     float64            `json:"min_s"`
	Max     float64            `json:"max_s"`
	Spread  float64            `json:"spread"` // (max-min)/median
	MBps    float64            `json:"mb_per_s"`
	PeakRSS int64              `json:"peak_rss_kib,omitempty"` // max over runs
	Extras  map[string]float64 `json:"extras,omitempty"`       // medians
	extras  map[string][]float64
}

type comparison struct {
	Ours     string  `json:"ours"`
	Ref      string  `json:"reference"`
	MinRatio float64 `json:"min_ratio,omitempty"`
	Target   string  `json:"target,omitempty"`
	Ratio    float64 `json:"ratio"`
	Met      *bool   `json:"met,omitempty"`

	// Copied from the two measurements, so each row of the JSON stands alone.
	OursMedian   float64 `json:"ours_median_s"`
	OursMBps     float64 `json:"ours_mb_per_s"`
	RefMedian    float64 `json:"ref_median_s"`
	RefMBps      float64 `json:"ref_mb_per_s"`
	PeakRSSKiB   int64   `json:"ours_peak_rss_kib,omitempty"`
	ScratchPeak  *int64  `json:"ours_scratch_peak_bytes,omitempty"`
	ScratchUsed  *bool   `json:"ours_scratch_used,omitempty"`
	ScratchBytes *int64  `json:"ours_scratch_bytes_reported,omitempty"`
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func runReport(args []string) error {
	if len(args) != 3 {
		usage()
	}
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer f.Close()
	byLabel := map[string]*measure{}
	var order []string
	get := func(l string) *measure {
		m := byLabel[l]
		if m == nil {
			m = &measure{Label: l, extras: map[string][]float64{}}
			byLabel[l] = m
			order = append(order, l)
		}
		return m
	}
	var comps []comparison
	var pods []podRow
	var notes []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		c := strings.Split(sc.Text(), "\t")
		num := func(i int) float64 { v, _ := strconv.ParseFloat(c[i], 64); return v }
		switch {
		case c[0] == "M" && len(c) >= 7:
			m := get(c[1])
			m.Bytes = int64(num(5))
			if c[6] != "0" {
				m.Failed++
				continue
			}
			m.Seconds = append(m.Seconds, num(3))
			m.RSSKiB = append(m.RSSKiB, int64(num(4)))
		case c[0] == "C" && len(c) >= 5:
			comps = append(comps, comparison{Ours: c[1], Ref: c[2], MinRatio: num(3), Target: c[4]})
		case c[0] == "P" && len(c) >= 7:
			pods = append(pods, podRow{Case: c[1], CDI: c[2], OursEnv: c[3], OursCLI: c[4], Limit: c[5], Target: num(6)})
			if len(c) >= 8 {
				pods[len(pods)-1].DevLimit = c[7]
			}
			if len(c) >= 9 {
				pods[len(pods)-1].Decode = c[8]
			}
			if len(c) >= 10 {
				pods[len(pods)-1].Mode = c[9]
			}
		case c[0] == "N" && len(c) >= 2:
			if !slices.Contains(notes, c[1]) { // one per run
				notes = append(notes, c[1])
			}
		case c[0] == "X" && len(c) >= 4:
			m := get(c[1])
			m.extras[c[2]] = append(m.extras[c[2]], num(3))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, m := range byLabel {
		if len(m.Seconds) > 0 {
			m.Median = median(m.Seconds)
			m.Min, m.Max = slices.Min(m.Seconds), slices.Max(m.Seconds)
			m.Spread = (m.Max - m.Min) / m.Median
			m.MBps = float64(m.Bytes) / m.Median / 1e6
		}
		for _, r := range m.RSSKiB {
			m.PeakRSS = max(m.PeakRSS, r)
		}
		if len(m.extras) > 0 {
			m.Extras = map[string]float64{}
			for k, v := range m.extras {
				m.Extras[k] = median(v)
			}
		}
	}
	for i := range comps {
		o, r := byLabel[comps[i].Ours], byLabel[comps[i].Ref]
		if o != nil {
			c := &comps[i]
			c.OursMedian, c.OursMBps, c.PeakRSSKiB = o.Median, o.MBps, o.PeakRSS
			if v, ok := o.Extras["scratch_peak"]; ok {
				n := int64(v)
				c.ScratchPeak = &n
			}
			if v, ok := o.Extras["scratchUsed"]; ok {
				u := v >= 0.5
				c.ScratchUsed = &u
			}
			if k := reportedScratchKey(o); k != "" {
				n := int64(o.Extras[k])
				c.ScratchBytes = &n
			}
		}
		if r != nil {
			comps[i].RefMedian, comps[i].RefMBps = r.Median, r.MBps
		}
		if o == nil || r == nil || o.MBps == 0 || r.MBps == 0 {
			continue
		}
		comps[i].Ratio = o.MBps / r.MBps
		if comps[i].MinRatio > 0 {
			met := comps[i].Ratio >= comps[i].MinRatio
			comps[i].Met = &met
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "case (ours)\tours s\tours MB/s\tspread\tpeak RSS MiB\tscratch MB\treference\tref s\tref MB/s\tratio\ttarget\t")
	for _, c := range comps {
		o, r := byLabel[c.Ours], byLabel[c.Ref]
		if o == nil || r == nil {
			continue
		}
		verdict := c.Target
		if c.Met != nil {
			verdict += map[bool]string{true: " ok", false: " MISSED"}[*c.Met]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Ours, secs(o), mbps(o), pct(o), rss(o), scratchMB(o),
			c.Ref, secs(r), mbps(r), ratio(c.Ratio), verdict)
	}
	tw.Flush()
	fmt.Println("(scratch MB: peak allocated under --scratch (or the pod's /scratch), sampled every 10 ms; \"used\": the result's scratchUsed;" +
		" \"reported\": its scratch byte count.)")
	fillPodRows(pods, byLabel)
	if m := byLabel[podSetupLabel]; m != nil && len(m.Seconds) > 0 {
		notes = append(notes, fmt.Sprintf("the pod's namespace, mounts and cgroup alone (/bin/true in it): %.2f s, part of every env row", m.Median))
	}
	printPodTable(os.Stdout, pods, notes)

	fmt.Println()
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "every measurement\tmedian s\tmin s\tmax s\tspread\tvirtual MB/s\tpeak RSS MiB\truns\tfailed\textras (median)\t")
	for _, l := range order {
		m := byLabel[l]
		var ex []string
		for k, v := range m.Extras {
			ex = append(ex, fmt.Sprintf("%s=%.0f", k, v))
		}
		slices.Sort(ex)
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%d\t%d\t%s\t\n", l, m.Median, m.Min, m.Max, pct(m), mbps(m), rss(m), len(m.Seconds), m.Failed, strings.Join(ex, " "))
	}
	tw.Flush()

	var meta any
	if b, err := os.ReadFile(args[1]); err == nil {
		json.Unmarshal(b, &meta)
	}
	ms := make([]*measure, 0, len(order))
	for _, l := range order {
		ms = append(ms, byLabel[l])
	}
	out, err := json.MarshalIndent(map[string]any{"machine": meta, "comparisons": comps, "pods": pods, "notes": notes, "measurements": ms}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(args[2], append(out, '\n'), 0o644)
}

func mbps(m *measure) string {
	if m.MBps == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", m.MBps)
}

func pct(m *measure) string {
	if len(m.Seconds) < 2 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", m.Spread*100)
}

// rssLimitKiB is issue 3's ceiling for the importer's peak RSS (children
// included); our rows above it are flagged.
const rssLimitKiB = 96 << 10

func rss(m *measure) string {
	if m.PeakRSS == 0 {
		return "-"
	}
	flag := ""
	if strings.HasPrefix(m.Label, "ours ") && m.PeakRSS > rssLimitKiB {
		flag = " >96!"
	}
	return fmt.Sprintf("%.0f%s", float64(m.PeakRSS)/1024, flag)
}

func ratio(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", r)
}

func secs(m *measure) string {
	if len(m.Seconds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", m.Median)
}

// reportedScratchKey is the result JSON's scratch byte count among m's
// extras (named like scratchBytes; the importer may not report one).
func reportedScratchKey(m *measure) string {
	for k := range m.Extras {
		if strings.HasPrefix(k, "scratch") && k != "scratch_peak" && k != "scratchUsed" {
			return k
		}
	}
	return ""
}

func scratchMB(m *measure) string {
	v, ok := m.Extras["scratch_peak"]
	if !ok {
		return "-"
	}
	s := fmt.Sprintf("%.0f", v/1e6)
	var notes []string
	if m.Extras["scratchUsed"] >= 0.5 {
		notes = append(notes, "used")
	}
	if k := reportedScratchKey(m); k != "" {
		notes = append(notes, fmt.Sprintf("%.0f reported", m.Extras[k]/1e6))
	}
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, ", ") + ")"
	}
	return s
}
