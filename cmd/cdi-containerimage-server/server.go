package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// config is one run's settings.
type config struct {
	host, imageDir      string
	port                int
	readyFile, doneFile string
	// env is what GET /info reports (the process's environment).
	env []string
	// root is where the bootable-OS directories are looked for ("" is /).
	root   string
	logger *log.Logger
	// poll is how often the done file is looked for.
	poll time.Duration
}

// serverInfo is GET /info's answer, the shape CDI's importer reads.
type serverInfo struct {
	Env []string `json:"env"`
}

// serve runs the server until the done file appears or ctx ends.
func serve(ctx context.Context, c config) error {
	if err := refuseBootableOS(c.root); err != nil {
		return err
	}
	// Every name is resolved inside the image directory: its entry may be
	// a symlink, and one leading out of it (to the node's or the
	// container's files) is refused, at start and on every request.
	root, err := os.OpenRoot(c.imageDir)
	if err != nil {
		return fmt.Errorf("opening the image directory: %w", err)
	}
	defer root.Close()
	name, err := diskFileName(root)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /info", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(serverInfo{Env: c.env})
	})
	// http.FileServer answers HEAD and Range requests.
	mux.Handle("/", http.FileServerFS(root.FS()))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", net.JoinHostPort(c.host, strconv.Itoa(c.port)))
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Close()

	// Ready only once listening: the importer connects as soon as it sees it.
	if err := writeWhole(c.readyFile, name); err != nil {
		return fmt.Errorf("writing the ready file: %w", err)
	}
	defer os.Remove(c.readyFile)
	c.logger.Printf("Serving %s at http://%s/%s", filepath.Join(c.imageDir, name), ln.Addr(), name)

	if err := waitForFile(ctx, c.doneFile, c.poll, served); err != nil {
		return err
	}
	os.Remove(c.doneFile)
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		c.logger.Printf("Shutdown: %v", err)
	}
	c.logger.Print("Importer has completed")
	return nil
}

// waitForFile returns once path exists; an error when ctx ends first or
// the server stopped by itself.
func waitForFile(ctx context.Context, path string, poll time.Duration, served <-chan error) error {
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped before %s appeared: %w", path, ctx.Err())
		case err := <-served:
			return fmt.Errorf("serving: %w", err)
		case <-tick.C:
		}
	}
}

// diskFileName returns the name of the image directory's one entry, which
// must be a file (the containerdisk layout: /disk/<image>) or a symlink
// that resolves to one inside the directory.
func diskFileName(root *os.Root) (string, error) {
	dir := root.Name()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return "", fmt.Errorf("reading the image directory: %w", err)
	}
	if len(entries) != 1 {
		return "", fmt.Errorf("image directory %s holds %d entries, want exactly one disk image file", dir, len(entries))
	}
	name := entries[0].Name()
	fi, err := root.Stat(name)
	if err != nil {
		return "", fmt.Errorf("image directory %s: %s does not resolve to a file inside it: %w", dir, name, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("image directory %s holds %s, which is not a file", dir, name)
	}
	return name, nil
}

// refuseBootableOS fails for a bootc/ostree image (a bootable OS tree, not
// a containerdisk), as CDI's server does.
func refuseBootableOS(root string) error {
	for _, d := range []string{"sysroot", "ostree"} {
		if fi, err := os.Stat(filepath.Join(root, "/", d)); err == nil && fi.IsDir() {
			return errors.New("bootc image detected: this image holds an ostree-based bootable OS, not a containerdisk")
		}
	}
	return nil
}

// writeWhole writes content to path so that a reader sees no file or the
// whole of it, never an empty one: a temporary file beside it, renamed.
func writeWhole(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
