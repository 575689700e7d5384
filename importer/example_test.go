package importer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/diskimport/engine/importer"
)

// Import a raw image from a local file into a file, growing it to the
// requested size.
func ExampleImport() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "source.raw")
	_ = os.WriteFile(src, []byte("a tiny raw disk image"), 0o644)

	res, err := importer.Import(context.Background(), importer.Options{
		Source: src,
		Target: filepath.Join(dir, "disk.img"),
		Size:   1 << 20,
		Logger: slog.New(slog.DiscardHandler),
	})
	switch {
	case errors.Is(err, importer.ErrTargetTooSmall):
		fmt.Println("the volume is too small:", err)
	case err != nil:
		fmt.Println("import failed:", err)
	default:
		fmt.Println(res.SourceFormat, res.VirtualSize, res.Phases)
	}
	// Output: raw 1048576 [Info TransferDataFile Resize Commit Complete]
}
