package main

import (
	"fmt"
	"os"

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
	return &cobra.Command{
		Use:    "docs DIR",
		Short:  "Write the markdown reference of importer and its subcommands into DIR",
		Args:   cobra.ExactArgs(1),
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // the same pages for the same commands
			if err := doc.GenMarkdownTree(root, args[0]); err != nil {
				return fmt.Errorf("writing the command-line reference into %s: %w", args[0], err)
			}
			return nil
		},
	}
}
