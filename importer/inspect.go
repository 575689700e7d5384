package importer

import (
	"context"
	"encoding/json"
)

// Inspection is what Inspect tells about a source.
type Inspection struct {
	Source       string   `json:"source"`
	SourceFormat string   `json:"sourceFormat,omitempty"`
	Compressions []string `json:"compressions,omitempty"`
	// VirtualSize is the disk's size, -1 when only a full read would tell
	// (a compressed raw stream); SourceSize the bytes the source holds, -1
	// when it does not say.
	VirtualSize int64 `json:"virtualSize"`
	SourceSize  int64 `json:"sourceSize"`
	// AllocatedSize is what a local image occupies on disk (holes
	// excluded), -1 for a source that is not a local file.
	AllocatedSize int64 `json:"allocatedSize"`
	// UncompressedSize is an .xz's content size from its index (a local
	// file or a URL read over ranges), -1 when not known.
	UncompressedSize int64 `json:"uncompressedSize"`
	// ScratchNeeded: the import would decompress the image into scratch
	// space before converting it.
	ScratchNeeded bool `json:"scratchNeeded"`
	// Route is the path the import would take ("stream", "scratch",
	// "in-place", "ranged", "stream-decode") and Phases its phases after Info; both empty
	// when the image is refused.
	Route  string  `json:"route,omitempty"`
	Phases []Phase `json:"phases,omitempty"`
	// Refused says why the import would refuse the image ("" when it would
	// not); RefusedErr is that error, to branch on with errors.Is.
	Refused    string `json:"refused,omitempty"`
	RefusedErr error  `json:"-"`
	// Reason is the refusal's word (Reason), as an import's JSON has it.
	Reason string `json:"reason,omitempty"`
}

// inspectTarget stands in for the target an inspection does not have.
const inspectTarget = "(inspect)"

// Inspect reads as much of o.Source as an import's Info phase does (for a
// local image qemu-img would read in place, also what Validate checks) and
// tells what the import would find and do, writing nothing. o.Target is
// not used; o.Format ("qcow2") and the source options (credentials, CA,
// NoRangedRead…) matter as for Import. A refused image is not an error:
// Refused says why. The error is for a source that cannot be read.
func Inspect(ctx context.Context, o Options) (*Inspection, error) {
	o.Target = inspectTarget
	r, err := newRequest(o)
	if err != nil {
		return nil, err
	}
	in, err := inspectSource(ctx, r)
	err = cancelled(ctx, err)
	if in != nil && o.SourceReader != nil {
		in.Source = o.Source // "-", not the reader's internal name
	}
	return in, err
}

// JSON renders the inspection on one line.
func (i *Inspection) JSON() []byte {
	b, _ := json.Marshal(i) // strings, numbers and string slices
	return b
}
