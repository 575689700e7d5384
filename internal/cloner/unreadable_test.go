package cloner_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// TestCloneSourceReadErrorIsTheCause: a source device whose reads fail
// past half its size (EIO: a loop device whose backing file was cut after
// it was attached) ends the clone with that read error, naming the
// device, at once: a sparse-v2 clone does not resume as if the connection
// had dropped, and in neither protocol does the upload server complete an
// import.
func TestCloneSourceReadErrorIsTheCause(t *testing.T) {
	dir := t.TempDir()
	backing := testimg.Raw(t, dir, "source.img", 8*mib, 3)
	src := testimg.AttachLoop(t, backing, "--direct-io=on")
	require.NoError(t, os.Truncate(backing, 4*mib))
	p := newPKI(t)
	for _, protocol := range []string{cloner.ProtocolSparseV2, cloner.ProtocolSnappy} {
		t.Run(protocol, func(t *testing.T) {
			dst := testimg.LoopDevice(t, t.TempDir(), 8*mib)
			s := startServer(t, p, importer.Options{Target: dst})
			res, err := send(t, p, s.url(""), cloner.ContentTypeBlock, src, protocol)
			require.Error(t, err)
			t.Logf("%v", err)
			assert.ErrorIs(t, err, syscall.EIO)
			assert.Contains(t, err.Error(), "read "+src)
			require.NotNil(t, res)
			assert.Zero(t, res.Resumes, "a source that cannot be read whole is not resumed")
			if protocol == cloner.ProtocolSparseV2 {
				assert.Contains(t, err.Error(), "reading clone source at ")
			}
			select {
			case <-s.done:
				assert.Error(t, s.err, "the server completed an import of a source that was never read whole")
			default: // a session waiting for a resume that will not come: nothing completed
			}
		})
	}
}
