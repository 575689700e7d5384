package format

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// maxOVFSize bounds the OVF descriptor read from an OVA: descriptors are
// kilobytes (the corpus's is 7.7 KiB); a larger member is not parsed.
const maxOVFSize = 4 << 20

// ovfEnvelope is the part of an OVF descriptor that says which files are
// disks: DiskSection's Disk elements name References' File elements by id.
// Names are matched without their namespace (ovf:, or none).
type ovfEnvelope struct {
	Files []struct {
		ID   string `xml:"id,attr"`
		Href string `xml:"href,attr"`
	} `xml:"References>File"`
	Disks []struct {
		FileRef string `xml:"fileRef,attr"`
	} `xml:"DiskSection>Disk"`
}

// ovfDiskFiles reads an OVF descriptor and returns the file names of its
// disks, in the order the DiskSection lists them. A descriptor that does not
// parse names none: the members are then judged by their bytes.
func ovfDiskFiles(r io.Reader) ([]string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxOVFSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxOVFSize {
		return nil, nil
	}
	var env ovfEnvelope
	if xml.Unmarshal(b, &env) != nil {
		return nil, nil
	}
	href := map[string]string{}
	for _, f := range env.Files {
		href[f.ID] = f.Href
	}
	var disks []string
	for _, d := range env.Disks {
		if h := href[d.FileRef]; h != "" {
			disks = append(disks, h)
		}
	}
	return disks, nil
}

// ovfNamesSeveralDisks is the refusal of an OVA whose descriptor lists more
// than one disk: known from the descriptor, before any disk is read.
func ovfNamesSeveralDisks(ovf string, disks []string) error {
	return &errdefs.NotImageError{
		Message: fmt.Sprintf("a tar archive holding more than one disk image (%s lists %s), not a disk image (extract the one to import first)", ovf, strings.Join(disks, ", ")),
		Kind:    errdefs.ErrSeveralDisksInArchive,
	}
}
