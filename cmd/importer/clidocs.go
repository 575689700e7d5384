package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// cliDocsDir is where `make docs` writes the command-line reference,
// relative to the repository's root; TestCLIReferenceIsGenerated
// regenerates it and compares.
const cliDocsDir = "docs/cli"

// newDocsCommand is the hidden `importer docs DIR` behind `make docs`: one
// markdown page per command, generated from the cobra commands as the man
// pages are, so the reference says what --help says.
func newDocsCommand() *cobra.Command {
	return generatorCommand("docs DIR", "Write the markdown reference of importer and its subcommands into DIR", func(root *cobra.Command, dir string) error {
		if err := doc.GenMarkdownTree(root, dir); err != nil {
			return fmt.Errorf("writing the command-line reference into %s: %w", dir, err)
		}
		return nil
	})
}
