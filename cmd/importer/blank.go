package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
)

// newBlankCommand is `importer blank --size SIZE DEST`: an empty disk.
// code receives the exit status, as for the root command.
func newBlankCommand(ctx context.Context, stdout, stderr io.Writer, code *int) *cobra.Command {
	var (
		size, format, terminationLog string
		overhead                     float64
		prealloc, asJSON, quiet      bool
		verbose                      int
	)
	cmd := &cobra.Command{
		Use:   "blank --size SIZE [flags] DEST",
		Short: "Create an empty disk: a sparse raw or qcow2 file, or a block device left as is or zeroed",
		Long: `Create an empty disk on DEST.

A file DEST (or DEST/disk.img for a directory) gets a sparse raw image, or a
qcow2 image with --format qcow2, of --size less --filesystem-overhead. A block
device is left as it is, or zeroed with --preallocation (BLKZEROOUT where the
device supports it, written zeros otherwise).`,
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseQuantity(size)
			if err != nil {
				*code = exitUsage
				return err
			}
			res, err := importer.CreateBlank(ctx, importer.BlankOptions{
				Target:             args[0],
				Size:               n,
				Format:             format,
				FilesystemOverhead: overhead,
				Preallocation:      prealloc,
				Logger:             newLogger(stderr, verbose, quiet),
			})
			r := reporter{terminationLog: terminationLog, json: asJSON, quiet: quiet, stdout: stdout, stderr: stderr}
			*code = r.report(res, err, "blank disk failed", blankSummary(res))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&size, "size", "", "volume size: bytes or a Kubernetes quantity such as 10Gi (required for a file DEST)")
	fl.StringVar(&format, "format", "raw", "format of a file DEST: raw or qcow2")
	fl.BoolVar(&prealloc, "preallocation", false, "allocate the whole file, or zero the whole block device")
	fl.Float64Var(&overhead, "filesystem-overhead", 0, "fraction of a filesystem volume kept free, e.g. 0.06")
	fl.StringVar(&terminationLog, "termination-log", "", "write the result JSON to this file")
	fl.BoolVar(&asJSON, "json", false, "print the result JSON on standard output")
	fl.CountVarP(&verbose, "verbose", "v", "more log output (debug)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "only warnings and errors")
	return cmd
}

func blankSummary(res *importer.Result) string {
	if res == nil {
		return ""
	}
	return fmt.Sprintf("Blank disk created: %s (%d bytes)", res.Target, res.VirtualSize)
}

// runEnvBlank is IMPORTER_SOURCE=none: CDI's blank volume, on the block
// volume when /dev/cdi-block-volume exists, else /data/disk.img.
func runEnvBlank(ctx context.Context, getenv func(string) string, paths cdiPaths, log *slog.Logger, stderr io.Writer) int {
	o, err := envBlankOptions(getenv, paths)
	var res *importer.Result
	if err == nil {
		o.Logger = log
		res, err = importer.CreateBlank(ctx, o)
	}
	return reportEnv(paths, res, err, log, stderr, "blank disk failed")
}

func envBlankOptions(getenv func(string) string, paths cdiPaths) (importer.BlankOptions, error) {
	var o importer.BlankOptions
	size, err := parseQuantity(getenv("IMPORTER_IMAGE_SIZE"))
	if err != nil {
		return o, fmt.Errorf("IMPORTER_IMAGE_SIZE: %v: %w", err, errdefs.ErrInvalidOptions)
	}
	o.Size = size
	if o.Preallocation, err = envBool(getenv, "PREALLOCATION"); err != nil {
		return o, err
	}
	if v := getenv("FILESYSTEM_OVERHEAD"); v != "" {
		if o.FilesystemOverhead, err = strconv.ParseFloat(v, 64); err != nil {
			return o, fmt.Errorf("FILESYSTEM_OVERHEAD %q: %w", v, errdefs.ErrInvalidOptions)
		}
	}
	o.Target = paths.DataFile
	if _, err := os.Stat(paths.BlockDevice); err == nil {
		o.Target = paths.BlockDevice
		o.FilesystemOverhead = 0
	}
	return o, nil
}

// envCloneOptions adds what IMPORTER_SOURCE=clone needs to the options
// envOptions read: IMPORTER_ENDPOINT must be a local path (a block device or
// an image file), and IMPORTER_EXACT_SIZE / IMPORTER_VERIFY (this engine's,
// not CDI's) ask for an exact-size copy and a read-back check.
func envCloneOptions(getenv func(string) string, o *importer.Options) error {
	if !filepath.IsAbs(o.Source) {
		return fmt.Errorf("IMPORTER_SOURCE=clone: IMPORTER_ENDPOINT %q must be an absolute path to a block device or image file: %w", o.Source, errdefs.ErrInvalidOptions)
	}
	var err error
	if o.ExactSize, err = envBool(getenv, "IMPORTER_EXACT_SIZE"); err != nil {
		return err
	}
	if o.Verify, err = envBool(getenv, "IMPORTER_VERIFY"); err != nil {
		return err
	}
	return nil
}
