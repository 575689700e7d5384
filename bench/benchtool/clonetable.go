package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
)

// The clone table's goals (issue: storage-class migration at the speed
// of the disks): ours at least 3× CDI's on every row, and on a fast link
// within 1.5× of the local copy between the same volumes.
const (
	cloneSpeedupGoal = 3.0
	cloneLocalGoal   = 1.5
)

// cloneLinkRate is each link's rate in bytes per second, as bench/clone.sh
// paces it (`benchtool relay -rate 125M`); the fast link has none.
var cloneLinkRate = map[string]float64{"1gbit": 125e6}

// cloneQuotaCores is each half's CFS quota in cores with the limit "cdi"
// (bench/clone.sh's cpu_quota, 75000 us per 100000 us: CDI's 750m).
const cloneQuotaCores = 0.75

// cloneRun is one run of bench/clone.sh.
type cloneRun struct {
	Copier        string  `json:"copier"` // cdi, ours, local
	Kind          string  `json:"kind"`   // block, fs, fs-block
	DataPct       int     `json:"data_pct"`
	Link          string  `json:"link"`  // fast, 1gbit, local
	Limit         string  `json:"limit"` // cdi, none
	Seconds       float64 `json:"seconds"`
	ClonerCPU     float64 `json:"cloner_cpu_s"`
	ClonerPeakMiB float64 `json:"cloner_peak_mib"`
	ServerCPU     float64 `json:"server_cpu_s"`
	ServerPeakMiB float64 `json:"server_peak_mib"`
	VirtualBytes  float64 `json:"virtual_bytes"`
	// DataBytes is the source's data (its blocks that are not zeros), the
	// bytes any copier must carry; 0 in runs before it was recorded.
	DataBytes float64 `json:"data_bytes,omitempty"`
	// HostBusy is the machine's busy share while the copier ran (every
	// core: the loop devices' kernel workers and softirqs too, which the
	// halves' cgroups leave out); 0 in runs before it was recorded.
	HostBusy float64 `json:"host_busy,omitempty"`
}

// cloneHost is what bench/clone.sh records of the machine it ran on.
type cloneHost struct {
	Cores int // the machine's; runtime.NumCPU() of the reader when unrecorded
}

// cloneRow is one row: a kind of volume, its data, a link and a limit.
type cloneRow struct {
	Kind    string
	DataPct int
	Link    string
	Limit   string
}

// runCloneTable prints the clone table of bench/clone.sh's JSON.
func runCloneTable(args []string) error {
	if len(args) != 1 {
		usage()
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var doc struct {
		CDIVersion string     `json:"cdi_version"`
		CDINote    string     `json:"cdi_note"`
		Cores      int        `json:"cores"`
		Runs       []cloneRun `json:"runs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	host := cloneHost{Cores: doc.Cores}
	if host.Cores == 0 {
		host.Cores = runtime.NumCPU()
	}
	printCloneTable(os.Stdout, doc.Runs, doc.CDIVersion, doc.CDINote, host)
	return nil
}

func printCloneTable(w io.Writer, runs []cloneRun, cdiVersion, cdiNote string, host cloneHost) {
	var rows []cloneRow
	for _, r := range runs {
		row := cloneRow{r.Kind, r.DataPct, r.Link, r.Limit}
		if r.Copier != "local" && !slices.Contains(rows, row) {
			rows = append(rows, row)
		}
	}
	pick := func(copier string, match func(cloneRun) bool) []cloneRun {
		var out []cloneRun
		for _, r := range runs {
			if r.Copier == copier && match(r) {
				out = append(out, r)
			}
		}
		return out
	}
	fmt.Fprintf(w, "| volumes | data | link | CPU limit | CDI %s s | ours s | local copy s | ours vs CDI | ours vs local | CPU s CDI / ours (cloner+server) | peak MiB CDI / ours (cloner, server) | ours' delta pass, 1 %% changed: s, CPU s | verdict |\n", cdiVersion)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, row := range rows {
		same := func(r cloneRun) bool {
			return r.Kind == row.Kind && r.DataPct == row.DataPct && r.Link == row.Link && r.Limit == row.Limit
		}
		cdi, ours, delta := pick("cdi", same), pick("ours", same), pick("delta", same)
		local := pick("local", func(r cloneRun) bool { return r.Kind == row.Kind && r.DataPct == row.DataPct })
		cdiS, oursS, localS := medianOf(cdi, seconds), medianOf(ours, seconds), medianOf(local, seconds)
		limit := "none"
		if row.Limit == "cdi" {
			limit = fmt.Sprintf("%.0fm", 1000*cloneQuotaCores)
		}
		speedup, vsLocal := "-", "-"
		if cdiS > 0 && oursS > 0 {
			speedup = fmt.Sprintf("%.2f×", cdiS/oursS)
		}
		if localS > 0 && oursS > 0 {
			vsLocal = fmt.Sprintf("%.2f×", oursS/localS)
		}
		v := cloneVerdict(row, cdi, ours, localS, host)
		fmt.Fprintf(w, "| %s | %d %% | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s, %s | %s |\n",
			cloneKind(row.Kind), row.DataPct, row.Link, limit, cloneSecs(cdiS), cloneSecs(oursS), cloneSecs(localS), speedup, vsLocal,
			cloneSecs(medianOf(cdi, cpuBoth)), cloneSecs(medianOf(ours, cpuBoth)), peaks(cdi), peaks(ours),
			cloneSecs(medianOf(delta, seconds)), cloneSecs(medianOf(delta, cpuBoth)), v)
	}
	if cdiNote != "" {
		fmt.Fprintf(w, "\nCDI's rows left out: %s\n", cdiNote)
	}
}

func cloneKind(k string) string {
	switch k {
	case "fs":
		return "filesystem → filesystem"
	case "fs-block":
		return "filesystem → block"
	}
	return "block → block"
}

func seconds(r cloneRun) float64 { return r.Seconds }
func cpuBoth(r cloneRun) float64 { return r.ClonerCPU + r.ServerCPU }

// medianOf is the median of f over runs (0 for none).
func medianOf(runs []cloneRun, f func(cloneRun) float64) float64 {
	if len(runs) == 0 {
		return 0
	}
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// peaks is the largest memory peak of each half over the runs.
func peaks(runs []cloneRun) string {
	if len(runs) == 0 {
		return "-"
	}
	var cl, srv float64
	for _, r := range runs {
		cl, srv = max(cl, r.ClonerPeakMiB), max(srv, r.ServerPeakMiB)
	}
	return fmt.Sprintf("%.0f, %.0f", cl, srv)
}

func cloneSecs(s float64) string {
	if s == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", s)
}

// cloneVerdict says whether a row meets its goals (3× CDI's time; on the
// fast link within 1.5× of the local copy) and, for each it misses,
// which measured limit prevents it, or MISSED with the numbers:
//   - the volumes: the goal needs less time than the local copy between
//     the same two volumes takes (the limit);
//   - the link: the source's data alone takes longer at the link's rate
//     (every copier must carry it; zeros go as lengths);
//   - CPU: ours' halves were busy through the run (hostSaturated of the CPU
//     they had: two 750m quotas, or the machine's cores shared) and the
//     CPU they spent, at that rate, takes longer than the goal allows.
func cloneVerdict(row cloneRow, cdi, ours []cloneRun, localS float64, host cloneHost) string {
	cdiS, oursS := medianOf(cdi, seconds), medianOf(ours, seconds)
	if oursS == 0 {
		return "ours not run"
	}
	// The least time the CPU ours' halves spent takes on the CPU they
	// had, and how busy they kept it through the run (a miss is the CPU's
	// from hostSaturated on, the pod table's rule).
	var cpuFloor, busy float64
	var busyText string
	switch {
	case row.Limit == "cdi":
		// Each half under its own quota: the busier half bounds it.
		cpuFloor = max(medianOf(ours, func(r cloneRun) float64 { return r.ClonerCPU }),
			medianOf(ours, func(r cloneRun) float64 { return r.ServerCPU })) / cloneQuotaCores
		busy = cpuFloor / oursS
		busyText = fmt.Sprintf("ours' busier half spent %.0f %% of its %.0fm quota through the run", 100*busy, 1000*cloneQuotaCores)
	case host.Cores > 0:
		cpuFloor = medianOf(ours, cpuBoth) / float64(host.Cores)
		busy = cpuFloor / oursS
		busyText = fmt.Sprintf("ours' two halves spent %.0f %% of %d cores through the run", 100*busy, host.Cores)
		// The halves share the machine with the kernel's work for them:
		// its cores' busy share, where recorded, is the measure.
		if hostBusy := medianOf(ours, func(r cloneRun) float64 { return r.HostBusy }); hostBusy > busy {
			busy = hostBusy
			busyText = fmt.Sprintf("the machine's %d cores were %.0f %% busy while ours ran", host.Cores, 100*busy)
		}
	}
	dataBytes := medianOf(ours, func(r cloneRun) float64 {
		if r.DataBytes > 0 {
			return r.DataBytes
		}
		return r.VirtualBytes * float64(r.DataPct) / 100
	})
	linkFloor := 0.0
	if rate := cloneLinkRate[row.Link]; rate > 0 {
		linkFloor = dataBytes / rate
	}
	// why names the limit that makes a goal of need seconds unreachable,
	// the most binding one where several do.
	why := func(need float64, volumesCount bool) string {
		floor, limit := need, ""
		if volumesCount && localS > floor {
			floor, limit = localS, fmt.Sprintf("limit: the volumes — the local copy between them takes %.2f s", localS)
		}
		if linkFloor > floor {
			floor, limit = linkFloor, fmt.Sprintf("limit: the link — the source's %.0f MB of data take %.2f s at %.0f MB/s", dataBytes/1e6, linkFloor, cloneLinkRate[row.Link]/1e6)
		}
		if busy >= hostSaturated && cpuFloor > floor {
			limit = fmt.Sprintf("limit: CPU — %s; ours' CPU takes at least %.2f s on it", busyText, cpuFloor)
		}
		if limit == "" {
			return "MISSED (" + busyText + ")"
		}
		return limit
	}
	var verdict []string
	if cdiS > 0 && cdiS/oursS < cloneSpeedupGoal {
		need := cdiS / cloneSpeedupGoal
		verdict = append(verdict, fmt.Sprintf("short of %.0f× CDI (needs %.2f s): %s", cloneSpeedupGoal, need, why(need, true)))
	}
	if row.Link == "fast" && localS > 0 && oursS/localS > cloneLocalGoal {
		need := localS * cloneLocalGoal
		verdict = append(verdict, fmt.Sprintf("over %.1f× the local copy (needs %.2f s): %s", cloneLocalGoal, need, why(need, false)))
	}
	v := "goal met"
	if len(verdict) > 0 {
		v = strings.Join(verdict, "; ")
	}
	if len(cdi) == 0 {
		v += " (no CDI rows)"
	}
	return v
}
