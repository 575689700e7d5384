package sandbox_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/internal/sandbox"
)

func TestStderrBufferKeepsHeadAndTail(t *testing.T) {
	b := sandbox.NewStderrBuffer(8, 8)
	for i := range 100 {
		n, err := fmt.Fprintf(b, "%02d", i)
		assert.NoError(t, err)
		assert.Equal(t, 2, n)
	}
	assert.Equal(t, "00010203\n[... 184 bytes omitted ...]\n96979899", b.String())
}

func TestStderrBufferWithoutTailKeepsTheStart(t *testing.T) {
	b := sandbox.NewStderrBuffer(4, 0)
	_, _ = b.Write([]byte(" abcdefgh"))
	assert.Equal(t, "abc", b.String())
	short := sandbox.NewStderrBuffer(64, 64)
	_, _ = short.Write([]byte("  one line\n"))
	assert.Equal(t, "one line", short.String())
	assert.False(t, strings.Contains(short.String(), "omitted"))
}
