package cdi

import (
	"fmt"
	"strings"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
)

// Kind is what a pod's environment asks the importer to do.
type Kind int

const (
	// Import fetches IMPORTER_ENDPOINT (http, registry, clone).
	Import Kind = iota
	// Blank creates an empty disk (IMPORTER_SOURCE=none).
	Blank
	// Upload serves CDI's upload paths and imports what is sent
	// (IMPORTER_SOURCE=upload).
	Upload
)

// Request is one pod's job, read from its environment.
type Request struct {
	Kind Kind
	// Import is the import to run for Import, and the template of every
	// uploaded import for Upload (its Source is "-").
	Import importer.Options
	// Blank is the disk to create for Blank.
	Blank importer.BlankOptions
	// Upload is where and how to serve for Upload.
	Upload UploadConfig
	// Metrics is where and how the progress metric is served (Import and
	// Blank; an upload pod's port belongs to the upload server).
	Metrics MetricsConfig
	// NodePull is set when the controller runs the image's own server
	// beside the importer (IMPORTER_READY_FILE); see NodePull.Wait.
	NodePull *NodePull
	// Warnings are settings read but ignored (say, a TLS cipher name Go
	// does not know), for the log.
	Warnings []string

	// cleanups undo what reading the environment made (Close).
	cleanups []func()
}

// Close removes what ReadEnv made for the run (a merged certificate
// directory); call it once the job is over.
func (r *Request) Close() {
	for _, c := range r.cleanups {
		c()
	}
	r.cleanups = nil
}

// supportedSources is what an unknown IMPORTER_SOURCE is told.
const supportedSources = "http, s3, gcs, registry, clone, none and upload"

// ReadEnv reads CDI's importer environment into a request; paths are the
// pod's fixed paths (PathsFromEnv). Every error wraps
// errdefs.ErrInvalidOptions, and its text is the whole termination message
// (as CDI writes "Unknown data source: x"). On error the request's Kind is
// still set, so the failure can be reported as what was asked. Call
// Request.Close when the job is over, also after an error.
func ReadEnv(getenv func(string) string, paths Paths) (Request, error) {
	req, err := readEnv(getenv, paths)
	return req, asPlain(err)
}

func readEnv(getenv func(string) string, paths Paths) (Request, error) {
	var req Request
	switch src := getenv("IMPORTER_SOURCE"); src {
	case "none":
		req.Kind = Blank
	case "upload":
		req.Kind = Upload
	case "http", "clone", "registry", "s3", "gcs":
	case "imageio", "vddk":
		return req, fmt.Errorf("IMPORTER_SOURCE=%s is not supported by this importer (supported: %s): %w", src, supportedSources, errdefs.ErrInvalidOptions)
	default:
		return req, fmt.Errorf("Unknown data source: %q (supported: %s): %w", src, supportedSources, errdefs.ErrInvalidOptions)
	}
	var err error
	if req.Metrics, req.Warnings, err = metricsConfig(getenv); err != nil {
		return req, err
	}
	switch req.Kind {
	case Blank:
		if getenv("IMPORTER_CONTENTTYPE") == "archive" {
			return req, &plainFailure{text: MessageBlankArchive, err: errdefs.ErrInvalidOptions}
		}
		req.Blank, err = blankOptions(getenv, paths)
		return req, err
	case Upload:
		req.Metrics.Listen = "off" // the upload server has the pod's port
	}
	if req.Import, err = importOptions(getenv, paths); err != nil {
		return req, err
	}
	if w := useScratchVolume(&req.Import, paths); w != "" {
		req.Warnings = append(req.Warnings, w)
	}
	if req.NodePull, err = nodePull(getenv); err != nil {
		return req, err
	}
	if err := trustProxyCerts(getenv, paths, &req); err != nil {
		return req, err
	}
	if req.Kind == Upload {
		req.Upload, err = uploadConfig(getenv)
	}
	return req, err
}

// importOptions reads the options of every source but none.
func importOptions(getenv func(string) string, paths Paths) (importer.Options, error) {
	var o importer.Options
	src := getenv("IMPORTER_SOURCE")
	switch src {
	case "registry":
		o.Arch = getenv("IMPORTER_REGISTRY_IMAGE_ARCHITECTURE")
		o.AuthFile = getenv("REGISTRY_AUTH_FILE")
		o.RegistriesConf = getenv("CONTAINERS_REGISTRIES_CONF")
	case "upload":
		o.Source = "-" // the upload server supplies each stream
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
	if src == "http" {
		if err := checkHTTPEndpoint(o.Source); err != nil {
			return o, err
		}
	}
	if src == "s3" || src == "gcs" {
		var err error
		if o.Source, err = objectStoreEndpoint(src, o.Source); err != nil {
			return o, err
		}
	}
	var err error
	if o.Size, err = envQuantity(getenv, "IMPORTER_IMAGE_SIZE"); err != nil {
		return o, err
	}
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
	o.ExpectContentDigest = getenv("IMPORTER_CONTENT_DIGEST")
	if o.Connections, err = envInt(getenv, "IMPORTER_CONNECTIONS"); err != nil {
		return o, err
	}
	if o.MaxSpill, err = envQuantity(getenv, "IMPORTER_MAX_SPILL"); err != nil {
		return o, err
	}
	if o.FilesystemOverhead, err = envFloat(getenv, "FILESYSTEM_OVERHEAD"); err != nil {
		return o, err
	}
	if strings.EqualFold(getenv("CACHE_MODE"), "TRYNONE") {
		o.CacheMode = "trynone"
	}
	o.Headers = extraHeaders(getenv)
	secretHeaders, err := headerFiles(paths.ExtraHeaders)
	if err != nil {
		return o, err
	}
	o.Headers = append(o.Headers, secretHeaders...)
	if o.Egress, err = egressPolicy(getenv); err != nil {
		return o, err
	}
	if src == "clone" {
		if err := cloneOptions(getenv, &o); err != nil {
			return o, err
		}
	}
	if err := placeTarget(&o, paths); err != nil {
		return o, err
	}
	return o, nil
}

// placeTarget points o at the pod's volume: the block device when the
// controller mapped one (a device has no filesystem to keep free), else the
// disk image file, or for an archive the directory it is extracted into.
func placeTarget(o *importer.Options, paths Paths) error {
	block := paths.blockMode()
	switch {
	case o.ContentType == importer.ContentTypeArchive && block:
		return fmt.Errorf("IMPORTER_CONTENTTYPE=archive needs a filesystem volume, not a block device: %w", errdefs.ErrInvalidOptions)
	case o.ContentType == importer.ContentTypeArchive:
		o.Target = paths.DataDir
	case block:
		o.Target = paths.BlockDevice
		o.FilesystemOverhead = 0
	default:
		o.Target = paths.DataFile
	}
	return nil
}

// blankOptions reads IMPORTER_SOURCE=none: CDI's blank volume, on the block
// volume when there is one, else the disk image file.
func blankOptions(getenv func(string) string, paths Paths) (importer.BlankOptions, error) {
	var o importer.BlankOptions
	var err error
	if o.Size, err = envQuantity(getenv, "IMPORTER_IMAGE_SIZE"); err != nil {
		return o, err
	}
	if o.Preallocation, err = envBool(getenv, "PREALLOCATION"); err != nil {
		return o, err
	}
	if o.FilesystemOverhead, err = envFloat(getenv, "FILESYSTEM_OVERHEAD"); err != nil {
		return o, err
	}
	o.Target = paths.DataFile
	if paths.blockMode() {
		o.Target = paths.BlockDevice
		o.FilesystemOverhead = 0
	}
	return o, nil
}

// cloneOptions adds what IMPORTER_SOURCE=clone needs: IMPORTER_ENDPOINT
// must be a local path (a block device or an image file), and
// IMPORTER_EXACT_SIZE / IMPORTER_VERIFY (this engine's, not CDI's) ask for
// an exact-size copy and a read-back check.
func cloneOptions(getenv func(string) string, o *importer.Options) error {
	if err := checkClonePath(o.Source); err != nil {
		return err
	}
	var err error
	if o.ExactSize, err = envBool(getenv, "IMPORTER_EXACT_SIZE"); err != nil {
		return err
	}
	o.Verify, err = envBool(getenv, "IMPORTER_VERIFY")
	return err
}
