// Package cloner is the source half of a host-assisted clone, the role of
// CDI's cloner pod (cmd/cdi-cloner): it reads a volume (a block device's
// raw bytes, or a mounted filesystem as a tar) and POSTs it to an upload
// server that writes the target volume. The package is named for that pod
// role; its receiving half is uploadserver's clone side.
//
// Two wire formats share one request shape (POST to the upload path with
// the x-cdi-content-type header):
//
//   - CDI's: the stream compressed with the Snappy framing format, which
//     CDI's upload server decodes; used against any upload server that
//     does not announce ours.
//   - sparse-v2, ours, offered by our upload server in the answer to HEAD
//     (ProtocolHeader) and chosen by the sender with the same header: an s2
//     stream of records (Record, Encoder, Decoder) that sends zero runs
//     as their length, ends with the source's content digest (blk-sha256,
//     the one every import records; the server compares it with the bytes
//     it accepted before it commits and answers Clone Complete), and names
//     a session so a dropped connection resumes from the offset the server
//     holds (OffsetHeader) instead of starting over.
package cloner
