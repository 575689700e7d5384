package cdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/mountinfo"
)

// useScratchVolume applies the scratch policy of a pod to o: scratch space
// is the volume CDI's controller mounts at paths.Scratch and nothing else.
// A directory there that is not a mount point (the image's own /scratch,
// or one a pod spec made some other way) is the container's writable
// layer, as the system temp dir would be: node storage shared with the
// other pods, which evicts them when full. So without a mount the import
// gets no scratch space at all (importer.Options.NoScratch), and an image
// that needs it ends with errdefs.ErrScratchSpaceRequired (Classify:
// ScratchSpaceRequired), the controller's cue to mount a scratch volume.
// When the mount table cannot be read an existing directory is used, with
// the warning returned: refusing it would have the controller add a
// scratch volume that the next pod cannot see either, again and again.
func useScratchVolume(o *importer.Options, paths Paths) (warning string) {
	mounted, err := isMountPoint(paths.Scratch)
	switch {
	case err == nil && mounted:
		o.ScratchDir = paths.Scratch
		return ""
	case err == nil || errors.Is(err, fs.ErrNotExist):
		o.NoScratch = true
		return ""
	}
	if st, serr := os.Stat(paths.Scratch); serr == nil && st.IsDir() {
		o.ScratchDir = paths.Scratch
		return fmt.Sprintf("cannot tell whether %s is a mounted scratch volume (%v); using it as scratch space", paths.Scratch, err)
	}
	o.NoScratch = true
	return ""
}

// ScratchNote says, for the log, what scratch space an import of o has
// (scratchPath: where the controller mounts a scratch volume).
func ScratchNote(o importer.Options, scratchPath string) string {
	if o.NoScratch {
		return "No scratch volume mounted at " + scratchPath + ": an image that needs scratch space ends with scratchSpaceRequired"
	}
	return "Scratch space: the volume at " + o.ScratchDir
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

// isMountPoint reports whether dir is the root of a mount: a line of the
// mount table (mountinfo.Self) has it as its mount point, relative to the
// process's root, so a chroot or a container sees its own paths. Comparing
// st_dev with the parent's does not tell: a bind mount of a directory of
// the same filesystem, which is how podman and the kubelet mount a
// hostPath or local volume, has its parent's st_dev.
func isMountPoint(dir string) (bool, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, err
	}
	if resolved, err = filepath.Abs(resolved); err != nil {
		return false, err
	}
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m.Point == resolved {
			return true, nil
		}
	}
	return false, nil
}
