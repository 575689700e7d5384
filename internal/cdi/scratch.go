package cdi

import (
	"fmt"
	"strings"

	"github.com/diskimport/engine/importer"
)

// scratchDir is the scratch policy of a pod: scratch space is CDI's scratch
// volume and nothing else. The engine's own fallback, the system temp dir,
// would be the container's writable layer, small and shared with the
// node's other pods, so it is never used here; an image that needs scratch
// space when the controller mounted none fails with
// errdefs.ErrScratchSpaceRequired (Classify: ScratchSpaceRequired).
func scratchDir(paths Paths) string {
	return paths.Scratch
}

// ScratchReason says, for the log, why an import that ended with
// ScratchSpaceRequired needed scratch space: what the engine found in the
// Info phase, before it wrote a byte.
func ScratchReason(res *importer.Result) string {
	f := "the"
	if res != nil && res.SourceFormat != "" {
		f = "the " + res.SourceFormat
	}
	if res != nil && len(res.Compressions) > 0 {
		return fmt.Sprintf("%s image is %s-compressed; qemu-img must read it at random, so it is decompressed to a scratch file first",
			f, strings.Join(res.Compressions, "+"))
	}
	return f + " image arrives as a stream that cannot be read at random (no byte ranges, or inside a container-image layer); qemu-img must, so it is copied to a scratch file first"
}
