package cdi

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/diskimport/engine/datasource"
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
	// The cloud's metadata service as the last source of S3 or GCS
	// credentials: only when the admin sets it, and then for the credential
	// requests only (the egress policy still denies it to the data).
	if o.MetadataCredentials, err = envBool(getenv, "IMPORTER_METADATA_CREDENTIALS"); err != nil {
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

// The readers of single variables: an empty variable is the zero value,
// anything unreadable an error naming the variable.

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

func envFloat(getenv func(string) string, name string) (float64, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", name, v, errdefs.ErrInvalidOptions)
	}
	return f, nil
}

func envInt(getenv func(string) string, name string) (int, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a whole number: %w", name, v, errdefs.ErrInvalidOptions)
	}
	return n, nil
}

func envQuantity(getenv func(string) string, name string) (int64, error) {
	n, err := ParseQuantity(getenv(name))
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %w", name, err, errdefs.ErrInvalidOptions)
	}
	return n, nil
}

// maxExtraHeaders bounds the IMPORTER_EXTRA_HEADER_<n> numbers looked at.
const maxExtraHeaders = 100

// extraHeaders collects IMPORTER_EXTRA_HEADER_0, _1, … in numeric order
// (gaps allowed).
func extraHeaders(getenv func(string) string) []string {
	var out []string
	for n := range maxExtraHeaders {
		if v := getenv("IMPORTER_EXTRA_HEADER_" + strconv.Itoa(n)); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// ParseQuantity turns a Kubernetes quantity ("10Gi", "1G", "1.5Mi") or a
// plain byte count into bytes, rounding fractions up as Kubernetes does.
// IMPORTER_IMAGE_SIZE is a PVC's requested size in this notation; the
// command line's --size takes the same, so a size reads alike everywhere.
func ParseQuantity(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	num, factor := splitQuantitySuffix(s)
	if n, err := strconv.ParseInt(num, 10, 64); err == nil && factor == 1 {
		if n < 0 {
			return 0, fmt.Errorf("size %q is negative", s)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("size %q: want bytes or a quantity such as 10Gi or 1G", s)
	}
	v := math.Ceil(f * factor)
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}

// splitQuantitySuffix splits off a Kubernetes resource.Quantity suffix,
// binary (Ki..Ei) or decimal (k..E), and returns its factor (1 without).
func splitQuantitySuffix(s string) (num string, factor float64) {
	if len(s) >= 2 && s[len(s)-1] == 'i' {
		if i := strings.IndexByte("KMGTPE", s[len(s)-2]); i >= 0 {
			return s[:len(s)-2], math.Exp2(float64(10 * (i + 1)))
		}
	}
	if len(s) >= 1 {
		if i := strings.IndexByte("kMGTPE", s[len(s)-1]); i >= 0 {
			return s[:len(s)-1], math.Pow10(3 * (i + 1))
		}
	}
	return s, 1
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

// checkClonePath accepts only an absolute path for IMPORTER_SOURCE=clone:
// the source volume is mounted into the pod at a fixed place, and a
// relative path or a URL would read something else.
func checkClonePath(endpoint string) error {
	if !filepath.IsAbs(endpoint) {
		return fmt.Errorf("IMPORTER_SOURCE=clone: IMPORTER_ENDPOINT %q must be an absolute path to a block device or image file: %w", endpoint, errdefs.ErrInvalidOptions)
	}
	return nil
}

// objectStoreEndpoint maps CDI's IMPORTER_ENDPOINT of an s3 or gcs source
// to the engine's endpoint: CDI gives S3 objects as
// http(s)://host/bucket/key (path style, region from an amazonaws.com host
// name) and GCS objects as gs://bucket/object or
// https://storage.googleapis.com/bucket/object; the engine names them
// s3+http(s):// and gs+https:// so the registry picks the object-store
// source rather than plain HTTP. s3:// and gs:// pass as they are. The
// credentials stay where they were read: IMPORTER_ACCESS_KEY_ID and
// IMPORTER_SECRET_KEY for S3, GOOGLE_APPLICATION_CREDENTIALS for GCS.
func objectStoreEndpoint(source, endpoint string) (string, error) {
	lower := strings.ToLower(endpoint)
	switch {
	case source == "s3" && strings.HasPrefix(lower, "s3://"),
		source == "gcs" && strings.HasPrefix(lower, "gs://"):
		return endpoint, nil
	case strings.HasPrefix(lower, "http://"), strings.HasPrefix(lower, "https://"):
		if source == "s3" {
			return "s3+" + endpoint, nil
		}
		return "gs+" + endpoint, nil
	}
	want := "http(s)://host/bucket/key or s3://bucket/key"
	if source == "gcs" {
		want = "gs://bucket/object or https://storage.googleapis.com/bucket/object"
	}
	return "", fmt.Errorf("IMPORTER_ENDPOINT %q of an %s source is not %s: %w", datasource.RedactURL(endpoint), source, want, errdefs.ErrInvalidOptions)
}

// egressPolicy is the pod's egress policy: whoever may create a DataVolume
// chooses the endpoint, so by default an importer pod may not reach the
// node's link-local networks or the cloud's metadata service.
// IMPORTER_EGRESS_DENY replaces that deny list ("none": deny nothing,
// "default" stands for it inside a list); IMPORTER_EGRESS_ALLOW, when set,
// is the only networks a source may reach. Both are CIDRs or addresses
// separated by commas.
func egressPolicy(getenv func(string) string) (*importer.EgressPolicy, error) {
	p := &importer.EgressPolicy{Deny: datasource.DefaultEgressDeny()}
	var err error
	if v := getenv("IMPORTER_EGRESS_DENY"); v != "" {
		if p.Deny, err = datasource.ParseEgressList(v); err != nil {
			return nil, fmt.Errorf("IMPORTER_EGRESS_DENY: %w", err)
		}
	}
	if v := getenv("IMPORTER_EGRESS_ALLOW"); v != "" {
		if p.Allow, err = datasource.ParseEgressList(v); err != nil {
			return nil, fmt.Errorf("IMPORTER_EGRESS_ALLOW: %w", err)
		}
	}
	return p, nil
}

// headerFiles reads the extra HTTP headers the controller mounts from
// secrets under dir (/extraheaders/<n>/<key>): every file is one
// "Name: value" line. As in CDI, hidden entries are skipped, among them
// the "..data" and "..<timestamp>" directories a Kubernetes secret volume
// keeps its real files in (the visible names are symlinks into them, which
// os.Stat follows), and a missing dir means no headers. Errors name the
// file, never its content, which is often a token.
func headerFiles(dir string) ([]string, error) {
	var headers []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return err
		}
		if path == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil // a subdirectory WalkDir enters by itself, or a link to one
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// A secret's value often ends in the newline of the file it was
		// made from; a header cannot hold one.
		headers = append(headers, strings.TrimRight(string(b), "\r\n"))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading extra headers under %s: %w: %w", dir, err, errdefs.ErrInvalidOptions)
	}
	return headers, nil
}

// UploadConfig is how IMPORTER_SOURCE=upload serves CDI's upload paths.
type UploadConfig struct {
	// Listen is IMPORTER_UPLOAD_LISTEN; empty means the upload server's
	// default, CDI's :8443.
	Listen string
	// TLS carries the certificate of TLS_CERT and TLS_KEY (PEM text, as CDI's
	// upload server takes them); nil means plain HTTP.
	TLS *tls.Config
	// Token is the bearer token every request must present, read from the
	// file IMPORTER_UPLOAD_TOKEN_FILE names; empty means none.
	Token string
}

func uploadConfig(getenv func(string) string) (UploadConfig, error) {
	c := UploadConfig{Listen: getenv("IMPORTER_UPLOAD_LISTEN")}
	if certPEM, keyPEM := getenv("TLS_CERT"), getenv("TLS_KEY"); certPEM != "" || keyPEM != "" {
		pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		if err != nil {
			return c, fmt.Errorf("TLS_CERT/TLS_KEY: %w: %w", err, errdefs.ErrInvalidOptions)
		}
		c.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	if p := getenv("IMPORTER_UPLOAD_TOKEN_FILE"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return c, fmt.Errorf("IMPORTER_UPLOAD_TOKEN_FILE: %w: %w", err, errdefs.ErrInvalidOptions)
		}
		c.Token = strings.TrimSpace(string(b))
	}
	return c, nil
}
