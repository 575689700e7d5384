package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// CompareImage is one side of Compare: an image file or device, its format
// driver, and optionally the number of bytes to consider (a device larger
// than the image keeps old bytes past its end).
type CompareImage struct {
	Path   string
	Format string
	Size   int64 // > 0: only the first Size bytes (raw only, qemu's "size" option)
}

// Compare limits: like convert, compare reads the whole image through the
// format driver.
var defaultCompareLimits = defaultConvertLimits

// maxCompareOutput caps what Compare keeps of qemu-img's report.
const maxCompareOutput = 1024

// ErrImagesDiffer is returned by Compare when both images read but differ
// (qemu-img compare exit status 1); the error text has qemu-img's report.
var ErrImagesDiffer = errors.New("images differ")

// Compare runs `qemu-img compare --image-opts A B` in the sandbox, reading
// both sides. It returns qemu-img's report; images that differ give an
// error wrapping ErrImagesDiffer, anything else a failure of qemu-img.
func (r *Runner) Compare(ctx context.Context, a, b CompareImage) (string, error) {
	if a.Format == "" || b.Format == "" {
		return "", fmt.Errorf("qemu-img compare: formats are required (probing is not allowed): %w", errdefs.ErrInvalidOptions)
	}
	out := &capBuffer{max: maxCompareOutput}
	res, err := r.run(ctx, runSpec{
		sub:    "compare",
		args:   []string{"compare", "--image-opts", a.imageOpts(), b.imageOpts()},
		limits: r.Limits.merge(defaultCompareLimits),
		stdout: out,
		reads:  []string{a.Path, b.Path},
	})
	report := strings.TrimSpace(out.String())
	if err != nil && res.exitCode == 1 && ctx.Err() == nil && !errors.Is(err, errdefs.ErrUnsafeImage) {
		return report, fmt.Errorf("qemu-img compare: %w: %s", ErrImagesDiffer, report)
	}
	return report, err
}

// imageOpts builds the --image-opts string: the format driver on the
// host_device or file protocol. Commas in a path are doubled, as qemu's
// option syntax wants.
func (c CompareImage) imageOpts() string {
	proto := "file"
	if fi, err := os.Stat(c.Path); err == nil && fi.Mode()&os.ModeDevice != 0 {
		proto = "host_device"
	}
	s := "driver=" + c.Format
	if c.Size > 0 {
		s += ",size=" + strconv.FormatInt(c.Size, 10)
	}
	return s + ",file.driver=" + proto + ",file.filename=" + strings.ReplaceAll(c.Path, ",", ",,")
}
