package main

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
)

// finish of a complete import stops the metrics server before it sets
// 100, so nothing waits for a scrape of the final value (CDI's controller
// sets 100% itself when the pod succeeds): a client scraping without pause
// all along never reads 100, and the port is closed once finish returns.
// A server that waited for a last scrape would have answered one with 100.
func TestFinishStopsMetricsBeforeTheFinalValue(t *testing.T) {
	o := &progressOutputs{tracker: cdi.NewProgressTracker()}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	o.start(cdi.MetricsConfig{Listen: "127.0.0.1:0", OwnerUID: "owner"}, log, log, true)
	require.NotNil(t, o.server, "the metrics server started")
	addr := o.server.Addr()
	o.observe(importer.Progress{Phase: "TransferDataFile", BytesRead: 50, SourceSize: 100, Percent: 50})

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as CDI's controller scrapes
	}}
	var (
		mu     sync.Mutex
		seen   []string
		stop   = make(chan struct{})
		done   = make(chan struct{})
		served = make(chan struct{})
	)
	go func() {
		defer close(done)
		first := true
		for {
			select {
			case <-stop:
				return
			default:
			}
			if body, err := scrapeOnce(client, "https://"+addr+"/metrics"); err == nil {
				mu.Lock()
				seen = append(seen, cdiProgress(body, "owner"))
				mu.Unlock()
				if first {
					close(served)
					first = false
				}
			}
		}
	}()
	<-served
	o.finish(&importer.Result{}, nil)
	close(stop)
	<-done

	assert.Equal(t, 100.0, o.tracker.State().Percent, "the import is recorded complete")
	mu.Lock()
	defer mu.Unlock()
	assert.NotEmpty(t, seen)
	assert.NotContains(t, seen, "100", "a scrape read the final value: the server outlived it")
	_, err := net.DialTimeout("tcp", addr, time.Second)
	assert.Error(t, err, "the metrics port is closed when finish returns")
}
