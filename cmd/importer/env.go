package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
)

// cdiPaths are the fixed paths of CDI's importer pod.
type cdiPaths struct {
	BlockDevice    string // present when the volume is in block mode
	DataDir        string
	DataFile       string
	Scratch        string
	TerminationLog string
}

// defaultCDIPaths returns CDI's paths. IMPORTER_PATH_PREFIX, when set, is
// put in front of each, so the contract can be exercised without owning /data
// and /dev (tests, or a person trying it as non-root).
func defaultCDIPaths(getenv func(string) string) cdiPaths {
	prefix := getenv("IMPORTER_PATH_PREFIX")
	return cdiPaths{
		BlockDevice:    prefix + "/dev/cdi-block-volume",
		DataDir:        prefix + "/data",
		DataFile:       prefix + "/data/disk.img",
		Scratch:        prefix + "/scratch",
		TerminationLog: prefix + "/dev/termination-log",
	}
}

// envOptions reads CDI's importer environment into import options.
func envOptions(getenv func(string) string, paths cdiPaths) (importer.Options, error) {
	var o importer.Options
	switch src := getenv("IMPORTER_SOURCE"); src {
	case "http", "clone":
	case "registry":
		o.Arch = getenv("IMPORTER_REGISTRY_IMAGE_ARCHITECTURE")
		o.AuthFile = getenv("REGISTRY_AUTH_FILE")
		o.RegistriesConf = getenv("CONTAINERS_REGISTRIES_CONF")
	case "upload":
		o.Source = "-" // the upload server supplies the stream (upload.go)
	case "s3", "gcs", "imageio", "vddk":
		return o, fmt.Errorf("IMPORTER_SOURCE=%s is not supported yet (only http, clone and none): %w", src, errdefs.ErrInvalidOptions)
	default:
		return o, fmt.Errorf("Unknown data source: %q: %w", src, errdefs.ErrInvalidOptions)
	}
	switch ct := getenv("IMPORTER_CONTENTTYPE"); ct {
	case "", "kubevirt":
	case "archive":
		o.ContentType = importer.ContentTypeArchive
	default:
		return o, fmt.Errorf("unknown IMPORTER_CONTENTTYPE %q (kubevirt or archive): %w", ct, errdefs.ErrInvalidOptions)
	}
	if o.Source != "-" {
		o.Source = getenv("IMPORTER_ENDPOINT")
	}
	if o.Source == "" {
		return o, fmt.Errorf("IMPORTER_ENDPOINT is empty: %w", errdefs.ErrInvalidOptions)
	}
	if getenv("IMPORTER_SOURCE") == "http" {
		if err := checkHTTPEndpoint(o.Source); err != nil {
			return o, err
		}
	}
	size, err := parseQuantity(getenv("IMPORTER_IMAGE_SIZE"))
	if err != nil {
		return o, fmt.Errorf("IMPORTER_IMAGE_SIZE: %v: %w", err, errdefs.ErrInvalidOptions)
	}
	o.Size = size
	o.Username = getenv("IMPORTER_ACCESS_KEY_ID")
	o.Password = getenv("IMPORTER_SECRET_KEY")
	o.CertDir = getenv("IMPORTER_CERT_DIR")
	if o.InsecureTLS, err = envBool(getenv, "INSECURE_TLS"); err != nil {
		return o, err
	}
	if o.Preallocation, err = envBool(getenv, "PREALLOCATION"); err != nil {
		return o, err
	}
	if c := getenv("IMPORTER_CHECKSUM"); c != "" {
		o.Checksums = []string{c}
	}
	if v := getenv("FILESYSTEM_OVERHEAD"); v != "" {
		if o.FilesystemOverhead, err = strconv.ParseFloat(v, 64); err != nil {
			return o, fmt.Errorf("FILESYSTEM_OVERHEAD %q: %w", v, errdefs.ErrInvalidOptions)
		}
	}
	if strings.EqualFold(getenv("CACHE_MODE"), "TRYNONE") {
		o.CacheMode = "trynone"
	}
	o.Headers = extraHeaders(getenv)
	if getenv("IMPORTER_SOURCE") == "clone" {
		if err := envCloneOptions(getenv, &o); err != nil {
			return o, err
		}
	}
	o.Target = paths.DataFile
	if _, err := os.Stat(paths.BlockDevice); err == nil {
		o.Target = paths.BlockDevice
		o.FilesystemOverhead = 0
	}
	if o.ContentType == importer.ContentTypeArchive {
		if o.Target == paths.BlockDevice {
			return o, fmt.Errorf("IMPORTER_CONTENTTYPE=archive needs a filesystem volume, not a block device: %w", errdefs.ErrInvalidOptions)
		}
		o.Target = paths.DataDir
	}
	o.ScratchDir = paths.Scratch
	return o, nil
}

// checkHTTPEndpoint accepts only an http or https URL with a host, as CDI's
// http source does. The engine itself also reads local files and file://
// URLs, and in a pod that would copy the pod's own files (service-account
// tokens under /var/run/secrets, say) into the volume. The error names the
// scheme, never the whole endpoint, which may carry credentials.
func checkHTTPEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("IMPORTER_SOURCE=http: IMPORTER_ENDPOINT is not a valid URL: %w", errdefs.ErrInvalidOptions)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return fmt.Errorf("IMPORTER_SOURCE=http: IMPORTER_ENDPOINT is a path, not an http or https URL: %w", errdefs.ErrInvalidOptions)
	default:
		return fmt.Errorf("IMPORTER_SOURCE=http: IMPORTER_ENDPOINT has scheme %q, want http or https: %w", u.Scheme, errdefs.ErrInvalidOptions)
	}
	if u.Host == "" {
		return fmt.Errorf("IMPORTER_SOURCE=http: IMPORTER_ENDPOINT has no host: %w", errdefs.ErrInvalidOptions)
	}
	return nil
}

func envBool(getenv func(string) string, name string) (bool, error) {
	v := getenv(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false: %w", name, v, errdefs.ErrInvalidOptions)
	}
	return b, nil
}

// maxExtraHeaders bounds the IMPORTER_EXTRA_HEADER_<n> numbers looked at.
const maxExtraHeaders = 100

// extraHeaders collects IMPORTER_EXTRA_HEADER_0, _1, … in numeric order
// (gaps allowed).
func extraHeaders(getenv func(string) string) []string {
	var out []string
	for n := 0; n < maxExtraHeaders; n++ {
		if v := getenv("IMPORTER_EXTRA_HEADER_" + strconv.Itoa(n)); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// runEnv runs one import under CDI's contract and writes the termination
// message. Like CDI, a checksum mismatch exits 0 with the message so the
// controller marks the import failed for good instead of retrying it.
func runEnv(ctx context.Context, getenv func(string) string, paths cdiPaths, log *slog.Logger, stderr io.Writer) int {
	if getenv("IMPORTER_SOURCE") == "none" {
		return runEnvBlank(ctx, getenv, paths, log, stderr)
	}
	o, err := envOptions(getenv, paths)
	var res *importer.Result
	if err == nil {
		o.Logger = log
		res, err = envImport(ctx, getenv, o) // upload.go: the upload server for IMPORTER_SOURCE=upload
	}
	return reportEnv(paths, res, err, log, stderr, "import failed")
}
