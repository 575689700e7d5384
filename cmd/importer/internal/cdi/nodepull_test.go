package cdi

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// nodePullOf is the handshake as the controller's environment gives it,
// its ready file in dir.
func nodePullOf(t *testing.T, dir string, extra map[string]string) *NodePull {
	env := map[string]string{"IMPORTER_PULL_METHOD": "node", "IMPORTER_READY_FILE": filepath.Join(dir, "ready"), "IMPORTER_DONE_FILE": filepath.Join(dir, "done")}
	for k, v := range extra {
		env[k] = v
	}
	n, err := nodePull(envOf(env))
	require.NoError(t, err)
	return n
}

// A kubelet pull of the containerdisk that takes 1m54s (CDI issue 4253):
// the ready file appears then, and the wait, logged every 15 s, takes it.
// CDI's importer (and ours before) failed the import at 60 s.
func TestNodePullWaitOutlastsASlowPull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		n := nodePullOf(t, dir, nil)
		const pull = 114 * time.Second
		go func() {
			time.Sleep(pull)
			os.WriteFile(n.ReadyFile, []byte("fedora.qcow2\n"), 0o644)
		}()
		var log bytes.Buffer
		start := time.Now()
		endpoint, err := n.Wait(context.Background(), "http://localhost:8100/disk.img", slog.New(slog.NewTextHandler(&log, nil)))
		require.NoError(t, err, log.String())
		assert.Equal(t, "http://localhost:8100/fedora.qcow2", endpoint)
		waited := time.Since(start)
		assert.GreaterOrEqual(t, waited, pull)
		assert.Less(t, waited, pull+time.Second, "taken as soon as it appears")
		assert.Equal(t, int(pull/readyFileLogEvery), strings.Count(log.String(), "waiting for the ready file"), "one line per 15 s of waiting:\n%s", log.String())
		assert.Contains(t, log.String(), "waited=1m45s limit=30m0s")
		assert.Contains(t, log.String(), `msg="Node pull: the ready file appeared"`)
	})
}

// No ready file ever (the pull never ends): the wait is bounded, and fails
// with CDI's text.
func TestNodePullWaitIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := nodePullOf(t, t.TempDir(), nil)
		start := time.Now()
		_, err := n.Wait(context.Background(), "http://localhost:8100/disk.img", nil)
		assert.Equal(t, ReadyFileTimeout, time.Since(start))
		assert.Equal(t, "Timeout waiting for file "+n.ReadyFile, FailureText(Import, err))
		assert.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
	})
}

// IMPORTER_READY_FILE_TIMEOUT replaces the bound; a pod stopped while it
// waits ends the wait at once.
func TestNodePullWaitTimeoutVariableAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := nodePullOf(t, t.TempDir(), map[string]string{"IMPORTER_READY_FILE_TIMEOUT": "5m"})
		start := time.Now()
		_, err := n.Wait(context.Background(), "http://localhost:8100/disk.img", nil)
		assert.Equal(t, 5*time.Minute, time.Since(start))
		assert.Error(t, err)

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Second, cancel)
		start = time.Now()
		_, err = n.Wait(ctx, "http://localhost:8100/disk.img", nil)
		assert.Equal(t, 20*time.Second, time.Since(start))
		assert.True(t, errors.Is(err, errdefs.ErrCancelled), "%v", err)
	})
}

// A ready file seen between its creation and its write (empty) is read
// again a poll later and its name taken; one that stays empty means the
// controller's disk.img. CI once read "disk.img" for a name written a
// moment after the file appeared.
func TestNodePullReadsAnEmptyReadyFileAgain(t *testing.T) {
	for _, tc := range []struct {
		name, later, want string
	}{
		{"named a moment later", "fedora.qcow2", "http://localhost:8100/fedora.qcow2"},
		{"stays empty", "", "http://localhost:8100/disk.img"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := nodePullOf(t, t.TempDir(), nil)
				require.NoError(t, os.WriteFile(n.ReadyFile, nil, 0o644))
				go func() {
					time.Sleep(n.poll / 2)
					if tc.later != "" {
						os.WriteFile(n.ReadyFile, []byte(tc.later), 0o644)
					}
				}()
				endpoint, err := n.Wait(context.Background(), "http://localhost:8100/disk.img", nil)
				require.NoError(t, err)
				assert.Equal(t, tc.want, endpoint)
			})
		})
	}
}
