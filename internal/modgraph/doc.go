// Package modgraph holds no code: its test checks what a program that
// imports the library gets in its module graph (no Kubernetes API, none of
// the tools' modules), as a user's own module sees it.
package modgraph
