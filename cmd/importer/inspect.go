package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/units"
)

// newInspectCommand is `importer inspect SOURCE`: what an import of SOURCE
// would find and do, as text or --json, writing nothing.
func newInspectCommand(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, code *int) *cobra.Command {
	var f cliFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect [flags] SOURCE",
		Short: "Show what an import of SOURCE would find and do, writing nothing",
		Long: `Show what an import of SOURCE would find and do, writing nothing: the
format and compression, the virtual size, the size of the source, whether
scratch space would be needed, the route and phases of the import, and why
it would refuse the image. SOURCE is anything an import takes (a URL, an
image reference, a file, - for standard input). The exit status is 0 when
the import would go ahead, 1 when it would refuse the image or the source
cannot be read.`,
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := f.options(args[0], inspectTargetPlaceholder, stdin)
			if err != nil {
				*code = cdi.ExitUsage
				return err
			}
			opts.Logger = newLogger(stderr, f.verbose-1, f.verbose == 0)
			in, err := importer.Inspect(ctx, opts)
			if err != nil {
				*code = cdi.CLIExitCode(err)
				return err
			}
			if asJSON {
				fmt.Fprintln(stdout, string(in.JSON()))
			} else {
				io.WriteString(stdout, inspectionText(in))
			}
			if in.RefusedErr != nil {
				*code = cdi.ExitFailed
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print the inspection as JSON")
	fl.StringVar(&f.format, "format", "raw", "format a file DEST would get (raw or qcow2): qcow2 always converts")
	fl.CountVarP(&f.verbose, "verbose", "v", "log what the engine does")
	addSourceFlags(fl, &f)
	registerValueCompletions(cmd)
	return cmd
}

// inspectTargetPlaceholder fills options' DEST, which Inspect ignores.
const inspectTargetPlaceholder = "-"

// inspectionText is the text form:
//
//	source      https://example.org/disk.qcow2.xz
//	format      qcow2 (xz)
//	...
func inspectionText(in *importer.Inspection) string {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "%-13s %s\n", k, v) }
	row("source", in.Source)
	f := in.SourceFormat
	if len(in.Compressions) > 0 {
		f += " (" + strings.Join(in.Compressions, ", ") + ")"
	}
	row("format", f)
	row("virtual size", sizeText(in.VirtualSize, "known only after a full read"))
	row("source size", sizeText(in.SourceSize, "not given by the source"))
	if in.AllocatedSize >= 0 {
		row("allocated", sizeText(in.AllocatedSize, ""))
	}
	if in.UncompressedSize >= 0 {
		row("uncompressed", sizeText(in.UncompressedSize, ""))
	}
	if in.Refused != "" {
		row("refused", in.Refused)
		return b.String()
	}
	row("scratch", map[bool]string{true: "needed (the image is decompressed to scratch space for qemu-img)", false: "not needed"}[in.ScratchNeeded])
	row("route", in.Route)
	phases := []string{string(importer.PhaseInfo)}
	for _, p := range in.Phases {
		phases = append(phases, string(p))
	}
	row("phases", strings.Join(phases, " → "))
	return b.String()
}

func sizeText(n int64, unknown string) string {
	if n < 0 {
		return unknown
	}
	return fmt.Sprintf("%s (%d bytes)", units.Bytes(n), n)
}
