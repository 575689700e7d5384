// Package cdi is the contract between the importer binary and KubeVirt
// CDI's controller: what a pod made for CDI's importer image tells the
// importer, and how the importer answers. The engine itself (package
// importer) knows nothing of pods; this package turns a pod's environment
// into importer options, and an import's result or error into a
// termination message and an exit code. The binary (cmd/importer) and the
// upload server use it; nothing here is API for library users, which take
// importer.Result as it is.
//
// # Roles
//
// CDI starts its importer, upload-server and cloner pods with the image's
// entrypoint and no command; RoleFromEnv tells which pod an environment
// is by the variables only that pod has, and refuses one with two pods'
// variables.
//
// CDI's controller also starts two programs of the importer image by name
// (the image has a launcher at each path that runs the importer's
// subcommand of that name): /usr/bin/cdi-image-size-detection
// (RunSizeDetection: a clone's source image's virtual size as the
// termination message, CDI's flags and exit codes) and
// /usr/bin/cdi-source-update-poller (RunSourceUpdatePoller: a
// DataImportCron's registry digest patched into its annotations through
// the API server with the pod's service account, CDI's flags and exit
// codes).
//
// # Environment
//
// ReadEnv reads these variables (the names and meanings are CDI's unless
// marked ours):
//
//	IMPORTER_SOURCE          http, s3, gcs, registry, clone (ours: a local
//	                         device or image file), none (a blank disk) or
//	                         upload (serve CDI's upload paths); anything else
//	                         (imageio, vddk) fails, naming the supported ones
//	IMPORTER_ENDPOINT        the URL, image reference or, for clone, the
//	                         absolute path of the source; for http only an
//	                         http or https URL with a host is taken
//	IMPORTER_CONTENTTYPE     kubevirt (default) or archive (a tar extracted
//	                         into the data directory; filesystem volumes only;
//	                         refused for none, as CDI does)
//	IMPORTER_IMAGE_SIZE      the requested volume size, a Kubernetes quantity
//	IMPORTER_ACCESS_KEY_ID   basic-auth user name; for s3 the access key id
//	IMPORTER_SECRET_KEY      basic-auth password; for s3 the secret key
//	GOOGLE_APPLICATION_CREDENTIALS  for gcs, a service-account key file
//	                         (read by the GCS source; none: anonymous)
//	IMPORTER_CERT_DIR        directory of CA certificates to trust: every
//	                         certificate in every non-hidden file
//	IMPORTER_PROXY_CERT_DIR  CA certificates of the proxy (default
//	                         /proxycerts/), pooled with IMPORTER_CERT_DIR
//	INSECURE_TLS             true: do not verify the server's certificate
//	IMPORTER_CHECKSUM        algo:hex digest expected of the bytes received
//	IMPORTER_CONTENT_DIGEST  blk-sha256:hex content digest expected of the
//	                         disk written (importer digest --content)
//	IMPORTER_EXTRA_HEADER_n  extra request header lines, n from 0 to 99
//	IMPORTER_CONNECTIONS     (ours) connections an http, s3 or gcs object
//	                         is read over when its server serves ranges
//	                         (default 16; 1: one GET)
//	IMPORTER_MAX_SPILL       (ours) cap of the scratch the stream decoder
//	                         spills early clusters to, a quantity (default:
//	                         the image's virtual size)
//	FILESYSTEM_OVERHEAD      fraction of a filesystem volume kept free
//	PREALLOCATION            true: allocate the whole target
//	CACHE_MODE               TRYNONE: qemu-img tries O_DIRECT, falls back
//	http_proxy, https_proxy, no_proxy  the proxy (read by Go's transport)
//
//	progress metric (MetricsConfig):
//	OWNER_UID                the ownerUID label of ProgressMetricName
//	TLS_CERT, TLS_KEY        PEM certificate and key of the metrics server
//	                         (and of the upload server); default self-signed
//	TLS_MIN_VERSION          VersionTLS10 ... VersionTLS13
//	TLS_CIPHERS              comma-separated OpenSSL or Go suite names
//	IMPORTER_METRICS_LISTEN  (ours) the address, default :8443; off: none
//
//	registry:
//	IMPORTER_REGISTRY_IMAGE_ARCHITECTURE  platform to pick from an index
//	REGISTRY_AUTH_FILE                    containers auth.json to read
//	CONTAINERS_REGISTRIES_CONF            registries.conf to read
//
//	registry by node pull (NodePull; IMPORTER_SOURCE is then http):
//	IMPORTER_PULL_METHOD     node: labels come from the server's GET /info
//	IMPORTER_READY_FILE      waited for (ReadyFileTimeout, 30 min; logged);
//	                         holds the disk file's name
//	IMPORTER_DONE_FILE       created after a successful import
//	IMPORTER_READY_FILE_TIMEOUT  (ours) replaces ReadyFileTimeout
//
//	clone (ours):
//	IMPORTER_EXACT_SIZE      true: the target must be the source's size
//	IMPORTER_VERIFY          true: read both back and compare them
//
//	upload:
//	IMPORTER_UPLOAD_LISTEN   listen address (ours; default :8443)
//	TLS_CERT, TLS_KEY        PEM certificate and key, as CDI's upload server
//	                         takes them; without them the server speaks HTTP
//	IMPORTER_UPLOAD_TOKEN_FILE  file holding a bearer token (ours)
//
//	IMPORTER_PATH_PREFIX     (ours, for tests and non-root trials) put in
//	                         front of every fixed path below
//
// # Files
//
// The fixed paths of CDI's pod (Paths):
//
//	/dev/cdi-block-volume  the target when it exists (a block-mode volume)
//	/data/disk.img         the target otherwise; /data for an archive
//	/scratch               scratch space when a volume is mounted there (read
//	                       from the mount table), the only place the importer
//	                       puts a decompressed image a format must read at
//	                       random; a plain directory counts as none
//	/extraheaders/<n>/*    secret-backed extra headers, one line per file
//	/proxycerts/           the proxy's CAs when IMPORTER_PROXY_CERT_DIR is unset
//	/dev/termination-log   written once at the end: the termination message
//	/var/run/secrets/kubernetes.io/serviceaccount  token and ca.crt: the
//	                       poller's way to the API server
//
// Besides these, the importer reads the files the variables above name:
// the clone source, the certificates in IMPORTER_CERT_DIR and
// IMPORTER_PROXY_CERT_DIR, REGISTRY_AUTH_FILE, CONTAINERS_REGISTRIES_CONF,
// IMPORTER_UPLOAD_TOKEN_FILE and the ready file.
//
// # Results
//
// Report writes the termination log. After a run that exits 0 it is one
// line of JSON of at most 4096 bytes, Kubernetes' limit
// (TerminationMessage): CDI's fields (scratchSpaceRequired,
// preallocationApplied, labels, message) and this engine's; when it would
// be longer, the cause in message is kept first and labels are dropped in
// a fixed order and counted. After a failure (exit 1) it is CDI's plain
// text, "Unable to process data: <cause>" (FailureText): CDI's controller
// parses JSON only from a pod that exited 0.
//
// Classify reads an import's error, through the engine's one table of
// errors (internal/errtable: each sentinel of package errdefs, its reason
// word and its class), into one Class; ExitCode and CLIExitCode map a class to
// the exit code (0, 1, or 2 for wrong command-line options), and the
// upload server maps it to an HTTP status. Like CDI's importer, two
// failures exit 0 under the contract: a checksum mismatch, so the
// controller fails the import for good rather than restarting the pod to
// fetch the same bytes again, and scratch space required, so it adds a
// scratch volume and recreates the pod.
//
// # Progress
//
// ProgressTracker turns the engine's snapshots into one percentage of the
// whole import; NewMetricsHandler serves it as ProgressMetricName (CDI's
// controller scrapes https://POD:8443/metrics) beside this engine's
// diskimport_* metrics, StartMetricsServer over HTTPS, and ProgressLog as
// log lines.
package cdi
