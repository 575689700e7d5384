package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
)

type cliFlags struct {
	size               string
	format             string
	scratch            string
	checksums          []string
	certDir            string
	insecureTLS        bool
	headers            []string
	creds              string
	preallocation      bool
	allowOvercommit    bool
	filesystemOverhead float64
	cacheMode          string
	stallTimeout       time.Duration
	noRangedRead       bool
	noStreamDecode     bool
	formatIn           string
	maxSpill           string
	retries            int
	connections        int
	retryMaxElapsed    time.Duration
	terminationLog     string
	json               bool
	verbose            int
	quiet              bool
	contentType        string
	exactSize          bool
	verify             bool
	expectContent      string
	zeroTarget         bool
	delta              bool
	deltaBase          string
	arch               string
	authFile           string
	registriesConf     string
	metricsListen      string
	ownerUID           string
	logFormat          string
	mode               string
	s3Endpoint         string
	s3Region           string
	gcsEndpoint        string
	egressAllow        []string
	egressDeny         []string

	// metadataCredentials allows the instance metadata service as the
	// last source of S3/GCS credentials.
	metadataCredentials bool
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	code := cdi.ExitOK
	var f cliFlags
	cmd := &cobra.Command{
		Use:   "importer [flags] SOURCE DEST",
		Short: "Import a VM disk image onto a block device or into a file",
		Long: `Import a VM disk image onto a block device or into a file.

SOURCE is an http(s) URL, an s3://bucket/key or gs://bucket/object, a
container disk image in a registry (docker://quay.io/containerdisks/fedora:40),
an OCI archive or layout (oci-archive:disk.tar, oci:/dir:tag), a local file
or block device, or - for standard input.
DEST is a block device, a file, or an existing directory (DEST/disk.img).
gz, xz, zstd and lz4 are removed on the fly; raw and iso are streamed
straight to DEST; qcow2, streamOptimized vmdk, vhd, vdi and vhdx are decoded
as they arrive, and qemu-img converts the layouts the decoder does not take
(from a ranged HTTP source or scratch space).

With no arguments (CDI's pods pass only -v=N), importer is the CDI pod its
environment describes, and says so in its first log line: the importer with
IMPORTER_SOURCE (reading IMPORTER_ENDPOINT and the other IMPORTER_* variables,
writing to /dev/cdi-block-volume or /data/disk.img), the upload server with
TLS_CERT_FILE, TLS_KEY_FILE, CLIENT_CERT_FILE, CLIENT_NAME or
UPLOAD_IMAGE_SIZE (as upload-server without DEST), the clone source with
UPLOAD_URL, VOLUME_MODE, MOUNT_POINT, CLIENT_CERT, CLIENT_KEY or
SERVER_CA_CERT (as clone-source). Variables of two of them are refused. Each
reports to /dev/termination-log.`,
		// Example, not Long: the man page keeps its lines as they are.
		Example: `  importer https://example.org/disk.qcow2.xz /dev/sdb
  importer --size 20Gi docker://quay.io/containerdisks/fedora:40 disk.img
  curl -sL URL | importer - disk.img
  importer inspect disk.vmdk`,
		Args:          importArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch len(args) {
			case 0:
				var err error
				code, err = runPodRole(ctx, getenv, f.verbose, f.quiet, stdout, stderr)
				return err
			}
			if err := misspelledCommand(cmd, args[0]); err != nil {
				code = cdi.ExitUsage
				return err
			}
			if len(args) == 1 {
				code = cdi.ExitUsage
				return errors.New("DEST is required")
			}
			if err := checkLogFormat(f.logFormat); err != nil {
				code = cdi.ExitUsage
				return err
			}
			opts, err := f.options(args[0], args[1], stdin)
			if err != nil {
				code = cdi.ExitUsage
				return err
			}
			code = runImport(ctx, opts, f, stdout, stderr)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.allowOvercommit, "allow-sparse-overcommit", false, "let a sparse image larger than a file DEST's free space be written (as qemu-img convert does; it fails if its data do not fit); default: the virtual size must fit the free space")
	fl.StringVar(&f.mode, "mode", "", "permission bits of a new DEST file, in octal (default: 0666 less the umask)")
	fl.BoolVar(&f.noStreamDecode, "no-stream-decode", false, "put a streamed qcow2, streamOptimized vmdk, dynamic vhd, vdi or vhdx in scratch for qemu-img instead of decoding it straight onto DEST")
	fl.StringVar(&f.maxSpill, "max-spill", "", "cap the scratch the stream decoder may spill clusters that arrive before their tables to (bytes or a quantity such as 2Gi; it never exceeds the image's virtual size anyway)")
	fl.StringVar(&f.contentType, "content-type", "kubevirt", "kubevirt (a disk image), archive (a tar stream, optionally compressed, extracted into the DEST directory) or as-is (the bytes unchanged: nothing sniffed, decompressed or converted)")
	fl.StringVar(&f.expectContent, "expect-content-digest", "", "fail unless the disk written has this content digest (blk-sha256:HEX, or the HEX blksum prints; see importer digest --content)")
	fl.BoolVar(&f.verify, "verify", false, "re-read SOURCE (a local file or device) and DEST after the copy and compare them; the digests go in the result")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "serve progress metrics over HTTPS (self-signed) at ADDR, e.g. :8443: CDI's "+cdi.ProgressMetricName+" and diskimport_*")
	fl.StringVar(&f.ownerUID, "owner-uid", "", "the ownerUID label of "+cdi.ProgressMetricName+" (CDI: the DataVolume's UID)")
	fl.BoolVar(&f.zeroTarget, "zero-target", false, "zero a block DEST first (BLKZEROOUT) so zero blocks of SOURCE need not be written")
	fl.BoolVar(&f.delta, "delta", false, "clone: when DEST already holds an earlier copy of SOURCE (same size, or a larger block device unless --exact-size), write only the 64 KiB blocks that differ, in place (a full clone otherwise)")
	fl.StringVar(&f.deltaBase, "delta-base", "", "with --delta: the content digest DEST must have to be the base (the last pass's contentDigest); another gets a full clone")
	cmd.AddCommand(newBlankCommand(ctx, stdout, stderr, &code))
	cmd.AddCommand(newUploadCommand(ctx, getenv, stdout, stderr, &code), newCloneSourceCommand(ctx, getenv, stdout, stderr, &code))
	cmd.AddCommand(newUploadClientCommand(ctx, stdin, stdout, stderr, &code))
	cmd.AddCommand(newSizeDetectionCommand(ctx, getenv, stderr, &code), newPollerCommand(ctx, getenv, stderr, &code))
	addSourceFlags(fl, &f)
	addTargetFlags(fl, &f)
	addOutputFlags(fl, &f)
	cmd.AddCommand(newDigestCommand(ctx, stdin, stdout, &code))
	addVersion(ctx, cmd, stdout)
	cmd.AddCommand(newInspectCommand(ctx, stdin, stdout, stderr, &code))
	cmd.AddCommand(newManCommand(), newDocsCommand())
	registerValueCompletions(cmd)
	cmd.SetFlagErrorFunc(suggestFlag)
	cmd.SetArgs(args)
	cmd.SetIn(stdin)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "importer:", err)
		if code == cdi.ExitOK {
			code = cdi.ExitUsage
		}
		if code == cdi.ExitUsage && f.json {
			// A script that asked for JSON gets it for a usage error too.
			fmt.Fprintln(stdout, string(cdi.CLIMessage(nil, errdefs.Mark(errdefs.ErrInvalidOptions, err)).JSON()))
		}
	}
	return code
}

func (f *cliFlags) options(source, dest string, stdin io.Reader) (importer.Options, error) {
	size, err := cdi.ParseQuantity(f.size)
	if err != nil {
		return importer.Options{}, err
	}
	maxSpill, err := cdi.ParseQuantity(f.maxSpill)
	if err != nil {
		return importer.Options{}, fmt.Errorf("--max-spill: %w", err)
	}
	o := importer.Options{
		Source: source,
		Target: dest,
		TargetOptions: importer.TargetOptions{
			Size:                  size,
			Format:                f.format,
			ScratchDir:            f.scratch,
			Preallocation:         f.preallocation,
			AllowSparseOvercommit: f.allowOvercommit,
			FilesystemOverhead:    f.filesystemOverhead,
			CacheMode:             f.cacheMode,
			NoRangedRead:          f.noRangedRead,
			NoStreamDecode:        f.noStreamDecode,
			MaxSpill:              maxSpill,
			FormatIn:              f.formatIn,
			ContentType:           f.contentType,
			ExactSize:             f.exactSize,
			Verify:                f.verify,
			ExpectContentDigest:   f.expectContent,
			ZeroTarget:            f.zeroTarget,
		},
		Checksums: f.checksums,
		Access: datasource.Access{
			MetadataCredentials: f.metadataCredentials,

			CertDir:         f.certDir,
			InsecureTLS:     f.insecureTLS,
			Headers:         f.headers,
			StallTimeout:    f.stallTimeout,
			NoConnectRetry:  true,
			Connections:     f.connections,
			RetryMaxElapsed: f.retryMaxElapsed,
			Arch:            f.arch,
			AuthFile:        f.authFile,
			RegistriesConf:  f.registriesConf,
		},
		Retries:   &f.retries,
		Delta:     f.delta,
		DeltaBase: f.deltaBase,
	}
	if source == "-" {
		o.SourceReader = stdin
	}
	o.S3Endpoint, o.S3Region, o.GCSEndpoint = f.s3Endpoint, f.s3Region, f.gcsEndpoint
	if o.Mode, err = fileMode(f.mode); err != nil {
		return o, err
	}
	if o.Egress, err = f.egress(); err != nil {
		return o, err
	}
	o.Username, o.Password, err = f.credentials()
	return o, err
}

// credentials splits --creds USER:PASSWORD (both empty without it).
func (f *cliFlags) credentials() (user, pass string, err error) {
	if f.creds == "" {
		return "", "", nil
	}
	user, pass, ok := strings.Cut(f.creds, ":")
	if !ok {
		return "", "", errors.New("--creds wants USER:PASSWORD")
	}
	return user, pass, nil
}

// compressionSuffix names the layers as a file name would, innermost
// first: a raw disk in a gzipped tar is "raw.tar.gz" (the result lists
// them outermost first).
func compressionSuffix(c []string) string {
	if len(c) == 0 {
		return ""
	}
	names := slices.Clone(c)
	slices.Reverse(names)
	return "." + strings.Join(names, ".")
}

// addTargetFlags adds the flags that say how to write DEST: an import and
// the upload server take all of them, from this one list.
func addTargetFlags(fl *pflag.FlagSet, f *cliFlags) {
	fl.StringVar(&f.size, "size", "", "requested volume size: bytes or a Kubernetes quantity such as 10Gi; a file DEST is grown to it (less --filesystem-overhead)")
	fl.StringVar(&f.format, "format", "raw", "format of a file DEST: raw or qcow2 (block devices are always raw)")
	fl.StringVar(&f.scratch, "scratch", "", "directory for the decompressed image when a format needs random access (default: the system temp dir)")
	fl.StringArrayVar(&f.checksums, "checksum", nil, "expected digest ALGO:HEX of the bytes as received (md5, sha1, sha256, sha512); repeatable")
	fl.BoolVar(&f.preallocation, "preallocation", false, "allocate the whole DEST file")
	fl.Float64Var(&f.filesystemOverhead, "filesystem-overhead", 0, "fraction of a filesystem volume kept free, e.g. 0.06")
	fl.StringVar(&f.cacheMode, "cache-mode", "", "qemu-img target cache: none, writeback or trynone (default: none where the target supports O_DIRECT, else writeback)")
	fl.BoolVar(&f.exactSize, "exact-size", false, "clone: DEST must be exactly the source's size (a device of that size, or a file that ends up that size)")
}

// addOutputFlags adds the flags that say what a run reports and logs, for
// an import and the upload server alike.
func addOutputFlags(fl *pflag.FlagSet, f *cliFlags) {
	fl.StringVar(&f.terminationLog, "termination-log", "", "write the result JSON to this file (of each attempt, for an upload server that keeps running)")
	fl.BoolVar(&f.json, "json", false, "print the final result JSON on standard output")
	fl.CountVarP(&f.verbose, "verbose", "v", "log the engine's phases and findings (-vv: debug)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress and no summary: only warnings and errors")
	fl.StringVar(&f.logFormat, "log-format", logFormatText, "log lines as text or json; with json the final summary or error is a record too (an import's env mode reads IMPORTER_LOG_FORMAT)")
}
