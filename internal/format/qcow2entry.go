package format

// The bits of qcow2 L1, L2 and refcount-table entries (qcow2 specification),
// one set for the structural check, the route choice's table walk and the
// stream decoder.
const (
	QCOW2EntryCopied      = uint64(1) << 63            // refcount is exactly one
	QCOW2EntryCompressed  = uint64(1) << 62            // L2: a compressed cluster
	QCOW2EntryZero        = uint64(1) << 0             // L2 (version 3): the cluster reads zeros
	QCOW2EntryOffsetMask  = uint64(0x00fffffffffffe00) // bits 9..55: the host offset
	QCOW2L1Reserved       = uint64(0x7f000000000001ff) // bits 0..8, 56..62
	QCOW2L2Reserved       = uint64(0x3f000000000001fe) // bits 1..8, 56..61
	QCOW2RefTableReserved = uint64(0x1ff)              // bits 0..8
)
