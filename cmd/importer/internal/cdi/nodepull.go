package cdi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/envlabels"
)

// ReadyFileTimeout bounds the wait for the node-pull server's ready file.
// The server can only write it once the kubelet has pulled the
// containerdisk image, which takes as long as the image is large and the
// registry slow: CDI's importer gives up after 60 s and fails a good
// import (CDI issue 4253: a 1m54s pull). Ours waits as long as the pod may
// reasonably live for a pull, the bound CDI's proposed fix chose (PR 4254),
// and until the pod is stopped (its context); it logs while it waits.
const ReadyFileTimeout = 30 * time.Minute

// readyFileLogEvery is how often the wait says it still waits.
const readyFileLogEvery = 15 * time.Second

// diskImageName is the file name at the end of the endpoint the controller
// sets for node pull (http://localhost:8100/disk.img); the ready file
// names the real one.
const diskImageName = "disk.img"

// NodePull is the importer's half of a registry import with
// IMPORTER_PULL_METHOD=node: the controller runs the containerdisk image
// itself as a sidecar that serves its disk file over HTTP
// (cmd/cdi-containerimage-server), and the two containers meet through
// two files in a shared volume.
type NodePull struct {
	// ReadyFile (IMPORTER_READY_FILE) appears once the server listens; it
	// holds the disk file's name.
	ReadyFile string
	// DoneFile (IMPORTER_DONE_FILE) is created after a successful import,
	// so that the server exits and the pod can complete.
	DoneFile string
	// Labels: the import takes labels from the server's GET /info
	// (IMPORTER_PULL_METHOD=node).
	Labels bool
	// Timeout bounds the wait for ReadyFile (ReadyFileTimeout).
	Timeout time.Duration
	// poll is the interval between looks for ReadyFile, logEvery between
	// the log lines of a long wait.
	poll, logEvery time.Duration
}

// nodePull reads the handshake's variables; nil when none is set. Like
// CDI's importer, each file is used when its variable is set, whatever
// IMPORTER_PULL_METHOD says. IMPORTER_READY_FILE_TIMEOUT (ours, a Go
// duration) replaces ReadyFileTimeout.
func nodePull(getenv func(string) string) (*NodePull, error) {
	n := &NodePull{
		ReadyFile: getenv("IMPORTER_READY_FILE"),
		DoneFile:  getenv("IMPORTER_DONE_FILE"),
		Labels:    getenv("IMPORTER_PULL_METHOD") == "node",
		Timeout:   ReadyFileTimeout,
		poll:      100 * time.Millisecond,
		logEvery:  readyFileLogEvery,
	}
	if v := getenv("IMPORTER_READY_FILE_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("IMPORTER_READY_FILE_TIMEOUT=%q: want a duration such as 60s: %w", v, errdefs.ErrInvalidOptions)
		}
		n.Timeout = d
	}
	if n.ReadyFile == "" && n.DoneFile == "" && !n.Labels {
		return nil, nil
	}
	return n, nil
}

// Wait waits for the ready file and returns the endpoint to import: the
// controller's endpoint with its final "disk.img" replaced by the name the
// ready file holds (when it holds one). A wait longer than logEvery is
// logged at each logEvery. The timeout's error is CDI's text, "Timeout
// waiting for file <path>".
func (n *NodePull) Wait(ctx context.Context, endpoint string, log *slog.Logger) (string, error) {
	if n.ReadyFile == "" {
		return endpoint, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	deadline := time.NewTimer(n.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(n.poll)
	defer tick.Stop()
	report := time.NewTicker(n.logEvery)
	defer report.Stop()
	emptySeen := false
	for {
		name, err := os.ReadFile(n.ReadyFile)
		switch {
		case err == nil && len(name) == 0 && !emptySeen:
			// A writer that creates the file and then writes the name can
			// be seen between the two: an empty file is read once more a
			// poll later before it means disk.img.
			emptySeen = true
		case err == nil:
			if waited := time.Since(start); waited >= n.logEvery {
				log.Info("Node pull: the ready file appeared", "file", n.ReadyFile, "waited", waited.Round(time.Second).String())
			}
			return replaceDiskName(endpoint, strings.TrimSpace(string(name))), nil
		case !errors.Is(err, os.ErrNotExist):
			return "", fmt.Errorf("reading %s: %w", n.ReadyFile, err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for file %s: %w: %w", n.ReadyFile, errdefs.ErrCancelled, ctx.Err())
		case <-deadline.C:
			return "", &plainFailure{text: "Timeout waiting for file " + n.ReadyFile, err: errdefs.ErrSourceUnreachable}
		case <-report.C:
			log.Info("Node pull: waiting for the ready file (the node pulls the containerdisk image before its server starts)",
				"file", n.ReadyFile, "waited", time.Since(start).Round(time.Second).String(), "limit", n.Timeout.String())
		case <-tick.C:
		}
	}
}

// replaceDiskName puts name in place of the endpoint's final disk.img. The
// name is one path segment (the server lists its image directory), so it
// is escaped as one.
func replaceDiskName(endpoint, name string) string {
	if name == "" {
		return endpoint
	}
	base, ok := strings.CutSuffix(endpoint, diskImageName)
	if !ok {
		return endpoint
	}
	return base + url.PathEscape(name)
}

// ServerLabels asks the node-pull server at endpoint for its environment
// (GET /info: {"env": ["K=V", ...]}, the containerdisk container's) and
// returns its KUBEVIRT_IO_ variables as labels, as a pod-pull import takes
// them from the image's config.
func (n *NodePull) ServerLabels(ctx context.Context, endpoint string) (map[string]string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("node-pull endpoint: %w", err)
	}
	info := url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/info"}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, info.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking the node-pull server for its environment: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("asking the node-pull server for its environment: %s: %w", resp.Status, errdefs.ErrSourceRefused)
	}
	var body struct {
		Env []string `json:"env"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("reading the node-pull server's environment: %w", err)
	}
	return envlabels.FromEnv(body.Env), nil
}

// Done creates the done file (once: an existing one is left alone).
func (n *NodePull) Done() error {
	if n.DoneFile == "" {
		return nil
	}
	f, err := os.OpenFile(n.DoneFile, os.O_CREATE|os.O_WRONLY, 0o666)
	if err != nil {
		return fmt.Errorf("creating done file: %w", err)
	}
	return f.Close()
}

// Import runs the import of o with the node-pull handshake around it:
// wait for the ready file and take the disk file's name from it, import,
// then add the server's labels (a label the import found itself wins) and
// create the done file. A nil n imports o as it is.
func (n *NodePull) Import(ctx context.Context, o importer.Options) (*importer.Result, error) {
	if n == nil {
		return importer.Import(ctx, o)
	}
	endpoint, err := n.Wait(ctx, o.Source, o.Logger)
	if err != nil {
		return nil, err
	}
	if endpoint != o.Source && o.Logger != nil {
		o.Logger.Info("Node pull: the server is ready", "endpoint", endpoint)
	}
	o.Source = endpoint
	res, err := importer.Import(ctx, o)
	if err != nil {
		return res, err
	}
	if n.Labels {
		labels, lerr := n.ServerLabels(ctx, endpoint)
		if lerr != nil && o.Logger != nil {
			// CDI's importer, too, completes without the labels.
			o.Logger.Warn("Node pull: no labels from the server", "err", lerr)
		}
		for k, v := range labels {
			if _, ok := res.Labels[k]; !ok {
				if res.Labels == nil {
					res.Labels = map[string]string{}
				}
				res.Labels[k] = v
			}
		}
	}
	if err := n.Done(); err != nil && o.Logger != nil {
		// The image is imported; CDI's importer, too, only logs this.
		o.Logger.Error("Node pull: the server will not learn that the import is done", "err", err)
	}
	return res, nil
}
