package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// checkableFormats are the formats whose qemu-img driver implements check
// (verified on qemu-img 7.2: qcow2, vmdk, vdi, vhdx report results; vpc and
// raw fail with "This image format does not support checks", exit 63).
var checkableFormats = map[string]bool{
	"qcow2": true, "vmdk": true, "vdi": true, "vhdx": true,
	"qed": true, "qcow": true, "parallels": true,
}

// qemu-img check exit codes (qemu-img(1)).
const (
	checkExitOK          = 0
	checkExitCheckFailed = 1 // check could not complete (I/O error, etc.)
	checkExitCorrupt     = 2
	checkExitLeaks       = 3
	checkExitUnsupported = 63
)

type checkJSON struct {
	Corruptions  int64 `json:"corruptions"`
	Leaks        int64 `json:"leaks"`
	CheckErrors  int64 `json:"check-errors"`
	Fragmented   int64 `json:"fragmented-clusters"`
	TotalCluster int64 `json:"total-clusters"`
}

// Check runs `qemu-img check --output=json -f FORMAT PATH` for formats qemu
// can check and returns nil for the others. Corruptions or check errors are
// reported as errdefs.ErrInvalidImage; leaked clusters alone are harmless for
// a read-only conversion and are accepted.
func (r *Runner) Check(ctx context.Context, path, format string) error {
	if format == "" {
		return fmt.Errorf("qemu-img check %s: format is required (probing is not allowed): %w", path, errdefs.ErrInvalidOptions)
	}
	if !checkableFormats[format] {
		r.logger().Debug("qemu-img check skipped: format has no check", "format", format, "path", path)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.infoTimeout())
	defer cancel()
	// -r is never passed: check must not modify the image.
	res, out, err := r.query(ctx, "check", path, format)
	if err == nil {
		return nil
	}
	code := res.exitCode
	if code < 0 || ctx.Err() != nil || errors.Is(err, errdefs.ErrUnsafeImage) {
		return err // killed, cancelled or not started: already described
	}
	var j checkJSON
	jsonErr := json.Unmarshal(out.Bytes(), &j)
	switch {
	case code == checkExitLeaks:
		r.logger().Info("qemu-img check found leaked clusters (harmless for reading)", "path", path, "leaks", j.Leaks)
		return nil
	case code == checkExitUnsupported || strings.Contains(res.stderr, "does not support checks"):
		return nil
	case code == checkExitCorrupt && jsonErr == nil:
		return fmt.Errorf("qemu-img check %s: image is corrupt: %d corruptions, %d leaks, %d check errors (%s): %w",
			path, j.Corruptions, j.Leaks, j.CheckErrors, withStderr(res.stderr), errdefs.ErrInvalidImage)
	case code == checkExitCheckFailed || code == checkExitCorrupt:
		// The image could not even be checked (unreadable metadata, bad
		// header): that is a damaged image too.
		return fmt.Errorf("qemu-img check %s: check could not complete (exit %d, %s): %w",
			path, code, withStderr(res.stderr), errdefs.ErrInvalidImage)
	}
	return err
}
