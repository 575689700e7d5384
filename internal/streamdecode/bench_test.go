package streamdecode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/diskimport/engine/internal/testkit/testimg"
)

// The bench disk: 512 MiB virtual, about 35 % data.
const benchSize = 512 << 20

func benchDisk(b *testing.B) (dir, raw string) {
	dir = b.TempDir()
	return dir, rawDisk(b, filepath.Join(dir, "disk.raw"), benchSize, 35, 42)
}

// BenchmarkDecodeVsQemuImg decodes each image into a fresh sparse file
// and, interleaved, lets `qemu-img convert -O raw` do the same; ns/op is
// the decoder's, "x-qemu-img" is qemu-img's time over ours (above 1: we
// are faster). Run: go test -run NONE -bench DecodeVsQemuImg -benchtime 3x
func BenchmarkDecodeVsQemuImg(b *testing.B) {
	testimg.Need(b, "qemu-img")
	benchDir, raw := benchDisk(b)
	cases := []struct {
		name, fmt string
		dec       decodeFunc
		args      []string
	}{
		{"qcow2", "qcow2", DecodeQCOW2, []string{"-O", "qcow2"}},
		{"qcow2-zlib", "qcow2", DecodeQCOW2, []string{"-O", "qcow2", "-c"}},
		{"qcow2-zstd", "qcow2", DecodeQCOW2, []string{"-O", "qcow2", "-c", "-o", "compression_type=zstd"}},
		{"vmdk-streamOptimized", "vmdk", DecodeVMDK, []string{"-O", "vmdk", "-o", "subformat=streamOptimized"}},
		{"vhd-dynamic", "vpc", DecodeVHD, []string{"-O", "vpc", "-o", "force_size=on"}},
		{"vdi-dynamic", "vdi", DecodeVDI, []string{"-O", "vdi"}},
		{"vhdx", "vhdx", DecodeVHDX, []string{"-O", "vhdx"}},
	}
	for _, c := range cases {
		img := filepath.Join(benchDir, c.name+".img")
		if _, err := os.Stat(img); err != nil {
			testimg.Run(b, "qemu-img", append(append([]string{"convert", "-q", "-f", "raw"}, c.args...), raw, img)...)
		}
		b.Run(c.name, func(b *testing.B) {
			out := filepath.Join(b.TempDir(), "out.raw")
			var ours, theirs time.Duration
			var st Stats
			for i := 0; b.Loop(); i++ {
				os.Remove(out)
				start := time.Now()
				var err error
				st, err = decodeToFile(img, out, c.dec)
				ours += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					b.StopTimer()
					testimg.Run(b, "qemu-img", "compare", "-q", "-f", "raw", "-F", c.fmt, out, img)
					b.StartTimer()
				}
				b.StopTimer()
				os.Remove(out)
				start = time.Now()
				if o, err := exec.Command("qemu-img", "convert", "-q", "-f", c.fmt, "-O", "raw", img, out).CombinedOutput(); err != nil {
					b.Fatalf("qemu-img: %v\n%s", err, o)
				}
				theirs += time.Since(start)
				b.StartTimer()
			}
			b.ReportMetric(float64(theirs)/float64(ours), "x-qemu-img")
			b.ReportMetric(float64(st.PeakBuffered), "buffered-B")
			fi, _ := os.Stat(img)
			b.SetBytes(fi.Size())
		})
	}
}

func decodeToFile(img, out string, dec decodeFunc) (Stats, error) {
	in, err := os.Open(img)
	if err != nil {
		return Stats{}, err
	}
	defer in.Close()
	f, err := os.Create(out)
	if err != nil {
		return Stats{}, err
	}
	defer f.Close()
	st, err := dec(context.Background(), in, f, Options{})
	if err != nil {
		return st, err
	}
	return st, f.Truncate(st.VirtualSize)
}
