//go:build linux

package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Leaf is where bytes finally lie, below every loop device, partition and
// device-mapper table: a file (its st_dev and inode) or a block device
// built over nothing else the kernel tells of (its device number).
type Leaf struct {
	File     bool
	Dev, Ino uint64
}

// Extent is a run of a leaf's bytes that a path holds; Len < 0 runs to the
// leaf's end. Via says how the path reaches the leaf, for error messages.
// Whole says the run is all of the leaf a device over slaves maps somewhere
// in (its table is not read), so narrowing it to a part of that device
// keeps it whole.
type Extent struct {
	Leaf  Leaf
	Off   int64
	Len   int64
	Via   string
	Whole bool
}

// Overlaps reports whether e and o share a byte.
func (e Extent) Overlaps(o Extent) bool {
	if e.Leaf != o.Leaf {
		return false
	}
	end := func(x Extent) int64 {
		if x.Len < 0 {
			return 1<<63 - 1
		}
		return x.Off + x.Len
	}
	return e.Off < end(o) && o.Off < end(e)
}

// maxStackDepth bounds the walk down loop devices, partitions and slaves
// (real stacks are a few levels deep; a cycle is not walked forever).
const maxStackDepth = 16

// Stack finds what a device is built over, from sysfs (/sys/dev/block) and
// the loop driver; its fields are the roots it reads, so a test can hand it
// a tree of its own.
type Stack struct {
	Sysfs string // "/sys"
	Dev   string // "/dev"
}

// Holds returns the extents of leaves whose bytes the file or block device
// at path holds: a regular file holds itself; a loop device the range of its
// backing file it maps (LOOP_GET_STATUS64: the backing file's st_dev and
// inode, its offset and size limit); a partition its range of its parent's;
// a device over slaves (device-mapper, md) all of each slave, since its
// table is not read; any other device itself. A file on a filesystem is not
// followed to the device under the filesystem: a copy between them goes
// through the filesystem, which keeps them apart. Other kinds of path hold
// nothing.
func Holds(path string) ([]Extent, error) {
	return Stack{Sysfs: "/sys", Dev: "/dev"}.Holds(path)
}

// Holds is the package's Holds over s's roots.
func (s Stack) Holds(path string) ([]Extent, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return []Extent{{Leaf: Leaf{File: true, Dev: st.Dev, Ino: st.Ino}, Len: -1, Via: "file " + path}}, nil
	case unix.S_IFBLK:
		return s.device(st.Rdev, path, path, 0)
	}
	return nil, nil
}

// device returns the extents device rdev holds; node is a node of it when
// the caller has one ("" otherwise), via how it was reached.
func (s Stack) device(rdev uint64, node, via string, depth int) ([]Extent, error) {
	if depth > maxStackDepth {
		return nil, fmt.Errorf("%s: devices stacked more than %d deep", via, maxStackDepth)
	}
	id := fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev))
	dir := filepath.Join(s.Sysfs, "dev", "block", id)
	if _, err := os.Stat(dir); err != nil {
		// No sysfs (or a device it does not list): the device itself.
		return []Extent{{Leaf: Leaf{Dev: rdev}, Len: -1, Via: via}}, nil
	}
	name := s.name(dir, id)
	if exists(filepath.Join(dir, "loop")) {
		return s.loop(rdev, dir, name, node, via, depth)
	}
	if exists(filepath.Join(dir, "partition")) {
		return s.partition(dir, name, via, depth)
	}
	slaves, err := os.ReadDir(filepath.Join(dir, "slaves"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if len(slaves) == 0 {
		return []Extent{{Leaf: Leaf{Dev: rdev}, Len: -1, Via: via}}, nil
	}
	var out []Extent
	for _, sl := range slaves {
		dev, err := readDevNumber(filepath.Join(dir, "slaves", sl.Name(), "dev"))
		if err != nil {
			return nil, fmt.Errorf("%s: slave %s: %w", via, sl.Name(), err)
		}
		ext, err := s.device(dev, "", fmt.Sprintf("%s → %s is over %s", via, name, sl.Name()), depth+1)
		if err != nil {
			return nil, err
		}
		// The table maps some part of each slave; which part is not read,
		// so the whole of what the slave holds counts.
		for _, e := range ext {
			e.Whole = true
			out = append(out, e)
		}
	}
	return out, nil
}

// partition returns the extents of a partition: its range of its parent's.
func (s Stack) partition(dir, name, via string, depth int) ([]Extent, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	parentDir := filepath.Dir(resolved)
	parent, err := readDevNumber(filepath.Join(parentDir, "dev"))
	if err != nil {
		return nil, fmt.Errorf("%s: parent of partition %s: %w", via, name, err)
	}
	start, err := readInt(filepath.Join(dir, "start"))
	if err != nil {
		return nil, err
	}
	sectors, err := readInt(filepath.Join(dir, "size"))
	if err != nil {
		return nil, err
	}
	// sysfs counts partitions in 512-byte sectors whatever the device's.
	ext, err := s.device(parent, "", fmt.Sprintf("%s → %s is a partition of %s", via, name, filepath.Base(parentDir)), depth+1)
	if err != nil {
		return nil, err
	}
	return sub(ext, start*512, sectors*512), nil
}

// loop returns the extents of a loop device: the range of its backing file
// (or device) it maps. The driver's own record of the backing file's st_dev
// and inode (LOOP_GET_STATUS64) names it even when renamed or deleted;
// sysfs's backing_file (a path at attach time) is the fallback where no node
// of the device can be opened.
func (s Stack) loop(rdev uint64, dir, name, node, via string, depth int) ([]Extent, error) {
	backing := strings.TrimSuffix(readString(filepath.Join(dir, "loop", "backing_file")), " (deleted)")
	if backing == "" {
		return nil, nil // detached meanwhile: holds nothing
	}
	via = fmt.Sprintf("%s → %s is a loop device over %s", via, name, backing)
	info, err := s.loopStatus(rdev, name, node)
	var off, limit int64
	var leaf Leaf
	switch {
	case err == nil:
		off, limit = int64(info.Offset), int64(info.Sizelimit)
		leaf = Leaf{File: true, Dev: info.Device, Ino: info.Inode}
	case errors.Is(err, unix.ENXIO):
		return nil, nil // no backing file
	default:
		o, err := readInt(filepath.Join(dir, "loop", "offset"))
		if err != nil {
			return nil, err
		}
		l, err := readInt(filepath.Join(dir, "loop", "sizelimit"))
		if err != nil {
			return nil, err
		}
		off, limit = o, l
		var st unix.Stat_t
		if err := unix.Stat(backing, &st); err != nil {
			return nil, fmt.Errorf("%s: the backing file: %w", via, err)
		}
		leaf = Leaf{File: true, Dev: st.Dev, Ino: st.Ino}
	}
	if limit == 0 {
		limit = -1
	}
	// A loop device over a block device: its bytes are that device's.
	var st unix.Stat_t
	if unix.Stat(backing, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK && st.Dev == leaf.Dev && st.Ino == leaf.Ino {
		ext, err := s.device(st.Rdev, backing, via, depth+1)
		if err != nil {
			return nil, err
		}
		return sub(ext, off, limit), nil
	}
	return []Extent{{Leaf: leaf, Off: off, Len: limit, Via: via}}, nil
}

// loopStatus asks the loop driver about device rdev through a node of it:
// node, else /dev/block/MAJ:MIN, else /dev/NAME, each only if it is rdev.
func (s Stack) loopStatus(rdev uint64, name, node string) (*unix.LoopInfo64, error) {
	id := fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev))
	var lastErr error = fmt.Errorf("no node of %s: %w", name, fs.ErrNotExist)
	for _, p := range []string{node, filepath.Join(s.Dev, "block", id), filepath.Join(s.Dev, name)} {
		if p == "" {
			continue
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			lastErr = err
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK || st.Rdev != rdev {
			unix.Close(fd)
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(fd)
		unix.Close(fd)
		return info, err
	}
	return nil, lastErr
}

// name is the kernel's name of the device whose sysfs directory is dir.
func (s Stack) name(dir, id string) string {
	for _, line := range strings.Split(readString(filepath.Join(dir, "uevent")), "\n") {
		if n, ok := strings.CutPrefix(line, "DEVNAME="); ok {
			return n
		}
	}
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		return filepath.Base(resolved)
	}
	return id
}

// sub narrows the extents of a device to the run [off, off+length) of its
// address space (length < 0: to the end). Only a device that holds one
// extent, not Whole, has its address space laid out in it; the others are
// kept as they are.
func sub(ext []Extent, off, length int64) []Extent {
	if len(ext) != 1 || ext[0].Whole {
		return ext
	}
	e := ext[0]
	if e.Len >= 0 {
		if off >= e.Len {
			return nil
		}
		if length < 0 || off+length > e.Len {
			length = e.Len - off
		}
	}
	e.Off += off
	e.Len = length
	return []Extent{e}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// readDevNumber reads a sysfs dev file ("MAJ:MIN").
func readDevNumber(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	maj, min, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	ma, err1 := strconv.ParseUint(maj, 10, 32)
	mi, err2 := strconv.ParseUint(min, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: not MAJ:MIN: %q", path, b)
	}
	return unix.Mkdev(uint32(ma), uint32(mi)), nil
}
