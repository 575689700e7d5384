package importer

import (
	"context"
	"errors"
	"fmt"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/iostage"
)

// Import copies the image named by o.Source onto o.Target, converting it to
// raw (or qcow2 for a file target that asks for it), and grows a file target
// to the requested size. It reports success only when the target holds the
// complete, verified image and has been synced. On failure the returned
// error wraps one of the package's Err values and the Result says how far
// the import got; the target is never reported complete.
func Import(ctx context.Context, o Options) (*Result, error) {
	r, err := newRequest(o)
	if err != nil {
		return &Result{Target: o.Target, TargetState: TargetUntouched}, err
	}
	res, err := importWithRestarts(ctx, r)
	return res, cancelled(ctx, err)
}

// cancelled is err as the caller who cancelled ctx wants to read it:
// "import cancelled", not the killed child's or the cut read's text
// (which stay in the chain). A timeout keeps its text, which names what
// was being waited for and the failure being retried.
func cancelled(ctx context.Context, err error) error {
	if err == nil || !errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	return &errdefs.CancelledError{What: "import", Context: ctx.Err(), Detail: err}
}

// newRequest checks the options and resolves them for the engine: the source
// built through the datasource registry, the checksums parsed.
func newRequest(o Options) (request, error) {
	if (o.Source == "" && o.CustomSource == nil) || o.Target == "" {
		return request{}, fmt.Errorf("source and target are required: %w", errdefs.ErrInvalidOptions)
	}
	switch o.Format {
	case "", "raw", "qcow2":
	default:
		return request{}, fmt.Errorf("target format %q: want raw or qcow2: %w", o.Format, errdefs.ErrInvalidOptions)
	}
	switch o.FormatIn {
	case "", formatInRaw:
	default:
		return request{}, fmt.Errorf("source format %q: only raw can be forced (the others are detected): %w", o.FormatIn, errdefs.ErrInvalidOptions)
	}
	switch o.CacheMode {
	case "", "none", "writeback", "trynone":
	default:
		return request{}, fmt.Errorf("cache mode %q: want none, writeback or trynone: %w", o.CacheMode, errdefs.ErrInvalidOptions)
	}
	if o.NoScratch && o.ScratchDir != "" {
		return request{}, fmt.Errorf("NoScratch with ScratchDir %q: one or the other: %w", o.ScratchDir, errdefs.ErrInvalidOptions)
	}
	if o.MaxSpill < 0 {
		return request{}, fmt.Errorf("spill limit %d: want a size in bytes, or 0 for none: %w", o.MaxSpill, errdefs.ErrInvalidOptions)
	}
	if o.FilesystemOverhead < 0 || o.FilesystemOverhead >= 1 {
		return request{}, fmt.Errorf("filesystem overhead %v: want a fraction in [0, 1): %w", o.FilesystemOverhead, errdefs.ErrInvalidOptions)
	}
	var sums []iostage.Checksum
	for _, s := range o.Checksums {
		c, err := iostage.ParseChecksum(s)
		if err != nil {
			return request{}, err
		}
		sums = append(sums, c)
	}
	var expect string
	if o.ExpectContentDigest != "" {
		if o.ContentType == ContentTypeArchive || o.Format == "qcow2" {
			return request{}, fmt.Errorf("an expected content digest is for disk images written raw, not archives or qcow2 files: %w", errdefs.ErrInvalidOptions)
		}
		d, err := blkhash.ParseDigest(o.ExpectContentDigest)
		if err != nil {
			return request{}, err
		}
		expect = d.String()
	}
	src, err := newSource(o)
	if err != nil {
		return request{}, err
	}
	settings := o.TargetOptions
	settings.ExpectContentDigest = expect
	return request{
		Source:                  src,
		Target:                  o.Target,
		Checksums:               sums,
		TargetOptions:           settings,
		StreamDecodeMaxBuffered: o.streamDecodeMaxBuffered,
		Delta:                   o.Delta,
		DeltaBase:               o.DeltaBase,
		Progress:                o.Progress,
		Events:                  o.Events,
		Logger:                  o.logger(),
		Qemu:                    o.Qemu,
		Wrap:                    o.wrapPhase,
	}, nil
}

// newSource builds the import's source through the datasource registry:
// every scheme gets the same Config, whichever entry point the endpoint came
// through. An upload body handed in by the caller is a stream of its own.
func newSource(o Options) (datasource.Source, error) {
	if o.Source == "-" && o.SourceReader != nil {
		name := o.SourceReaderName
		if name == "" {
			name = "standard input"
		}
		if o.SourceReaderSize > 0 {
			return datasource.NewSizedReader(name, o.SourceReader, o.SourceReaderSize), nil
		}
		return datasource.NewReader(name, o.SourceReader), nil
	}
	if o.CustomSource != nil {
		return o.CustomSource, nil
	}
	c, err := sourceConfig(o)
	if err != nil {
		return nil, err
	}
	endpoint, err := objectEndpoint(o)
	if err != nil {
		return nil, err
	}
	if o.Registry != nil {
		return o.Registry.New(endpoint, c)
	}
	return datasource.New(endpoint, c)
}

// objectEndpoint is o.Source addressed to o's S3 or GCS server.
func objectEndpoint(o Options) (string, error) {
	endpoint, err := datasource.S3URL(o.Source, o.S3Endpoint, o.S3Region)
	if err != nil {
		return "", err
	}
	return datasource.GCSURL(endpoint, o.GCSEndpoint)
}

// sourceConfig is the part of the options that configures a source.
func sourceConfig(o Options) (datasource.Config, error) {
	c := datasource.Config{
		Access:  o.Access,
		Retries: retryLimit(o.Retries),
		Logger:  o.logger(),
		TempDir: o.ScratchDir,
	}
	if o.Egress != nil && o.Transport != nil {
		return c, fmt.Errorf("an egress policy cannot be applied to a caller's Transport (dial with Egress.DialContext in it instead): %w", errdefs.ErrInvalidOptions)
	}
	var err error
	c.Transport, err = transport(o, c)
	return c, err
}
