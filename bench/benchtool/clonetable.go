package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
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
		Runs       []cloneRun `json:"runs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	printCloneTable(os.Stdout, doc.Runs, doc.CDIVersion, doc.CDINote)
	return nil
}

func printCloneTable(w io.Writer, runs []cloneRun, cdiVersion, cdiNote string) {
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
			limit = "750m"
		}
		var verdict []string
		speedup, vsLocal := "-", "-"
		if cdiS > 0 && oursS > 0 {
			speedup = fmt.Sprintf("%.2f×", cdiS/oursS)
			if cdiS/oursS < cloneSpeedupGoal {
				verdict = append(verdict, fmt.Sprintf("short of %.0f× CDI", cloneSpeedupGoal))
			}
		}
		if localS > 0 && oursS > 0 {
			vsLocal = fmt.Sprintf("%.2f×", oursS/localS)
			if row.Link == "fast" && oursS/localS > cloneLocalGoal {
				verdict = append(verdict, fmt.Sprintf("over %.1f× the local copy", cloneLocalGoal))
			}
		}
		v := "goal met"
		if len(verdict) > 0 {
			v = strings.Join(verdict, "; ")
		}
		if len(cdi) == 0 {
			v += " (no CDI rows)"
		}
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
