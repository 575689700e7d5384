package qemu

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func collect(chunks ...string) []float64 {
	var got []float64
	w := newProgressWriter(func(v float64) { got = append(got, v) })
	for _, c := range chunks {
		_, _ = w.Write([]byte(c))
	}
	w.Flush()
	return got
}

func TestProgressSplitCR(t *testing.T) {
	assert.Equal(t, []float64{0, 45.34, 100},
		collect("    (0.00/100%)\r    (45.34/100%)\r    (100.00/100%)\r"))
}

func TestProgressSplitLF(t *testing.T) {
	assert.Equal(t, []float64{1.5, 100}, collect("    (1.50/100%)\n    (100.00/100%)\n"))
}

func TestProgressMixedAndSplitAcrossWrites(t *testing.T) {
	// CRLF, a token cut in the middle of a write, a final line without a
	// terminator, and repeated values reported once.
	assert.Equal(t, []float64{3.12, 50, 99.99, 100},
		collect("    (3.1", "2/100%)\r\n", "  (50.00/100%)\r  (50.00/100%)\n(99.99/1", "00%)\r(100.00/100%)"))
}

func TestProgressIgnoresNoise(t *testing.T) {
	assert.Equal(t, []float64{12}, collect("qemu-img: warning\r(abc/100%)\n(12.00/100%)\r(250.00/100%)\n"))
}
