package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/diskimport/engine/internal/iostage"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/pgzip"
)

// benchRepo is where the containerdisks are pushed; the tags are the
// bench cases' suffixes (registry-raw-gz → :raw-gz).
const benchRepo = "bench/disk"

// containerdisk is one image: a file of the image directory put at
// disk/<Entry> in a single gzip layer, like quay.io/containerdisks.
type containerdisk struct{ Tag, File, Entry string }

var containerdisks = []containerdisk{
	{Tag: "raw-gz", File: "disk.raw", Entry: "disk/disk.img"},
	{Tag: "qcow2", File: "disk.qcow2", Entry: "disk/disk.qcow2"},
	// zlib-compressed clusters inside the gzip layer: the stream decoder
	// inflates twice, and CDI's path still lands the qcow2 in scratch.
	{Tag: "c-qcow2", File: "disk.c.qcow2", Entry: "disk/disk.qcow2"},
}

// runRegistry builds the containerdisks once (layer blobs cached under
// DIR/registry/), serves them from a go-containerregistry registry on
// --listen, prints "HOST:PORT" and, per image, "TAG LAYER-DIGEST" lines,
// then serves until SIGTERM/SIGINT.
func runRegistry(args []string) error {
	fs := flag.NewFlagSet("registry", flag.ExitOnError)
	dir := fs.String("dir", "", "bench image directory (bench/cache/img-SIZE)")
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	fs.Parse(args)
	if *dir == "" {
		return errors.New("registry: --dir is required")
	}
	blobs := filepath.Join(*dir, "registry", "blobs")
	if err := os.MkdirAll(filepath.Join(blobs, "sha256"), 0o755); err != nil {
		return err
	}
	// images.sh's lock: two bench runs starting together build each layer
	// once (the second finds the first one's cache entry).
	lock, err := os.OpenFile(filepath.Join(*dir, ".images.lock"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	layers := map[string]*fileLayer{}
	for _, c := range containerdisks {
		l, err := cachedLayer(*dir, blobs, c)
		if err != nil {
			return fmt.Errorf("building %s: %w", c.Tag, err)
		}
		layers[c.Tag] = l
	}
	lock.Close() // releases the lock

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(&sizeStatBlobs{dir: blobs}))
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	host := ln.Addr().String()

	// The layer blobs are already in the blob directory, so pushing sends
	// only configs and manifests (remote.Write finds the layers by HEAD).
	for _, c := range containerdisks {
		img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.DockerManifestSchema2), layers[c.Tag])
		if err != nil {
			return err
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return err
		}
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture = "linux", "amd64"
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			return err
		}
		ref, err := name.ParseReference(host+"/"+benchRepo+":"+c.Tag, name.Insecure)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, img); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
	}
	fmt.Println(host)
	for _, c := range containerdisks {
		fmt.Printf("%s %s\n", c.Tag, layers[c.Tag].digest)
	}
	os.Stdout.Sync()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// layerMeta is what is cached next to a built blob, so a later run needs
// neither to compress nor to hash a gigabyte again.
type layerMeta struct {
	Digest, DiffID string
	Size           int64
	SourceSize     int64
	SourceMtime    int64
}

// cachedLayer returns the layer of c, building it when its cache entry is
// missing or its source file changed.
func cachedLayer(dir, blobs string, c containerdisk) (*fileLayer, error) {
	src := filepath.Join(dir, c.File)
	fi, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	metaPath := filepath.Join(dir, "registry", c.Tag+".json")
	var m layerMeta
	if b, err := os.ReadFile(metaPath); err == nil && json.Unmarshal(b, &m) == nil &&
		m.SourceSize == fi.Size() && m.SourceMtime == fi.ModTime().UnixNano() {
		if l, err := m.layer(blobs); err == nil {
			return l, nil
		}
	}
	fmt.Fprintf(os.Stderr, "bench: building containerdisk layer %s (%s as %s, gzip)\n", c.Tag, c.File, c.Entry)
	if m, err = buildLayer(src, fi, blobs, c.Entry); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(metaPath, b, 0o644); err != nil {
		return nil, err
	}
	return m.layer(blobs)
}

// buildLayer writes tar(disk/<entry>, 107:107) | pgzip into the blob
// directory, hashing the tar (diff ID) and the blob (digest) on the way.
func buildLayer(src string, fi os.FileInfo, blobs, entry string) (layerMeta, error) {
	in, err := os.Open(src)
	if err != nil {
		return layerMeta{}, err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(blobs, "build-*")
	if err != nil {
		return layerMeta{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	blobHash, tarHash := sha256.New(), sha256.New()
	var blobSize atomic.Int64
	zw, err := pgzip.NewWriterLevel(iostage.NewWriteCounter(io.MultiWriter(tmp, blobHash), &blobSize), 6)
	if err != nil {
		return layerMeta{}, err
	}
	tw := tar.NewWriter(io.MultiWriter(zw, tarHash))
	hdrs := []*tar.Header{
		{Name: "disk/", Typeflag: tar.TypeDir, Mode: 0o555, Uid: 107, Gid: 107, ModTime: fi.ModTime()},
		{Name: entry, Typeflag: tar.TypeReg, Mode: 0o440, Uid: 107, Gid: 107, ModTime: fi.ModTime(), Size: fi.Size()},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return layerMeta{}, err
		}
	}
	if _, err := io.Copy(tw, in); err != nil {
		return layerMeta{}, err
	}
	if err := tw.Close(); err != nil {
		return layerMeta{}, err
	}
	if err := zw.Close(); err != nil {
		return layerMeta{}, err
	}
	if err := tmp.Close(); err != nil {
		return layerMeta{}, err
	}
	m := layerMeta{Digest: "sha256:" + hexSum(blobHash), DiffID: "sha256:" + hexSum(tarHash), Size: blobSize.Load(),
		SourceSize: fi.Size(), SourceMtime: fi.ModTime().UnixNano()}
	d, _ := v1.NewHash(m.Digest)
	return m, os.Rename(tmp.Name(), filepath.Join(blobs, d.Algorithm, d.Hex))
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// fileLayer is a gzip layer whose blob is a file in the blob directory,
// with its hashes known from the cache (ggcr's tarball layers would hash
// and decompress the whole blob at every start).
type fileLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
}

func (m layerMeta) layer(blobs string) (*fileLayer, error) {
	d, err := v1.NewHash(m.Digest)
	if err != nil {
		return nil, err
	}
	diff, err := v1.NewHash(m.DiffID)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(blobs, d.Algorithm, d.Hex)
	if fi, err := os.Stat(p); err != nil || fi.Size() != m.Size {
		return nil, fmt.Errorf("blob %s missing or of the wrong size", p)
	}
	return &fileLayer{path: p, digest: d, diffID: diff, size: m.Size}, nil
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return types.DockerLayer, nil }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	return nil, errors.New("not needed for pushing")
}

// sizeStatBlobs is a blob directory like ggcr's disk handler, except that
// Stat trusts the file name instead of re-hashing the blob: the disk
// handler hashes a gigabyte on every GET and HEAD, which would be timed as
// part of the import.
type sizeStatBlobs struct{ dir string }

func (b *sizeStatBlobs) path(h v1.Hash) string { return filepath.Join(b.dir, h.Algorithm, h.Hex) }

func (b *sizeStatBlobs) Stat(_ context.Context, _ string, h v1.Hash) (int64, error) {
	fi, err := os.Stat(b.path(h))
	if errors.Is(err, os.ErrNotExist) {
		return 0, registry.ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (b *sizeStatBlobs) Get(_ context.Context, _ string, h v1.Hash) (io.ReadCloser, error) {
	f, err := os.Open(b.path(h))
	if errors.Is(err, os.ErrNotExist) {
		return nil, registry.ErrNotFound
	}
	return f, err
}

func (b *sizeStatBlobs) Put(_ context.Context, _ string, h v1.Hash, rc io.ReadCloser) error {
	defer rc.Close()
	tmp, err := os.CreateTemp(b.dir, "upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, rc); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(b.dir, h.Algorithm), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), b.path(h))
}
