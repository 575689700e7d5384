package importer

import (
	"context"
	"fmt"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/volume"
)

// info is the Info phase: it opens the target and the source, peels
// compression, identifies the image, checks what its header tells before a
// byte reaches the target, and decides the plan. The target is opened
// first, so a busy device is refused before a download starts, except
// where a delta pass is asked for: whether the target is then claimed in
// place or staged depends on the source.
func (a *attempt) info(ctx context.Context) (*importPlan, error) {
	if a.req.Blank {
		return a.blankInfo(ctx)
	}
	if a.req.DeltaReceived != nil {
		return a.receivedDeltaInfo(ctx)
	}
	switch a.req.ContentType {
	case "", ContentTypeKubevirt:
	case ContentTypeAsIs:
		if a.req.Format == "qcow2" {
			return nil, fmt.Errorf("content type %s copies the bytes as they are; --format qcow2 does not apply: %w", ContentTypeAsIs, errdefs.ErrInvalidOptions)
		}
	default:
		return a.archiveInfo(ctx)
	}
	var st *datasource.Transfer
	var facts *importFacts
	if a.req.Delta {
		var err error
		if st, err = a.openSource(ctx); err != nil {
			return nil, err
		}
		if facts = a.sourceFacts(); deltaClosed(facts, a.req) == "" {
			return a.deltaInfo(facts)
		}
	}
	if err := a.openTarget(ctx); err != nil {
		return nil, err
	}
	if st == nil {
		var err error
		if st, err = a.openSource(ctx); err != nil {
			return nil, err
		}
		facts = a.sourceFacts()
	}
	img := a.source.image
	a.log.Info("Image detected", "format", img.Format, "compression", a.result.Compressions,
		"virtualSize", img.Header.VirtualSize, "sourceSize", st.Size, "target", a.target.Path(), "targetCapacity", a.target.Capacity())

	if err := a.checkEarlySize(ctx, img, st); err != nil {
		return nil, err
	}
	if err := a.checkClone(ctx, img, st); err != nil {
		return nil, err
	}
	return a.choosePlan(a.gatherFacts(ctx, facts)), nil
}

// openTarget opens the target to be written (a file staged beside its
// final name, a device claimed) and refuses a device asked to hold a
// qcow2.
func (a *attempt) openTarget(ctx context.Context) error {
	tgt, err := volume.Open(ctx, volume.Options{
		Path:               a.req.Target,
		RequestedSize:      a.req.Size,
		FilesystemOverhead: a.req.FilesystemOverhead,
		Mode:               a.req.Mode,
		Logger:             a.log,
		// A file's capacity may pass its free space.
		AllowSparseOvercommit: a.req.AllowSparseOvercommit,
	})
	if err != nil {
		return fmt.Errorf("opening target %s: %w", a.req.Target, err)
	}
	a.target = tgt
	a.result.Target = tgt.Path()
	if outputFormat(a.req) == "qcow2" && tgt.Kind() == volume.Block {
		return fmt.Errorf("target %s is a block device, which holds raw data only; qcow2 needs a file target: %w", tgt.Path(), errdefs.ErrInvalidOptions)
	}
	return nil
}

// choosePlan is decide's plan for the facts, logged in one line with the
// reason for its route.
func (a *attempt) choosePlan(f *importFacts) *importPlan {
	plan, why := decide(f, a.req)
	a.log.Info("Import planned", "route", plan.Route.String(), "reason", why, "phases", plan.Phases,
		"source", a.req.Source.String(), "checksum", f.checksummed, "replayable", !f.caps.OneTime)
	return plan
}

// checkEarlySize refuses an image whose size is known up front and does not
// fit, before anything is written.
func (a *attempt) checkEarlySize(ctx context.Context, img *format.Image, st *datasource.Transfer) error {
	capacity := a.target.Capacity()
	if v := img.Header.VirtualSize; v > 0 {
		a.result.VirtualSize = v
		if v > capacity {
			return a.target.TooSmall(v, errdefs.VirtualImageSize)
		}
		return nil
	}
	if n := img.RawMemberSize(); n-format.FixedVHDFooterLen > capacity {
		// A raw disk read from a tar: the member's header gave its size
		// (a fixed VHD's footer, one sector, may be the excess).
		return a.target.TooSmall(n, "image size")
	}
	if img.Format.NeedsConversion() || len(img.Compressions) > 0 || st.Size < 0 {
		return nil
	}
	if a.req.ContentType == ContentTypeAsIs {
		// Every byte goes to the target: no footer to leave out.
		if st.Size > capacity {
			return a.target.TooSmall(st.Size, "source size")
		}
		return nil
	}
	if a.caps.LocalPath != "" {
		// A DMG is known only by its last sector: read it now, so a local
		// one is refused before a byte reaches the target (a stream is
		// refused at its end, before its held-back head is written).
		tail, err := readTail(ctx, st, format.FixedVHDFooterLen)
		if err != nil {
			return err
		}
		if err := format.CheckTrailer(tail); err != nil {
			return err
		}
	}
	if st.Size <= capacity {
		return nil
	}
	tooBig := a.target.TooSmall(st.Size, "image size")
	if st.Size-format.FixedVHDFooterLen > capacity {
		return tooBig
	}
	// One sector too many: fine only if that sector is a fixed VHD's footer,
	// which does not go to the disk. Where the end can be read now (a local
	// file or device, or a server that serves ranges), decide before a byte
	// is written; a plain stream is decided at its end (copyRaw).
	tail, err := readTail(ctx, st, format.FixedVHDFooterLen)
	if err != nil {
		return err
	}
	if tail != nil && !format.IsFixedVHDFooter(tail, st.Size-format.FixedVHDFooterLen) {
		return tooBig
	}
	return nil
}
