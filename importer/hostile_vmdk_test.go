package importer_test

// Hostile vmdks end to end (issue 9): descriptors that make qemu open a
// host file or device, capacity 0, disagreeing footers and vmdks cut
// inside their last grain. Each is imported from a file, over HTTP from a
// server that serves ranges, compressed (.xz) through scratch, and as an
// upload stream, and
// must fail with its own error, never complete, and never leave the
// secret file's bytes in the target (a loop device, when root, keeps what
// was written even after a failure).

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/hostileimg"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// vmdkSecretSize is the secret file's size: 2048 sectors, the extent size
// the hostile descriptors name.
const vmdkSecretSize = 1 << 20

// hostileVMDK is one crafted vmdk; secret is the path of a host file
// (with random content) the image tries to smuggle into the target.
type hostileVMDK struct {
	name string
	make func(t *testing.T, dir, secret string) []byte
	want error
	msg  string
	// ranged: the image's header is sound, so a ranged HTTP import really
	// takes the NBD path and is refused by the checks there.
	ranged bool
	// streamMsg is the stream decoder's wording where it differs from
	// the checks' (a streamOptimized image over HTTP or xz is decoded
	// straight onto the target): same sentinel, other words.
	streamMsg string
}

// decodedMsg is the message expected when the import may take the
// stream-decode route.
func (c hostileVMDK) decodedMsg() string {
	if c.streamMsg != "" {
		return c.streamMsg
	}
	return c.msg
}

// realSparseVMDK is a 1 MiB monolithicSparse or streamOptimized vmdk made
// by qemu-img, its last grain allocated.
func realSparseVMDK(t *testing.T, dir, subformat string) []byte {
	raw := testimg.Raw(t, dir, "v-"+subformat+".raw", 1<<20, 35)
	p := testimg.Convert(t, raw, filepath.Join(dir, "v-"+subformat+".vmdk"), "vmdk", "subformat="+subformat)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}

// realDisk is size bytes of varied content, as testimg.Raw makes them.
func realDisk(t *testing.T, dir string, size int64) []byte {
	b, err := os.ReadFile(testimg.Raw(t, dir, "disk.raw", size, 37))
	require.NoError(t, err)
	return b
}

// withDescriptor replaces the embedded descriptor (the header's sectors
// for it, NUL padded) and sets the capacity in sectors.
func withDescriptor(b []byte, capacity uint64, desc string) []byte {
	le := binary.LittleEndian
	off, n := le.Uint64(b[28:])*512, le.Uint64(b[36:])*512
	if uint64(len(desc)) >= n {
		panic("descriptor too long for the test image")
	}
	clear(b[off : off+n])
	copy(b[off:], desc)
	le.PutUint64(b[12:], capacity)
	return b
}

// vmdkFooterStyle turns a qemu-made vmdk into VMware's footer layout: the
// header's grain directory offset says "at end", and a footer marker, a
// header copy with the real offset (edited by fix) and an end-of-stream
// marker end the file.
func vmdkFooterStyle(b []byte, fix func(footer []byte)) []byte {
	footer := bytes.Clone(b[:512])
	fix(footer)
	binary.LittleEndian.PutUint64(b[56:], ^uint64(0))
	marker := make([]byte, 512)
	binary.LittleEndian.PutUint32(marker[12:], 3) // footer marker
	b = append(b, marker...)
	b = append(b, footer...)
	return append(b, make([]byte, 512)...) // end-of-stream marker
}

func hostileVMDKCases() []hostileVMDK {
	sparse := func(capacity uint64, desc func(secret string) string) func(t *testing.T, dir, secret string) []byte {
		return func(t *testing.T, dir, secret string) []byte {
			return withDescriptor(realSparseVMDK(t, dir, "monolithicSparse"), capacity, desc(secret))
		}
	}
	const head = "# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\n"
	return []hostileVMDK{
		{name: "capacity0-flat-extent-to-host-file", make: sparse(0, func(s string) string {
			return head + "createType=\"monolithicFlat\"\nRW 2048 FLAT \"" + s + "\" 0\n"
		}), want: importer.ErrUnsafeImage, msg: "capacity 0"},
		{name: "capacity0-flat-extent-to-device", make: sparse(0, func(string) string {
			return head + "createType=\"monolithicFlat\"\nRW 2048 FLAT \"/dev/loop0\" 0\n"
		}), want: importer.ErrUnsafeImage, msg: "capacity 0"},
		// What the old parser let through: createType first in a comment
		// (qemu's choice), the real extent tab-separated (skipped by a
		// reader that splits on spaces) and a decoy RDONLY sparse line.
		{name: "capacity0-comment-createType-tabs-rdonly-decoy", make: sparse(0, func(s string) string {
			return head + "# createType=\"monolithicFlat\"\ncreateType=\"monolithicSparse\"\n" +
				"RW\t2048\tFLAT\t\"" + s + "\"\t0\nRDONLY 2048 SPARSE \"v.vmdk\"\n"
		}), want: importer.ErrUnsafeImage, msg: "capacity 0"},
		{name: "descriptor-createType-twice-tabs", make: sparse(2048, func(s string) string {
			return head + "# createType=\"monolithicFlat\"\ncreateType=\"monolithicSparse\"\n" +
				"RW\t2048\tFLAT\t\"" + s + "\"\t0\nRDONLY 2048 SPARSE \"v.vmdk\"\n"
		}), want: importer.ErrUnsafeImage, msg: "mentions createType"},
		{name: "descriptor-rdonly-sparse-other-file", make: sparse(2048, func(s string) string {
			return head + "createType=\"monolithicSparse\"\nRDONLY 2048 SPARSE \"" + s + "\"\n"
		}), want: importer.ErrUnsafeImage, msg: "names a path"},
		{name: "descriptor-noaccess", make: sparse(2048, func(string) string {
			return head + "createType=\"monolithicSparse\"\nNOACCESS 2048 SPARSE \"v.vmdk\"\n"
		}), want: importer.ErrUnsafeImage, msg: "NOACCESS"},
		{name: "capacity0-no-descriptor", make: func(t *testing.T, dir, _ string) []byte {
			b := realSparseVMDK(t, dir, "monolithicSparse")
			clear(b[12:20]) // capacity
			clear(b[28:44]) // descriptor offset and size
			return b
		}, want: importer.ErrInvalidImage, msg: "capacity is 0"},
		{name: "sparse-cut-inside-last-grain", make: func(t *testing.T, dir, _ string) []byte {
			b := realSparseVMDK(t, dir, "monolithicSparse")
			return b[:len(b)-4096]
		}, want: importer.ErrInvalidImage, msg: "past the end", ranged: true},
		{name: "streamOptimized-cut-inside-last-grain", make: func(t *testing.T, dir, _ string) []byte {
			b := realSparseVMDK(t, dir, "streamOptimized")
			return b[:len(b)-4096]
		}, want: importer.ErrInvalidImage, msg: "past the end", streamMsg: "inside a marker or grain"},
		{name: "sparse-footer-points-to-another-footer", make: func(t *testing.T, dir, _ string) []byte {
			return vmdkFooterStyle(realSparseVMDK(t, dir, "monolithicSparse"), func(f []byte) {
				binary.LittleEndian.PutUint64(f[56:], ^uint64(0))
			})
		}, want: importer.ErrUnsafeImage, msg: "another footer", ranged: true},
		// qemu refuses a footer whose magic is wrong ("Invalid footer"),
		// and so does every route (issue 21).
		{name: "streamOptimized-footer-wrong-magic", make: func(t *testing.T, dir, _ string) []byte {
			var b bytes.Buffer
			require.NoError(t, hostileimg.VMDKFooter(&b, realDisk(t, dir, 1<<20), "KDMW"))
			return b.Bytes()
		}, want: importer.ErrInvalidImage, msg: "magic"},
		{name: "streamOptimized-footer-disagrees", make: func(t *testing.T, dir, _ string) []byte {
			return vmdkFooterStyle(realSparseVMDK(t, dir, "streamOptimized"), func(f []byte) {
				binary.LittleEndian.PutUint64(f[12:], 1<<22) // another capacity
			})
		}, want: importer.ErrUnsafeImage, msg: "does not agree"},
	}
}

// importVMDKFails imports o, which must fail with want (message msg),
// never complete and leave nothing behind; it returns the result.
func importVMDKFails(t *testing.T, o importer.Options, want error, msg string) *importer.Result {
	t.Helper()
	res, err := importFailure(t, o)
	assert.ErrorIs(t, err, want)
	assert.Contains(t, err.Error(), msg)
	return res
}

func TestHostileVMDKs(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	device := testimg.LoopDeviceIfRoot(t, t.TempDir(), 4<<20)
	for _, c := range hostileVMDKCases() {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			secretPath := filepath.Join(dir, "secret.bin")
			secret := testimg.Raw(t, dir, "secret.bin", vmdkSecretSize, 36)
			require.Equal(t, secretPath, secret)
			secretBytes, err := os.ReadFile(secret)
			require.NoError(t, err)

			www := filepath.Join(dir, "www")
			require.NoError(t, os.Mkdir(www, 0o755))
			img := filepath.Join(www, "evil.vmdk")
			require.NoError(t, os.WriteFile(img, c.make(t, dir, secret), 0o644))
			xz := testimg.Compress(t, img, "xz")
			srv, rc := serveCountingRanges(t, www)

			target := func() string { return filepath.Join(t.TempDir(), "disk.img") }
			t.Run("file", func(t *testing.T) {
				importVMDKFails(t, importer.Options{Source: img, Target: target()}, c.want, c.msg)
			})
			t.Run("http-ranged", func(t *testing.T) {
				before := rc.ranges.Load()
				res := importVMDKFails(t, importer.Options{Source: srv.URL + "/evil.vmdk", Target: target()}, c.want, c.decodedMsg())
				if c.ranged {
					assert.False(t, res.ScratchUsed, "the ranged path was not taken")
					assert.Greater(t, rc.ranges.Load()-before, int64(0), "nothing was read with ranges")
				}
			})
			t.Run("scratch-xz", func(t *testing.T) {
				importVMDKFails(t, importer.Options{Source: srv.URL + "/" + filepath.Base(xz), Target: target(), TargetOptions: importer.TargetOptions{NoStreamDecode: true}}, c.want, c.msg)
			})
			t.Run("stream-decode-xz", func(t *testing.T) {
				importVMDKFails(t, importer.Options{Source: srv.URL + "/" + filepath.Base(xz), Target: target()}, c.want, c.decodedMsg())
			})
			t.Run("upload-stream", func(t *testing.T) {
				// What uploadserver hands the engine: the request body.
				body, err := os.Open(img)
				require.NoError(t, err)
				t.Cleanup(func() { body.Close() })
				// A one-time stream takes the stream decoder too.
				importVMDKFails(t, importer.Options{Source: "-", SourceReader: body, Target: target()}, c.want, c.decodedMsg())
			})
			if device == "" {
				return
			}
			t.Run("http-ranged-to-device", func(t *testing.T) {
				importVMDKFails(t, importer.Options{Source: srv.URL + "/evil.vmdk", Target: device}, c.want, c.decodedMsg())
				got, err := os.ReadFile(device)
				require.NoError(t, err)
				assert.False(t, bytes.Contains(got, secretBytes[:64<<10]), "the device holds the secret file's bytes")
			})
		})
	}
}

// The vmdk images of public projects in ../shared/real-images: the sound
// ones import exactly as qemu-img converts them, the unsafe ones are
// refused.
func TestRealVMDKs(t *testing.T) {
	testimg.Need(t, "qemu-img", "xz")
	root := testimg.RealImages()
	if _, err := os.Stat(root); err != nil {
		t.Skipf("no real images: %v", err)
	}
	good := []string{
		"ostest/vmdk-monolithicSparse.vmdk", "ostest/vmdk-streamOptimized.vmdk", "ostest/vmdk-sparse-with-footer.vmdk",
		"slx/image_t0.vmdk", "slx/image_t5.vmdk", "slx/image-default.vmdk",
		"cot/blank.vmdk", "cot/input.vmdk", "cot/ubuntu.2.0-disk1.vmdk",
		"qemu/iotest-version3.vmdk", "qemu/iotest-version3-old.vmdk", "tsk/image.vmdk",
	}
	bad := map[string]error{
		"ostest/vmdk-monolithicFlat.vmdk":          importer.ErrUnsafeImage,
		"ostest/vmdk-monolithicFlat-leak.vmdk":     importer.ErrUnsafeImage,
		"ostest/vmdk-sparse-with-url-backing.vmdk": importer.ErrUnsafeImage,
		"slx/image_t1.vmdk":                        importer.ErrUnsafeImage, // descriptors naming extent files
		"slx/image_t2.vmdk":                        importer.ErrUnsafeImage,
		"slx/image_t3.vmdk":                        importer.ErrUnsafeImage,
		"slx/image_t4.vmdk":                        importer.ErrUnsafeImage,
		"qemu/afl9.vmdk":                           importer.ErrUnsafeImage,  // absurd capacity; qemu: "L1 size too big"
		"slx/image_t1-s001.vmdk":                   importer.ErrInvalidImage, // an extent without its descriptor: qemu cannot open it
	}
	unpack := func(t *testing.T, rel string) string {
		out := filepath.Join(t.TempDir(), filepath.Base(rel))
		b := xzDecompress(t, filepath.Join(root, rel+".xz"))
		require.NoError(t, os.WriteFile(out, b, 0o644))
		return out
	}
	for _, rel := range good {
		t.Run(strings.ReplaceAll(rel, "/", "-"), func(t *testing.T) {
			img := unpack(t, rel)
			want := filepath.Join(t.TempDir(), "want.raw")
			testimg.Run(t, "qemu-img", "convert", "-f", "vmdk", "-O", "raw", img, want)
			dst := filepath.Join(t.TempDir(), "disk.img")
			res, err := importer.Import(context.Background(), importer.Options{Source: img, Target: dst, TargetOptions: importer.TargetOptions{ScratchDir: t.TempDir()}, Logger: testimg.Logger(t)})
			require.NoError(t, err)
			require.True(t, res.Complete)
			// Byte for byte, holes skipped where both files have them
			// (some of these disks are 16 GiB, mostly empty).
			testimg.Run(t, "qemu-img", "compare", "-q", "-s", "-f", "raw", "-F", "raw", want, dst)
		})
	}
	for rel, want := range bad {
		t.Run(strings.ReplaceAll(rel, "/", "-"), func(t *testing.T) {
			img := unpack(t, rel)
			importVMDKFails(t, importer.Options{Source: img, Target: filepath.Join(t.TempDir(), "disk.img")}, want, "")
		})
	}
}

// xzDecompress runs xz -dc on path.
func xzDecompress(t *testing.T, path string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	testimg.Run(t, "sh", "-c", "xz -dc \"$1\" > \"$2\"", "sh", path, out)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	return b
}
