package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
)

// newSizeDetectionCommand is `importer cdi-image-size-detection`: the
// program CDI's clone controller runs as /usr/bin/cdi-image-size-detection
// (the image's launcher of that name runs this), with CDI's flags, exit
// codes and termination message.
func newSizeDetectionCommand(ctx context.Context, getenv func(string) string, stderr io.Writer, code *int) *cobra.Command {
	return &cobra.Command{
		Use:   cdi.SizeDetectionProgram + " -image-path PATH",
		Short: "Write a disk image's virtual size to the termination log (CDI's size-detection pod)",
		Long: `Inspect the disk image at -image-path (CDI's pod: /data/disk.img, the
source volume of a clone) as an import would, the format checked and, for an
image qemu-img reads, qemu-img info run in the sandbox, and write its virtual
size in decimal bytes to /dev/termination-log. Exit codes are CDI's: 0, 1 no
-image-path, 2 the image cannot be read or is refused (the cause is logged and
written to the termination log), 3 not a local path, 4 the termination log
cannot be written. Flags (one dash or two): -image-path PATH, -scheme file://.`,
		DisableFlagParsing: true,
		SilenceUsage:       true,
		SilenceErrors:      true,
		RunE: func(cmd *cobra.Command, args []string) error {
			log := envLogger(stderr, getenv, 0, false)
			*code = cdi.RunSizeDetection(ctx, args, cdi.PathsFromEnv(getenv), log, stderr)
			return nil
		},
	}
}

// newPollerCommand is `importer cdi-source-update-poller`: the program
// CDI's DataImportCron controller runs as /usr/bin/cdi-source-update-poller
// (the image's launcher of that name runs this), with CDI's flags and
// exit codes.
func newPollerCommand(ctx context.Context, getenv func(string) string, stderr io.Writer, code *int) *cobra.Command {
	return &cobra.Command{
		Use:   cdi.PollerProgram + " -ns NS -cron NAME -url docker://REF [-certdir DIR]",
		Short: "Record a registry image's digest in a DataImportCron (CDI's poller pod)",
		Long: `Resolve -url (docker://REGISTRY/REPO[:TAG]) to its manifest digest, reading no
layer, and patch the DataImportCron -ns/-cron's annotations through the API
server with the pod's service account, as CDI's poller does: the time of the
poll (` + cdi.AnnLastCronTime + `) and, when it changed, the
digest (` + cdi.AnnSourceDesiredDigest + `).
The registry is reached as an importer pod would: IMPORTER_ACCESS_KEY_ID and
IMPORTER_SECRET_KEY, INSECURE_TLS, -certdir pooled with the proxy's CAs
(/proxycerts/), http_proxy/https_proxy/no_proxy; the API server never through
the proxy. Exit codes are CDI's: 0, 2 an unknown flag, 1 any failure (the cause
is logged and written to the termination log). Flags (one dash or two): -ns,
-cron, -url, -certdir, -server URL (instead of KUBERNETES_SERVICE_HOST/_PORT);
-kubeconfig is refused.`,
		DisableFlagParsing: true,
		SilenceUsage:       true,
		SilenceErrors:      true,
		RunE: func(cmd *cobra.Command, args []string) error {
			log := envLogger(stderr, getenv, 0, false)
			*code = cdi.RunSourceUpdatePoller(ctx, args, getenv, cdi.PathsFromEnv(getenv), log, stderr)
			return nil
		},
	}
}
