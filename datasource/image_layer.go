package datasource

import (
	"archive/tar"
	"bufio"
	"context"
	_ "crypto/sha256" // digest algorithms of layer blobs
	_ "crypto/sha512"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"

	digest "github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/types"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
)

// layerReader is one layer blob on its way through digest verification,
// decompression and the tar reader.
type layerReader struct {
	info     types.BlobInfo
	ref      string
	blob     io.ReadCloser
	src      *recordingReader // the raw blob, failures remembered
	verifier digest.Verifier
	raw      *bufio.Reader // hashed bytes, buffered for sniffing
	decomp   io.Reader
	closeDec func() error
	tr       *tar.Reader
}

// recordingReader remembers the first error of the blob transfer that is
// not io.EOF, so a decoder error caused by a broken connection is reported
// as the transfer's failure rather than as a damaged image.
type recordingReader struct {
	r   io.Reader
	err error
}

func (s *recordingReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

func (s *imageSource) openLayer(ctx context.Context, p *pulledImage, info types.BlobInfo, cache types.BlobInfoCache) (*layerReader, error) {
	ref := s.ref
	if err := info.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("image %s: layer digest %q: %w: %w", ref, info.Digest, errdefs.ErrInvalidImage, err)
	}
	// Broken transfers are resumed below the digest verifier, so the
	// verifier sees each byte of the blob once.
	blob, err := openBlob(ctx, p.src, info, cache, p.relay, ref, s.budget, s.log)
	if err != nil {
		return nil, p.pullError(ctx, ref, err)
	}
	l := &layerReader{info: info, ref: ref, blob: blob, verifier: info.Digest.Verifier()}
	// The digest covers the blob as stored, so it is taken below every
	// decoder; GetBlob itself does not verify.
	l.src = &recordingReader{r: blob}
	l.raw = bufio.NewReaderSize(io.TeeReader(l.src, l.verifier), 64<<10)
	if err := l.startDecompression(ctx); err != nil {
		l.close()
		return nil, err
	}
	l.tr = tar.NewReader(l.decomp)
	return l, nil
}

// startDecompression sniffs the blob rather than trusting its media type
// (docker and OCI spell them differently, and some registries lie). The
// decoders are the format package's, with its limits (a zstd window is
// capped, so a hostile frame header cannot make us allocate gigabytes).
func (l *layerReader) startDecompression(ctx context.Context) error {
	head, err := l.raw.Peek(layerSniffLen)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return l.readError(err)
	}
	l.decomp, l.closeDec = l.raw, func() error { return nil }
	// Layers are tar, tar+gzip or tar+zstd; anything else is read as a
	// tar and fails as such.
	switch c, _ := format.Sniff(head); c {
	case format.Gzip, format.Zstd:
		dec, err := format.NewDecompressor(ctx, c, l.raw, format.Options{})
		if err != nil {
			return l.readError(err)
		}
		l.decomp, l.closeDec = dec, dec.Close
	}
	return nil
}

// layerSniffLen covers the compression magics, a zstd skippable frame's
// included.
const layerSniffLen = 16

// findDisk walks the tar entries up to the first regular file under disk/
// and returns its header, or nil when the layer has none (it is then read
// to its end).
func (l *layerReader) findDisk() (*tar.Header, error) {
	for {
		h, err := l.tr.Next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, l.readError(err)
		}
		name, ok, err := diskEntryName(h.Name)
		if err != nil {
			return nil, fmt.Errorf("image %s, layer %s: %w", l.ref, l.info.Digest, err)
		}
		if !ok || (h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeRegA) {
			continue
		}
		h.Name = name
		return h, nil
	}
}

// diskEntryName says whether a tar entry name is a file under disk/ (as
// "disk/x", "./disk/x" or "/disk/x"), returning it cleaned. Whiteouts are
// skipped; a name that climbs out of disk/ is refused.
func diskEntryName(name string) (string, bool, error) {
	n := strings.TrimLeft(strings.TrimPrefix(name, "./"), "/")
	if !strings.HasPrefix(n, registryDiskDir) {
		return "", false, nil
	}
	clean := path.Clean(n)
	if clean == "disk" {
		return "", false, nil // the directory itself
	}
	if !strings.HasPrefix(clean, registryDiskDir) {
		return "", false, fmt.Errorf("layer entry %q escapes disk/: %w", name, errdefs.ErrUnsafeImage)
	}
	if strings.HasPrefix(path.Base(clean), ".wh.") {
		return "", false, nil
	}
	return clean, true, nil
}

// finish reads the rest of the layer (the decoder first, so its own
// checks run, then any bytes after the compressed stream) and checks the
// blob's digest.
func (l *layerReader) finish() error {
	if _, err := io.Copy(io.Discard, l.decomp); err != nil {
		return l.readError(err)
	}
	if _, err := io.Copy(io.Discard, l.raw); err != nil {
		return l.readError(err)
	}
	if !l.verifier.Verified() {
		return fmt.Errorf("image %s: layer %s: digest mismatch: the blob received does not match its digest: %w",
			l.ref, l.info.Digest, errdefs.ErrInvalidImage)
	}
	return nil
}

// readError names a failure while reading the layer: the transfer's own
// error when the blob read failed, else a damaged layer.
func (l *layerReader) readError(err error) error {
	if l.src.err != nil {
		return fmt.Errorf("image %s: reading layer %s: %w: %w", l.ref, l.info.Digest, errdefs.ErrSourceUnreachable, l.src.err)
	}
	if errors.Is(err, errdefs.ErrCancelled) {
		return err
	}
	// The decoder's errors are classified already (a window too large is
	// unsafe, a broken stream invalid); tar's are a damaged layer.
	if errors.Is(err, errdefs.ErrUnsafeImage) || errors.Is(err, errdefs.ErrInvalidImage) {
		return fmt.Errorf("image %s: layer %s: %w", l.ref, l.info.Digest, err)
	}
	return fmt.Errorf("image %s: layer %s is damaged: %w: %w", l.ref, l.info.Digest, errdefs.ErrInvalidImage, noShortRead(err))
}

func (l *layerReader) close() {
	if l.closeDec != nil {
		l.closeDec()
	}
	l.blob.Close()
}

// registryBody is the disk file inside a layer. When the file ends it
// reads the rest of the layer and checks the blob digest before reporting
// io.EOF, so a corrupted blob fails the import before success is
// reported. The engine may read it from a decoder goroutine and close it
// from another, hence the lock.
type registryBody struct {
	mu     sync.Mutex
	ctx    context.Context
	layer  *layerReader
	image  *pulledImage
	err    error // sticky
	eof    bool
	closed bool
}

func (b *registryBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return 0, fmt.Errorf("image %s: %w", b.layer.ref, errdefs.ErrClosed)
	case b.err != nil:
		return 0, b.err
	case b.eof:
		return 0, io.EOF
	}
	if err := b.ctx.Err(); err != nil {
		b.err = fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
		return 0, b.err
	}
	n, err := b.layer.tr.Read(p)
	switch {
	case err == io.EOF:
		if ferr := b.layer.finish(); ferr != nil {
			b.err = redactErrorURLs(ferr)
			return n, b.err
		}
		b.eof = true
		return n, io.EOF
	case err != nil:
		b.err = redactErrorURLs(b.layer.readError(err))
		return n, b.err
	}
	return n, nil
}

func (b *registryBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	b.layer.close()
	b.image.close()
	return nil
}
