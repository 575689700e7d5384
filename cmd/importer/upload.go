package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/uploadserver"
)

// newUploadCommand is `importer upload-server [flags] DEST`: receive one
// image over HTTP and import it to DEST as it arrives. code receives the
// exit status, as for the root command.
func newUploadCommand(ctx context.Context, stdout, stderr io.Writer, code *int) *cobra.Command {
	var (
		f                 cliFlags
		listen, cert, key string
		tokenFile         string
		keepRunning       bool
	)
	cmd := &cobra.Command{
		Use:   "upload-server [flags] DEST",
		Short: "Receive an image over HTTP(S) and import it to DEST as it arrives",
		Long: `Serve CDI's upload paths and import the uploaded image to DEST:

  POST|PUT /v1beta1/upload            the image as the request body (answers once imported)
  POST     /v1beta1/upload-form       multipart form, field "file"
  POST|PUT /v1beta1/upload-async      answers once received; the import finishes in the background
  POST     /v1beta1/upload-form-async
  GET      /v1beta1/status            JSON: phase, bytes, error
  GET      /healthz

Every format and compression of the engine is accepted; with
--content-type archive a tar stream is extracted into the DEST directory.
One upload at a time (409 while busy). The server exits after the first
successful import unless --keep-running.`,
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			log := newLogger(stderr, f.verbose, f.quiet)
			opts, err := f.options("-", args[0], nil)
			if err != nil {
				*code = exitUsage
				return err
			}
			opts.SourceReader = nil
			opts.Logger = log
			token := ""
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					*code = exitUsage
					return fmt.Errorf("--token-file: %w", err)
				}
				token = strings.TrimSpace(string(b))
				if token == "" {
					*code = exitUsage
					return fmt.Errorf("--token-file %s is empty", tokenFile)
				}
			}
			if (cert == "") != (key == "") {
				*code = exitUsage
				return errors.New("--tls-cert and --tls-key go together")
			}
			srv := &uploadserver.Server{
				Options: uploadserver.Options{
					Import: opts, Token: token, KeepRunning: keepRunning, Logger: log,
					OnResult: func(res *importer.Result, err error) {
						// Every attempt leaves its result in the log.
						_ = reporter{terminationLog: f.terminationLog, stderr: stderr}.writeLog(res, err)
					},
				},
				Addr: listen, TLSCert: cert, TLSKey: key,
			}
			res, err := srv.Run(ctx)
			r := reporter{json: f.json, quiet: f.quiet, stdout: stdout, stderr: stderr}
			*code = r.report(res, err, "upload-server", importSummary(res))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", uploadserver.DefaultAddr, "address to listen on")
	fl.StringVar(&cert, "tls-cert", "", "PEM certificate file for HTTPS (with --tls-key)")
	fl.StringVar(&key, "tls-key", "", "PEM private key file for HTTPS")
	fl.StringVar(&tokenFile, "token-file", "", "file holding the bearer token every request but /healthz must present")
	fl.BoolVar(&keepRunning, "keep-running", false, "keep accepting uploads after a successful import")
	// The root's import flags that apply to an upload.
	fl.StringVar(&f.contentType, "content-type", "kubevirt", "kubevirt (a disk image) or archive (a tar stream extracted into the DEST directory)")
	fl.StringVar(&f.size, "size", "", "requested volume size: bytes or a quantity such as 10Gi")
	fl.StringVar(&f.format, "format", "raw", "format of a file DEST: raw or qcow2")
	fl.StringVar(&f.scratch, "scratch", "", "directory for the decompressed image when a format needs random access")
	fl.StringArrayVar(&f.checksums, "checksum", nil, "expected digest ALGO:HEX of the uploaded bytes; repeatable")
	fl.BoolVar(&f.preallocation, "preallocation", false, "allocate the whole DEST file")
	fl.Float64Var(&f.filesystemOverhead, "filesystem-overhead", 0, "fraction of a filesystem volume kept free, e.g. 0.06")
	fl.StringVar(&f.cacheMode, "cache-mode", "", "qemu-img target cache: none, writeback or trynone")
	fl.StringVar(&f.terminationLog, "termination-log", "", "write the result JSON of each attempt to this file")
	fl.BoolVar(&f.json, "json", false, "print the final result JSON on standard output")
	fl.CountVarP(&f.verbose, "verbose", "v", "more log output (debug)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "only warnings and errors")
	return cmd
}

// envImport runs the import of CDI's env contract: for IMPORTER_SOURCE=upload
// the upload server on :8443 (IMPORTER_UPLOAD_LISTEN overrides; TLS_CERT and
// TLS_KEY hold PEM certificate and key as in CDI's upload server;
// IMPORTER_UPLOAD_TOKEN_FILE optionally names a bearer-token file), else a
// plain import.
func envImport(ctx context.Context, getenv func(string) string, o importer.Options) (*importer.Result, error) {
	if getenv("IMPORTER_SOURCE") != "upload" {
		return importer.Import(ctx, o)
	}
	o.Source, o.SourceReader = "-", nil
	srv := &uploadserver.Server{Options: uploadserver.Options{Import: o, Logger: o.Logger}, Addr: getenv("IMPORTER_UPLOAD_LISTEN")}
	if certPEM, keyPEM := getenv("TLS_CERT"), getenv("TLS_KEY"); certPEM != "" || keyPEM != "" {
		pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		if err != nil {
			return &importer.Result{}, fmt.Errorf("TLS_CERT/TLS_KEY: %v: %w", err, errdefs.ErrInvalidOptions)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	if p := getenv("IMPORTER_UPLOAD_TOKEN_FILE"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return &importer.Result{}, fmt.Errorf("IMPORTER_UPLOAD_TOKEN_FILE: %v: %w", err, errdefs.ErrInvalidOptions)
		}
		srv.Token = strings.TrimSpace(string(b))
	}
	return srv.Run(ctx)
}
