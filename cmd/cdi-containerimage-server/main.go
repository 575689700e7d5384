// Command cdi-containerimage-server is the server half of CDI's registry
// import by node pull (IMPORTER_PULL_METHOD=node). CDI's controller copies
// it out of the importer image into a shared volume and runs it inside
// the containerdisk image, which may have no libc (so it is built static,
// CGO_ENABLED=0, from the standard library alone):
//
//	/shared/server -p 8100 -image-dir /disk -ready-file /shared/ready -done-file /shared/done
//
// It serves the one disk file of -image-dir over HTTP on localhost (with
// byte ranges, so the importer reads it in place; every name is resolved
// inside -image-dir, so a symlink out of it is refused), and GET /info with its
// environment, the containerdisk's, whose KUBEVIRT_IO_ variables become
// the volume's labels. It writes the disk file's name to -ready-file once
// it listens, and exits when -done-file appears (the importer creates it
// after a successful import), so that the pod completes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	var c config
	flag.IntVar(&c.port, "p", 8100, "port to serve on, on localhost")
	flag.StringVar(&c.imageDir, "image-dir", ".", "directory holding the disk image file (exactly one)")
	flag.StringVar(&c.readyFile, "ready-file", "/shared/ready", "file written with the disk file's name once serving")
	flag.StringVar(&c.doneFile, "done-file", "/shared/done", "file whose appearance ends the server")
	flag.Parse()
	c.host = "localhost"
	c.env = os.Environ()
	c.logger = log.New(os.Stderr, "", log.LstdFlags)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-containerimage-server:", err)
		os.Exit(1)
	}
}
