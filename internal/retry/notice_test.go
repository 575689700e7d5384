package retry_test

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/internal/retry"
)

// A notice reads as a sentence for a person and gives a log record the
// retry's keys, inlined after its context's, in the order they always had.
func TestNoticeSentenceAndRecord(t *testing.T) {
	n := retry.Notice{
		Attempt: retry.Attempt{N: 2, Max: 5, Delay: 1940 * time.Millisecond, Cause: errors.New("read: connection reset by peer")},
		Failure: "Connection to example.com dropped", Offset: 1288490189,
		Context: []slog.Attr{slog.String("url", "https://example.com/disk.img")},
	}
	assert.Equal(t, "Connection to example.com dropped at 1.2 GiB; retrying in 1.9 s (retry 2 of 5)", n.Sentence())
	n.Offset, n.Delay = 0, 27578*time.Millisecond
	assert.Equal(t, "Connection to example.com dropped; retrying in 28 s (retry 2 of 5)", n.Sentence(), "no 'at' before a byte was read")

	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	log.Warn("HTTP transfer failed, retrying", n.Attr())
	assert.Equal(t, `level=WARN msg="HTTP transfer failed, retrying" url=https://example.com/disk.img retry=2 maxRetries=5 delay=27.578s offset=0 cause="read: connection reset by peer"`+"\n", out.String())
}
