package format

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"regexp"
	"strings"
)

// VMDK sparse extent header (little endian), from VMware's "Virtual Disk
// Format 1.1" specification.
const (
	vmdkHeaderLen      = 512
	vmdkSector         = 512
	vmdkMaxGTEsPerGT   = 512 // qemu refuses larger grain tables
	vmdkMaxGrainSector = 1 << 16
	vmdkMaxDescBytes   = 1 << 20
)

func parseVMDKHeader(head []byte) (Header, error) {
	const f = VMDK
	le := binary.LittleEndian
	if err := needHead(f, head, vmdkHeaderLen, "sparse header"); err != nil {
		return Header{}, err
	}
	if !bytes.HasPrefix(head, magicVMDK) {
		return Header{}, invalidf(f, "bad magic")
	}
	version := le.Uint32(head[4:])
	if version < 1 || version > 3 {
		return Header{}, unsupportedf(f, "sparse header version %d", version)
	}
	capacity := le.Uint64(head[12:])
	grain := le.Uint64(head[20:])
	descOff := le.Uint64(head[28:])
	descSize := le.Uint64(head[36:])
	gtes := le.Uint32(head[44:])
	if capacity > 1<<53 {
		return Header{}, unsafef(f, "capacity of %d sectors is absurd", capacity)
	}
	if grain == 0 || grain > vmdkMaxGrainSector || grain&(grain-1) != 0 {
		return Header{}, invalidf(f, "grain size of %d sectors", grain)
	}
	if gtes == 0 || gtes > vmdkMaxGTEsPerGT {
		return Header{}, invalidf(f, "%d grain table entries per grain table", gtes)
	}
	h := Header{Format: f, VirtualSize: int64(capacity) * vmdkSector, GrainSize: int64(grain) * vmdkSector}
	if descOff == 0 && descSize == 0 {
		// No embedded descriptor: qemu uses the extent on its own.
		return h, nil
	}
	if descSize == 0 || descSize*vmdkSector > vmdkMaxDescBytes || descOff > vmdkMaxDescBytes/vmdkSector {
		return Header{}, invalidf(f, "embedded descriptor at sector %d of %d sectors", descOff, descSize)
	}
	start, end := descOff*vmdkSector, (descOff+descSize)*vmdkSector
	if end > uint64(len(head)) {
		return Header{}, invalidf(f, "embedded descriptor (bytes %d..%d) lies beyond the %d bytes examined", start, end, len(head))
	}
	desc := head[start:end]
	if i := bytes.IndexByte(desc, 0); i >= 0 {
		desc = desc[:i]
	}
	ct, err := checkVMDKDescriptor(desc)
	if err != nil {
		return Header{}, err
	}
	h.VMDKCreateType = ct
	return h, nil
}

// checkVMDKDescriptor accepts only a self-contained monolithic descriptor:
// no parent, and exactly one SPARSE extent, which is the file itself.
func checkVMDKDescriptor(desc []byte) (string, error) {
	const f = VMDK
	var createType string
	extents := 0
	sc := bufio.NewScanner(bytes.NewReader(desc))
	sc.Buffer(make([]byte, 0, 4096), vmdkMaxDescBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if key, val, ok := strings.Cut(line, "="); ok && !isExtentLine(line) {
			key = strings.TrimSpace(key)
			val = strings.Trim(strings.TrimSpace(val), `"`)
			switch strings.ToLower(key) {
			case "parentcid":
				if strings.ToLower(val) != "ffffffff" {
					return "", unsafef(f, "descriptor names a parent (parentCID=%s)", val)
				}
			case "parentfilenamehint":
				return "", unsafef(f, "descriptor names a parent file %q", val)
			case "createtype":
				createType = val
			}
			continue
		}
		if !isExtentLine(line) {
			continue
		}
		extents++
		fields := vmdkExtentRE.FindStringSubmatch(line)
		if fields == nil || fields[3] != "SPARSE" {
			return "", unsafef(f, "descriptor extent %q is not the file's own sparse extent", line)
		}
		// The rest must be just the quoted file name: a trailing offset
		// would point into another file.
		name := strings.TrimSpace(fields[4])
		if len(name) < 2 || name[0] != '"' || strings.IndexByte(name[1:], '"') != len(name)-2 {
			return "", unsafef(f, "descriptor extent %q has extra fields", line)
		}
	}
	if err := sc.Err(); err != nil {
		return "", invalidf(f, "embedded descriptor: %v", err)
	}
	if extents != 1 {
		return "", unsafef(f, "descriptor lists %d extents, want exactly the file itself", extents)
	}
	switch createType {
	case "monolithicSparse", "streamOptimized":
	default:
		return "", unsafef(f, "createType %q is not a single-file sparse vmdk", createType)
	}
	return createType, nil
}

func isExtentLine(line string) bool {
	for _, p := range []string{"RW ", "RDONLY ", "NOACCESS "} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// vmdkExtentRE splits "RW 2048 SPARSE "name.vmdk"" into access, sectors,
// type and the rest.
var vmdkExtentRE = regexp.MustCompile(`^(RW|RDONLY|NOACCESS)\s+(\d+)\s+(\S+)\s*(.*)$`)
