package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/units"
)

// newBlankCommand is `importer blank --size SIZE DEST`: an empty disk.
// code receives the exit status, as for the root command.
func newBlankCommand(ctx context.Context, stdout, stderr io.Writer, code *int) *cobra.Command {
	var (
		size, format, terminationLog string
		mode                         string
		logFormat                    string
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
			n, err := cdi.ParseQuantity(size)
			if err != nil {
				*code = cdi.ExitUsage
				return err
			}
			log, err := newFormatLogger(stderr, logFormat, cliLogLevel(verbose, quiet))
			if err != nil {
				*code = cdi.ExitUsage
				return err
			}
			perm, err := fileMode(mode)
			if err != nil {
				*code = cdi.ExitUsage
				return err
			}
			res, err := importer.CreateBlank(ctx, importer.BlankOptions{
				Target:             args[0],
				Size:               n,
				Format:             format,
				FilesystemOverhead: overhead,
				Preallocation:      prealloc,
				Mode:               perm,
				Logger:             log,
			})
			r := reporter{terminationLog: terminationLog, json: asJSON, quiet: quiet, stdout: stdout, stderr: stderr}
			if logFormat == logFormatJSON {
				r.records, _ = newFormatLogger(stderr, logFormat, slog.LevelInfo)
			}
			*code = r.report(res, err, "blank disk failed", blankSummary(res))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&size, "size", "", "volume size: bytes or a Kubernetes quantity such as 10Gi (required for a file DEST)")
	fl.StringVar(&format, "format", "raw", "format of a file DEST: raw or qcow2")
	fl.BoolVar(&prealloc, "preallocation", false, "allocate the whole file, or zero the whole block device")
	fl.Float64Var(&overhead, "filesystem-overhead", 0, "fraction of a filesystem volume kept free, e.g. 0.06")
	fl.StringVar(&mode, "mode", "", "permission bits of a new DEST file, in octal (default: 0666 less the umask, as an import's)")
	fl.StringVar(&terminationLog, "termination-log", "", "write the result JSON to this file")
	fl.BoolVar(&asJSON, "json", false, "print the result JSON on standard output")
	fl.CountVarP(&verbose, "verbose", "v", "log what is done (-vv: debug)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no summary: only warnings and errors")
	fl.StringVar(&logFormat, "log-format", logFormatText, "log lines as text or json")
	registerValueCompletions(cmd)
	return cmd
}

func blankSummary(res *importer.Result) string {
	if res == nil {
		return ""
	}
	return fmt.Sprintf("Blank disk created: %s, %s (%d bytes)", res.Target, units.Bytes(res.VirtualSize), res.VirtualSize)
}
