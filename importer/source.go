package importer

import (
	"context"
	"fmt"
	"io"
	"maps"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/iostage"
)

// sourceReader is the read side of one transfer: source → counter
// (progress) → checksum tee (the bytes as received) → decompressors → the
// image. Info opens it; the phase that reads the image to its end drains it.
type sourceReader struct {
	source   datasource.Source
	body     io.Closer
	wire     io.Reader // the source bytes as received, hashed when checksums are set
	verifier *iostage.Verifier
	image    *format.Image
	size     int64 // the transfer's size, -1 when not known
	// runs, when set, are the bytes as runs (datasource.Runs), taken
	// instead of image: copied as they are, nothing computed over them.
	runs    datasource.Runs
	counter *iostage.Counter
}

// openSource starts the transfer and builds the read side of the pipeline.
// It records what it found in the result.
func (a *attempt) openSource(ctx context.Context) (*datasource.Transfer, error) {
	src := a.req.Source
	st, err := src.Open(ctx)
	if err != nil {
		// Each source's error names it once ("GET URL: ...", "source
		// file X does not exist").
		return nil, err
	}
	r := &sourceReader{source: src, body: st.Body, size: st.Size}
	a.source = r
	a.caps = st.Capabilities
	if err := a.refuseSameVolume(); err != nil {
		return nil, err
	}
	a.takeSourceLabels()
	a.meter.sourceSize.Store(st.Size)
	counter := iostage.NewCounter(st.Body)
	a.meter.counter.Store(counter)
	r.verifier = iostage.NewVerifier(a.req.Checksums)
	r.wire = counter
	if r.verifier != nil {
		r.wire = io.TeeReader(counter, r.verifier)
	}
	img := &format.Image{Reader: r.wire, Format: format.Raw}
	if a.req.ContentType != ContentTypeAsIs {
		img, err = format.Open(ctx, r.wire, format.Options{
			Logger:      a.log,
			ForceRaw:    a.req.FormatIn == formatInRaw,
			WholeTar:    a.req.ContentType == ContentTypeArchive,
			ContentType: st.ContentType,
			FromServer:  st.ContentType != "" || st.HTTPAnswer,
		})
		if err != nil {
			return nil, fmt.Errorf("reading the header of %s: %w", src, err)
		}
	}
	r.image = img
	r.counter = counter
	if st.Runs != nil && a.req.ContentType == ContentTypeAsIs && r.verifier == nil {
		r.runs = st.Runs
	}
	a.result.SourceFormat = string(img.Format)
	for _, c := range img.Compressions {
		a.result.Compressions = append(a.result.Compressions, string(c))
	}
	return st, nil
}

// drain stops the decoders, reads whatever the source still holds (so the
// digest covers every byte received) and verifies the checksums, recording
// them in res.
func (r *sourceReader) drain(a *attempt) error {
	if err := r.image.Close(); err != nil {
		return fmt.Errorf("closing image stream: %w", err)
	}
	if r.verifier == nil {
		return nil
	}
	if _, err := io.Copy(io.Discard, r.wire); err != nil {
		return fmt.Errorf("reading the rest of %s: %w", r.source, err)
	}
	sums, err := r.verifier.Verify()
	if err != nil {
		return fmt.Errorf("verifying %s: %w", r.source, err)
	}
	for _, s := range sums {
		a.result.Checksums = append(a.result.Checksums, s.String())
	}
	a.log.Info("Checksum verified", "checksums", a.result.Checksums)
	return nil
}

func (r *sourceReader) close() {
	if r.image != nil {
		r.image.Close()
	}
	r.body.Close()
}

// takeSourceLabels copies labels a source derives from its image (the
// KUBEVIRT_IO_ env vars of a containerdisk) into the result.
func (a *attempt) takeSourceLabels() {
	l, ok := a.req.Source.(datasource.Labeler)
	if !ok {
		return
	}
	labels := l.Labels()
	if len(labels) == 0 {
		return
	}
	if a.result.Labels == nil {
		a.result.Labels = map[string]string{}
	}
	maps.Copy(a.result.Labels, labels)
}
