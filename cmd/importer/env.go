package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
)

// runEnv runs the one job CDI's environment asks for and reports it as
// CDI's controller expects (package cdi holds the contract; this is the
// wiring).
func runEnv(ctx context.Context, getenv func(string) string, log *slog.Logger, stderr io.Writer) int {
	paths := cdi.PathsFromEnv(getenv)
	req, err := cdi.ReadEnv(getenv, paths)
	var res *importer.Result
	if err == nil {
		res, err = runRequest(ctx, req, log)
	}
	code, werr := cdi.Report(paths, res, err)
	if werr != nil {
		fmt.Fprintln(stderr, "importer: writing termination message:", werr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "importer: %s: %v\n", failedWhat(req.Kind), err)
		return code
	}
	log.Info("Import complete", "target", res.Target, "format", res.SourceFormat, "virtualSize", res.VirtualSize)
	return code
}

func runRequest(ctx context.Context, req cdi.Request, log *slog.Logger) (*importer.Result, error) {
	switch req.Kind {
	case cdi.Blank:
		req.Blank.Logger = log
		return importer.CreateBlank(ctx, req.Blank)
	case cdi.Upload:
		req.Import.Logger = log
		return serveEnvUpload(ctx, req.Import, req.Upload) // upload.go
	}
	req.Import.Logger = log
	return importer.Import(ctx, req.Import)
}

// failedWhat names a failed job on standard error.
func failedWhat(k cdi.Kind) string {
	if k == cdi.Blank {
		return "blank disk failed"
	}
	return "import failed"
}
