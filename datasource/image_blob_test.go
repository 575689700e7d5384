package datasource

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/regtest"
)

// resumeDisk is 1.5 MiB of varied content: random blocks (so the gzip
// layer stays about as large), text and a zero hole.
func resumeDisk() []byte {
	rng := rand.New(rand.NewPCG(6, 4))
	var b bytes.Buffer
	for i := range 3 {
		blk := make([]byte, 384<<10)
		for j := range blk {
			blk[j] = byte(rng.Uint32())
		}
		b.Write(blk)
		b.WriteString(strings.Repeat("text block "+string(rune('a'+i))+"\n", 4096))
	}
	b.Write(make([]byte, 128<<10))
	return b.Bytes()
}

// pushResumeImage pushes a one-layer gzip containerdisk and returns its
// docker:// reference, the layer digest and the disk bytes.
func pushResumeImage(t *testing.T, reg *regtest.Registry) (string, v1.Hash, []byte) {
	data := resumeDisk()
	l := regtest.Layer(t, regtest.Gzip, regtest.File{Name: "disk/", Dir: true}, regtest.File{Name: "disk/disk.img", Data: data})
	d, err := l.Digest()
	require.NoError(t, err)
	size, err := l.Size()
	require.NoError(t, err)
	require.Greater(t, size, int64(1<<20), "the blob must be large enough to be cut several times")
	return "docker://" + reg.Push(t, "bench/resume:v1", regtest.Image(t, regtest.Config{}, l), nil), d, data
}

func readRegistry(t *testing.T, ref string, o Config) (Source, []byte, error) {
	conf, auth := regtest.Hermetic(t)
	o.RegistriesConf, o.AuthFile, o.InsecureTLS = conf, auth, true
	s, err := NewContainerImage(ref, o)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	st, err := s.Open(ctx)
	if err != nil {
		return s, nil, err
	}
	t.Cleanup(func() { st.Body.Close() })
	got, err := io.ReadAll(st.Body)
	return s, got, err
}

// One cut: containers/image itself resumes with "Range: bytes=N-", which
// the test registry serves; we do not retry.
func TestRegistryBlobResumedByContainersImage(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{})
	ref, d, data := pushResumeImage(t, reg)
	reg.DropBlob(d, 300<<10, 1)
	s, got, err := readRegistry(t, ref, Config{Access: Access{RetryBackoff: 10 * time.Millisecond}})
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got), "content differs after a resumed blob")
	assert.Equal(t, []string{"", "bytes=307200-"}, reg.BlobRanges(d))
	assert.Equal(t, 0, Retries(s))
}

// Cuts every 64 KiB, four times: containers/image gives up after its one
// reconnection (too little progress), and our reader fetches the blob
// again, skips what it had and completes with the right content.
func TestRegistryBlobRetriedAfterRepeatedDrops(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{})
	ref, d, data := pushResumeImage(t, reg)
	reg.DropBlob(d, 64<<10, 4)
	s, got, err := readRegistry(t, ref, Config{Access: Access{RetryBackoff: 10 * time.Millisecond}})
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got), "content differs after retried blob transfers")
	assert.GreaterOrEqual(t, Retries(s), 1)
	ranges := reg.BlobRanges(d)
	t.Logf("blob GETs (Range headers): %q; our retries: %d", ranges, Retries(s))
	assert.GreaterOrEqual(t, len(ranges), 4)
}

// A blob that always breaks: bounded retries, then a clear transfer error.
func TestRegistryBlobGivesUpAfterRetries(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{})
	ref, d, _ := pushResumeImage(t, reg)
	reg.DropBlob(d, 64<<10, 1000)
	s, _, err := readRegistry(t, ref, Config{Retries: 2, Access: Access{RetryBackoff: 10 * time.Millisecond}})
	require.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
	assert.Contains(t, err.Error(), "gave up after 2 retries")
	assert.Equal(t, 2, Retries(s))
}

// Without our retries (Retries < 0), the repeated drops fail the import:
// the test above depends on the retry layer, not on luck.
func TestRegistryBlobRepeatedDropsFailWithoutRetries(t *testing.T) {
	reg := regtest.Start(t, regtest.Options{})
	ref, d, _ := pushResumeImage(t, reg)
	reg.DropBlob(d, 64<<10, 4)
	_, _, err := readRegistry(t, ref, Config{Retries: -1})
	require.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
}
