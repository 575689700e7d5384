package cloner_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"testing"

	"github.com/klauspost/compress/s2"

	"github.com/diskimport/engine/internal/cloner"
)

// forgedStream is a sparse-v1 body carrying data with a wrong digest.
func forgedStream(t *testing.T, data []byte) (io.Reader, [sha256.Size]byte) {
	var buf bytes.Buffer
	sw := s2.NewWriter(&buf)
	enc := cloner.NewEncoder(sw)
	wrong := sha256.Sum256(append([]byte("not "), data...))
	for _, err := range []error{enc.Start(int64(len(data)), 0), enc.Data(0, data), enc.End(wrong), sw.Close()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return &buf, wrong
}
