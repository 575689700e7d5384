package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
)

// addRegistryFlags adds the options of docker://, oci-archive: and oci:
// sources (--creds, --cert-dir and --insecure-tls apply to them too).
func addRegistryFlags(fl *pflag.FlagSet, f *cliFlags) {
	fl.StringVar(&f.arch, "arch", "", "architecture to pick from a multi-platform image (default: this machine's)")
	fl.StringVar(&f.authFile, "auth-file", "", "registry credentials: a containers auth.json or docker config.json")
	fl.StringVar(&f.registriesConf, "registries-conf", "", "registries.conf to use for mirrors and insecure registries (default: the system's)")
}

// newDigestCommand is `importer digest SOURCE`: print the manifest digest
// an image reference resolves to, so a poller can tell whether the image
// changed since the last import.
func newDigestCommand(ctx context.Context, stdout io.Writer, code *int) *cobra.Command {
	var f cliFlags
	cmd := &cobra.Command{
		Use:   "digest [flags] SOURCE",
		Short: "Print the manifest digest a docker://, oci-archive: or oci: image resolves to",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := importer.Options{CertDir: f.certDir, InsecureTLS: f.insecureTLS, Arch: f.arch,
				AuthFile: f.authFile, RegistriesConf: f.registriesConf,
				Logger: newLogger(cmd.ErrOrStderr(), f.verbose, f.quiet)}
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
				return err
			}
			fmt.Fprintln(stdout, d)
			return nil
		},
	}
	fl := cmd.Flags()
	addRegistryFlags(fl, &f)
	addEgressFlags(fl, &f)
	fl.StringVar(&f.certDir, "cert-dir", "", "directory of CA certificates (*.crt, *.pem) to trust")
	fl.BoolVar(&f.insecureTLS, "insecure-tls", false, "do not verify the registry's certificate; allow plain http")
	fl.StringVar(&f.creds, "creds", "", "registry USER:PASSWORD")
	fl.CountVarP(&f.verbose, "verbose", "v", "more log output (debug)")
	fl.BoolVarP(&f.quiet, "quiet", "q", true, "only warnings and errors")
	return cmd
}
