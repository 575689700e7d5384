package nbdserver

// Protocol constants from the NBD protocol specification (doc/proto.md of
// the NBD project): the fixed newstyle handshake and the simple-reply
// transmission phase, which is all a read-only export needs.
const (
	nbdMagic       = 0x4e42444d41474943 // "NBDMAGIC"
	optMagic       = 0x49484156454f5054 // "IHAVEOPT"
	optReplyMagic  = 0x0003e889045565a9
	requestMagic   = 0x25609513
	simpleRepMagic = 0x67446698

	// Handshake flags (server) and client flags.
	flagFixedNewstyle  = 1 << 0
	flagNoZeroes       = 1 << 1
	clientFixedNewstyl = 1 << 0
	clientNoZeroes     = 1 << 1

	// Options.
	optExportName = 1
	optAbort      = 2
	optList       = 3
	optInfo       = 6
	optGo         = 7

	// Option replies.
	repAck        = 1
	repServer     = 2
	repInfo       = 3
	repErrUnsup   = 1<<31 + 1
	repErrInvalid = 1<<31 + 3

	infoExport    = 0
	infoBlockSize = 3

	// Transmission flags.
	transHasFlags        = 1 << 0
	transReadOnly        = 1 << 1
	transSendFlush       = 1 << 2
	transSendTrim        = 1 << 5
	transSendWriteZeroes = 1 << 6
	transCanMultiConn    = 1 << 8
	transSendFastZero    = 1 << 11

	// Commands.
	cmdRead        = 0
	cmdWrite       = 1
	cmdDisc        = 2
	cmdFlush       = 3
	cmdTrim        = 4
	cmdWriteZeroes = 6

	// Command flags.
	cmdFlagFUA      = 1 << 0
	cmdFlagNoHole   = 1 << 1
	cmdFlagFastZero = 1 << 4

	// Errors (errno values fixed by the protocol, not the host's).
	errPerm   = 1
	errIO     = 5
	errNoMem  = 12
	errInval  = 22
	errNoSpc  = 28
	errNotSup = 95

	// maxOptionLen bounds an option's payload we are willing to read; real
	// clients send a few hundred bytes at most.
	maxOptionLen = 64 << 10
)
