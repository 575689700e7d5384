package engine

import (
	"context"
	"fmt"
	"os"

	"github.com/diskimport/engine/datasource"
)

// readLastSector returns the last 512 bytes of a source whose end can be
// read ahead of the stream: a local file or device, or an HTTP object
// served with ranges. It returns nil (and no error) for a plain stream.
func readLastSector(ctx context.Context, st *datasource.Stream) ([]byte, error) {
	if st.Size < fixedVHDFooterSize {
		return nil, nil
	}
	tail := make([]byte, fixedVHDFooterSize)
	off := st.Size - fixedVHDFooterSize
	switch {
	case st.LocalPath != "":
		f, err := os.Open(st.LocalPath)
		if err != nil {
			return nil, fmt.Errorf("reading the end of %s: %w", st.LocalPath, err)
		}
		defer f.Close()
		if _, err := f.ReadAt(tail, off); err != nil {
			return nil, fmt.Errorf("reading the last sector of %s: %w", st.LocalPath, err)
		}
		return tail, nil
	case st.Ranged != nil:
		rr, err := st.Ranged.Open(ctx)
		if err != nil {
			return nil, err
		}
		defer rr.Close()
		if n, err := rr.ReadAt(tail, off); err != nil || n != len(tail) {
			// A server that serves no ranges after all: copyRaw still
			// decides at the end of the stream.
			return nil, nil
		}
		return tail, nil
	}
	return nil, nil
}
