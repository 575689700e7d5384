package cloner

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/s2"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
)

// Headers and values of the sparse-v2 wire format.
const (
	// ProtocolHeader: in a HEAD answer, the formats the server takes; in a
	// POST, the one the body uses.
	ProtocolHeader = "X-Diskimport-Clone-Protocol"
	// ProtocolSparseV2's End record carries the source's blk-sha256
	// content digest; a peer speaking sparse-v1 (another digest there) and
	// this one do not offer each other their formats, so they fall back to
	// CDI's stream instead of failing the digest at the end.
	ProtocolSparseV2 = "sparse-v2"
	// SessionHeader names one clone across its requests.
	SessionHeader = "X-Diskimport-Clone-Session"
	// OffsetHeader, in a HEAD answer for a session, is how many bytes of
	// the source the server holds: the next request starts there.
	OffsetHeader = "X-Diskimport-Clone-Offset"
	// SizeHeader, on CDI's snappy stream of a block clone, is the source's
	// size: our server refuses a target too small before writing (CDI's
	// ignores it).
	SizeHeader = "X-Diskimport-Clone-Size"
	// DeltaHeader: in a HEAD answer, DeltaV1 when the server takes delta
	// passes; in a sparse-v2 POST, DeltaSignature (the request for the
	// target's signature, answered with it) or DeltaApply (the runs of the
	// session the signature opened).
	DeltaHeader    = "X-Diskimport-Clone-Delta"
	DeltaV1        = "delta-v1"
	DeltaSignature = "signature"
	DeltaApply     = "apply"
	// BaseHeader, on a signature request, is the content digest the target
	// must have to be the pass's base.
	BaseHeader = "X-Diskimport-Clone-Base"
	// FilesystemHeader: in a HEAD answer, FilesystemDiskImage when the
	// server takes a filesystem clone of a volume that holds only its
	// disk image as sparse-v2 records of that file (written where a
	// filesystem clone's disk.img goes: the target file or device).
	FilesystemHeader    = "X-Diskimport-Clone-Filesystem"
	FilesystemDiskImage = "disk-image"
	// DeltaOfHeader: in a HEAD answer, DeltaOfDiskImage when the server's
	// target is a block device, which takes no filesystem volume's pass (it
	// lays out a directory) but the block delta pass of a volume's raw
	// disk image, as it takes that file's records in full; on a filesystem
	// clone's signature request, DeltaOfDiskImage asks for that pass (no
	// manifest: the runs are the disk image's).
	DeltaOfHeader    = "X-Diskimport-Clone-Delta-Of"
	DeltaOfDiskImage = "disk-image"
	// FramingHeader: in a HEAD answer, FramingRecords when the server
	// takes sparse-v2 bodies of bare records; on a sparse-v2 POST,
	// FramingRecords when the body is such (without it, the records are
	// in s2's stream format, as every server that takes sparse-v2 reads).
	FramingHeader  = "X-Diskimport-Clone-Framing"
	FramingRecords = "records"
)

// Record kinds.
const (
	recordStart = 'S' // size of the source, offset this request starts at
	recordData  = 'D' // offset, length, bytes
	recordZero  = 'Z' // offset, length: a run of zeros, not sent
	recordEnd   = 'E' // the source's content digest (blk-sha256)
	// recordPacked is a data record as an s2 block: offset, length, the
	// block's length, the block. Decoded, it is a Data record.
	recordPacked = 'P'
)

// maxPackedRecord bounds a packed record's block: the most s2 makes of
// maxDataRecord bytes.
func maxPackedRecord() int { return s2.MaxEncodedLen(maxDataRecord) }

// Packing: a data record goes packed when its s2 block is at most
// packNum/packDen of it; after one that does not shrink so, the next
// skip records go as they are (skip doubles, up to maxPackSkip, and
// starts again at none once one shrinks), so an incompressible source
// pays for one attempt in maxPackSkip+1. Random data gains nothing from
// s2, and its attempt cost the cloner 0.13 s per 740 MB.
const (
	packNum, packDen = 7, 8
	maxPackSkip      = 64
)

// maxDataRecord bounds one data record, so a hostile length cannot make
// the receiver allocate without bound.
const maxDataRecord = 4 << 20

// Record is one decoded record.
type Record struct {
	Kind byte
	// Start: Size and Offset. Data and Zero: Offset and Length (Data holds
	// the bytes, valid until the next Next, unless they were left on the
	// stream: DataReader reads them either way).
	Size, Offset, Length int64
	Data                 []byte
	Digest               blkhash.Digest
}

// IsStart, IsData, IsZero and IsEnd tell the record's kind.
func (r *Record) IsStart() bool { return r.Kind == recordStart }
func (r *Record) IsData() bool  { return r.Kind == recordData }
func (r *Record) IsZero() bool  { return r.Kind == recordZero }
func (r *Record) IsEnd() bool   { return r.Kind == recordEnd }

// Encoder writes records.
type Encoder struct {
	w   io.Writer
	enc bufferEncoder // w's, when it encodes a buffer without copying it
	buf [25]byte
	// pack: data records go packed where they shrink (NewRecordsEncoder);
	// skip and skipLeft are the records not tried after one that did not.
	pack           bool
	packed         []byte
	skip, skipLeft int
}

// bufferEncoder is an s2.Writer's EncodeBuffer: p encoded where it lies,
// not copied into the writer's blocks first (with concurrency 1 it is
// done when the call returns, so p may be reused at once).
type bufferEncoder interface {
	EncodeBuffer(p []byte) error
}

// NewEncoder writes records to w.
func NewEncoder(w io.Writer) *Encoder {
	e := &Encoder{w: w}
	e.enc, _ = w.(bufferEncoder)
	return e
}

// NewStreamEncoder writes records compressed by s2 to w: the data of a
// record is encoded where it lies, as its own block, not copied into
// s2's blocks first. With the body written straight onto the connection
// (streamBody), a 2 GiB sparse-v2 clone with 35 % data took 1.69-1.86 s
// of the cloner's CPU, against 2.07-2.29 s through a pipe and s2's
// copies (interleaved, 3 rounds).
func NewStreamEncoder(w io.Writer) (*Encoder, *s2.Writer) {
	sw := s2.NewWriter(w, s2.WriterConcurrency(1))
	return NewEncoder(sw), sw
}

// NewRecordsEncoder writes bare records to w (FramingRecords), each data
// record packed as an s2 block where that shrinks it: no stream framing
// around them, so no CRC-32C of every byte and no compression attempt on
// every block of a source that does not compress. A fully written 2 GiB
// block clone (random data) under 750m, 6 interleaved rounds: the cloner
// 3.00 CPU-s instead of 3.38, the server 3.15 instead of 3.45, 4.53 s
// instead of 5.01.
func NewRecordsEncoder(w io.Writer) *Encoder { return &Encoder{w: w, pack: true} }

// framed is a sparse-v2 request's headers with its body's framing
// (framing: FramingRecords when the server offered it, else "").
func framed(framing string, headers map[string]string) map[string]string {
	if framing == FramingRecords {
		headers[FramingHeader] = FramingRecords
	}
	return headers
}

// bodyEncoder is a sparse-v2 request's encoder onto w in framing (as
// framed said), and what ends the body.
func bodyEncoder(w io.Writer, framing string) (*Encoder, func() error) {
	if framing == FramingRecords {
		return NewRecordsEncoder(w), func() error { return nil }
	}
	enc, sw := NewStreamEncoder(w)
	return enc, sw.Close
}

// head writes a record's kind and its big-endian 64-bit fields (two, or a
// packed record's three).
func (e *Encoder) head(kind byte, fields ...uint64) error {
	_, err := e.w.Write(e.headBytes(kind, fields...))
	return err
}

func (e *Encoder) headBytes(kind byte, fields ...uint64) []byte {
	e.buf[0] = kind
	for i, f := range fields {
		binary.BigEndian.PutUint64(e.buf[1+8*i:], f)
	}
	return e.buf[:1+8*len(fields)]
}

// Start opens a request: the source has size bytes and this body starts at
// offset.
func (e *Encoder) Start(size, offset int64) error {
	return e.head(recordStart, uint64(size), uint64(offset))
}

// Data sends p, the source's bytes at off (at most maxDataRecord).
func (e *Encoder) Data(off int64, p []byte) error {
	if len(p) > maxDataRecord {
		return fmt.Errorf("data record of %d bytes exceeds %d", len(p), maxDataRecord)
	}
	if e.pack {
		if block := e.tryPack(p); block != nil {
			return e.writePacked(off, len(p), block)
		}
	}
	if err := e.head(recordData, uint64(off), uint64(len(p))); err != nil {
		return err
	}
	if e.enc != nil {
		return e.enc.EncodeBuffer(p)
	}
	_, err := e.w.Write(p)
	return err
}

// tryPack is p as an s2 block when that is small enough to send instead,
// else nil (the skip rule above).
func (e *Encoder) tryPack(p []byte) []byte {
	if e.skipLeft > 0 {
		e.skipLeft--
		return nil
	}
	if bound := maxPackedRecord(); cap(e.packed) < bound {
		e.packed = make([]byte, bound)
	}
	block := s2.Encode(e.packed[:cap(e.packed)], p)
	if len(block)*packDen <= len(p)*packNum {
		e.skip = 0
		return block
	}
	e.skip = min(max(2*e.skip, 1), maxPackSkip)
	e.skipLeft = e.skip
	return nil
}

func (e *Encoder) writePacked(off int64, n int, block []byte) error {
	if err := e.head(recordPacked, uint64(off), uint64(n), uint64(len(block))); err != nil {
		return err
	}
	_, err := e.w.Write(block)
	return err
}

// Zero says the n bytes at off are zeros.
func (e *Encoder) Zero(off, n int64) error { return e.head(recordZero, uint64(off), uint64(n)) }

// End closes the stream with the content digest of the whole source.
func (e *Encoder) End(digest blkhash.Digest) error {
	if _, err := e.w.Write([]byte{recordEnd}); err != nil {
		return err
	}
	_, err := e.w.Write(digest[:])
	return err
}

// Decoder reads records.
type Decoder struct {
	r      byteReader
	rec    Record
	buf    []byte
	packed []byte
	// onStream: a data record's bytes stay on the stream for DataReader
	// (LeaveDataOnStream); left of them are not read yet.
	onStream bool
	left     int64
	data     bytes.Reader
	cut      error // what cut a record's bytes short on the stream
}

type byteReader interface {
	io.Reader
	io.ByteReader
}

// NewDecoder reads records from r; a reader that reads bytes one at a
// time itself (an s2.Reader: its blocks are its buffer) is read as it
// is, another through a buffer.
func NewDecoder(r io.Reader) *Decoder {
	if br, ok := r.(byteReader); ok {
		return &Decoder{r: br}
	}
	return &Decoder{r: bufio.NewReaderSize(r, 64<<10)}
}

// LeaveDataOnStream makes Next leave a data record's bytes on the stream
// (its Data nil): DataReader reads them, straight into the caller's
// buffer, and the next Next skips what it did not read. A packed record's
// bytes are decoded into Data as before.
func (d *Decoder) LeaveDataOnStream() { d.onStream = true }

// DataReader reads the current data record's Length bytes: from Data, or
// off the stream (LeaveDataOnStream). It is valid until the next Next; a
// stream that ends before the record does is io.ErrUnexpectedEOF.
// Whatever cut the bytes short is kept (DataErr) and ends the stream.
func (d *Decoder) DataReader() io.Reader {
	if d.rec.Data != nil {
		d.data.Reset(d.rec.Data)
		return &d.data
	}
	return (*recordBytes)(d)
}

// recordBytes reads the bytes of a data record left on the stream.
type recordBytes Decoder

func (b *recordBytes) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	if b.cut != nil {
		return 0, b.cut
	}
	n, err := b.r.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	if b.left > 0 || err != io.EOF { //nolint:errorlint // io.EOF from Read is never wrapped
		err = unexpected(err)
	}
	if err != nil && err != io.EOF { //nolint:errorlint // as above
		b.cut = err
	}
	return n, err
}

// DataErr is what cut the bytes of a record left on the stream short
// while they were read (the request's connection failed): nil while none
// did. The stream ends there: Next returns it too.
func (d *Decoder) DataErr() error { return d.cut }

// errMalformed marks a body that is not sparse-v2; errors of the reader
// beneath are returned as they are (a dropped connection can resume).
var errMalformed = errors.New("malformed clone stream")

// IsMalformed reports whether err is a protocol violation, not a transport
// failure.
func IsMalformed(err error) bool { return errors.Is(err, errMalformed) }

// Next returns the next record. A stream that ends before its End record
// returns io.ErrUnexpectedEOF.
func (d *Decoder) Next() (*Record, error) {
	if d.cut != nil {
		return nil, d.cut
	}
	if d.left > 0 {
		n, err := io.CopyN(io.Discard, d.r, d.left)
		if d.left -= n; err != nil {
			return nil, unexpected(err)
		}
	}
	kind, err := d.r.ReadByte()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	d.rec = Record{Kind: kind}
	switch kind {
	case recordEnd:
		if _, err := io.ReadFull(d.r, d.rec.Digest[:]); err != nil {
			return nil, unexpected(err)
		}
		return &d.rec, nil
	case recordStart, recordData, recordZero, recordPacked:
	default:
		return nil, fmt.Errorf("%w: unknown record %q: %w", errMalformed, kind, errdefs.ErrInvalidImage)
	}
	var h [16]byte
	if _, err := io.ReadFull(d.r, h[:]); err != nil {
		return nil, unexpected(err)
	}
	a, b := int64(binary.BigEndian.Uint64(h[:8])), int64(binary.BigEndian.Uint64(h[8:]))
	if a < 0 || b < 0 {
		return nil, fmt.Errorf("%w: negative field in record %q: %w", errMalformed, kind, errdefs.ErrInvalidImage)
	}
	switch kind {
	case recordStart:
		d.rec.Size, d.rec.Offset = a, b
	case recordZero:
		d.rec.Offset, d.rec.Length = a, b
	case recordData:
		if b > maxDataRecord {
			return nil, fmt.Errorf("%w: data record of %d bytes: %w", errMalformed, b, errdefs.ErrInvalidImage)
		}
		d.rec.Offset, d.rec.Length = a, b
		if d.onStream {
			d.left = b
			break
		}
		if cap(d.buf) < int(b) {
			d.buf = make([]byte, b)
		}
		d.rec.Data = d.buf[:b]
		if _, err := io.ReadFull(d.r, d.rec.Data); err != nil {
			return nil, unexpected(err)
		}
	case recordPacked:
		if err := d.unpack(a, b); err != nil {
			return nil, err
		}
	}
	return &d.rec, nil
}

// unpack reads a packed record of n bytes at off and decodes it as the
// Data record it stands for.
func (d *Decoder) unpack(off, n int64) error {
	var h [8]byte
	if _, err := io.ReadFull(d.r, h[:]); err != nil {
		return unexpected(err)
	}
	size := binary.BigEndian.Uint64(h[:])
	if n == 0 || n > maxDataRecord || size == 0 || size > uint64(maxPackedRecord()) {
		return fmt.Errorf("%w: packed record of %d bytes in %d: %w", errMalformed, n, size, errdefs.ErrInvalidImage)
	}
	if cap(d.packed) < int(size) {
		d.packed = make([]byte, size)
	}
	block := d.packed[:size]
	if _, err := io.ReadFull(d.r, block); err != nil {
		return unexpected(err)
	}
	if got, err := s2.DecodedLen(block); err != nil || int64(got) != n {
		return fmt.Errorf("%w: packed record of %d bytes holds %d (%v): %w", errMalformed, n, got, err, errdefs.ErrInvalidImage)
	}
	if cap(d.buf) < int(n) {
		d.buf = make([]byte, n)
	}
	data, err := s2.Decode(d.buf[:n], block)
	if err != nil || int64(len(data)) != n {
		return fmt.Errorf("%w: packed record at %d: %v: %w", errMalformed, off, err, errdefs.ErrInvalidImage)
	}
	d.rec = Record{Kind: recordData, Offset: off, Length: n, Data: data}
	return nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
