package uploadserver_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

const deltaVolume = 8 << 20

// phaseLog records the phases an import's events started.
type phaseLog struct {
	mu     sync.Mutex
	phases []importer.Phase
}

func (l *phaseLog) observe(e importer.Event) {
	if e.Kind != importer.EventPhaseStarted {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phases = append(l.phases, e.Phase)
}

func (l *phaseLog) started() []importer.Phase {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]importer.Phase(nil), l.phases...)
}

// waitLast waits for the server's outcome.
func waitLast(t *testing.T, h *uploadserver.Handler) (*importer.Result, error) {
	t.Helper()
	waitStatus(t, h, func(s uploadserver.Status) bool { return s.Phase == "Complete" || s.Phase == "Error" })
	res, err, _ := h.Last()
	return res, err
}

// TestReceivedDeltaPassGoesThroughThePhases: a delta pass sent by
// clone-source's sender is an import of the server's, onto a file
// holding an earlier copy of a volume and onto a filesystem volume's
// directory holding an earlier disk.img: its events start Info,
// TransferDelta, Verify, Commit and Complete in that order, as an
// upload's do, the server's Result is the engine's (its phases, the pass
// received), and the target then holds the source's bytes.
func TestReceivedDeltaPassGoesThroughThePhases(t *testing.T) {
	want := []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDelta, importer.PhaseVerify, importer.PhaseCommit, importer.PhaseComplete}
	for _, c := range []struct {
		name, contentType string
		// extra: the blocks the pass changes beyond the disk's (a small
		// file the target does not have, sent whole).
		extra int64
		// layout makes the source and the target holding an earlier copy
		// of it; the source is then changed at three blocks.
		layout func(t *testing.T) (src, disk, target, dst string)
	}{
		{"volume", cloner.ContentTypeBlock, 0, func(t *testing.T) (string, string, string, string) {
			src := testimg.Raw(t, t.TempDir(), "source.img", deltaVolume, 7)
			dst := filepath.Join(t.TempDir(), "disk.img")
			testimg.CopyOnto(t, src, dst)
			return src, src, dst, dst
		}},
		{"filesystem", cloner.ContentTypeFilesystem, 1, func(t *testing.T) (string, string, string, string) {
			src := t.TempDir()
			disk := testimg.Raw(t, src, "disk.img", deltaVolume, 7)
			require.NoError(t, os.WriteFile(filepath.Join(src, "notes.txt"), []byte("a small file, sent whole"), 0o644))
			dir := t.TempDir()
			dst := filepath.Join(dir, "disk.img")
			testimg.CopyOnto(t, disk, dst)
			return src, disk, filepath.Join(dir, "disk.img"), dst
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, disk, target, dst := c.layout(t)
			changed := testimg.WriteRandomAt(t, disk, 8, 4096, 0, 3<<20, deltaVolume-4096)
			var log phaseLog
			h, url := serve(t, uploadserver.Options{Import: importer.Options{Target: target, Events: log.observe}})

			sent, err := cloner.Send(context.Background(), cloner.Options{
				URL: url + uploadserver.PathUpload, ContentType: c.contentType, Source: src, Delta: true,
				Client: http.DefaultClient, Logger: testimg.Logger(t), RetryDelay: 50e6,
			})
			require.NoError(t, err)
			require.NotNil(t, sent.Delta, "the target was a base")

			res, err := waitLast(t, h)
			require.NoError(t, err)
			assert.Equal(t, want, log.started())
			assert.True(t, res.Complete)
			assert.Equal(t, want, res.Phases, "the Result's phases are the import's")
			require.NotNil(t, res.Delta)
			assert.True(t, res.Delta.Received)
			assert.Equal(t, changed+c.extra, res.Delta.BlocksChanged)
			assert.Positive(t, res.Delta.WireBytes)
			assert.Equal(t, sent.Digest, res.ContentDigest)
			assert.Equal(t, testimg.Digest(t, disk, -1), testimg.Digest(t, dst, -1))
			if c.name == "filesystem" {
				b, err := os.ReadFile(filepath.Join(filepath.Dir(dst), "notes.txt"))
				require.NoError(t, err)
				assert.Equal(t, "a small file, sent whole", string(b))
			}
		})
	}
}

// TestReceivedDeltaPassWithAWrongEndDigestIsNeverComplete: runs whose End
// record names a digest the target does not have after them fail the
// import in Verify: Commit and Complete never start, the server reports
// a verify mismatch, and the target's first and last MiB are left zeroed
// (its held ends never written: no copy anything takes for done) while
// the bytes between them are the base's.
func TestReceivedDeltaPassWithAWrongEndDigestIsNeverComplete(t *testing.T) {
	dst := testimg.Raw(t, t.TempDir(), "disk.img", deltaVolume, 9)
	before, err := os.ReadFile(dst)
	require.NoError(t, err)
	var log phaseLog
	h, url := serve(t, uploadserver.Options{Import: importer.Options{Target: dst, Events: log.observe}})

	post := func(headers map[string]string, body io.Reader) (int, string) {
		req, err := http.NewRequest(http.MethodPost, url+uploadserver.PathUpload, body)
		require.NoError(t, err)
		req.Header.Set(uploadserver.HeaderContentType, uploadserver.ContentTypeBlockdeviceClone)
		req.Header.Set(cloner.ProtocolHeader, cloner.ProtocolSparseV2)
		req.Header.Set(cloner.SessionHeader, "0123456789abcdef")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, answer := post(map[string]string{cloner.DeltaHeader: cloner.DeltaSignature, cloner.SizeHeader: strconv.Itoa(deltaVolume)}, http.NoBody)
	require.Equal(t, http.StatusOK, code, answer)
	sig, err := delta.ReadSignature(s2.NewReader(bytes.NewReader([]byte(answer))), deltaVolume)
	require.NoError(t, err)
	assert.Equal(t, testimg.ContentDigest(t, dst), sig.Digest.String(), "the signature is the target's")

	// A run in each held end and one between, then an End record that
	// names the base's digest: not the target's after the runs.
	var body bytes.Buffer
	sw := s2.NewWriter(&body)
	enc := cloner.NewEncoder(sw)
	run := testimg.RandomBytes(delta.BlockSize, 10)
	for _, err := range []error{
		enc.Start(deltaVolume, 0), enc.Data(0, run), enc.Data(4<<20, run), enc.Data(deltaVolume-delta.BlockSize, run),
		enc.End(sha256.Sum256([]byte("not the target's"))), sw.Close(),
	} {
		require.NoError(t, err)
	}
	code, answer = post(map[string]string{cloner.DeltaHeader: cloner.DeltaApply}, &body)
	assert.GreaterOrEqual(t, code, 400)
	assert.Contains(t, answer, errdefs.ErrVerifyMismatch.Error())

	res, err := waitLast(t, h)
	require.ErrorIs(t, err, errdefs.ErrVerifyMismatch)
	assert.False(t, res != nil && res.Complete)
	phases := log.started()
	assert.Equal(t, []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDelta, importer.PhaseVerify, importer.PhaseError}, phases)
	assert.NotContains(t, phases, importer.PhaseCommit)
	assert.NotContains(t, phases, importer.PhaseComplete)
	testimg.AssertZeros(t, dst, 0, 1<<20)
	testimg.AssertZeros(t, dst, deltaVolume-1<<20, 1<<20)
	after, err := os.ReadFile(dst)
	require.NoError(t, err)
	got := after[1<<20 : deltaVolume-1<<20]
	middle := append([]byte(nil), before[1<<20:deltaVolume-1<<20]...)
	copy(middle[4<<20-1<<20:], run)
	assert.True(t, bytes.Equal(middle, got), "between the ends: the base with the run applied")
}

// TestDiskImagePassIsOfferedAndTakenOnlyOntoADevice: the server offers a
// filesystem volume's disk-image pass (the block pass of its disk.img) in
// its HEAD answer only when its target is a block device, and refuses one
// asked for onto a filesystem volume's disk.img (412: that volume takes
// the volume's pass), leaving the file as it was.
func TestDiskImagePassIsOfferedAndTakenOnlyOntoADevice(t *testing.T) {
	offer := func(t *testing.T, target string) (string, string) {
		_, url := serve(t, uploadserver.Options{Import: importer.Options{Target: target}})
		resp, err := http.Head(url + uploadserver.PathUpload)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, cloner.DeltaV1, resp.Header.Get(cloner.DeltaHeader))
		return resp.Header.Get(cloner.DeltaOfHeader), url
	}
	t.Run("a device", func(t *testing.T) {
		dev := testimg.LoopDevice(t, t.TempDir(), deltaVolume)
		of, _ := offer(t, dev)
		assert.Equal(t, cloner.DeltaOfDiskImage, of)
	})
	t.Run("a filesystem volume's disk.img", func(t *testing.T) {
		dst := testimg.Raw(t, t.TempDir(), "disk.img", deltaVolume, 11)
		before := testimg.Digest(t, dst, -1)
		of, url := offer(t, dst)
		assert.Empty(t, of)
		req, err := http.NewRequest(http.MethodPost, url+uploadserver.PathUpload, http.NoBody)
		require.NoError(t, err)
		for k, v := range map[string]string{
			uploadserver.HeaderContentType: uploadserver.ContentTypeFilesystemClone, cloner.ProtocolHeader: cloner.ProtocolSparseV2,
			cloner.SessionHeader: "0123456789abcdef", cloner.DeltaHeader: cloner.DeltaSignature,
			cloner.DeltaOfHeader: cloner.DeltaOfDiskImage, cloner.SizeHeader: strconv.Itoa(deltaVolume),
		} {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusPreconditionFailed, resp.StatusCode, string(b))
		assert.Contains(t, string(b), "no block device")
		assert.Equal(t, before, testimg.Digest(t, dst, -1))
	})
}
