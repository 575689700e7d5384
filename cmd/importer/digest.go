package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
)

// newDigestCommand is `importer digest SOURCE`: print the manifest digest
// an image reference resolves to, so a poller can tell whether the image
// changed since the last import; with --content, the content digest of
// any source's disk (importer.ContentDigest), the one an import records.
func newDigestCommand(ctx context.Context, stdin io.Reader, stdout io.Writer, code *int) *cobra.Command {
	var f cliFlags
	var content bool
	cmd := &cobra.Command{
		Use:   "digest [flags] SOURCE",
		Short: "Print the manifest digest a docker://, oci-archive: or oci: image resolves to, or with --content the content digest of any source's disk",
		Long: `Print the manifest digest a docker://, oci-archive: or oci: image resolves to.

With --content, print the content digest of the disk SOURCE holds instead
(blk-sha256:HEX, where HEX is what blksum 0.10.1 prints for the same disk):
SOURCE is anything an import takes (a device, a raw, qcow2, vmdk, vhd, vdi or
vhdx file, compressed or not, a URL, a registry containerdisk, - for standard
input). The digest is of the guest-visible bytes, so one disk as raw,
qcow2.xz or on a loop device gives one digest; an import records the same
digest as contentDigest and checks it with --expect-content-digest.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, _ := newFormatLogger(cmd.ErrOrStderr(), logFormatText, cliLogLevel(f.verbose, f.quiet))
			if content {
				o, err := f.options(args[0], inspectTargetPlaceholder, stdin)
				if err != nil {
					*code = cdi.ExitUsage
					return err
				}
				o.Logger = log
				d, err := importer.ContentDigest(ctx, o)
				if err != nil {
					*code = cdi.CLIExitCode(err)
					return err
				}
				fmt.Fprintln(stdout, d)
				return nil
			}
			o := importer.Options{Access: datasource.Access{
				CertDir:        f.certDir,
				InsecureTLS:    f.insecureTLS,
				Arch:           f.arch,
				AuthFile:       f.authFile,
				RegistriesConf: f.registriesConf,
			},
				Logger: log}
			var err error
			if o.Username, o.Password, err = f.credentials(); err != nil {
				*code = cdi.ExitUsage
				return err
			}
			if o.Egress, err = f.egress(); err != nil {
				*code = cdi.ExitUsage
				return err
			}
			d, err := importer.ResolveDigest(ctx, args[0], o)
			if err != nil {
				*code = cdi.ExitFailed
				if errors.Is(err, importer.ErrInvalidOptions) && !strings.Contains(args[0], ":") {
					// A path: the user likely wanted the disk's digest.
					return fmt.Errorf("%w (for the content digest of the disk it holds: importer digest --content %s)", err, args[0])
				}
				return err
			}
			fmt.Fprintln(stdout, d)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&content, "content", false, "print the content digest of SOURCE's disk (any source), not a manifest digest")
	addSourceFlags(fl, &f)
	fl.StringVar(&f.scratch, "scratch", "", "with --content: where the stream decoder spills, and where an image it cannot read in one pass is imported to be hashed (default: the system temp dir)")
	fl.CountVarP(&f.verbose, "verbose", "v", "log what is done (-vv: debug); by default only warnings and errors")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "only warnings and errors, as by default (overrides -v)")
	return cmd
}
