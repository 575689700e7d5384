package cdi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/diskimport/engine/importer"
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

// mountInfoPath is the mount table of the calling thread's mount namespace;
// in a pod every thread shares one, and a test can give one thread its own.
const mountInfoPath = "/proc/thread-self/mountinfo"

// isMountPoint reports whether dir is the root of a mount: a line of the
// mount table has it as its mount point (the fifth field, relative to the
// process's root, so a chroot or a container sees its own paths). Comparing
// st_dev with the parent's does not tell: a bind mount of a directory of
// the same filesystem, which is how podman and the kubelet mount a hostPath
// or local volume, has its parent's st_dev.
func isMountPoint(dir string) (bool, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, err
	}
	if resolved, err = filepath.Abs(resolved); err != nil {
		return false, err
	}
	f, err := os.Open(mountInfoPath)
	if err != nil {
		return false, err
	}
	defer f.Close()
	// Lines can be long (an overlay's lowerdir lists every layer): read
	// them whole rather than through a Scanner's bounded token.
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if fields := strings.Fields(line); len(fields) >= 5 && unescapeMountField(fields[4]) == resolved {
			return true, nil
		}
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", mountInfoPath, err)
		}
	}
}

// unescapeMountField undoes the kernel's octal escapes of the mount table
// (\040 for a space, \011 tab, \012 newline, \134 backslash).
func unescapeMountField(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
