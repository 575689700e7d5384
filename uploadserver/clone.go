package uploadserver

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"

	"github.com/klauspost/compress/s2"

	"github.com/diskimport/engine/archive"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
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

// serveClone receives a host-assisted clone: ours (sparse-v1, resumable)
// when the request says so, else CDI's snappy-framed stream.
func (h *Handler) serveClone(w http.ResponseWriter, r *http.Request, ct string) {
	if p := r.Header.Get(cloner.ProtocolHeader); p != "" {
		if p != cloner.ProtocolSparseV1 || ct != ContentTypeBlockdeviceClone {
			http.Error(w, fmt.Sprintf("clone protocol %q for %s: only %s of a %s", p, ct, cloner.ProtocolSparseV1, ContentTypeBlockdeviceClone), http.StatusBadRequest)
			return
		}
		h.serveSparseClone(w, r)
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
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(h.opts.BaseContext, cancel)
	defer stop()
	h.log.Info("Clone started", "contentType", ct, "remote", r.RemoteAddr, "protocol", "snappy")
	h.setPhase(string(importer.PhaseTransferDataFile))
	size := int64(-1)
	if v := r.Header.Get(cloner.SizeHeader); v != "" && ct == ContentTypeBlockdeviceClone {
		if size, err = strconv.ParseInt(v, 10, 64); err != nil || size < 0 {
			body.close()
			err = fmt.Errorf("%s %q: %w", cloner.SizeHeader, v, errdefs.ErrInvalidImage)
			h.finishClone(nil, err)
			h.respondClone(w, nil, err)
			return
		}
	}
	res, err := h.cloneSnappy(ctx, s2.NewReader(body), ct, size)
	body.close()
	if serr := body.stalled(); err != nil && serr != nil {
		err = serr
	}
	if res != nil {
		res.BytesRead = count.Load()
	}
	h.finishClone(res, err)
	h.respondClone(w, res, err)
}

// cloneSnappy writes CDI's decoded clone stream: raw bytes of a block
// device, or a tar of a filesystem volume, extracted into the target's
// directory or, onto a block target, its disk.img alone.
// size is the source's size when the client said (SizeHeader), else -1.
func (h *Handler) cloneSnappy(ctx context.Context, src io.Reader, ct string, size int64) (*importer.Result, error) {
	o := h.opts.Import
	if ct == ContentTypeFilesystemClone && !isBlockDevice(o.Target) {
		dir := archiveDir(o.Target)
		st, err := archive.Extract(ctx, src, dir, archive.Options{Logger: h.log})
		if err != nil {
			return nil, fmt.Errorf("extracting the filesystem clone into %s: %w", dir, err)
		}
		return &importer.Result{Complete: true, Target: dir, SourceFormat: "tar", BytesWritten: st.Bytes}, nil
	}
	if ct == ContentTypeFilesystemClone {
		tr := tar.NewReader(src)
		n, err := seekDiskImage(tr)
		if err != nil {
			return nil, err
		}
		src, size = io.LimitReader(tr, n), n
	}
	raw, err := openRawClone(ctx, o, size)
	if err != nil {
		return nil, err
	}
	if err := raw.copyFrom(src); err != nil {
		raw.abort()
		return nil, fmt.Errorf("receiving the clone: %w", err)
	}
	return raw.commit(ctx)
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
	_, _ = w.Write(append(cdi.UploadTerminationMessage(cdi.NewTerminationMessage(res, nil), true).JSON(), '\n'))
}

// describeClone, in a HEAD answer, offers our clone format and, for the
// session of an interrupted clone, the offset to resume from.
func (h *Handler) describeClone(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(cloner.ProtocolHeader, cloner.ProtocolSparseV1)
	id := r.Header.Get(cloner.SessionHeader)
	if id == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.clone; s != nil && s.id == id {
		w.Header().Set(cloner.OffsetHeader, strconv.FormatInt(s.raw.offset, 10))
	}
}
