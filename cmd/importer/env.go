package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/errtable"
)

// runEnv runs the one job CDI's environment asks for and reports it as
// CDI's controller expects (package cdi holds the contract; this is the
// wiring).
func runEnv(ctx context.Context, getenv func(string) string, log *slog.Logger, stderr io.Writer) int {
	paths := cdi.PathsFromEnv(getenv)
	req, err := cdi.ReadEnv(getenv, paths)
	defer req.Close()
	for _, w := range req.Warnings {
		log.Warn(w)
	}
	if err == nil && req.Kind != cdi.Blank {
		log.Info(cdi.ScratchNote(req.Import, paths.Scratch))
	}
	var res *importer.Result
	if err == nil {
		progress := startEnvProgress(req.Metrics, log)
		res, err = runRequest(ctx, req, log, progress.observe)
		progress.finish(res, err)
	}
	code, werr := cdi.Report(paths, req.Kind, res, err)
	if werr != nil {
		fmt.Fprintln(stderr, "importer: writing termination message:", werr)
	}
	switch {
	case err == nil:
		log.Info("Import complete", "target", res.Target, "format", res.SourceFormat, "virtualSize", res.VirtualSize)
	case cdi.Classify(err) == errtable.ScratchSpaceRequired:
		// Not a failure under the contract: the controller creates a
		// scratch volume and runs the pod again with it.
		log.Info("Scratch space required; nothing was written to the target, exiting 0 so that the controller adds a scratch volume",
			"why", cdi.ScratchReason(res), "cause", err)
	default:
		fmt.Fprintf(stderr, "importer: %s: %v\n", failedWhat(req.Kind), err)
	}
	return code
}

func runRequest(ctx context.Context, req cdi.Request, log *slog.Logger, progress func(importer.Progress)) (*importer.Result, error) {
	switch req.Kind {
	case cdi.Blank:
		req.Blank.Logger = log
		return importer.CreateBlank(ctx, req.Blank)
	case cdi.Upload:
		req.Import.Logger = log
		return serveEnvUpload(ctx, req.Import, req.Upload)
	}
	req.Import.Logger = log
	req.Import.Progress = progress
	return req.NodePull.Import(ctx, req.Import)
}

// failedWhat names a failed job on standard error.
func failedWhat(k cdi.Kind) string {
	if k == cdi.Blank {
		return "blank disk failed"
	}
	return "import failed"
}
