package datasource_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
)

func TestReadTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "img")
	require.NoError(t, os.WriteFile(p, []byte("0123456789"), 0o644))
	st, err := datasource.NewFile(p).Open(context.Background())
	require.NoError(t, err)
	defer st.Body.Close()
	tail, err := datasource.ReadTail(context.Background(), st, 4)
	require.NoError(t, err)
	assert.Equal(t, "6789", string(tail))
	tail, err = datasource.ReadTail(context.Background(), st, 11)
	require.NoError(t, err)
	assert.Nil(t, tail, "shorter than asked")

	stream, err := datasource.NewReader("upload", strings.NewReader("0123456789")).Open(context.Background())
	require.NoError(t, err)
	tail, err = datasource.ReadTail(context.Background(), stream, 4)
	require.NoError(t, err)
	assert.Nil(t, tail, "a plain stream's end cannot be read ahead")
}
