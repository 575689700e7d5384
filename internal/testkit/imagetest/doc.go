// Package imagetest runs the image `make image` built in real containers
// (podman, as root): each CDI role the image stands in for, with the
// mounts, devices and environment CDI's controller gives its pods, and
// the image's reproducibility and size. It has tests only; `make
// image-test` builds the image and runs them with IMAGE_DIR set.
package imagetest
