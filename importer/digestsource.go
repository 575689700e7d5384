package importer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/streamdecode"
)

// digestRequest is one `importer digest --content`: the source built by
// the facade, where the stream decoder may spill, and the log.
type digestRequest struct {
	Source   datasource.Source
	SpillDir string // "" = no spilling
	Logger   *slog.Logger
	// MaxBuffered bounds the decoder's buffer of clusters that precede
	// their table (streamdecode.Options.MaxBuffered; 0 = its default).
	MaxBuffered int64
	MaxSpill    int64 // the spill file's cap, as request.MaxSpill
}

// digestResult is the content digest of a source's disk and what was found
// on the way.
type digestResult struct {
	Digest       blkhash.Digest
	VirtualSize  int64
	SourceFormat string
	Compressions []string
	// Method is how the bytes were had: "file" (a local raw file or
	// device read in place, holes skipped), "stream" (a raw stream),
	// "stream-decode" (the engine's decoder, its guest writes hashed).
	Method string
}

// digestContent reads a source the way an import does (the same source,
// decompressors and stream decoder) into a content hash instead of a
// target: nothing is written. An image the decoder cannot follow in one
// pass, or a format it does not decode, fails with
// errdefs.ErrNotStreamable; ContentDigest then imports it into a temporary
// file and takes that import's digest.
func digestContent(ctx context.Context, r digestRequest) (digestResult, error) {
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := r.Source.Open(ctx)
	if err != nil {
		return digestResult{}, err
	}
	defer st.Body.Close()
	img, err := format.Open(ctx, st.Body, format.Options{Logger: log})
	if err != nil {
		return digestResult{}, fmt.Errorf("reading the header of %s: %w", r.Source, err)
	}
	defer img.Close()
	res := digestResult{SourceFormat: string(img.Format)}
	for _, c := range img.Compressions {
		res.Compressions = append(res.Compressions, string(c))
	}
	switch {
	case (img.Format == format.Raw || img.Format == format.ISO) && len(img.Compressions) == 0 && st.LocalPath != "":
		res.Method = "file"
		res.Digest, res.VirtualSize, err = digestLocalRaw(ctx, st.LocalPath, st.Size)
	case img.Format == format.Raw || img.Format == format.ISO:
		res.Method = "stream"
		res.Digest, res.VirtualSize, err = digestRawStream(img)
	case streamdecode.Supports(img):
		res.Method = "stream-decode"
		a := blkhash.NewAssembler(0)
		var ds streamdecode.Stats
		ds, err = streamdecode.Decode(ctx, img, img.Format, a, streamdecode.Options{SpillDir: r.SpillDir, MaxBuffered: r.MaxBuffered, MaxSpill: r.MaxSpill})
		if ds.SpilledBytes > 0 {
			log.Info("Clusters that arrived before their tables were spilled to the scratch directory",
				"dir", r.SpillDir, "spilledBytes", ds.SpilledBytes, "peakSpilled", ds.PeakSpilled)
		}
		if err == nil {
			res.VirtualSize = ds.VirtualSize
			res.Digest, err = a.Sum(ds.VirtualSize)
		}
		if err == nil {
			_, err = io.Copy(io.Discard, img) // the decompressors' own checks
		}
	default:
		err = fmt.Errorf("the stream decoder does not read a %s: %w", format.Describe(img.Format, img.Header), errdefs.ErrNotStreamable)
	}
	if err != nil {
		return res, fmt.Errorf("content digest of %s: %w", r.Source, err)
	}
	log.Info("Content digest", "source", r.Source.String(), "contentDigest", res.Digest.String(), "method", res.Method,
		"virtualSize", res.VirtualSize)
	return res, nil
}

// digestLocalRaw hashes a raw file or device in place, less a fixed VHD's
// footer (as the stream route leaves it out of the disk).
func digestLocalRaw(ctx context.Context, path string, size int64) (blkhash.Digest, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return blkhash.Digest{}, 0, err
	}
	defer f.Close()
	if size < 0 {
		if size, err = f.Seek(0, io.SeekEnd); err != nil {
			return blkhash.Digest{}, 0, err
		}
	}
	if size, err = format.RawDiskSize(f, size); err != nil {
		return blkhash.Digest{}, 0, err
	}
	d, err := blkhash.SumFile(ctx, f, size, 0)
	return d, size, err
}

// digestRawStream hashes a raw stream in order, less a fixed VHD's footer
// at its end (format.RawDiskReader), as the stream route leaves it out.
func digestRawStream(img io.Reader) (blkhash.Digest, int64, error) {
	h := blkhash.New(0)
	if _, err := h.ReadFrom(format.NewRawDiskReader(img)); err != nil {
		return blkhash.Digest{}, 0, err
	}
	return h.Sum(), h.Length(), nil
}

// isNotStreamable says whether ContentDigest gave up for a layout or
// format only an import through qemu-img reads.
func isNotStreamable(err error) bool { return errors.Is(err, errdefs.ErrNotStreamable) }
