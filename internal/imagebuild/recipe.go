package imagebuild

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"time"

	"github.com/diskimport/engine/internal/sandbox"
)

// Recipe says what goes into the image. Paths are on the build machine.
type Recipe struct {
	// Importer is the static importer binary, installed as
	// /usr/bin/importer: the entrypoint, with CDI's program names
	// starting its roles (cdiLaunchers). Empty for an image of other
	// programs only (CDI's own, for the e2e timing run), which then names
	// its Entrypoint.
	Importer string
	// Entrypoint is the image's entrypoint; empty: the importer.
	Entrypoint []string
	// Path is the image's PATH; empty: /usr/bin:/bin.
	Path string
	// Programs are more of the project's static programs, for instance
	// bin/cdi-containerimage-server at /usr/bin/cdi-containerimage-server.
	Programs []Program
	// Scripts are files installed as they are, executable (CDI's
	// cloner_startup.sh); their interpreter comes from HostPrograms.
	Scripts []Program
	// HostPrograms are programs of the build machine (qemu-img, xz),
	// copied to their own paths with every library the loader maps for
	// them.
	HostPrograms []string
	// HostLibraries are shared objects of the build machine that a host
	// program opens with dlopen (nbdkit's plugins and filters), copied to
	// their own paths with the libraries they need, as the loader of the
	// first dynamic host program lists them.
	HostLibraries []string
	// Busybox is a static busybox; Applets are linked to it beside it
	// (sh and cp, which CDI's node-pull init container runs).
	Busybox string
	Applets []string
	// UID is the non-root user (and group) the image runs as; it owns
	// /data and /scratch. CDI runs its pods as 107.
	UID int
	// Source, Version and Revision are the org.opencontainers.image
	// labels.
	Source, Version, Revision string
	// Created is the image's creation time and every file's mtime;
	// the commit's time keeps builds of one commit identical.
	Created time.Time
	// Licenses adds /usr/share/doc/PKG/copyright for every Debian package
	// a host file comes from (qemu's GPL among them).
	Licenses bool
}

// Program is one of the project's binaries and where it goes.
type Program struct {
	Source string // on the build machine
	Path   string // in the image
	// Dynamic marks a program of the project built from C (native/)
	// against the build machine's libraries: its shared libraries go into
	// the system layer, as a host program's do. Others must be static.
	Dynamic bool
}

// The layers, in the order they are stacked: what the build machine
// provides changes rarely, the project's binaries with every commit.
const (
	systemLayerComment  = "host programs and their libraries, busybox, users and directories"
	projectLayerComment = "the project's static binaries"
)

// SystemTree is the first layer: the host programs with their libraries,
// busybox and its applets, /etc/passwd and /etc/group, /tmp, /data and
// /scratch, and the copyright files of the packages used.
func (r Recipe) SystemTree(ctx context.Context) (*Tree, error) {
	t := NewTree()
	var hostPaths []string
	// The host programs with their libraries; of the project's dynamic
	// programs only the libraries (the programs go in the project layer).
	for _, p := range r.HostPrograms {
		libs, err := sandbox.SharedLibraries(ctx, p)
		if err != nil {
			return nil, err
		}
		if err := addHostFiles(t, append([]string{p}, libs...), &hostPaths); err != nil {
			return nil, err
		}
	}
	for _, p := range dynamicSources(r.Programs) {
		libs, err := sandbox.SharedLibraries(ctx, p)
		if err != nil {
			return nil, err
		}
		if err := addHostFiles(t, libs, &hostPaths); err != nil {
			return nil, err
		}
	}
	if err := r.addHostLibraries(ctx, t, &hostPaths); err != nil {
		return nil, err
	}
	if err := r.addBusybox(t, &hostPaths); err != nil {
		return nil, err
	}
	if err := r.addUsersAndDirs(t); err != nil {
		return nil, err
	}
	if r.Licenses {
		if err := addCopyrights(ctx, t, hostPaths); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// dynamicSources are the build machine's paths of the dynamic programs.
func dynamicSources(ps []Program) []string {
	var out []string
	for _, p := range ps {
		if p.Dynamic {
			out = append(out, p.Source)
		}
	}
	return out
}

func (r Recipe) addHostLibraries(ctx context.Context, t *Tree, hostPaths *[]string) error {
	if len(r.HostLibraries) == 0 {
		return nil
	}
	loader := ""
	for _, p := range r.HostPrograms {
		interp, err := sandbox.Interpreter(p)
		if err != nil {
			return err
		}
		if loader = interp; loader != "" {
			break
		}
	}
	if loader == "" {
		return fmt.Errorf("imagebuild: host libraries %q need a dynamic host program whose loader lists them", r.HostLibraries)
	}
	for _, lib := range r.HostLibraries {
		needed, err := sandbox.LoadedLibraries(ctx, loader, lib)
		if err != nil {
			return err
		}
		if err := addHostFiles(t, append([]string{lib}, needed...), hostPaths); err != nil {
			return err
		}
	}
	return nil
}

// addHostFiles adds the host files and notes every host path they went
// through (the copyright files are found from them).
func addHostFiles(t *Tree, files []string, hostPaths *[]string) error {
	for _, f := range files {
		resolved, links, err := t.AddHostFile(f)
		if err != nil {
			return err
		}
		*hostPaths = append(*hostPaths, f, resolved)
		*hostPaths = append(*hostPaths, links...)
	}
	return nil
}

func (r Recipe) addBusybox(t *Tree, hostPaths *[]string) error {
	if r.Busybox == "" {
		return nil
	}
	static, err := sandbox.IsStatic(r.Busybox)
	if err != nil {
		return err
	}
	if !static {
		return fmt.Errorf("imagebuild: busybox %s is not static (install busybox-static)", r.Busybox)
	}
	resolved, links, err := t.AddHostFile(r.Busybox)
	if err != nil {
		return err
	}
	*hostPaths = append(*hostPaths, r.Busybox, resolved)
	*hostPaths = append(*hostPaths, links...)
	dir := path.Dir(resolved)
	for _, a := range r.Applets {
		if err := t.Symlink(path.Join(dir, a), path.Base(resolved)); err != nil {
			return err
		}
	}
	// /bin/sh must work wherever busybox lives (CDI's pods run it by that
	// name): on a merged-/usr build machine /bin is already the symlink.
	if !t.Has("/bin") && dir == "/usr/bin" {
		return t.Symlink("/bin", "usr/bin")
	}
	return nil
}

func (r Recipe) addUsersAndDirs(t *Tree) error {
	if r.UID <= 0 {
		return fmt.Errorf("imagebuild: the image's user must be non-root, not uid %d", r.UID)
	}
	id := strconv.Itoa(r.UID)
	passwd := "root:x:0:0:root:/root:/bin/sh\nimporter:x:" + id + ":" + id + ":importer:/tmp:/bin/sh\n"
	group := "root:x:0:\nimporter:x:" + id + ":\n"
	steps := []func() error{
		func() error { return t.Bytes("/etc/passwd", []byte(passwd), 0o644) },
		func() error { return t.Bytes("/etc/group", []byte(group), 0o644) },
		func() error { return t.Dir("/root", 0o700, 0, 0) },
		func() error { return t.Add(Entry{Path: "/tmp", Kind: KindDir, Perm: 0o777, Sticky: true}) },
		func() error { return t.Dir("/data", 0o755, r.UID, r.UID) },
		func() error { return t.Dir("/scratch", 0o755, r.UID, r.UID) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// ProjectTree is the second layer: the importer and the other static
// programs of the project, and the scripts.
func (r Recipe) ProjectTree() (*Tree, error) {
	t := NewTree()
	programs := r.Programs
	if r.Importer != "" {
		programs = append([]Program{{Source: r.Importer, Path: EntrypointPath}}, programs...)
	}
	for _, p := range programs {
		static, err := sandbox.IsStatic(p.Source)
		if err != nil {
			return nil, err
		}
		if !static && !p.Dynamic {
			return nil, fmt.Errorf("imagebuild: %s is not static (build it with CGO_ENABLED=0)", p.Source)
		}
		if err := t.File(p.Path, p.Source, 0o755); err != nil {
			return nil, err
		}
	}
	for _, s := range r.Scripts {
		if err := t.File(s.Path, s.Source, 0o755); err != nil {
			return nil, err
		}
	}
	if r.Importer == "" {
		return t, nil
	}
	for _, l := range cdiLaunchers() {
		script := "#!/bin/sh\n# " + l.why + "\nexec " + EntrypointPath + l.args + ` "$@"` + "\n"
		if err := t.Bytes(l.path, []byte(script), 0o755); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// cdiLaunchers start each CDI pod role by the program name CDI's own
// images use, so one image can be set as CDI's importer, upload server
// and cloner image whatever name the pod spec or an operator's override
// runs.
func cdiLaunchers() []struct{ path, args, why string } {
	return []struct{ path, args, why string }{
		{"/usr/bin/cdi-importer", "", "CDI's importer name for the entrypoint: the role from CDI's environment"},
		{"/usr/bin/cdi-uploadserver", " upload-server", "CDI's upload server: its environment (DESTINATION, TLS_*, CLIENT_*, DEADLINE)"},
		{"/usr/bin/cloner_startup.sh", " clone-source", "CDI's cloner entrypoint: its environment (VOLUME_MODE, MOUNT_POINT, UPLOAD_URL, CLIENT_*)"},
		{"/usr/bin/cdi-cloner", " clone-source", "CDI's cloner binary: -content-type, -upload-bytes, -mount flags"},
		{"/usr/bin/cdi-image-size-detection", " cdi-image-size-detection", "CDI's clone size detection: -image-path /data/disk.img, the virtual size as the termination message"},
		{"/usr/bin/cdi-source-update-poller", " cdi-source-update-poller", "CDI's DataImportCron poller: -ns, -cron, -url, -certdir; the digest patched into the DataImportCron"},
	}
}

// EntrypointPath is where the importer is and what the image runs.
const EntrypointPath = "/usr/bin/importer"
