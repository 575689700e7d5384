package format

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
)

// A vmdk descriptor is read by qemu in two ways at once: createType (and
// parentFileNameHint) by the first occurrence of the name anywhere in the
// text, comments included, and extent lines by a scanf that splits fields
// on any whitespace. checkVMDKDescriptor refuses every text on which a
// line-by-line reading and qemu's could disagree: it accepts only comments,
// simple key=value lines and one extent line that is the file's own sparse
// extent, and refuses anything else.

// vmdkAllowedCreateTypes are the single-file sparse vmdks we convert.
var vmdkAllowedCreateTypes = map[string]bool{"monolithicSparse": true, "streamOptimized": true}

// vmdkAccessModes are the access words that start an extent line (the
// specification's spelling; matched without regard to case, to be safe).
var vmdkAccessModes = map[string]bool{"rw": true, "rdonly": true, "noaccess": true}

var vmdkKeyRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._]*$`)

// checkVMDKDescriptor accepts only a self-contained single-file
// descriptor and returns its createType.
func checkVMDKDescriptor(desc []byte) (string, error) {
	const f = VMDK
	lower := bytes.ToLower(desc)
	if bytes.Contains(lower, []byte("parentfilenamehint")) {
		return "", unsafef(f, "descriptor names a parent file (parentFileNameHint)")
	}
	if n := bytes.Count(lower, []byte("createtype")); n != 1 {
		return "", unsafef(f, "descriptor mentions createType %d times, want exactly once", n)
	}
	var createType string
	haveCreateType, extents := false, 0
	for _, raw := range strings.Split(string(desc), "\n") {
		line := strings.TrimSuffix(raw, "\r")
		if err := checkVMDKDescriptorChars(line); err != nil {
			return "", err
		}
		line = strings.Trim(line, " \t")
		fields := strings.Fields(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			// qemu reads a comment's first word ("#...") as an access
			// mode, which never matches; createType in a comment was
			// counted above and leaves none for the key line below.
		case vmdkAccessModes[strings.ToLower(fields[0])]:
			extents++
			if err := checkVMDKSelfExtent(line); err != nil {
				return "", err
			}
		case strings.Contains(line, "="):
			key, val, _ := strings.Cut(line, "=")
			key, val = strings.Trim(key, " \t"), strings.Trim(val, " \t")
			if !vmdkKeyRE.MatchString(key) {
				return "", unsafef(f, "descriptor line %q is not a key=value line", line)
			}
			switch strings.ToLower(key) {
			case "parentcid":
				if !strings.EqualFold(strings.Trim(val, `"`), "ffffffff") {
					return "", unsafef(f, "descriptor names a parent (parentCID=%s)", val)
				}
			case "createtype":
				// qemu takes the value as the bytes after `createType="`
				// up to the next quote: accept only that exact spelling.
				v, ok := strings.CutPrefix(line, `createType="`)
				if !ok || !strings.HasSuffix(v, `"`) || strings.Contains(v[:len(v)-1], `"`) {
					return "", unsafef(f, "createType line %q is not written as createType=\"...\"", line)
				}
				createType, haveCreateType = v[:len(v)-1], true
			}
		default:
			return "", unsafef(f, "descriptor line %q is neither a comment, a key=value line nor an extent", line)
		}
	}
	if extents != 1 {
		return "", unsafef(f, "descriptor lists %d extents, want exactly the file itself", extents)
	}
	if !haveCreateType {
		return "", unsafef(f, "descriptor has no createType line (a createType in a comment is what qemu would read)")
	}
	if !vmdkAllowedCreateTypes[createType] {
		return "", unsafef(f, "createType %q is not a single-file sparse vmdk", createType)
	}
	return createType, nil
}

// checkVMDKDescriptorChars refuses control characters: qemu's scanf
// treats \v, \f and \r as field separators where a line reader may not.
func checkVMDKDescriptorChars(line string) error {
	for i := 0; i < len(line); i++ {
		if c := line[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return unsafef(VMDK, "descriptor contains control character 0x%02x", c)
		}
	}
	return nil
}

// checkVMDKSelfExtent accepts exactly `RW|RDONLY <sectors> SPARSE "<name>"`
// with a plain file name: the file's own extent, which qemu never opens
// again for a sparse file with a capacity.
func checkVMDKSelfExtent(line string) error {
	const f = VMDK
	fields := strings.Fields(line)
	if fields[0] != "RW" && fields[0] != "RDONLY" {
		// VMware writes RDONLY for streamOptimized; NOACCESS or another
		// spelling is not a disk we can read alike.
		return unsafef(f, "descriptor extent %q: access %q, want RW or RDONLY", line, fields[0])
	}
	if len(fields) < 4 || fields[2] != "SPARSE" {
		return unsafef(f, "descriptor extent %q is not the file's own SPARSE extent", line)
	}
	name, ok := strings.CutPrefix(line, fields[0]+" "+fields[1]+" SPARSE ")
	if !ok {
		return unsafef(f, "descriptor extent %q: fields must be separated by single spaces", line)
	}
	if n, err := strconv.ParseUint(fields[1], 10, 63); err != nil || n == 0 {
		return unsafef(f, "descriptor extent %q: bad sector count", line)
	}
	if len(name) < 3 || name[0] != '"' || name[len(name)-1] != '"' || strings.Contains(name[1:len(name)-1], `"`) {
		return unsafef(f, "descriptor extent %q: want a single quoted file name and nothing after it", line)
	}
	if strings.ContainsAny(name, `/\`) {
		return unsafef(f, "descriptor extent %q names a path, not the file itself", line)
	}
	return nil
}
