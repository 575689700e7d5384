package cdi

import (
	"fmt"
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
