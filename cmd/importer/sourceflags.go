package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/diskimport/engine/datasource"
)

// addSourceFlags adds the flags that say how to read a source: every
// command that reads one (an import, inspect, digest) takes all of them,
// from this one list.
func addSourceFlags(fl *pflag.FlagSet, f *cliFlags) {
	fl.StringVar(&f.formatIn, "format-in", "", "the source's format: detected by default (a text page, an archive or a compression not decompressed is refused); raw takes the bytes, once gz/xz/zst/lz4 are removed, as a raw disk whatever they look like")
	fl.StringVar(&f.certDir, "cert-dir", "", "directory of CA certificates to trust for https: every PEM certificate in every non-hidden file")
	fl.BoolVar(&f.insecureTLS, "insecure-tls", false, "do not verify the https server's certificate (for a registry: allow plain http too)")
	fl.StringArrayVar(&f.headers, "header", nil, "extra HTTP header 'Name: value'; repeatable")
	fl.StringVar(&f.creds, "creds", "", "HTTP basic auth or registry USER:PASSWORD; for s3:// the ACCESS_KEY_ID:SECRET_KEY")
	fl.StringVar(&f.s3Endpoint, "s3-endpoint", "", "S3-compatible server of s3:// sources, http(s)://host[:port] (path style; default AWS, or AWS_ENDPOINT_URL_S3)")
	fl.StringVar(&f.s3Region, "s3-region", "", "signing region of S3 sources (default: from the host name, AWS_REGION or ~/.aws/config, else us-east-1)")
	fl.BoolVar(&f.metadataCredentials, "metadata-credentials", false, "when no other S3 or GCS credentials are configured, take them from the cloud's instance metadata service (AWS IMDSv2, the GKE/GCE metadata server)")
	fl.StringVar(&f.gcsEndpoint, "gcs-endpoint", "", "server of gs:// sources, http(s)://host[:port] (default storage.googleapis.com, or STORAGE_EMULATOR_HOST)")
	fl.DurationVar(&f.stallTimeout, "stall-timeout", 5*time.Minute, "fail a download that receives no bytes for this long")
	fl.BoolVar(&f.noRangedRead, "no-ranged-read", false, "copy a qcow2/vmdk/vhd/vhdx/vdi from HTTP to scratch even when the server serves byte ranges")
	fl.IntVar(&f.retries, "retries", 10, "re-send a failed HTTP request or resume a broken download at most this many times (0: none)")
	fl.IntVar(&f.connections, "connections", 0, fmt.Sprintf("read an http(s), s3 or gs object over this many connections at once (1 to %d), in order, when the server serves byte ranges of an object of known size; 1: one GET; 0 (the default): %d, or one GET from a near server (this machine, or a first answer within 5 ms) when the process may use less than two CPUs (a cgroup's CPU limit counted)", datasource.MaxConnections, datasource.DefaultConnections))
	// A person at a terminal wants the cause in under a minute: a steady
	// 503 took 132 s under the 5 minutes env mode keeps (a pod may start
	// before its server); each transfer that moves again starts afresh.
	fl.DurationVar(&f.retryMaxElapsed, "retry-max-elapsed", time.Minute, "stop retrying after failing for this long in a row (bytes arriving again start afresh)")
	addRegistryFlags(fl, f)
	addEgressFlags(fl, f)
}

// addRegistryFlags adds the options of docker://, oci-archive: and oci:
// sources (--creds, --cert-dir and --insecure-tls apply to them too).
func addRegistryFlags(fl *pflag.FlagSet, f *cliFlags) {
	fl.StringVar(&f.arch, "arch", "", "architecture to pick from a multi-platform image (default: this machine's)")
	fl.StringVar(&f.authFile, "auth-file", "", "registry credentials: a containers auth.json or docker config.json")
	fl.StringVar(&f.registriesConf, "registries-conf", "", "registries.conf to use for mirrors and insecure registries (default: the system's)")
}
