package importer

import (
	"time"

	"github.com/diskimport/engine/processor"
)

// Result describes a finished import. On failure Import returns a Result
// too, filled as far as the import got, with Complete false.
type Result struct {
	Complete bool
	Target   string
	// SourceFormat is the detected image format (raw, iso, qcow2, vmdk, vhd,
	// vhdx, vdi) and Compressions the wrappers peeled off, outermost first.
	SourceFormat string
	Compressions []string
	VirtualSize  int64
	// BytesWritten is the logical size of the image written to the target.
	BytesWritten int64
	// BytesRead counts the bytes received from the source.
	BytesRead            int64
	Checksums            []string
	PreallocationApplied bool
	ScratchUsed          bool
	Phases               []processor.Phase
	Duration             time.Duration
	Labels               map[string]string
}
