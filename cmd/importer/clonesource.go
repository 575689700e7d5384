package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/uploadserver"
)

// cloneSourceFlags are clone-source's flags: CDI's cloner's three
// (-content-type, -upload-bytes, -mount) and ours.
type cloneSourceFlags struct {
	contentType, mount     string
	uploadBytes            uint64
	url                    string
	clientCert, clientKey  string
	serverCA               string
	protocol               string
	retries                int
	metricsListen, ownerID string
	terminationLog         string
	json                   bool
	verbose                int
	quiet                  bool
	delta                  bool
	deltaBase              string
}

// newCloneSourceCommand is `importer clone-source`: the cloner pod of a
// host-assisted clone. Its flags are cobra's (help, the man page, the CLI
// reference and completion list them), and one dash is taken for two, as
// Go's flag package does, so CDI's cloner command line (-content-type …,
// -v=3 -alsologtostderr) works unchanged.
func newCloneSourceCommand(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer, code *int) *cobra.Command {
	var f cloneSourceFlags
	cmd := &cobra.Command{
		Use:   "clone-source [flags]",
		Short: "Stream a volume to an upload server (CDI's cloner pod)",
		Long: `Read a block device (raw) or a mounted filesystem volume (a tar of its
contents) and POST it to an upload server with mutual TLS and CDI's
x-cdi-content-type header. Against our upload server the stream is sparse-v2
(zero runs not sent, whole-source sha256 checked before Clone Complete,
resumed after a dropped connection); against any other it is CDI's
snappy-framed stream. With --delta, a delta pass onto a target holding an
earlier copy: a device's differing blocks; a filesystem volume's large files
likewise, its small files whole, committed once the volume's digest matched.

With UPLOAD_URL in the environment and no --url, CDI's cloner environment
applies: VOLUME_MODE, MOUNT_POINT, UPLOAD_URL, CLIENT_CERT, CLIENT_KEY and
SERVER_CA_CERT (PEM text), OWNER_UID, PREALLOCATION; progress is served as
` + cdi.CloneProgressMetricName + ` on :8443 and "Clone Complete" goes to
/dev/termination-log.

Flags take one dash or two (-content-type as --content-type), as CDI's
cloner command line passes them.`,
		// Parsed in RunE, after one dash is made two.
		DisableFlagParsing: true,
		SilenceUsage:       true,
		SilenceErrors:      true,
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			if err := fl.Parse(twoDashes(args)); err != nil {
				if errors.Is(err, pflag.ErrHelp) {
					return cmd.Help()
				}
				*code = cdi.ExitUsage
				return suggestFlag(cmd, err)
			}
			if help, _ := fl.GetBool("help"); help {
				return cmd.Help()
			}
			if fl.NArg() > 0 {
				*code = cdi.ExitUsage
				return fmt.Errorf("clone-source takes flags only, not %q (see importer clone-source --help)", fl.Arg(0))
			}
			log := newLogger(stderr, f.verbose, f.quiet)
			*code = runCloneSource(ctx, f, getenv, log, stdout, stderr)
			return nil
		},
	}
	cloneSourceFlagSet(cmd.Flags(), &f)
	cmd.Flags().BoolP("help", "h", false, "help for clone-source")
	return cmd
}

// twoDashes makes each one-dash flag of args a two-dash one ("-mount" is
// "--mount", "-v=3" "--v=3", "-q" "--q"), as Go's flag package reads them;
// a value such as -1, -h (help's shorthand) and what follows "--" are left
// alone.
func twoDashes(args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 1 && a[0] == '-' && isLetter(a[1]) && a != "-h" {
			a = "-" + a
		}
		out = append(out, a)
	}
	return out
}

func isLetter(b byte) bool { return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }

// cloneSourceFlagSet defines clone-source's flags on fs, setting f to
// their defaults.
func cloneSourceFlagSet(fs *pflag.FlagSet, f *cloneSourceFlags) {
	fs.StringVar(&f.contentType, "content-type", "", "blockdevice-clone or filesystem-clone")
	fs.StringVar(&f.mount, "mount", "", "the source: block device, or the mounted volume")
	fs.Uint64Var(&f.uploadBytes, "upload-bytes", 0, "bytes expected, for progress (default: measured)")
	fs.StringVar(&f.url, "url", "", "the upload server's upload URL")
	fs.StringVar(&f.clientCert, "client-cert", "", "PEM client certificate file")
	fs.StringVar(&f.clientKey, "client-key", "", "PEM client key file")
	fs.StringVar(&f.serverCA, "server-ca", "", "PEM CA file of the server's certificate")
	fs.StringVar(&f.protocol, "protocol", "auto", "auto, snappy (CDI's stream) or sparse-v2")
	fs.IntVar(&f.retries, "retries", 10, "resumptions after a dropped connection (sparse-v2)")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve the progress metric over HTTPS here")
	fs.StringVar(&f.ownerID, "owner-uid", "", "the ownerUID label of the progress metric")
	fs.StringVar(&f.terminationLog, "termination-log", "", "write the termination message here")
	fs.BoolVar(&f.json, "json", false, "print the result JSON on standard output")
	fs.IntVar(&f.verbose, "v", 0, "log verbosity (klog's -v=N is accepted)")
	fs.BoolVar(&f.quiet, "q", false, "only warnings and errors")
	fs.BoolVar(&f.delta, "delta", false, "a delta pass when the server's target holds an earlier copy: only the blocks that differ are sent (a device of the source's size or larger; a filesystem volume's files of the same size, its small files whole; onto a device, a volume holding only its raw disk.img as that file; env IMPORTER_DELTA=true)")
	fs.StringVar(&f.deltaBase, "delta-base", "", "with --delta: the digest the target must have to be the base (the last pass's digest: blk-sha256:… or a volume's tree-blk-sha256:…; env IMPORTER_DELTA_BASE)")
	fs.Bool("alsologtostderr", false, "accepted for CDI's command line; ignored")
	_ = fs.MarkHidden("alsologtostderr")
}

// cloneSourceDefaults are clone-source's flags as given none.
func cloneSourceDefaults() cloneSourceFlags {
	var f cloneSourceFlags
	cloneSourceFlagSet(pflag.NewFlagSet("clone-source", pflag.ContinueOnError), &f)
	return f
}

// runCloneSource fills the flags from CDI's environment when it applies,
// runs the clone and reports it.
func runCloneSource(ctx context.Context, f cloneSourceFlags, getenv func(string) string, log *slog.Logger, stdout, stderr io.Writer) int {
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, "importer: clone-source:", err)
		return code
	}
	var tlsConf *tls.Config
	if f.url == "" && getenv("UPLOAD_URL") != "" {
		c, err := cdi.ClonerFromEnv(getenv)
		if err != nil {
			return fail(cdi.ExitFailed, err)
		}
		f.url, tlsConf, f.ownerID = c.UploadURL, c.TLS, c.OwnerUID
		if f.contentType == "" {
			f.contentType = c.ContentType()
		}
		if f.mount == "" {
			f.mount = c.MountPoint
		}
		if f.terminationLog == "" {
			f.terminationLog = c.TerminationLog
		}
		if f.metricsListen == "" {
			f.metricsListen = getenv("IMPORTER_METRICS_LISTEN")
			if f.metricsListen == "" {
				f.metricsListen = cdi.DefaultMetricsAddr
			}
		}
	} else {
		var err error
		if tlsConf, err = cloneClientTLS(f); err != nil {
			return fail(cdi.ExitUsage, err)
		}
	}
	if f.url == "" || f.mount == "" || f.contentType == "" {
		return fail(cdi.ExitUsage, errors.New("-url (or UPLOAD_URL), -mount and -content-type are required"))
	}
	if !f.delta && getenv("IMPORTER_DELTA") == "true" {
		f.delta = true
	}
	if f.deltaBase == "" {
		f.deltaBase = getenv("IMPORTER_DELTA_BASE")
	}
	protocol := f.protocol
	if protocol == "auto" {
		protocol = cloner.ProtocolAuto
	}
	progress := new(atomic.Int64)
	total := int64(f.uploadBytes)
	if total == 0 {
		total = cloneSourceSize(f)
	}
	if f.metricsListen != "" && f.metricsListen != "off" {
		percent := func() float64 {
			if total <= 0 {
				return 0
			}
			return min(100, float64(progress.Load())*100/float64(total))
		}
		ms, err := cdi.StartMetricsServer(cdi.MetricsConfig{Listen: f.metricsListen, OwnerUID: f.ownerID}, cdi.NewCloneMetricsHandler(percent, f.ownerID))
		if err != nil {
			return fail(cdi.ExitFailed, err)
		}
		defer ms.Stop()
	}
	transport := cloner.NewTransport(tlsConf)
	start := time.Now()
	res, err := cloner.Send(ctx, cloner.Options{
		URL: f.url, ContentType: f.contentType, Source: f.mount, Protocol: protocol,
		Client: &http.Client{Transport: transport}, Retries: f.retries, Progress: progress, Logger: log,
		Delta: f.delta, DeltaBase: f.deltaBase,
	})
	if err != nil {
		return fail(cdi.ExitFailed, err)
	}
	log.Info("Clone complete", "protocol", res.Protocol, "sourceBytes", res.SourceBytes, "sourceRead", res.SourceRead, "wireBytes", res.WireBytes,
		"digest", res.Digest, "resumes", res.Resumes, "seconds", time.Since(start).Seconds())
	if d := res.Delta; d != nil {
		log.Info("Delta pass", "blocks", d.Blocks, "blocksChanged", d.BlocksChanged, "dataBytes", d.DataBytes, "zeroBytes", d.ZeroBytes,
			"signatureBytes", d.SignatureBytes, "final", d.Final, "baseDigest", d.BaseDigest)
		if !d.Final {
			log.Warn("Warm pass: the source changed while it was sent; run another pass once it is quiesced")
		}
	}
	if f.terminationLog != "" {
		// CDI's cloner writes this text; the upload server's message has the rest.
		if err := os.WriteFile(f.terminationLog, []byte(uploadserver.MessageCloneComplete), 0o600); err != nil {
			return fail(cdi.ExitFailed, fmt.Errorf("writing termination log: %w", err))
		}
	}
	if f.json {
		out, err := json.Marshal(struct {
			Protocol    string      `json:"protocol"`
			SourceBytes int64       `json:"sourceBytes"`
			SourceRead  int64       `json:"sourceRead,omitempty"`
			WireBytes   int64       `json:"wireBytes"`
			Digest      string      `json:"digest"`
			Resumes     int         `json:"resumes"`
			Delta       *delta.Pass `json:"delta,omitempty"`
		}{res.Protocol, res.SourceBytes, res.SourceRead, res.WireBytes, res.Digest, res.Resumes, res.Delta})
		if err != nil {
			return fail(cdi.ExitFailed, err)
		}
		fmt.Fprintf(stdout, "%s\n", out)
	}
	return cdi.ExitOK
}

// cloneClientTLS reads the client certificate and server CA files, when
// given (mutual TLS needs all three).
func cloneClientTLS(f cloneSourceFlags) (*tls.Config, error) {
	if f.clientCert == "" && f.clientKey == "" && f.serverCA == "" {
		return nil, nil
	}
	var pem [3][]byte
	for i, name := range []string{f.clientCert, f.clientKey, f.serverCA} {
		if name == "" {
			return nil, errors.New("-client-cert, -client-key and -server-ca go together")
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		pem[i] = b
	}
	return cdi.ClonerTLS(pem[0], pem[1], pem[2])
}

// cloneSourceSize measures the source for progress: a device's size, a
// filesystem's file bytes.
func cloneSourceSize(f cloneSourceFlags) int64 {
	if f.contentType == cloner.ContentTypeFilesystem {
		return cloner.UsedBytes(f.mount)
	}
	file, err := os.Open(f.mount)
	if err != nil {
		return 0
	}
	defer file.Close()
	n, _ := file.Seek(0, io.SeekEnd)
	return n
}
