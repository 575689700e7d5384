package importer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
)

// memSource is a caller's own source: a disk held in memory.
type memSource struct {
	disk  []byte
	opens atomic.Int32
	fail  error
}

func (m *memSource) Open(context.Context) (*datasource.Transfer, error) {
	m.opens.Add(1)
	if m.fail != nil {
		return nil, m.fail
	}
	return &datasource.Transfer{Body: io.NopCloser(bytes.NewReader(m.disk)), Size: int64(len(m.disk))}, nil
}

func (m *memSource) String() string { return "mem" }

// A caller's own Source reaches Import, whole or through a Registry, and
// the target holds its bytes; its errors come back in the chain.
func TestImportTakesTheCallersSource(t *testing.T) {
	disk := bytes.Repeat([]byte{0xeb, 0x3c, 0x90, 0x4d}, 256<<10)
	disk[510], disk[511] = 0x55, 0xaa
	dir := t.TempDir()
	src := &memSource{disk: disk}
	target := filepath.Join(dir, "a.img")
	res, err := importer.Import(context.Background(), importer.Options{CustomSource: src, Target: target, Logger: testLogger(t)})
	require.NoError(t, err)
	assert.True(t, res.Complete)
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, disk, got)
	assert.Equal(t, int32(1), src.opens.Load())

	reg := datasource.Builtin()
	reg.Register("mem://", func(string, datasource.Config) (datasource.Source, error) { return src, nil })
	target = filepath.Join(dir, "b.img")
	_, err = importer.Import(context.Background(), importer.Options{Source: "mem://disk", Registry: reg, Target: target, Logger: testLogger(t)})
	require.NoError(t, err)
	got, err = os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, disk, got)

	gone := errors.New("the disk went away")
	_, err = importer.Import(context.Background(), importer.Options{CustomSource: &memSource{fail: gone}, Target: filepath.Join(dir, "c.img"), Logger: testLogger(t)})
	require.ErrorIs(t, err, gone)
	assert.NoFileExists(t, filepath.Join(dir, "c.img"))

	_, err = importer.Import(context.Background(), importer.Options{Source: "mem://disk", Target: filepath.Join(dir, "d.img"), Logger: testLogger(t)})
	require.ErrorIs(t, err, importer.ErrInvalidOptions, "the built-in registry knows no mem://")
}
