package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/diskimport/engine/errdefs"
)

// ImageInfo is the part of `qemu-img info --output=json` the engine uses.
type ImageInfo struct {
	Format          string
	VirtualSize     int64
	ActualSize      int64
	ClusterSize     int64
	BackingFilename string   // "backing-filename", "" if none
	DataFile        string   // qcow2 external data file, "" if none
	ExtentFilenames []string // vmdk extents' file names (includes the image itself for monolithic vmdk)
	Corrupt         bool     // qcow2 "corrupt" flag in the header
	// Children are the block nodes under the image (qemu 8+ reports
	// them; qemu 7.2 does not): "file" is the image itself, anything else
	// (a vmdk extent, a data file) is another file qemu opened.
	Children []ChildInfo
}

// ChildInfo is one entry of qemu-img info's "children".
type ChildInfo struct {
	Name     string // "file", "extents.0", "data-file", ...
	Filename string
}

// infoJSON mirrors the qemu-img JSON; unknown fields are ignored by
// encoding/json. format-specific.data differs per format, so it is decoded
// into a union of the fields we read.
type infoJSON struct {
	Format          string `json:"format"`
	VirtualSize     int64  `json:"virtual-size"`
	ActualSize      int64  `json:"actual-size"`
	ClusterSize     int64  `json:"cluster-size"`
	BackingFilename string `json:"backing-filename"`
	Children        []struct {
		Name string `json:"name"`
		Info struct {
			Filename string `json:"filename"`
		} `json:"info"`
	} `json:"children"`
	FormatSpecific *struct {
		Type string `json:"type"`
		Data struct {
			DataFile string `json:"data-file"`
			Corrupt  bool   `json:"corrupt"`
			Extents  []struct {
				Filename string `json:"filename"`
			} `json:"extents"`
		} `json:"data"`
	} `json:"format-specific"`
}

// maxInfoJSON caps the info output we buffer; a vmdk with absurdly many
// extents should not make us allocate without bound.
const maxInfoJSON = 16 << 20

// Info runs `qemu-img info --output=json -f FORMAT PATH`. format is required:
// qemu-img's probing is never used.
func (r *Runner) Info(ctx context.Context, path, format string) (*ImageInfo, error) {
	if format == "" {
		return nil, fmt.Errorf("qemu-img info %s: format is required (probing is not allowed): %w", path, errdefs.ErrInvalidOptions)
	}
	ctx, cancel := context.WithTimeout(ctx, r.infoTimeout())
	defer cancel()
	res, out, err := r.query(ctx, "info", path, format)
	if err != nil {
		return nil, err
	}
	if out.overflow {
		return nil, fmt.Errorf("qemu-img info %s: output larger than %d bytes: %w", path, maxInfoJSON, errdefs.ErrInvalidImage)
	}
	info, err := parseInfo(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("qemu-img info %s: %w (%s)", path, err, withStderr(res.stderr))
	}
	return info, nil
}

func parseInfo(b []byte) (*ImageInfo, error) {
	var j infoJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("cannot parse JSON output: %w", err)
	}
	info := &ImageInfo{
		Format:          j.Format,
		VirtualSize:     j.VirtualSize,
		ActualSize:      j.ActualSize,
		ClusterSize:     j.ClusterSize,
		BackingFilename: j.BackingFilename,
	}
	for _, c := range j.Children {
		info.Children = append(info.Children, ChildInfo{Name: c.Name, Filename: c.Info.Filename})
	}
	if fs := j.FormatSpecific; fs != nil {
		info.DataFile = fs.Data.DataFile
		info.Corrupt = fs.Data.Corrupt
		for _, e := range fs.Data.Extents {
			info.ExtentFilenames = append(info.ExtentFilenames, e.Filename)
		}
	}
	return info, nil
}

// query runs the read-only `qemu-img SUB --output=json -f FORMAT -- PATH`
// (info, check) under the info limits, reading path alone, its JSON output
// kept up to maxInfoJSON bytes.
func (r *Runner) query(ctx context.Context, sub, path, format string) (runResult, *capBuffer, error) {
	out := &capBuffer{max: maxInfoJSON}
	res, err := r.run(ctx, runSpec{
		sub:    sub,
		args:   []string{sub, "--output=json", "-f", format, "--", path},
		limits: r.Limits.merge(defaultInfoLimits),
		stdout: out,
		reads:  []string{path},
	})
	return res, out, err
}

// capBuffer is a bytes.Buffer that stops growing at max and remembers that
// it did.
type capBuffer struct {
	bytes.Buffer
	max      int
	overflow bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); len(p) > room {
		c.overflow = true
		if room > 0 {
			c.Buffer.Write(p[:room])
		}
		return len(p), nil // keep draining so qemu-img does not block
	}
	return c.Buffer.Write(p)
}

// CheckSelfContained refuses (errdefs.ErrUnsafeImage) an image for which
// qemu-img info reports anything qemu would read besides the image itself:
// a backing file, an external data file, an extent or a child node that
// is another file. self lists the names qemu may give the image itself
// (its path, or for an NBD export of the image the export's URIs).
func (info *ImageInfo) CheckSelfContained(self ...string) error {
	if info.BackingFilename != "" {
		return fmt.Errorf("%w: image has a backing file %q", errdefs.ErrUnsafeImage, info.BackingFilename)
	}
	if info.DataFile != "" {
		return fmt.Errorf("%w: image has an external data file %q", errdefs.ErrUnsafeImage, info.DataFile)
	}
	if len(info.ExtentFilenames) > 1 {
		return fmt.Errorf("%w: qemu-img reports %d extents %q, want only the image itself", errdefs.ErrUnsafeImage, len(info.ExtentFilenames), info.ExtentFilenames)
	}
	for _, e := range info.ExtentFilenames {
		if !isSelf(e, self) {
			return fmt.Errorf("%w: image names an extent file %q", errdefs.ErrUnsafeImage, e)
		}
	}
	for _, c := range info.Children {
		// "file" is the protocol node under the format: the image itself.
		if c.Name != "file" || (c.Filename != "" && !isSelf(c.Filename, self)) {
			return fmt.Errorf("%w: qemu-img reports a child node %q (%q) besides the image itself", errdefs.ErrUnsafeImage, c.Name, c.Filename)
		}
	}
	return nil
}

// isSelf says whether qemu's name for a file is one of the image's own
// names; relative names are relative to the image's directory.
func isSelf(name string, self []string) bool {
	for _, s := range self {
		if name == s {
			return true
		}
		if filepath.IsAbs(s) {
			p := name
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(s), p)
			}
			if filepath.Clean(p) == filepath.Clean(s) {
				return true
			}
		}
	}
	return false
}
