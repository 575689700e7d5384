// Package imagebuild assembles the importer's container image without a
// base image and without a network: a root filesystem made of the
// project's own static binaries and programs copied from the build
// machine (each with exactly the shared libraries it links), written as
// gzip layers with go-containerregistry and saved as an OCI layout and a
// docker-archive.
//
// Everything that goes into a layer is fixed by the inputs' contents: entries
// are sorted by path, every mtime is the recipe's Created time, owners are
// numeric and set by the recipe, and permissions are normalised, so two
// builds from the same files give the same image digest and byte-identical
// archives. The build machine's file times, owners and directory order do
// not matter.
package imagebuild
