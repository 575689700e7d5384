package importer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
)

// Import a raw image from a local file into a file, growing it to the
// requested size.
func ExampleImport() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "source.raw")
	_ = os.WriteFile(src, bootSector(), 0o644)

	res, err := importer.Import(context.Background(), importer.Options{
		Source: src,
		Target: filepath.Join(dir, "disk.img"),
		TargetOptions: importer.TargetOptions{
			Size: 1 << 20,
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	switch {
	case errors.Is(err, importer.ErrTargetTooSmall):
		fmt.Println("the volume is too small:", err)
	case err != nil:
		fmt.Println("import failed:", err)
	default:
		fmt.Println(res.SourceFormat, res.VirtualSize, res.TargetSize, res.Phases)
	}
	// Output: raw 512 1048576 [Info TransferDataFile Resize Commit Complete]
}

// Make an empty 64 MiB sparse disk in a file.
func ExampleCreateBlank() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)

	res, err := importer.CreateBlank(context.Background(), importer.BlankOptions{
		Target: filepath.Join(dir, "disk.img"),
		Size:   64 << 20,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println("blank disk failed:", err)
		return
	}
	fmt.Println(res.Complete, res.VirtualSize, res.Phases)
	// Output: true 67108864 [Info Resize Commit Complete]
}

// Follow an import through its events: the phases as they start, and the
// moment the source is drained (every byte received and validated).
func ExampleOptions_events() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "source.raw")
	_ = os.WriteFile(src, bootSector(), 0o644)

	_, err := importer.Import(context.Background(), importer.Options{
		Source: src,
		Target: filepath.Join(dir, "disk.img"),
		Logger: slog.New(slog.DiscardHandler),
		Events: func(e importer.Event) {
			switch e.Kind {
			case importer.EventPhaseStarted:
				fmt.Println("started", e.Phase)
			case importer.EventSourceDrained:
				fmt.Println("source drained after", e.Phase)
			}
		},
	})
	fmt.Println("error:", err)
	// Output:
	// started Info
	// started TransferDataFile
	// source drained after TransferDataFile
	// started Resize
	// started Commit
	// started Complete
	// error: <nil>
}

// ResolveDigest takes container-image references only (docker://,
// oci-archive:, oci:); anything else is refused before any request.
func ExampleResolveDigest() {
	_, err := importer.ResolveDigest(context.Background(), "https://example.com/disk.img", importer.Options{
		Logger: slog.New(slog.DiscardHandler),
	})
	fmt.Println(errors.Is(err, importer.ErrInvalidOptions))
	// Output: true
}

// bootSector is a tiny raw disk: one 512-byte sector ending in the 0x55AA
// boot signature (text would be refused as not a disk image).
func bootSector() []byte {
	return append(make([]byte, 510), 0x55, 0xaa)
}

// What is not a disk image is refused by name; FormatIn "raw" takes its
// bytes as a raw disk anyway.
func ExampleImport_notADiskImage() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "index.html")
	_ = os.WriteFile(src, []byte("<html><body>Not Found</body></html>\n"), 0o644)

	o := importer.Options{Source: src, Target: filepath.Join(dir, "disk.img"), Logger: slog.New(slog.DiscardHandler)}
	_, err := importer.Import(context.Background(), o)
	fmt.Println(errors.Is(err, importer.ErrTextNotImage))

	o.FormatIn = "raw"
	res, err := importer.Import(context.Background(), o)
	fmt.Println(res.SourceFormat, err)
	// Output:
	// true
	// raw <nil>
}

// Import from a source of the program's own: a scheme registered on the
// built-in registry ("mem://" here, a map of disks), or a datasource.Source
// value handed in whole.
func ExampleOptions_registry() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	disks := map[string][]byte{"mem://boot": bootSector()}

	reg := datasource.Builtin()
	reg.Register("mem://", func(endpoint string, _ datasource.Config) (datasource.Source, error) {
		b, ok := disks[endpoint]
		if !ok {
			return nil, fmt.Errorf("no disk %s: %w", endpoint, importer.ErrInvalidOptions)
		}
		return datasource.NewSizedReader(endpoint, bytes.NewReader(b), int64(len(b))), nil
	})
	res, err := importer.Import(context.Background(), importer.Options{
		Source:   "mem://boot",
		Registry: reg,
		Target:   filepath.Join(dir, "disk.img"),
	})
	if err != nil {
		fmt.Println("import failed:", err)
		return
	}
	fmt.Println(res.SourceFormat, res.BytesWritten)

	res, err = importer.Import(context.Background(), importer.Options{
		CustomSource: datasource.NewFile(filepath.Join(dir, "disk.img")),
		Target:       filepath.Join(dir, "copy.img"),
	})
	if err != nil {
		fmt.Println("import failed:", err)
		return
	}
	fmt.Println(res.SourceFormat, res.BytesWritten)
	// Output:
	// raw 512
	// raw 512
}

// A program run by a person fails at once on a server that refuses the
// first connection, as the command line does; without NoConnectRetry
// Import would retry it for minutes (or until ctx ends), as CDI's pods
// want.
func ExampleOptions_noConnectRetry() {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	url := "http://" + l.Addr().String() + "/disk.qcow2"
	l.Close() // nothing listens there now: connection refused

	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := importer.Options{Source: url, Target: filepath.Join(dir, "disk.img")}
	opts.NoConnectRetry = true
	_, err := importer.Import(ctx, opts)
	fmt.Println(importer.Reason(err), errors.Is(err, importer.ErrSourceUnreachable), errors.Is(err, context.DeadlineExceeded))
	// Output: SourceUnreachable true false
}
