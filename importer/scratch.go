package importer

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/volume"
)

// scratchTransfer is TransferScratch: the decompressed image goes to a
// sparse scratch file so qemu-img can read it at random. The file is this
// phase's until it is complete; then it is handed to out (what Validate,
// Convert and Verify read), which removes it when done.
type scratchTransfer struct {
	a   *attempt
	out *imageInput
}

func (s *scratchTransfer) run(ctx context.Context) (err error) {
	a := s.a
	dir, err := a.scratchDir()
	if err != nil {
		return err
	}
	scratch, err := volume.OpenScratch(ctx, dir, string(a.source.image.Format), a.log)
	if err != nil {
		return err
	}
	defer scratch.Close()
	path := scratch.Path()
	a.result.ScratchUsed = true
	defer func() {
		if err != nil {
			if rerr := os.Remove(path); rerr != nil && !os.IsNotExist(rerr) {
				a.log.Warn("Removing scratch file failed", "path", path, "err", rerr)
			}
		}
	}()
	n, err := a.copyRaw(ctx, scratch)
	a.result.ScratchBytes += n
	if err != nil {
		scratch.Abort()
		if errors.Is(err, errdefs.ErrTargetTooSmall) {
			return fmt.Errorf("%w: scratch directory %s: %v", errdefs.ErrScratchSpaceRequired, dir, err)
		}
		return err
	}
	if err := scratch.Commit(ctx); err != nil {
		return fmt.Errorf("finishing scratch file %s: %w", path, err)
	}
	s.out.path, s.out.scratch = path, path
	return nil
}

// scratchDir is the request's scratch directory, or why there is none to
// use (ErrScratchSpaceRequired: none was given, or it is not a directory).
func (a *attempt) scratchDir() (string, error) {
	dir := a.req.ScratchDir
	if a.req.NoScratch {
		return "", fmt.Errorf("%w: this import was given no scratch space", errdefs.ErrScratchSpaceRequired)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%w: scratch directory %s is not usable: %v", errdefs.ErrScratchSpaceRequired, dir, err)
	}
	return dir, nil
}
