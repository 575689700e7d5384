package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/uploadserver"
)

// uploadFlags are upload-server's own flags.
type uploadFlags struct {
	listen, cert, key    string
	clientCA, clientName string
	tokenFile            string
	deadline             string
	keepRunning          bool
	listenAnywhere       bool
}

// newUploadCommand is `importer upload-server [flags] [DEST]`: receive one
// image (or a clone) over HTTP(S) and import it to DEST as it arrives.
// Without DEST it runs as CDI's upload-server pod, from its environment.
// code receives the exit status, as for the root command.
func newUploadCommand(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer, code *int) *cobra.Command {
	var (
		f  cliFlags
		uf uploadFlags
	)
	cmd := &cobra.Command{
		Use:   "upload-server [flags] [DEST]",
		Short: "Receive an image or a clone over HTTP(S) and import it to DEST as it arrives",
		Long: `Serve CDI's upload paths and import the uploaded image to DEST:

  POST|PUT /v1beta1/upload              the image as the request body (answers once imported);
                                        with x-cdi-content-type: blockdevice-clone|filesystem-clone
                                        a clone stream (CDI's snappy framing, or our sparse-v2)
  POST     /v1beta1/upload-form         multipart form, field "file"
  POST|PUT /v1beta1/upload-async        answers once received; the import finishes in the background
  POST     /v1beta1/upload-form-async
  POST|PUT /v1beta1/upload-archive      a tar stream extracted into DEST's directory (and -async)
  HEAD     on each upload path          200
  GET      /v1beta1/status              JSON: phase, bytes, error
  GET      /healthz

With --client-ca only clients whose certificate chains to that CA (and, with
--client-name, carries that name) may upload. With no TLS, token or client
CA the server listens on 127.0.0.1 only unless --listen-anywhere.
One upload at a time (409 while busy). The server exits after the first
successful import unless --keep-running; after an -async upload, once
/v1beta1/status has answered complete (importer upload --async reads it),
or a minute later at most.

Without DEST, CDI's upload-server environment applies: LISTEN_ADDRESS,
LISTEN_PORT, DESTINATION, UPLOAD_IMAGE_SIZE, FILESYSTEM_OVERHEAD,
PREALLOCATION, DEADLINE, TLS_CERT_FILE, TLS_KEY_FILE, CLIENT_CERT_FILE,
CLIENT_NAME, TLS_MIN_VERSION, TLS_CIPHERS; the termination message goes to
/dev/termination-log.`,
		Args:          cobra.MaximumNArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newFormatLogger(stderr, f.logFormat, logLevel(f.verbose, f.quiet))
			if err != nil {
				*code = cdi.ExitUsage
				return err
			}
			if len(args) == 0 {
				if getenv("TLS_CERT_FILE") == "" && getenv("DESTINATION") == "" {
					*code = cdi.ExitUsage
					return errors.New("DEST is required (or CDI's upload-server environment: TLS_CERT_FILE, TLS_KEY_FILE, …)")
				}
				*code = runEnvUploadServer(ctx, getenv, log, stderr)
				return nil
			}
			opts, err := f.options("-", args[0], nil)
			if err != nil {
				*code = cdi.ExitUsage
				return err
			}
			opts.SourceReader = nil
			opts.Logger = log
			srv, err := uf.server(opts, log)
			if err != nil {
				*code = cdi.ExitUsage
				return err
			}
			srv.OnResult = func(res *importer.Result, err error) {
				// Every attempt leaves its result in the log.
				_ = writeUploadMessage(f.terminationLog, res, err, false, stderr)
			}
			res, err := srv.Run(ctx)
			if err == nil || errors.Is(err, errdefs.ErrDeadlinePassed) {
				_ = writeUploadMessage(f.terminationLog, res, err, srv.Cloned(), stderr)
			}
			r := reporter{json: f.json, quiet: f.quiet, stdout: stdout, stderr: stderr}
			if f.logFormat == logFormatJSON {
				r.records, _ = newFormatLogger(stderr, f.logFormat, slog.LevelInfo)
			}
			if errors.Is(err, errdefs.ErrDeadlinePassed) {
				if r.records != nil {
					r.records.Warn("upload-server", "error", err.Error(), "reason", importer.Reason(err))
				} else {
					fmt.Fprintln(stderr, "importer: upload-server:", err)
				}
				*code = cdi.ExitOK // as CDI: the message says it, the pod succeeded
				return nil
			}
			*code = r.report(res, err, "upload-server", importSummary(res))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&uf.listen, "listen", uploadserver.DefaultAddr, "address to listen on")
	fl.StringVar(&uf.cert, "tls-cert", "", "PEM certificate file for HTTPS (with --tls-key)")
	fl.StringVar(&uf.key, "tls-key", "", "PEM private key file for HTTPS")
	fl.StringVar(&uf.clientCA, "client-ca", "", "PEM CA file: uploads need a client certificate it signed (mutual TLS; needs --tls-cert)")
	fl.StringVar(&uf.clientName, "client-name", "", "the name (common name or DNS name) the client certificate must carry")
	fl.StringVar(&uf.tokenFile, "token-file", "", "file holding the bearer token every request but /healthz must present")
	fl.StringVar(&uf.deadline, "deadline", "", "RFC 3339 time: once it passes with no upload complete, stop (exit 0, deadlinePassed in the termination log)")
	fl.BoolVar(&uf.keepRunning, "keep-running", false, "keep accepting uploads after a successful import")
	fl.BoolVar(&uf.listenAnywhere, "listen-anywhere", false, "listen beyond 127.0.0.1 even with no TLS, token or client CA")
	// The root's import flags that apply to an upload.
	addTargetFlags(fl, &f)
	addOutputFlags(fl, &f)
	fl.StringVar(&f.contentType, "content-type", "kubevirt", "kubevirt (a disk image) or archive (a tar stream extracted into the DEST directory)")
	fl.StringVar(&f.formatIn, "format-in", "", "raw: take the upload, once decompressed, as a raw disk (default: detected; what is not a disk image is refused)")
	// CDI's upload pod passes klog's flag; accepted and ignored.
	fl.Bool("alsologtostderr", false, "accepted for CDI's pod arguments; ignored")
	_ = fl.MarkHidden("alsologtostderr")
	return cmd
}

// asyncResultGrace is how long upload-server stays up after an
// asynchronous import succeeded for its status to be read (the server
// stops as soon as it was): importer upload --async polls every 500 ms by
// default (--status-interval). CDI's upload pod has none: its client
// learns the result from the DataVolume, and the pod's exit makes it.
const asyncResultGrace = time.Minute

// server builds the upload server of the flags around the import template.
func (uf uploadFlags) server(opts importer.Options, log *slog.Logger) (*uploadserver.Server, error) {
	token := ""
	if uf.tokenFile != "" {
		b, err := os.ReadFile(uf.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return nil, fmt.Errorf("--token-file %s is empty", uf.tokenFile)
		}
	}
	if (uf.cert == "") != (uf.key == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if uf.clientCA != "" && uf.cert == "" {
		return nil, errors.New("--client-ca needs --tls-cert and --tls-key")
	}
	var deadline time.Time
	if uf.deadline != "" {
		var err error
		if deadline, err = time.Parse(time.RFC3339, uf.deadline); err != nil {
			return nil, fmt.Errorf("--deadline: want an RFC 3339 time: %w", err)
		}
	}
	return &uploadserver.Server{
		Options: uploadserver.Options{Import: opts, Token: token, KeepRunning: uf.keepRunning, Logger: log,
			ClientName: uf.clientName, ResultGrace: asyncResultGrace},
		Addr: uf.listen, TLSCert: uf.cert, TLSKey: uf.key, ClientCAFile: uf.clientCA,
		Deadline: deadline, ListenAnywhere: uf.listenAnywhere,
	}, nil
}

// runEnvUploadServer is CDI's upload-server pod: its environment, its
// termination message (Upload Complete, Clone Complete or Deadline
// Passed), its exit codes and its last log line.
func runEnvUploadServer(ctx context.Context, getenv func(string) string, log *slog.Logger, stderr io.Writer) int {
	c, err := cdi.UploadServerFromEnv(getenv)
	if err != nil {
		return envUploadServerFailed(c.TerminationLog, err, log, stderr)
	}
	for _, w := range c.Warnings {
		log.Warn(w)
	}
	if c.ClientCAFile == "" {
		log.Warn("CLIENT_CERT_FILE is not set: no client can be authenticated, so every upload is refused with 401 (as CDI's upload server does)")
	}
	tmpl := importer.Options{Source: "-", Target: c.Destination, Logger: log, TargetOptions: c.TargetOptions}
	log.Info(cdi.ScratchNote(tmpl, cdi.PathsFromEnv(getenv).Scratch))
	// As CDI's upload server: an upload needs a client certificate the
	// client CA signed (and named CLIENT_NAME when set); without a client
	// CA no certificate can be verified, so nothing is accepted.
	srv := &uploadserver.Server{
		Options: uploadserver.Options{
			Import:     tmpl,
			ClientName: c.ClientName, RequireClientCert: true, Logger: log,
		},
		Addr: c.Listen, TLSCert: c.CertFile, TLSKey: c.KeyFile, ClientCAFile: c.ClientCAFile,
		MinVersion: c.MinVersion, CipherSuites: c.CipherSuites, Deadline: c.Deadline,
	}
	res, err := srv.Run(ctx)
	if err != nil && !errors.Is(err, errdefs.ErrDeadlinePassed) {
		return envUploadServerFailed(c.TerminationLog, err, log, stderr)
	}
	if werr := writeUploadMessage(c.TerminationLog, res, err, srv.Cloned(), stderr); werr != nil {
		return envUploadServerFailed(c.TerminationLog, fmt.Errorf("writing the termination message: %w", werr), log, stderr)
	}
	log.Info(cdi.UploadServerSucceeded)
	return cdi.ExitOK
}

// envUploadServerFailed ends an upload-server pod that failed as CDI's
// does: exit 1 and "UploadServer failed: CAUSE" as the last log line. The
// same line is the termination message, plain text as after any non-zero
// exit (CDI's controller parses JSON only from a pod that exited 0), so
// the controller shows the cause without falling back to the log.
func envUploadServerFailed(terminationLog string, err error, log *slog.Logger, stderr io.Writer) int {
	text := cdi.UploadServerFailureText(err)
	if terminationLog != "" {
		if werr := os.WriteFile(terminationLog, []byte(text), 0o600); werr != nil {
			fmt.Fprintln(stderr, "importer: writing termination log:", werr)
		}
	}
	log.Error(text)
	return cdi.ExitFailed
}

// writeUploadMessage writes the upload server's termination message (no
// file: nothing).
func writeUploadMessage(file string, res *importer.Result, err error, clone bool, stderr io.Writer) error {
	if file == "" {
		return nil
	}
	var msg []byte
	switch {
	case errors.Is(err, errdefs.ErrDeadlinePassed):
		msg = cdi.DeadlineMessage()
	case err == nil:
		msg = cdi.UploadTerminationMessage(cdi.NewTerminationMessage(res, nil), clone).JSON()
	default:
		msg = cdi.NewTerminationMessage(res, err).JSON()
	}
	if werr := os.WriteFile(file, append(msg, '\n'), 0o600); werr != nil {
		fmt.Fprintln(stderr, "importer: writing termination log:", werr)
		return werr
	}
	return nil
}

// serveEnvUpload runs the upload server of IMPORTER_SOURCE=upload: o is the
// template of every uploaded import, c where and how to serve.
func serveEnvUpload(ctx context.Context, o importer.Options, c cdi.UploadConfig) (*importer.Result, error) {
	o.Source, o.SourceReader = "-", nil
	srv := &uploadserver.Server{
		Options:   uploadserver.Options{Import: o, Token: c.Token, Logger: o.Logger},
		Addr:      c.Listen,
		TLSConfig: c.TLS,
	}
	return srv.Run(ctx)
}
