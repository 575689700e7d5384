package cdi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseQuantity(t *testing.T) {
	for in, want := range map[string]int64{
		"1Gi": 1073741824, "1G": 1000000000, "10Ki": 10240, "10k": 10000,
		"512": 512, "1.5Mi": 1572864, "": 0, " 2Mi ": 2 << 20,
	} {
		got, err := ParseQuantity(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"abc", "-1", "1Zi", "1e400Gi"} {
		_, err := ParseQuantity(bad)
		assert.Error(t, err, bad)
	}
}
