package cdi

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
)

// SizeDetectionProgram is the name CDI's clone controller starts the size
// detection as (/usr/bin/cdi-image-size-detection in the importer image):
// when a clone DataVolume has no size, or a filesystem volume of kubevirt
// content is cloned onto a block volume, it runs a pod with the source
// volume at /data and "-image-path /data/disk.img", and reads the image's
// virtual size (decimal bytes) from the termination message of a pod that
// exited 0.
const SizeDetectionProgram = "cdi-image-size-detection"

// The size detection's exit codes, CDI's (pkg/controller/common): the
// clone controller names the event after the code (ErrBadArguments, …) and
// ignores the termination message of a pod that did not exit 0.
const (
	SizeExitBadArguments = 1 // -image-path missing
	SizeExitInvalidFile  = 2 // the image cannot be read, or is refused
	SizeExitInvalidPath  = 3 // -scheme and -image-path are no usable URL
	SizeExitBadTermFile  = 4 // the termination message cannot be written
)

// sizeDetectionScheme is the only -scheme taken: the image is a file of
// the mounted volume (CDI's default, and all its controller passes).
const sizeDetectionScheme = "file://"

// RunSizeDetection is the size-detection pod: it inspects the image as an
// import's Info phase would (the project's own format checks, then, for a
// qcow2 or another format qemu-img reads in place, qemu-img info in the
// sandbox), so a hostile or corrupt image is refused with the cause on the
// log and in the termination message, and exit 2; never a size the image
// does not support. Flags are parsed as Go's flag package does, as CDI's
// binary parses them: an unknown flag prints the usage and exits 2, -h
// exits 0. It returns the exit code.
func RunSizeDetection(ctx context.Context, args []string, paths Paths, log *slog.Logger, stderr io.Writer) int {
	fs := flag.NewFlagSet(SizeDetectionProgram, flag.ContinueOnError)
	fs.SetOutput(stderr)
	imagePath := fs.String("image-path", "", "(required) path of the disk image, in the mounted volume")
	scheme := fs.String("scheme", sizeDetectionScheme, "URI scheme put in front of -image-path (only file:// is read)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage // Go's flag package exits 2, so does CDI's binary
	}
	fail := func(code int, err error) int {
		log.Error("Size detection failed", "error", err.Error(), "exitCode", code)
		if werr := writeTerminationLog(paths.TerminationLog, []byte(oneLine(err.Error()))); werr != nil {
			log.Warn("termination message not written", "error", werr.Error())
		}
		return code
	}
	if *imagePath == "" {
		fs.Usage()
		return fail(SizeExitBadArguments, errors.New("-image-path is required"))
	}
	path, err := sizeDetectionPath(*scheme, *imagePath)
	if err != nil {
		return fail(SizeExitInvalidPath, err)
	}
	log.Info("Detecting the virtual size", "image", path)
	size, err := virtualSize(ctx, path, log)
	if err != nil {
		return fail(SizeExitInvalidFile, err)
	}
	if err := writeTerminationLog(paths.TerminationLog, []byte(strconv.FormatInt(size, 10))); err != nil {
		log.Error("Size detection failed", "error", err.Error(), "exitCode", SizeExitBadTermFile)
		return SizeExitBadTermFile
	}
	log.Info("Virtual size detected", "image", path, "virtualSize", size)
	return ExitOK
}

// sizeDetectionPath is the local path scheme+imagePath names, as CDI joins
// them ("file://" + "/data/disk.img").
func sizeDetectionPath(scheme, imagePath string) (string, error) {
	u, err := url.Parse(scheme + imagePath)
	if err != nil {
		return "", fmt.Errorf("-scheme %q -image-path %q: %w", scheme, imagePath, err)
	}
	if u.Scheme != "file" {
		return "", fmt.Errorf("-scheme %q: only %s is read (the image is a file of the mounted volume)", scheme, sizeDetectionScheme)
	}
	if (u.Host != "" && u.Host != "localhost") || u.Path == "" || u.Path[0] != '/' {
		return "", fmt.Errorf("-image-path %q: want an absolute path, such as /data/disk.img", imagePath)
	}
	return u.Path, nil
}

// virtualSize inspects the image at path as an import would and returns
// its virtual size; an image the import would refuse is an error naming
// why.
func virtualSize(ctx context.Context, path string, log *slog.Logger) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	in, err := importer.Inspect(ctx, importer.Options{Source: path, Logger: log})
	if err != nil {
		return 0, fmt.Errorf("inspecting %s: %w", path, err)
	}
	if in.RefusedErr != nil {
		return 0, fmt.Errorf("%s refused: %w", path, in.RefusedErr)
	}
	if len(in.Compressions) > 0 {
		// A volume's disk.img is an image a VM reads as it is; CDI's qemu-img
		// would call this one raw and give the compressed file's size.
		return 0, fmt.Errorf("%s is a %s-compressed %s, not a disk image a VM can read: %w", path, strings.Join(in.Compressions, "+"), in.SourceFormat, errdefs.ErrInvalidImage)
	}
	if in.VirtualSize <= 0 {
		return 0, fmt.Errorf("%s (%s): no virtual size: %w", path, in.SourceFormat, errdefs.ErrInvalidImage)
	}
	return in.VirtualSize, nil
}
