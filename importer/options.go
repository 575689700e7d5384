package importer

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/qemu"
)

// Options describe one import. Source and Target are required. How the
// image is written (TargetOptions) and how the source is reached
// (datasource.Access) are embedded structs, handed on whole: o.Size and
// o.Username set them, and a literal names them:
//
//	importer.Options{Source: src, Target: dst,
//		TargetOptions: importer.TargetOptions{Size: 20 << 30},
//		Access:        datasource.Access{CertDir: "/etc/ca"}}
//
// Unlike the command line, the zero Options wait for a server that is not
// there yet: a connection refused (or a DNS or TLS failure) on the very
// first request is retried like a transfer that broke, up to Retries times
// with Access.RetryBackoff doubling to 30 s, for no longer than
// Access.RetryMaxElapsed (5 minutes), or until ctx ends, as CDI's pods
// need, which may start before their server. A program run by a person
// sets o.NoConnectRetry = true, as the command line does, to fail at once
// with ErrSourceUnreachable.
type Options struct {
	// Source names the image, as the command line's SOURCE does: an
	// http(s) URL, s3://bucket/key or gs://bucket/object (see S3Endpoint),
	// docker://, oci-archive: or oci: for a container disk, a local file
	// or block device path, or "-" for SourceReader (standard input when
	// SourceReader is nil).
	Source string
	// SourceReader supplies the image for Source "-" (an upload stream).
	SourceReader io.Reader
	// S3Endpoint is the S3-compatible server of an s3://bucket/key Source
	// (http(s)://host[:port], path style; "" is AWS, or
	// AWS_ENDPOINT_URL_S3), S3Region its signing region ("" derives it);
	// GCSEndpoint the server of a gs://bucket/object Source ("" is
	// storage.googleapis.com, or STORAGE_EMULATOR_HOST).
	S3Endpoint, S3Region, GCSEndpoint string
	// CustomSource, when set, is the source itself: a caller's own
	// datasource.Source, opened again to restart or verify as the built-in
	// ones are. Source then only names it and may be empty.
	CustomSource datasource.Source
	// Registry, when set, builds the source Source names instead of the
	// built-in one: datasource.Builtin() with the caller's own schemes
	// registered on it.
	Registry *datasource.Registry
	// SourceReaderName is what messages call SourceReader's stream
	// ("reading the header of NAME"); "standard input" when empty.
	SourceReaderName string
	// SourceReaderSize, when positive, is how many bytes SourceReader
	// holds: a target too small for them is refused before a byte is
	// written, and ExactSize can be checked up front. The reader must
	// deliver exactly that many (the caller enforces it).
	SourceReaderSize int64
	// Target is a block device, a file, or an existing directory (the image
	// then goes to DIR/disk.img).
	Target string

	// Checksums are expected digests ("sha256:hex", md5, sha1, sha512) of
	// the bytes as received; all are verified before success is reported.
	Checksums []string
	// TargetOptions say how the image is written: size, format, mode,
	// scratch space, the clone checks, the route's switches. The engine
	// receives them whole.
	TargetOptions

	// Delta makes the clone a delta pass when Target already holds an
	// earlier copy of Source (a file or device source of raw bytes; a
	// target of the same size, or a block device larger than the source,
	// unless ExactSize, as a full clone takes one): only the 64 KiB
	// blocks that differ are written, in place, and Result.Delta reports
	// the pass. A larger device's bytes past the source are left as a
	// full clone leaves them. A target that is no base (none, another
	// size, unreadable, not DeltaBase) gets a full clone instead.
	Delta bool
	// DeltaBase, when set, is the content digest the target must have to
	// be the base of a delta pass: the last pass's Result.ContentDigest.
	DeltaBase string

	// Access is how the source is reached: credentials, headers, TLS
	// trust, the egress policy (nil: none, the command line's default;
	// CDI's env mode denies link-local networks and the metadata service),
	// stalls, retry pacing, parallel connections and a registry image's
	// platform and files. The source receives it whole.
	datasource.Access
	// Retries bounds the re-sent requests after a dropped connection, a
	// stall, a 5xx or a 429: nil means 10, a pointer to 0 none (Retries:
	// new(0)), a pointer to n at most n. The transfer resumes with a Range
	// request, or starts over when the object changed; Access's
	// RetryBackoff and RetryMaxElapsed pace them.
	Retries *int
	// Transport, when set, carries the HTTP requests in place of the one
	// built from CertDir, InsecureTLS and the proxy environment, which it
	// must then apply itself (a custom dialer, a proxy, instrumentation);
	// it cannot be combined with Egress. It must not ask for compressed
	// transfer. TLSConfig, when set and Transport is not, is the TLS
	// configuration of the transport built for the import (its RootCAs
	// replace CertDir's pool). Registry sources use neither:
	// containers/image builds its own client.
	Transport http.RoundTripper
	TLSConfig *tls.Config

	// Progress, when set, is called about once a second from a goroutine of
	// its own, and once more when the import ends.
	Progress func(Progress)
	// Logger receives the phase log; nil logs nothing (a library says
	// nothing unless asked).
	Logger *slog.Logger
	// Qemu runs qemu-img; nil uses qemu-img from PATH, sandboxed, with the
	// package's default limits.
	Qemu *qemu.Runner
	// Events, when set, is called with every Event of the import (phase
	// started or ended, source drained), synchronously from the goroutine
	// running it: it must return quickly.
	Events func(Event)

	// wrapPhase decorates the step of a phase; tests inject faults with it
	// (WithPhaseHook).
	wrapPhase func(Phase, phaseStep) phaseStep
	// streamDecodeMaxBuffered bounds the stream decoder's buffer of
	// clusters that precede their table (WithStreamDecodeBuffer, in tests).
	streamDecodeMaxBuffered int64
}

// TargetOptions say how the image is written: the target's size, format and
// mode, the clone checks, the scratch space and the route's switches. The
// engine receives them as they are (Options embeds them; the conversion to
// the engine's copy of the struct fails to compile when a field is missing
// on either side).
type TargetOptions struct {
	// ContentType is "kubevirt" (default: a disk image), "archive": a tar
	// stream extracted into the Target directory, or "as-is": the source's
	// bytes copied onto the target unchanged, nothing sniffed or
	// decompressed (a raw volume's clone).
	ContentType string

	// Size is the requested volume size in bytes (0: none). A file target is
	// grown, never shrunk, to Size less FilesystemOverhead.
	Size int64
	// FilesystemOverhead is the fraction of a filesystem volume kept free
	// (CDI's rule: usable = round down to 1 MiB of Size/(1+overhead)).
	FilesystemOverhead float64
	// Mode is the permission bits of a new file target; 0 means 0660, as
	// CDI leaves disk.img (the importer command line passes what the umask
	// allows, or --mode).
	Mode os.FileMode
	// Format of a file target: "raw" (default) or "qcow2". Block targets are
	// always raw.
	Format string
	// FormatIn is the source's format: "" (default) detects it, and refuses
	// what is not a disk image (a text page, an archive, a compression the
	// engine does not remove); "raw" takes the bytes, once gzip, xz, zstd
	// and lz4 are removed, as a raw disk whatever they look like.
	FormatIn string
	// ScratchDir receives the decompressed image when a format needs random
	// access and the source is a stream. Default: os.TempDir().
	ScratchDir string
	// NoScratch gives the import no scratch space at all (ScratchDir must
	// be empty): an image that needs it fails with ErrScratchSpaceRequired
	// before a byte reaches the target, and the stream decoder spills
	// nothing. CDI's pods set it when no scratch volume is mounted.
	NoScratch bool
	// Preallocation allocates the whole file target (falloc, falling back to
	// full for qemu-img; fallocate for streamed files).
	Preallocation bool
	// CacheMode for qemu-img convert's target: "none" (O_DIRECT) or
	// "writeback" (the page cache); "" (the default) and "trynone" mean none
	// where the target's filesystem accepts O_DIRECT (always for block
	// devices), else writeback. Anything else is ErrInvalidOptions.
	CacheMode string
	// AllowSparseOvercommit lets an image larger than a file target's free
	// space be written when it is sparse, as qemu-img convert does: the
	// size check uses Size (when set), not the free space, and a write past
	// the real space fails. Off by default: the image must fit the free
	// space, so a full filesystem is found before a byte is written.
	AllowSparseOvercommit bool

	// Clone options, for a local file or block device source.
	// ExactSize requires the target to be exactly the source's virtual size
	// (a storage migration): a device of that size, or a file that ends up
	// that size; anything else is refused before a byte is written.
	ExactSize bool
	// Verify re-reads source and target after the copy and compares them
	// (sha256 digests for raw copies, qemu-img compare for converted
	// images); a difference fails the import with ErrVerifyMismatch.
	Verify bool
	// ExpectContentDigest fails the import with ErrChecksumMismatch,
	// before it completes and with the target removed, when the content
	// digest of the disk written (Result.ContentDigest) is another one:
	// "blk-sha256:HEX" or the HEX blksum prints.
	ExpectContentDigest string
	// ZeroTarget zeroes a whole block target first (BLKZEROOUT) so zero
	// blocks of the source can be skipped; where the device cannot, zero
	// blocks are written as without it.
	ZeroTarget bool

	// NoRangedRead always copies a convertible image from HTTP to scratch,
	// even when the server serves byte ranges and qemu-img could read it in
	// place (through an NBD export of our own range reader).
	NoRangedRead bool
	// NoStreamDecode copies a streamed qcow2, streamOptimized vmdk,
	// dynamic VHD, VDI or VHDX to scratch and converts it with qemu-img,
	// instead of decoding it straight onto a raw target in one pass.
	// Without it the decoder is used for every source, stdin and uploads
	// included: what arrives before the tables that map it is held in
	// memory up to a bound and spilled to ScratchDir past it (ScratchUsed
	// and ScratchBytes then say so). A layout the decoder cannot follow at
	// all starts the import over through scratch when the source can be
	// read again, and fails otherwise.
	NoStreamDecode bool
	// MaxSpill caps the stream decoder's spill file in ScratchDir (0: no
	// cap). The spill never exceeds the image's virtual size either, the
	// most a legitimate image needs held; an image that needs more is
	// taken through scratch and qemu-img when the source can be read
	// again, and refused otherwise.
	MaxSpill int64
}

// Progress is a snapshot of a running import.
type Progress struct {
	Phase Phase
	// BytesRead counts the bytes received from the source (compressed).
	BytesRead int64
	// SourceSize is the total to receive, or -1 when the source does not say.
	SourceSize int64
	// BytesWritten counts image bytes accepted by the target or scratch file.
	BytesWritten int64
	// Percent is the whole import's progress: it never goes back, stays
	// below 100 until the data is durable and is 100 only in PhaseComplete;
	// -1 until something is known (a stream of unknown length). On the
	// scratch route the transfer fills the first half, the conversion the
	// second.
	Percent float64
	// PhasePercent is the current phase's own progress: qemu-img's during
	// Convert, else BytesRead/SourceSize when known, else -1.
	PhasePercent float64
}

// EgressPolicy is the allow and deny lists of networks (Options.Egress);
// datasource.DefaultEgressDeny and datasource.ParseEgressList build them.
type EgressPolicy = datasource.EgressPolicy

// logger is o.Logger, or one that drops everything.
func (o Options) logger() *slog.Logger { return orDiscard(o.Logger) }

// orDiscard is l, or a logger that drops every record when l is nil.
func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
