package engine

import (
	"context"
	"fmt"
	"io"
	"maps"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/iostage"
)

// openSource starts the transfer and builds the read side of the pipeline:
// source → counter (progress) → checksum tee (the bytes as received) →
// decompressors → the image. It records what it found in the result.
func (j *job) openSource(ctx context.Context) (*datasource.Stream, *format.Stream, error) {
	st, err := j.source.Open(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to connect to data source %s: %w", j.source, err)
	}
	j.body = st.Body
	j.takeSourceLabels()
	j.sourceSize.Store(st.Size)
	counter := iostage.NewCounter(st.Body)
	j.counter.Store(counter)
	j.verifier = iostage.NewVerifier(j.checksums)
	j.wire = counter
	if j.verifier != nil {
		j.wire = io.TeeReader(counter, j.verifier)
	}
	img, err := format.Open(ctx, j.wire, format.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("reading the header of %s: %w", j.source, err)
	}
	j.image = img
	j.result.SourceFormat = string(img.Format)
	for _, c := range img.Compressions {
		j.result.Compressions = append(j.result.Compressions, string(c))
	}
	return st, img, nil
}

// takeSourceLabels copies labels a source derives from its image (the
// KUBEVIRT_IO_ env vars of a containerdisk) into the result.
func (j *job) takeSourceLabels() {
	l, ok := j.source.(datasource.Labeler)
	if !ok {
		return
	}
	labels := l.Labels()
	if len(labels) == 0 {
		return
	}
	if j.result.Labels == nil {
		j.result.Labels = map[string]string{}
	}
	maps.Copy(j.result.Labels, labels)
}
