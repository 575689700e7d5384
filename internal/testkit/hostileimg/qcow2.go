package hostileimg

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/diskimport/engine/internal/iostage"
	"github.com/klauspost/compress/zstd"
)

// QCOW2 describes a version 3 qcow2 with 64 KiB clusters and one L2 table
// (so at most 512 MiB), laid out in this order: header, L1 table, L2
// table, the data clusters in guest order, Filler bytes no table refers
// to, then (with L2AfterFiller, the L2 table here instead) the refcount
// table and one refcount block. Filler is a non-zero run: a decoder that
// keeps bytes while any table is still to come keeps all of it.
type QCOW2 struct {
	VirtualSize int64
	// Clusters holds guest cluster i's content (nil: unallocated).
	Clusters [][]byte
	// Zstd stores every allocated cluster as a zstd frame (compression
	// type 1); a content longer than the cluster is a frame that inflates
	// past it, as no writer makes.
	Zstd          bool
	Filler        int64
	L2AfterFiller bool
}

const qcow2Cluster = 64 << 10

// Disk is a guest disk of n clusters of 64 KiB and its QCOW2.Clusters:
// every every-th cluster, from the first, holds data (a non-zero pattern
// of its index), the others are unallocated (nil) and zeros in disk. A
// cluster's capacity ends with it: appending to one (a content longer than
// the cluster) copies it and leaves disk and the next cluster alone.
func Disk(n, every int) (disk []byte, clusters [][]byte) {
	disk = make([]byte, n*qcow2Cluster)
	clusters = make([][]byte, n)
	for i := 0; i < n; i += every {
		c := disk[i*qcow2Cluster : (i+1)*qcow2Cluster : (i+1)*qcow2Cluster]
		for k := range c {
			c[k] = byte(k%251 + i + 1)
		}
		clusters[i] = c
	}
	return disk, clusters
}

// WriteTo writes the image.
func (q QCOW2) WriteTo(w io.Writer) (int64, error) {
	if q.VirtualSize > 512<<20 || int64(len(q.Clusters))*qcow2Cluster > (q.VirtualSize+qcow2Cluster-1)/qcow2Cluster*qcow2Cluster {
		return 0, fmt.Errorf("hostileimg: a %d-byte disk of %d clusters does not fit one L2 table", q.VirtualSize, len(q.Clusters))
	}
	be := binary.BigEndian
	var enc *zstd.Encoder
	if q.Zstd {
		var err error
		if enc, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1)); err != nil {
			return 0, err
		}
		defer enc.Close()
	}
	// Host clusters: 0 header, 1 L1, 2 L2 (unless after the filler), then data.
	next := uint64(2)
	l2At := uint64(0)
	if !q.L2AfterFiller {
		l2At = next * qcow2Cluster
		next++
	}
	l2 := make([]byte, qcow2Cluster)
	stored := make([][]byte, len(q.Clusters))
	for i, c := range q.Clusters {
		if c == nil {
			continue
		}
		off := next * qcow2Cluster
		next++
		if !q.Zstd {
			if len(c) > qcow2Cluster {
				return 0, fmt.Errorf("hostileimg: cluster %d of %d bytes stored uncompressed", i, len(c))
			}
			stored[i] = append(append(make([]byte, 0, qcow2Cluster), c...), make([]byte, qcow2Cluster-len(c))...)
			be.PutUint64(l2[8*i:], off|1<<63)
			continue
		}
		frame := enc.EncodeAll(c, nil)
		if len(frame) > qcow2Cluster {
			return 0, fmt.Errorf("hostileimg: cluster %d compresses to %d bytes, more than a cluster", i, len(frame))
		}
		sectors := uint64(len(frame)+511) / 512
		be.PutUint64(l2[8*i:], 1<<62|(sectors-1)<<54|off)
		stored[i] = append(frame, make([]byte, qcow2Cluster-len(frame))...)
	}
	fillerEnd := next*qcow2Cluster + uint64(q.Filler)
	next = (fillerEnd + qcow2Cluster - 1) / qcow2Cluster
	if q.L2AfterFiller {
		l2At = next * qcow2Cluster
		next++
	}
	refTable, refBlock := next*qcow2Cluster, (next+1)*qcow2Cluster

	h := make([]byte, qcow2Cluster)
	copy(h, "QFI\xfb")
	be.PutUint32(h[4:], 3)
	be.PutUint32(h[20:], 16) // cluster bits
	be.PutUint64(h[24:], uint64(q.VirtualSize))
	be.PutUint32(h[36:], 1) // L1 entries
	be.PutUint64(h[40:], qcow2Cluster)
	be.PutUint64(h[48:], refTable)
	be.PutUint32(h[56:], 1)
	be.PutUint32(h[96:], 4)    // refcount order: 16 bits
	be.PutUint32(h[100:], 112) // header length
	if q.Zstd {
		be.PutUint64(h[72:], 1<<3) // incompatible: compression type
		h[104] = 1
	}
	l1 := make([]byte, qcow2Cluster)
	be.PutUint64(l1, l2At|1<<63)
	rt := make([]byte, qcow2Cluster)
	be.PutUint64(rt, refBlock)
	rb := make([]byte, qcow2Cluster)
	for c := uint64(0); c < min(next+2, qcow2Cluster/2); c++ {
		be.PutUint16(rb[2*c:], 1)
	}
	var written atomic.Int64
	err := buffered(iostage.NewWriteCounter(w, &written), func(w *bufio.Writer) error {
		w.Write(h)
		w.Write(l1)
		if !q.L2AfterFiller {
			w.Write(l2)
		}
		for _, s := range stored {
			w.Write(s)
		}
		if err := pattern(w, q.Filler, 0x5a); err != nil {
			return err
		}
		if err := zeros(w, int64((qcow2Cluster-fillerEnd%qcow2Cluster)%qcow2Cluster)); err != nil {
			return err
		}
		if q.L2AfterFiller {
			w.Write(l2)
		}
		w.Write(rt)
		_, err := w.Write(rb)
		return err
	})
	return written.Load(), err
}
