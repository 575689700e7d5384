package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
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
				*code = cdi.ExitUsage
				return err
			}
			opts.SourceReader = nil
			opts.Logger = log
			token := ""
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					*code = cdi.ExitUsage
					return fmt.Errorf("--token-file: %w", err)
				}
				token = strings.TrimSpace(string(b))
				if token == "" {
					*code = cdi.ExitUsage
					return fmt.Errorf("--token-file %s is empty", tokenFile)
				}
			}
			if (cert == "") != (key == "") {
				*code = cdi.ExitUsage
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
