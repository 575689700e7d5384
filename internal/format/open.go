package format

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/ctxio"
	"github.com/diskimport/engine/internal/iostage"
)

// Options tune Open. The zero value gives the defaults.
type Options struct {
	// MaxXZDictionary refuses xz streams whose first block asks for a larger
	// LZMA2 dictionary. Default 128 MiB: twice what the largest preset
	// (xz -9, 64 MiB) uses, so custom dict=128MiB archives still open, while
	// a hostile header cannot make us allocate up to 4 GiB.
	MaxXZDictionary int64
	// MaxZstdWindow refuses zstd frames with a larger window. Default
	// 128 MiB: what `zstd --ultra -22` and `--long=27` use.
	MaxZstdWindow uint64
	// ExternalXZ is the xz binary used to decode xz when there is no
	// InflateChild: "" looks up "xz" on PATH, "-" never uses one (pure Go
	// ulikunitz/xz).
	ExternalXZ string
	// ExternalGzip is the igzip (ISA-L) binary used to decode gzip: ""
	// looks up "igzip" on PATH, "-" never uses one (klauspost's gzip).
	ExternalGzip string
	// InflateChild is the diskimport-inflate binary (native/inflate),
	// which decodes gzip and xz into shared memory instead of a pipe and
	// is preferred to igzip and xz, and inflates a stream decoder's
	// compressed grains and clusters (StartBlockInflater): "" looks up
	// "diskimport-inflate" on PATH, "-" never uses one. It must be the
	// build of this tree (its ring protocol, inflateProtocol): another
	// fails the decode with errdefs.ErrInvalidOptions naming it.
	InflateChild string
	// MaxNesting is how many compression layers are peeled at most
	// (default 3); more is refused as unsafe.
	MaxNesting int
	// PeekSize is how much of each layer is examined (default 64 KiB, also
	// the minimum: the ISO 9660 magic sits at 0x8001).
	PeekSize int
	// MaxVirtualSize refuses images announcing a larger disk (default
	// 64 TiB).
	MaxVirtualSize int64
	// ForceRaw takes the innermost stream, once the gzip, xz, zstd and lz4
	// layers are removed, as a raw disk whatever its bytes look like: no
	// image format is detected, and text, archives and other compressions
	// are not refused (--format-in raw).
	ForceRaw bool
	// WholeTar keeps a tar as the content (the archive content type)
	// instead of opening its one disk member.
	WholeTar bool
	// ContentType is the HTTP Content-Type of the source, if any: with a
	// text type, an uncompressed stream without image magic and without a
	// NUL byte in its first KiB is refused as a text page.
	ContentType string
	// FromServer words a text refusal as a page a server returned (HTTP,
	// S3, GCS sources) rather than a text source.
	FromServer bool
	// Logger receives debug messages; nil means slog.Default().
	Logger *slog.Logger
}

// Defaults for Options.
const (
	DefaultMaxXZDictionary int64  = 128 << 20
	DefaultMaxZstdWindow   uint64 = 128 << 20
	DefaultMaxNesting             = 3
)

func (o Options) withDefaults() Options {
	if o.MaxXZDictionary <= 0 {
		o.MaxXZDictionary = DefaultMaxXZDictionary
	}
	if o.MaxZstdWindow == 0 {
		o.MaxZstdWindow = DefaultMaxZstdWindow
	}
	if o.MaxNesting <= 0 {
		o.MaxNesting = DefaultMaxNesting
	}
	if o.PeekSize < DefaultPeekSize {
		o.PeekSize = DefaultPeekSize
	}
	if o.MaxVirtualSize <= 0 {
		o.MaxVirtualSize = DefaultMaxVirtualSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// xzBinary is the external xz to run, or "" for the Go decoder.
func (o Options) xzBinary() string {
	return externalTool(o.ExternalXZ, "xz")
}

// externalTool reads an Options.External* setting: "-" is the Go decoder
// (""), "" the named tool from PATH when it is installed, anything else
// the tool's path.
func externalTool(setting, name string) string {
	switch setting {
	case "-":
		return ""
	case "":
		p, err := exec.LookPath(name)
		if err != nil {
			return ""
		}
		return p
	}
	return setting
}

// Image is an image with its compression layers peeled off. Reading it
// yields the image bytes from the first one on.
type Image struct {
	io.Reader
	Format       Format
	Compressions []Compression // outermost first (Tar for a tar's member)
	Header       Header
	// Member is the name of the tar member read as the image, when a
	// Compressions layer is Tar, and MemberSize its size in bytes.
	Member     string
	MemberSize int64

	decoders []*decoder // outermost first
}

// RawMemberSize is the size of a raw disk read straight from a tar member
// (no compression inside the tar), as the member's header gave it; 0 for
// any other image.
func (s *Image) RawMemberSize() int64 {
	if s.Format.NeedsConversion() || len(s.Compressions) == 0 || s.Compressions[len(s.Compressions)-1] != Tar {
		return 0
	}
	return s.MemberSize
}

// Open peels compression layers off r (nested ones too: qcow2.xz,
// raw.gz.zst...), sniffs and parses the header of the innermost stream and
// returns a reader positioned at the start of the image: the peeked bytes
// are replayed. The caller must Close the stream.
func Open(ctx context.Context, r io.Reader, o Options) (*Image, error) {
	o = o.withDefaults()
	s := &Image{}
	cur := r
	for {
		if err := ctx.Err(); err != nil {
			s.Close()
			return nil, fmt.Errorf("format: %w: %w", errdefs.ErrCancelled, err)
		}
		br := bufio.NewReaderSize(cur, o.PeekSize)
		head, err := br.Peek(o.PeekSize)
		if err != nil && !errors.Is(err, io.EOF) {
			s.Close()
			return nil, err
		}
		c, f, err := Detect(head)
		if o.ForceRaw && c == None {
			f, err = Raw, nil
		}
		if err != nil {
			s.Close()
			return nil, err
		}
		if c == None && len(head) == 0 {
			// Zero bytes, as sent or once decompressed: calling that a
			// disk would leave whatever the target held under a
			// "complete" label.
			s.Close()
			return nil, errEmptySource(s.Compressions)
		}
		if c == None && f == Raw && !o.ForceRaw {
			if err := checkNotImage(head); err != nil {
				s.Close()
				return nil, err
			}
			if IsTar(head) && !o.WholeTar && s.Member == "" {
				if len(s.Compressions) >= o.MaxNesting {
					s.Close()
					return nil, fmt.Errorf("format: more than %d nested layers (%v, then tar): %w", o.MaxNesting, s.Compressions, errdefs.ErrUnsafeImage)
				}
				l, err := openTarMember(br, o.PeekSize)
				if err != nil {
					s.Close()
					return nil, err
				}
				o.Logger.Debug("reading the disk image member of a tar", "member", l.name)
				s.Compressions = append(s.Compressions, Tar)
				s.Member, s.MemberSize = l.name, l.size
				cur = l
				continue
			}
			if err := checkText(head, s.Compressions, o); err != nil {
				s.Close()
				return nil, err
			}
		}
		if c == None {
			h, err := ParseHeaderMax(f, head, o.MaxVirtualSize)
			if err != nil {
				s.Close()
				return nil, &HeaderError{Format: f, Compressions: s.Compressions, Err: err}
			}
			s.Reader = ctxio.NewReader(ctx, "format", peeked{br, cur})
			s.Format, s.Header = f, h
			o.Logger.Debug("image opened", "format", f, "compressions", s.Compressions, "virtualSize", h.VirtualSize)
			return s, nil
		}
		if len(s.Compressions) >= o.MaxNesting {
			s.Close()
			return nil, fmt.Errorf("format: more than %d nested compression layers (%v, then %s): %w", o.MaxNesting, s.Compressions, c, errdefs.ErrUnsafeImage)
		}
		d, err := newDecoder(ctx, c, br, head, o)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.decoders = append(s.decoders, d)
		s.Compressions = append(s.Compressions, c)
		cur = d
	}
}

// peeked is a stream whose head br peeked: br's bytes, then the stream
// itself, read through br, or straight (its runs of zeros passing as
// runs) by ReadRun once br holds nothing.
type peeked struct {
	br     *bufio.Reader
	stream io.Reader
}

func (p peeked) Read(b []byte) (int, error) { return p.br.Read(b) }

// ReadRun is Read, passing on the stream's runs (iostage.RunReader).
func (p peeked) ReadRun(b []byte) (int, int64, error) {
	if p.br.Buffered() > 0 {
		n, err := p.br.Read(b)
		return n, 0, err
	}
	return iostage.ReadRun(p.stream, b)
}

// KnowsRuns says whether the stream gives runs.
func (p peeked) KnowsRuns() bool { return iostage.KnowsRuns(p.stream) }

// ReadRun is the image's Read, passing on runs of zeros the stream knows
// (a decoder child's), and KnowsRuns says whether it does
// (iostage.RunReader).
func (s *Image) ReadRun(p []byte) (int, int64, error) { return iostage.ReadRun(s.Reader, p) }
func (s *Image) KnowsRuns() bool                      { return iostage.KnowsRuns(s.Reader) }

// HeaderError is the refusal of an image's header; it names the format
// and the compression layers found before it, so that the refusal can
// still tell what the image is.
type HeaderError struct {
	Format       Format
	Compressions []Compression
	Err          error
}

func (e *HeaderError) Error() string { return e.Err.Error() }
func (e *HeaderError) Unwrap() error { return e.Err }

// Close stops the decoders (and an external xz process). Stopping early is
// not an error; Close reports only a failure to stop.
func (s *Image) Close() error {
	var errs []error
	for i := len(s.decoders) - 1; i >= 0; i-- {
		if err := s.decoders[i].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.decoders = nil
	return errors.Join(errs...)
}

// errEmptySource names the source as empty, and which layers it passed.
func errEmptySource(layers []Compression) error {
	if len(layers) == 0 {
		return fmt.Errorf("format: the source is empty: %w", errdefs.ErrInvalidImage)
	}
	return fmt.Errorf("format: the source is empty (0 bytes once %v compression is removed): %w", layers, errdefs.ErrInvalidImage)
}
