package cdi

import (
	"fmt"
	"os"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// Role is which of CDI's pods the image was started as. CDI's controller
// starts the importer, upload-server and clone-source pods from the image
// its IMPORTER_IMAGE, UPLOADSERVER_IMAGE and CLONER_IMAGE name, each with
// the image's own entrypoint and no command (the importer and upload
// server with Args ["-v=N"], the cloner with none), so with one image for
// all three the environment is what tells them apart.
type Role int

const (
	// RoleNone: none of CDI's pod environments.
	RoleNone Role = iota
	RoleImporter
	RoleUploadServer
	RoleCloneSource
)

func (r Role) String() string {
	switch r {
	case RoleImporter:
		return "importer"
	case RoleUploadServer:
		return "upload-server"
	case RoleCloneSource:
		return "clone-source"
	}
	return "none"
}

// roleMarkers are, per role, variables CDI's controller sets in that
// pod's environment and in no other's (import-controller.go
// makeImportEnv, upload-controller.go makeUploadPodContainers,
// clone-controller.go CreateCloneSourcePod). Variables every pod may have
// (PREALLOCATION, FILESYSTEM_OVERHEAD, OWNER_UID, TLS_MIN_VERSION,
// TLS_CIPHERS, our IMPORTER_METRICS_LISTEN and IMPORTER_LOG_FORMAT) mark
// none.
func roleMarkers() []struct {
	role  Role
	names []string
} {
	return []struct {
		role  Role
		names []string
	}{
		{RoleImporter, []string{"IMPORTER_SOURCE"}},
		{RoleUploadServer, []string{"TLS_CERT_FILE", "TLS_KEY_FILE", "CLIENT_CERT_FILE", "CLIENT_NAME", "UPLOAD_IMAGE_SIZE"}},
		{RoleCloneSource, []string{"UPLOAD_URL", "VOLUME_MODE", "MOUNT_POINT", "CLIENT_CERT", "CLIENT_KEY", "SERVER_CA_CERT"}},
	}
}

// RoleFromEnv picks the role whose marker variables are set (non-empty)
// and returns the ones found, for the log. Markers of two roles are
// refused (errdefs.ErrInvalidOptions) rather than guessed at: a pod that
// serves uploads where it should have sent a clone, or the reverse, would
// leave the clone hanging. No marker at all is RoleNone.
func RoleFromEnv(getenv func(string) string) (Role, []string, error) {
	role, found := RoleNone, []string(nil)
	var seen []string
	for _, m := range roleMarkers() {
		var set []string
		for _, name := range m.names {
			if getenv(name) != "" {
				set = append(set, name)
			}
		}
		if len(set) == 0 {
			continue
		}
		seen = append(seen, fmt.Sprintf("%s (%s)", m.role, strings.Join(set, ", ")))
		role, found = m.role, set
	}
	if len(seen) > 1 {
		return RoleNone, nil, fmt.Errorf("the environment is that of more than one of CDI's pods: %s; remove the other role's variables, or run the role's command (importer, importer upload-server, importer clone-source): %w",
			strings.Join(seen, " and "), errdefs.ErrInvalidOptions)
	}
	return role, found, nil
}

// Paths are the fixed paths of CDI's importer pod.
type Paths struct {
	// BlockDevice is where the controller puts a block-mode volume; when it
	// exists, it is the target.
	BlockDevice string
	// DataDir is where a filesystem-mode volume is mounted; DataFile, the
	// disk image in it, is the target, and an archive is extracted into
	// DataDir itself.
	DataDir  string
	DataFile string
	// Scratch is the scratch volume the controller mounts (see scratchDir).
	Scratch string
	// TerminationLog receives the termination message.
	TerminationLog string
	// ExtraHeaders holds one directory per secret of extra HTTP headers
	// (/extraheaders/<n>/), one header line per file (headerFiles).
	ExtraHeaders string
	// ProxyCerts is where the controller mounts the CA certificates of the
	// cluster's proxy when IMPORTER_PROXY_CERT_DIR does not say (CDI's own
	// importer reads only this path).
	ProxyCerts string
	// ServiceAccount holds the pod's service-account token, its CA
	// certificate (ca.crt) and namespace, as the kubelet mounts them: how
	// the DataImportCron poller reaches the API server.
	ServiceAccount string
}

// PathsFromEnv returns CDI's paths. IMPORTER_PATH_PREFIX, when set, is put
// in front of each, so the contract can be exercised without owning /data
// and /dev (tests, or a person trying it as non-root).
func PathsFromEnv(getenv func(string) string) Paths {
	prefix := getenv("IMPORTER_PATH_PREFIX")
	return Paths{
		BlockDevice:    prefix + "/dev/cdi-block-volume",
		DataDir:        prefix + "/data",
		DataFile:       prefix + "/data/disk.img",
		Scratch:        prefix + "/scratch",
		TerminationLog: prefix + "/dev/termination-log",
		ExtraHeaders:   prefix + "/extraheaders",
		ProxyCerts:     prefix + "/proxycerts",
		ServiceAccount: prefix + "/var/run/secrets/kubernetes.io/serviceaccount",
	}
}

// blockMode reports whether the volume is a block device: CDI's controller
// maps it at BlockDevice and mounts nothing at DataDir.
func (p Paths) blockMode() bool {
	_, err := os.Stat(p.BlockDevice)
	return err == nil
}
