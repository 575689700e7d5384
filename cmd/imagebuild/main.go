// Command imagebuild builds the importer's container image from
// bin/importer and programs installed on this machine, with no base image
// and no network (make image runs it):
//
//	imagebuild -importer bin/importer -version V -revision SHA -created UNIX -out-dir bin
//
// It writes OUT/importer-image.tar (a docker-archive for podman load,
// tagged REPOSITORY:V and REPOSITORY:latest), OUT/importer-image-oci/ (an
// OCI layout) and OUT/importer-image.json (digest and sizes), and prints
// the digest and the compressed size.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/diskimport/engine/internal/imagebuild"
)

type options struct {
	recipe         imagebuild.Recipe
	repository     string
	outDir         string
	createdUnix    int64
	maxCompressed  int64
	programs       []string
	nativePrograms []string
	scripts        []string
	hostPrograms   []string
	entrypoint     string
	applets        string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	img, err := o.recipe.Image(ctx)
	if err != nil {
		return err
	}
	s, err := imagebuild.Summarize(img)
	if err != nil {
		return err
	}
	tags := []string{o.recipe.Version, "latest"}
	repoTags := []string{o.repository + ":" + o.recipe.Version, o.repository + ":latest"}
	archive := filepath.Join(o.outDir, "importer-image.tar")
	layout := filepath.Join(o.outDir, "importer-image-oci")
	if err := imagebuild.WriteDockerArchive(archive, img, repoTags, o.recipe.Created); err != nil {
		return err
	}
	if err := imagebuild.WriteOCILayout(layout, img, tags); err != nil {
		return err
	}
	if err := s.WriteJSON(filepath.Join(o.outDir, "importer-image.json")); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "image      %s\n", strings.Join(repoTags, ", "))
	fmt.Fprintf(stdout, "digest     %s\n", s.Digest)
	fmt.Fprintf(stdout, "image id   %s\n", s.ConfigDigest)
	fmt.Fprintf(stdout, "compressed %.1f MB (%d bytes; limit %.0f MB); layers %s\n",
		megabytes(s.CompressedSize), s.CompressedSize, megabytes(o.maxCompressed), layerSizes(s.LayerSizes))
	fmt.Fprintf(stdout, "wrote      %s (docker-archive), %s/ (OCI layout)\n", archive, layout)
	if s.CompressedSize > o.maxCompressed {
		return fmt.Errorf("the image is %d bytes compressed, more than the limit of %d", s.CompressedSize, o.maxCompressed)
	}
	return nil
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	fs.StringVar(&o.recipe.Importer, "importer", "bin/importer", "the static importer binary: /usr/bin/importer, the entrypoint; empty: an image of the other programs only (CDI's, for the e2e timing run), with -entrypoint")
	fs.StringVar(&o.recipe.Path, "path", "", "the image's PATH (default /usr/bin:/bin)")
	fs.StringVar(&o.entrypoint, "entrypoint", "", "the entrypoint, comma-separated (default /usr/bin/importer)")
	fs.Func("program", "SRC=PATH: another static program of the project, installed at PATH (repeatable)", func(v string) error {
		o.programs = append(o.programs, v)
		return nil
	})
	fs.Func("native-program", "SRC=PATH: a program of the project built from C against this machine's libraries (native/), installed at PATH with its shared libraries (repeatable)", func(v string) error {
		o.nativePrograms = append(o.nativePrograms, v)
		return nil
	})
	fs.Func("script", "SRC=PATH: a file installed at PATH as it is, executable (repeatable)", func(v string) error {
		o.scripts = append(o.scripts, v)
		return nil
	})
	fs.Func("host-library", "a shared object of this machine a host program opens with dlopen (nbdkit's plugins), copied with its shared libraries (repeatable)", func(v string) error {
		o.recipe.HostLibraries = append(o.recipe.HostLibraries, v)
		return nil
	})
	fs.Func("host-program", "a program of this machine copied with its shared libraries (repeatable; default /usr/bin/qemu-img, /usr/bin/xz and /usr/bin/igzip)", func(v string) error {
		o.hostPrograms = append(o.hostPrograms, v)
		return nil
	})
	fs.StringVar(&o.recipe.Busybox, "busybox", "/bin/busybox", "a static busybox (Debian's busybox-static)")
	fs.StringVar(&o.applets, "applets", "sh,cp", "busybox applets to link beside it")
	fs.IntVar(&o.recipe.UID, "uid", 107, "the non-root user and group the image runs as")
	fs.StringVar(&o.recipe.Source, "source", "https://github.com/diskimport/engine", "the org.opencontainers.image.source label")
	fs.StringVar(&o.recipe.Version, "version", "", "the version: image tag and org.opencontainers.image.version label")
	fs.StringVar(&o.recipe.Revision, "revision", "", "the commit: org.opencontainers.image.revision label")
	fs.Int64Var(&o.createdUnix, "created", 0, "creation time and every file's mtime, in Unix seconds (the commit's time)")
	fs.BoolVar(&o.recipe.Licenses, "licenses", true, "add the copyright files of the Debian packages copied from")
	fs.StringVar(&o.repository, "repository", "localhost/diskimport/importer", "the repository the archive's tags name")
	fs.StringVar(&o.outDir, "out-dir", "bin", "where importer-image.tar, importer-image-oci/ and importer-image.json go")
	fs.Int64Var(&o.maxCompressed, "max-compressed-size", 40_000_000, "fail when the compressed image is larger (bytes)")
	err := fs.Parse(args)
	if err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// What a registry accepts as a tag.
	tagPattern := regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	if !tagPattern.MatchString(o.recipe.Version) {
		return o, fmt.Errorf("-version %q is not a valid image tag", o.recipe.Version)
	}
	if o.recipe.Revision == "" {
		return o, errors.New("-revision is required")
	}
	o.recipe.Created = time.Unix(o.createdUnix, 0).UTC()
	o.recipe.HostPrograms = o.hostPrograms
	if len(o.recipe.HostPrograms) == 0 {
		// igzip (Debian's isal) decodes gzip about twice as fast as the
		// in-process decoder; the engine runs it when it is on PATH.
		o.recipe.HostPrograms = []string{"/usr/bin/qemu-img", "/usr/bin/xz", "/usr/bin/igzip"}
	}
	if o.applets != "" {
		o.recipe.Applets = strings.Split(o.applets, ",")
	}
	if o.entrypoint != "" {
		o.recipe.Entrypoint = strings.Split(o.entrypoint, ",")
	}
	if o.recipe.Importer == "" && len(o.recipe.Entrypoint) == 0 {
		return o, errors.New("an image without -importer needs -entrypoint")
	}
	if o.recipe.Programs, err = sourcePaths("-program", o.programs); err != nil {
		return o, err
	}
	native, err := sourcePaths("-native-program", o.nativePrograms)
	if err != nil {
		return o, err
	}
	for _, p := range native {
		p.Dynamic = true
		o.recipe.Programs = append(o.recipe.Programs, p)
	}
	if o.recipe.Scripts, err = sourcePaths("-script", o.scripts); err != nil {
		return o, err
	}
	return o, os.MkdirAll(o.outDir, 0o755)
}

// sourcePaths reads the SRC=/PATH values of flag.
func sourcePaths(flag string, values []string) ([]imagebuild.Program, error) {
	var out []imagebuild.Program
	for _, p := range values {
		src, dst, ok := strings.Cut(p, "=")
		if !ok || src == "" || !strings.HasPrefix(dst, "/") {
			return nil, fmt.Errorf("%s %q: want SRC=/ABSOLUTE/PATH", flag, p)
		}
		out = append(out, imagebuild.Program{Source: src, Path: dst})
	}
	return out, nil
}

func megabytes(n int64) float64 { return float64(n) / 1e6 }

func layerSizes(sizes []int64) string {
	parts := make([]string, len(sizes))
	for i, n := range sizes {
		parts[i] = fmt.Sprintf("%.1f MB", megabytes(n))
	}
	return strings.Join(parts, " + ")
}
