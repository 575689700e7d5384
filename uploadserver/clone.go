package uploadserver

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"

	"github.com/klauspost/compress/s2"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
)

// HeaderContentType is CDI's header selecting a clone stream.
const HeaderContentType = "x-cdi-content-type"

// Clone content types (CDI's names).
const (
	ContentTypeFilesystemClone  = "filesystem-clone"
	ContentTypeBlockdeviceClone = "blockdevice-clone"
)

// cloneDiskImage is the entry of a filesystem clone that holds the disk.
const cloneDiskImage = "disk.img"

func isCloneContentType(ct string) bool {
	return ct == ContentTypeFilesystemClone || ct == ContentTypeBlockdeviceClone
}

// serveClone receives a host-assisted clone: ours (sparse-v2, resumable)
// when the request says so, else CDI's snappy-framed stream.
func (h *Handler) serveClone(w http.ResponseWriter, r *http.Request, ct string) {
	if p := r.Header.Get(cloner.ProtocolHeader); p != "" {
		// A filesystem volume goes over sparse-v2 as its disk image's
		// records (written where its disk.img goes: the target) or as a
		// delta pass.
		if p != cloner.ProtocolSparseV2 {
			http.Error(w, fmt.Sprintf("clone protocol %q for %s: only %s", p, ct, cloner.ProtocolSparseV2), http.StatusBadRequest)
			return
		}
		h.serveSparseClone(w, r, ct)
		return
	}
	count, err := h.begin()
	if err != nil {
		http.Error(w, err.Error(), beginStatus(err))
		return
	}
	stall := newStallGuard(w, h.opts.Import.StallTimeout)
	defer stall.disarm()
	body := &gatedReader{r: r.Body, n: count, stall: stall}
	h.log.Info("Clone started", "contentType", ct, "remote", r.RemoteAddr, "protocol", "snappy")
	o, err := h.snappyCloneOptions(s2.NewReader(body), ct, r.Header.Get(cloner.SizeHeader))
	if err != nil {
		body.close()
		h.finishClone(nil, err)
		h.respondClone(w, nil, err)
		return
	}
	h.runSync(w, r, body, o, true)
}

// snappyCloneOptions makes CDI's decoded clone stream an import: the raw
// bytes of a block device copied as they are; a tar of a filesystem
// volume extracted into the target's directory by the archive route (into
// a staging directory, committed only once complete) or, onto a block
// target, its disk.img alone, as they are. size is SizeHeader's value ("":
// the sender did not say).
func (h *Handler) snappyCloneOptions(src io.Reader, ct, size string) (importer.Options, error) {
	o := h.importOptions(src)
	if ct == ContentTypeFilesystemClone && !isBlockDevice(o.Target) {
		o.ContentType = importer.ContentTypeArchive
		o.Target = archiveDir(o.Target)
		return o, nil
	}
	o.ContentType = importer.ContentTypeAsIs
	if ct == ContentTypeFilesystemClone {
		tr := tar.NewReader(src)
		n, err := seekDiskImage(tr)
		if err != nil {
			return o, err
		}
		// The tar reader holds the entry to its size and fails a short one.
		o.SourceReader, o.SourceReaderSize = io.LimitReader(tr, n), n
		return o, nil
	}
	if size != "" {
		n, err := strconv.ParseInt(size, 10, 64)
		if err != nil || n < 0 {
			return o, fmt.Errorf("%s %q: %w", cloner.SizeHeader, size, errdefs.ErrInvalidImage)
		}
		o.SourceReader, o.SourceReaderSize = &announcedReader{r: src, left: n, size: n}, n
	}
	return o, nil
}

// announcedReader holds a clone stream to the size its sender announced:
// a byte past it, or an end before it, fails the read.
type announcedReader struct {
	r          io.Reader
	left, size int64
}

func (a *announcedReader) Read(p []byte) (int, error) {
	if a.left == 0 {
		var one [1]byte
		for {
			n, err := a.r.Read(one[:])
			if n > 0 {
				return 0, fmt.Errorf("the clone stream passes its announced %d bytes: %w", a.size, errdefs.ErrInvalidImage)
			}
			if err != nil {
				return 0, err
			}
		}
	}
	if int64(len(p)) > a.left {
		p = p[:a.left]
	}
	n, err := a.r.Read(p)
	a.left -= int64(n)
	if err == io.EOF && a.left > 0 {
		return n, fmt.Errorf("the clone stream ends at %d of its announced %d bytes: %w", a.size-a.left, a.size, errdefs.ErrInvalidImage)
	}
	return n, err
}

// seekDiskImage moves tr to the disk image of a filesystem clone and
// returns its size; tr then reads its bytes.
func seekDiskImage(tr *tar.Reader) (int64, error) {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return 0, fmt.Errorf("the filesystem clone holds no %s: %w", cloneDiskImage, errdefs.ErrInvalidImage)
		}
		if err != nil {
			return 0, fmt.Errorf("reading the filesystem clone: %w: %w", err, errdefs.ErrInvalidImage)
		}
		if hdr.Typeflag == tar.TypeReg && path.Clean(hdr.Name) == cloneDiskImage {
			return hdr.Size, nil
		}
	}
}

func isBlockDevice(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
}

func beginStatus(err error) int {
	if errors.Is(err, errFinished) || errors.Is(err, errDeadline) {
		return http.StatusServiceUnavailable
	}
	return http.StatusConflict
}

// finishClone records a clone's outcome (finish, marked as a clone for
// the termination message).
func (h *Handler) finishClone(res *importer.Result, err error) {
	h.mu.Lock()
	h.lastClone = true
	h.mu.Unlock()
	h.finish(res, err)
}

func (h *Handler) respondClone(w http.ResponseWriter, res *importer.Result, err error) {
	if err != nil {
		h.log.Warn("Clone failed", "err", err)
		http.Error(w, statusText(err), httpStatus(err))
		return
	}
	h.log.Info("Clone complete", "target", res.Target, "bytes", res.BytesWritten, "dataBytes", res.DataBytes, "digest", res.TargetDigest)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(answerJSON(res, true), '\n'))
}

// describeClone, in a HEAD answer, offers our clone format and, for the
// session of an interrupted clone, the offset to resume from.
func (h *Handler) describeClone(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(cloner.ProtocolHeader, cloner.ProtocolSparseV2)
	w.Header().Set(cloner.FramingHeader, cloner.FramingRecords)
	w.Header().Set(cloner.FilesystemHeader, cloner.FilesystemDiskImage)
	w.Header().Set(cloner.DeltaHeader, cloner.DeltaV1)
	if isBlockDevice(h.opts.Import.Target) {
		w.Header().Set(cloner.DeltaOfHeader, cloner.DeltaOfDiskImage)
	}
	id := r.Header.Get(cloner.SessionHeader)
	if id == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.clone; s != nil && s.id == id {
		w.Header().Set(cloner.OffsetHeader, strconv.FormatInt(s.offset(), 10))
	}
}
