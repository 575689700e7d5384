package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCommand is the hidden `importer man DIR` behind `make man`: one
// man page per command, generated from the cobra commands, so the pages
// say what the flags say.
func newManCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write the man pages of importer and its subcommands into DIR",
		Args:   cobra.ExactArgs(1),
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // the same pages for the same commands
			header := &doc.GenManHeader{Title: "IMPORTER", Section: "1", Source: "diskimport engine"}
			if err := doc.GenManTree(root, header, args[0]); err != nil {
				return fmt.Errorf("writing man pages into %s: %w", args[0], err)
			}
			return nil
		},
	}
}
