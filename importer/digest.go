package importer

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
)

// ResolveDigest returns the manifest digest a container-image reference
// (docker://, oci-archive:, oci:) resolves to, reading no layer: for a
// multi-platform image, the index's digest. A poller (CDI's DataImportCron)
// compares it with the last import to decide whether to import again.
// Only the source fields of o (credentials, TLS, registry settings,
// Logger) are used.
func ResolveDigest(ctx context.Context, source string, o Options) (string, error) {
	if !datasource.IsContainerImageRef(source) {
		return "", fmt.Errorf("%q is not a container image reference (docker://, oci-archive:, oci:): %w", source, errdefs.ErrInvalidOptions)
	}
	c, err := sourceConfig(o)
	if err != nil {
		return "", err
	}
	return datasource.ResolveDigest(ctx, source, c)
}

// ContentDigest returns the content digest of o.Source's disk
// ("blk-sha256:hex", blksum 0.10.1's digest): the guest-visible bytes,
// whatever the container, compression or holes, so one disk as raw,
// qcow2.xz, on a device or in a containerdisk gives one digest, the one an
// import of it records in Result.ContentDigest. Nothing is written: a raw
// file or device is read in place (holes skipped), a raw stream hashed as
// it comes, an image the stream decoder reads decoded into the hash
// (spilling what comes before its tables to o.ScratchDir, as an import
// does). Only what the decoder cannot read (a sparse vmdk, a layout past
// its buffer and spill) is imported into a temporary file in o.ScratchDir,
// removed after; a one-time stream (standard input) too, where the decoder
// gave up within its first replayHeadLimit bytes, which are kept for it.
// o.ScratchDir defaults to the system's temporary directory. The source
// fields of o are used, and ScratchDir and MaxSpill; Target is ignored.
func ContentDigest(ctx context.Context, o Options) (string, error) {
	if o.Source == "" {
		return "", fmt.Errorf("a source is required: %w", errdefs.ErrInvalidOptions)
	}
	if o.MaxSpill < 0 {
		return "", fmt.Errorf("spill limit %d: want a size in bytes, or 0 for none: %w", o.MaxSpill, errdefs.ErrInvalidOptions)
	}
	if o.ScratchDir == "" {
		o.ScratchDir = os.TempDir()
	}
	inner, err := newSource(o)
	if err != nil {
		return "", err
	}
	src := &replayHead{src: inner, limit: replayHeadLimit}
	defer src.Close()
	res, err := digestContent(ctx, digestRequest{
		Source: src, SpillDir: o.ScratchDir, Logger: o.logger(),
		MaxBuffered: o.streamDecodeMaxBuffered, MaxSpill: o.MaxSpill,
	})
	if err == nil {
		return res.Digest.String(), nil
	}
	if !isNotStreamable(err) {
		return "", err
	}
	if src.spent() {
		return "", fmt.Errorf("%w; %s is a one-time stream read past its first %d bytes, so it cannot be imported to be hashed instead", err, src, replayHeadLimit)
	}
	dir, err := os.MkdirTemp(o.ScratchDir, "importer-digest-*")
	if err != nil {
		return "", fmt.Errorf("a temporary file for the digest of %s: %w", o.Source, err)
	}
	defer os.RemoveAll(dir)
	o.Target = filepath.Join(dir, "disk.img")
	o.Format, o.Size, o.Preallocation, o.ExpectContentDigest, o.Verify = "raw", 0, false, "", false
	o.Events, o.Progress = nil, nil
	o.CustomSource, o.SourceReader = src, nil
	ir, err := Import(ctx, o)
	if err != nil {
		return "", err
	}
	if ir.ContentDigest == "" {
		return "", fmt.Errorf("the import of %s gave no content digest: %w", o.Source, errdefs.ErrUnsupportedFormat)
	}
	return ir.ContentDigest, nil
}

// replayHeadLimit is how much of a one-time stream ContentDigest keeps for
// the import that follows a decoder that gave up: the decoder decides from
// the headers (format.Open peeks 64 KiB of each layer; a vmdk's descriptor
// and a tar member's header are within them), and a decompressor's child
// is fed 1 MiB at a time, so a few MiB cover every layer stack it reads.
const replayHeadLimit = 16 << 20

// replayHead is a source opened a second time where its first opening was
// a one-time stream: the second reader replays what the first read (up to
// limit bytes; past it the source is spent) and goes on from where it
// stopped. The first reader may still be in a read when the second opens
// (a decompressor's feeder is not waited for): reads are serialized, what
// it gets is kept for the second, and after the second opened it gets
// nothing more. A source that can be opened again is passed through.
type replayHead struct {
	src   datasource.Source
	limit int

	opens    int
	oneTime  bool
	first    *datasource.Transfer
	mu       sync.Mutex
	head     []byte
	over     bool // the first reader read past limit
	replayed bool // a second opening has the first's body
}

func (h *replayHead) String() string { return h.src.String() }

func (h *replayHead) Open(ctx context.Context) (*datasource.Transfer, error) {
	h.opens++
	switch {
	case h.opens == 1:
		t, err := h.src.Open(ctx)
		if err != nil || !t.Capabilities.OneTime {
			return t, err
		}
		h.oneTime, h.first = true, t
		rec := *t
		rec.Body = io.NopCloser(&headRecorder{h: h})
		return &rec, nil
	case !h.oneTime:
		return h.src.Open(ctx)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.opens > 2 || h.over {
		return nil, fmt.Errorf("source %s is a one-time stream and was already read: %w", h.src, errdefs.ErrInvalidOptions)
	}
	h.replayed = true
	t := *h.first
	t.Body = &headReplayer{h: h}
	return &t, nil
}

// spent says whether a one-time stream was read too far to be opened again.
func (h *replayHead) spent() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.oneTime && h.over
}

// Close closes the first opening's body unless a second opening took it
// over (and closes it).
func (h *replayHead) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.first == nil || h.replayed {
		return nil
	}
	return h.first.Body.Close()
}

// headRecorder reads the first opening's body and keeps what it read while
// that is at most limit bytes.
type headRecorder struct{ h *replayHead }

func (r *headRecorder) Read(p []byte) (int, error) {
	h := r.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.replayed {
		return 0, fmt.Errorf("source %s: opened again: %w", h.src, io.ErrClosedPipe)
	}
	n, err := h.first.Body.Read(p)
	if !h.over {
		if len(h.head)+n > h.limit {
			h.over, h.head = true, nil
		} else {
			h.head = append(h.head, p[:n]...)
		}
	}
	return n, err
}

// headReplayer is the second opening's body: the kept head, then the rest.
type headReplayer struct {
	h   *replayHead
	off int
}

func (r *headReplayer) Read(p []byte) (int, error) {
	h := r.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.off < len(h.head) {
		n := copy(p, h.head[r.off:])
		r.off += n
		return n, nil
	}
	h.head = nil
	return h.first.Body.Read(p)
}

func (r *headReplayer) Close() error { return r.h.first.Body.Close() }
