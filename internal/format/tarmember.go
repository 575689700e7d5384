package format

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// Tar is the layer of a tar archive holding one disk image (GCE's disk.raw
// in a .tar.gz, an OVA's vmdk): Open reads through it to that member.
const Tar Compression = "tar"

// tarMagicOff is where "ustar" sits in a POSIX (ustar, pax or GNU) header.
const tarMagicOff = 257

// IsTar reports whether head starts with a POSIX, pax or GNU tar header.
func IsTar(head []byte) bool {
	return len(head) >= tarMagicOff+5 && string(head[tarMagicOff:tarMagicOff+5]) == "ustar"
}

// metadataSuffixes name the members of an OVA that are never the disk:
// the descriptor, the manifest, the certificate and VMware's NVRAM.
var metadataSuffixes = []string{".ovf", ".mf", ".cert", ".nvram"}

// maxNamesListed bounds the member names a refusal lists.
const maxNamesListed = 10

// tarLayer reads the one disk member of a tar. At the member's end it
// reads the rest of the archive's headers, and a second disk there fails
// the read instead of ending it: which disk was meant is a guess.
type tarLayer struct {
	src    *sourceReader // the archive's bytes; their first failure is the source's
	tr     *tar.Reader
	member *bufio.Reader
	name   string
	size   int64
	peek   int
	// ovfDisk is the one disk an OVA's descriptor names: that member is
	// the disk and no other is.
	ovfDisk string
	err     error // sticky
}

// openTarMember walks the tar in r to its first disk member and returns a
// layer reading it. A tar with no disk, or that is a container image
// layout, is refused with the names found.
func openTarMember(r io.Reader, peek int) (*tarLayer, error) {
	src := &sourceReader{r: r}
	l := &tarLayer{src: src, tr: tar.NewReader(src), peek: peek}
	var names []string
	for {
		hdr, err := l.tr.Next()
		if err == io.EOF {
			return nil, noDiskInTar(names)
		}
		if err != nil {
			return nil, l.tarError(err)
		}
		if isContainerLayout(hdr.Name) {
			return nil, &errdefs.NotImageError{
				Message: fmt.Sprintf("a container image archive (it holds %s), not a disk image (import it as oci-archive:PATH)", hdr.Name),
				Kind:    errdefs.ErrArchiveFile,
			}
		}
		if isRegular(hdr) && strings.HasSuffix(strings.ToLower(hdr.Name), ".ovf") && l.ovfDisk == "" {
			disks, err := ovfDiskFiles(l.tr)
			if err != nil {
				return nil, l.tarError(err)
			}
			if len(disks) > 1 {
				return nil, ovfNamesSeveralDisks(hdr.Name, disks)
			}
			if len(disks) == 1 {
				l.ovfDisk = path.Join(path.Dir(hdr.Name), disks[0])
			}
		}
		disk, member, err := l.diskMember(hdr)
		if err != nil {
			return nil, err
		}
		if disk {
			l.member, l.name, l.size = member, hdr.Name, hdr.Size
			return l, nil
		}
		if isRegular(hdr) {
			names = append(names, hdr.Name)
		}
	}
}

// diskMember reports whether hdr's member is a disk image: a regular file
// that is not OVA metadata and whose first bytes are an image or a
// compression, or binary data that is neither text, a tar nor another
// known non-image. It returns the member's reader, its head peeked.
func (l *tarLayer) diskMember(hdr *tar.Header) (bool, *bufio.Reader, error) {
	if !isRegular(hdr) || hdr.Size == 0 || hdr.Name == "" { // an import names the member it took
		return false, nil, nil
	}
	if l.ovfDisk != "" {
		if path.Clean(hdr.Name) != path.Clean(l.ovfDisk) {
			return false, nil, nil
		}
		return true, bufio.NewReaderSize(l.tr, l.peek), nil
	}
	lower := strings.ToLower(hdr.Name)
	for _, s := range metadataSuffixes {
		if strings.HasSuffix(lower, s) {
			return false, nil, nil
		}
	}
	br := bufio.NewReaderSize(l.tr, l.peek)
	head, err := br.Peek(l.peek)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, nil, l.tarError(err)
	}
	c, f, _ := detect(head)
	switch {
	case c != None, f != Raw:
		return true, br, nil
	case IsTar(head), checkNotImage(head) != nil, looksLikeText(head):
		return false, nil, nil
	}
	return true, br, nil
}

func isRegular(hdr *tar.Header) bool {
	return hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeGNUSparse
}

// isContainerLayout reports whether a member name belongs to an OCI image
// layout (oci-layout, index.json, blobs/ALG/DIGEST) or a docker save
// archive (manifest.json): a container image, not a tar of a disk.
func isContainerLayout(name string) bool {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	switch name {
	case "oci-layout", "index.json", "manifest.json":
		return true
	}
	dir, _ := path.Split(name)
	return strings.HasPrefix(dir, "blobs/") && strings.Count(dir, "/") == 2
}

func (l *tarLayer) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.member.Read(p)
	if err == io.EOF {
		err = l.checkRest()
	} else if err != nil {
		err = l.tarError(err)
	}
	if err != nil {
		l.err = err
	}
	return n, err
}

// checkRest reads the headers after the disk member: io.EOF at the
// archive's end, a refusal at a second disk.
func (l *tarLayer) checkRest() error {
	for {
		hdr, err := l.tr.Next()
		if err == io.EOF {
			return io.EOF
		}
		if err != nil {
			return l.tarError(err)
		}
		disk, _, err := l.diskMember(hdr)
		if err != nil {
			return err
		}
		if disk {
			return &errdefs.NotImageError{
				Message: fmt.Sprintf("a tar archive holding more than one disk image (%s, %s), not a disk image (extract the one to import first)", l.name, hdr.Name),
				Kind:    errdefs.ErrSeveralDisksInArchive,
			}
		}
	}
}

// tarError maps a failure reading the archive: the source's own error
// passes through, a damaged or truncated archive is an invalid image.
func (l *tarLayer) tarError(err error) error {
	if serr := l.src.failure(); serr != nil {
		return serr
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("tar: unexpected end of the archive (truncated?): %w", errdefs.ErrInvalidImage)
	}
	return fmt.Errorf("tar: %v: %w", err, errdefs.ErrInvalidImage)
}

// noDiskInTar is the refusal of a tar whose members hold no disk image.
func noDiskInTar(names []string) error {
	found := "it holds no regular file"
	if len(names) > 0 {
		shown := names
		if len(shown) > maxNamesListed {
			shown = shown[:maxNamesListed]
		}
		found = "it holds " + strings.Join(shown, ", ")
		if len(names) > len(shown) {
			found += fmt.Sprintf(" and %d more", len(names)-len(shown))
		}
	}
	return &errdefs.NotImageError{
		Message: "a tar archive holding no disk image (" + found + "), not a disk image",
		Kind:    errdefs.ErrNoDiskInArchive,
	}
}
