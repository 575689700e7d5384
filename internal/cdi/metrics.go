package cdi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ProgressMetricName is the metric CDI's controller scrapes from an
// importer pod, matching
// `(kubevirt_cdi_import_progress_total|kubevirt_cdi_clone_progress_total)\{ownerUID="UID"\} (\d{1,3}\.?\d*)`:
// its only label is ownerUID, its value the percentage done.
const ProgressMetricName = "kubevirt_cdi_import_progress_total"

// enginePhases are the phases diskimport_phase reports.
var enginePhases = []string{"Info", "TransferScratch", "TransferDataFile", "TransferDataDir", "Validate", "Convert", "Resize", "Complete", "Error"}

// NewMetricsHandler serves the tracker's state as Prometheus metrics from
// a registry of its own: CDI's progress metric for ownerUID, and this
// engine's under diskimport_ names (extra labels on CDI's metric would
// break the controller's match).
func NewMetricsHandler(tracker *ProgressTracker, ownerUID string) http.Handler {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, value func(ProgressState) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return value(tracker.State()) })
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        ProgressMetricName,
			Help:        "The import progress in percentage",
			ConstLabels: prometheus.Labels{"ownerUID": ownerUID},
		}, func() float64 { return tracker.State().Percent }),
		gauge("diskimport_read_bytes", "Bytes received from the source so far (as sent, compressed).",
			func(s ProgressState) float64 { return float64(s.BytesRead) }),
		gauge("diskimport_written_bytes", "Image bytes written by the current phase (to scratch space or the target).",
			func(s ProgressState) float64 { return float64(s.BytesWritten) }),
		gauge("diskimport_source_size_bytes", "Size of the source as it announced it; -1 when unknown.",
			func(s ProgressState) float64 { return float64(s.SourceSize) }),
		gauge("diskimport_read_bytes_per_second", "Bytes received from the source per second, over the last interval.",
			func(s ProgressState) float64 { return s.ReadRate }),
		gauge("diskimport_retries", "Requests re-sent after a failure; known once the import ends.",
			func(s ProgressState) float64 { return float64(s.Retries) }),
	)
	for _, phase := range enginePhases {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "diskimport_phase",
			Help:        "1 for the phase the import is in, 0 for the others.",
			ConstLabels: prometheus.Labels{"phase": phase},
		}, func() float64 {
			if tracker.State().Phase == phase {
				return 1
			}
			return 0
		}))
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
