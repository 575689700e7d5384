// Package datasource is for programs that bring images from somewhere the
// built-in sources do not reach: it is the extension point behind
// importer.Options.CustomSource and importer.Options.Registry, and the
// built-in sources (HTTP, S3, GCS, container images, files, streams) are
// written against it too.
//
// A source hands the engine an image's bytes exactly as it delivers them,
// still compressed if they were. Format detection and decompression happen
// in the engine; a source only knows how to start a byte stream and how
// much of it to expect.
//
// # Sources
//
// A [Source] is opened once per pass over the image: [Source.Open] returns a
// [Transfer] whose Body yields the bytes from the start. Sources that can be
// read again (files, HTTP objects, container images) may be opened again
// after a failure; a one-shot stream such as standard input cannot. Each
// Transfer carries its [Capabilities], declared by the source that opened
// it: a local file qemu-img can read in place (LocalPath), an object read at
// random over byte ranges (Ranges), bytes gone once read (OneTime), the
// body of an HTTP answer (HTTPAnswer); the engine reads a local file or a
// ranged object at random, or its end ahead of the stream, by these alone.
// A Source may also give labels for the volume ([Labeler]) or say how often
// it retried ([RetryReporter]).
//
// The built-in sources are:
//
//   - http:// and https:// URLs ([NewHTTP]): one GET per Open, resumed with
//     Range and If-Range after a broken transfer, retried with jittered
//     backoff, credentials and extra headers kept to the URL's origin; an
//     object of known size whose server serves ranges is read over
//     Config.Connections connections (by default 16, or one GET from a
//     near server when the process may use less than two CPUs), its
//     chunks delivered in order as one stream;
//   - S3 objects, s3://, s3+http:// and s3+https:// ([NewS3]), and GCS
//     objects, gs://, gs+http:// and gs+https:// ([NewGCS]): HTTP sources
//     whose transport signs (SigV4) or authorizes (OAuth2) each request to
//     the endpoint's origin, and no other, and pins resumed and ranged reads
//     to the object first seen;
//   - container images, docker://, oci-archive: and oci: ([NewContainerImage]):
//     the first file under disk/ in a containerdisk's layers, digest-checked;
//   - local files and block devices, as a path or a file:/// URL ([NewFile]);
//   - standard input ("-") and any other one-shot reader ([NewReader]).
//
// # Configuration
//
// Every source is built from the same [Config]: credentials, TLS, extra
// headers, proxy, an optional http.RoundTripper, the egress policy
// ([EgressPolicy]: networks a source may or may not connect to, checked on
// every address connected to), the retry policy, the stall timeout, the
// logger and the container-registry settings. Network sources are carried
// by one transport, [NewTransport]. A source
// uses the fields that apply to it, so one Config describes an import
// whatever its endpoint turns out to be. No source shows a credential in
// a log line or an error: URLs are rendered by [RedactURL].
//
// # The registry
//
// A [Registry] maps endpoint schemes to [Opener] functions. [Builtin] lists
// the built-in sources, one line each, and [New] opens an endpoint string
// (a command line argument, CDI's IMPORTER_ENDPOINT) with it: "-" is
// standard input, a registered scheme goes to its opener, a plain path is
// a local file, and an unknown "scheme://" is refused rather than taken for
// a path.
//
// # Adding a source
//
// A new kind of source is a type implementing [Source] and a constructor
// with the [Opener] signature, which reads what it needs from the Config
// (credentials, Transport, the retry fields) and sends its requests through
// [NewTransport] (or the caller's Transport), so TLS, proxy and the egress
// policy apply to it; the constructor is registered in [Builtin], one line
// per scheme it answers to:
//
//	r.Register("s3://", NewS3)
//
// An object store is more than one file: [NewS3] has its request signer
// beside it and [NewGCS] its token source, and both open the object
// through the HTTP source ([NewHTTP]).
//
// A program that wants a source of its own without changing this package
// registers it on the value Builtin returns and opens endpoints with that
// Registry's New.
package datasource
