package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
)

// runPodRole is the image's entrypoint started as CDI starts its pods:
// no command and only -v=N, CDI's environment saying which pod it is. The
// role taken is the first log line. It returns the exit code, and an error
// for the command to print when no role or more than one is found.
func runPodRole(ctx context.Context, getenv func(string) string, verbose int, quiet bool, stdout, stderr io.Writer) (int, error) {
	role, markers, err := cdi.RoleFromEnv(getenv)
	if err != nil {
		return cdi.ExitUsage, err
	}
	if role == cdi.RoleNone {
		return cdi.ExitUsage, errors.New("SOURCE and DEST are required (or the environment of one of CDI's pods: IMPORTER_SOURCE for the importer, TLS_CERT_FILE and the other upload-server variables, UPLOAD_URL and the other cloner variables)")
	}
	log := envLogger(stderr, getenv, verbose, quiet)
	log.Info(fmt.Sprintf("Running as CDI's %s pod", role), "role", role.String(), "chosenBy", strings.Join(markers, ","))
	switch role {
	case cdi.RoleUploadServer:
		return runEnvUploadServer(ctx, getenv, log, stderr), nil
	case cdi.RoleCloneSource:
		f := cloneSourceDefaults()
		f.verbose, f.quiet = verbose, quiet
		return runCloneSource(ctx, f, getenv, log, stdout, stderr), nil
	}
	return runEnv(ctx, getenv, log, stderr), nil
}
