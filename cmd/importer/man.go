package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// manExitStatus is the root page's EXIT STATUS section (roff).
const manExitStatus = `.SH EXIT STATUS
.TP
0
The import (or the subcommand) succeeded.
.TP
1
It failed: the cause is on standard error, and in the JSON's message and reason with --json.
.TP
2
Bad usage: an unknown command or flag, a missing or extra argument, an invalid value.
.TP
130
Interrupted (SIGINT, Ctrl-C); temporary files and the partial target were removed.
.TP
143
Terminated (SIGTERM); temporary files and the partial target were removed.
.PP
With no arguments (a CDI pod), the exit codes are CDI's: 0 also for a checksum mismatch, whose
termination message says so.
`

// newManCommand is the hidden `importer man DIR` behind `make man`: one
// man page per command, generated from the cobra commands, so the pages
// say what the flags say.
func newManCommand() *cobra.Command {
	return generatorCommand("man DIR", "Write the man pages of importer and its subcommands into DIR", func(root *cobra.Command, dir string) error {
		header := &doc.GenManHeader{Title: "IMPORTER", Section: "1", Source: "diskimport engine"}
		if err := doc.GenManTree(root, header, dir); err != nil {
			return fmt.Errorf("writing man pages into %s: %w", dir, err)
		}
		// cobra's pages have no EXIT STATUS section; the root's gets one,
		// before SEE ALSO as man-pages(7) orders them.
		page := filepath.Join(dir, root.Name()+".1")
		b, err := os.ReadFile(page)
		if err != nil {
			return err
		}
		s := string(b)
		if i := strings.Index(s, ".SH SEE ALSO"); i >= 0 {
			s = s[:i] + manExitStatus + "\n" + s[i:]
		} else {
			s += manExitStatus
		}
		return os.WriteFile(page, []byte(s), 0o644)
	})
}

// generatorCommand is a hidden command that writes pages generated from
// the cobra commands into the directory it is given (`importer man DIR`,
// `importer docs DIR`): the same pages for the same commands.
func generatorCommand(use, short string, write func(root *cobra.Command, dir string) error) *cobra.Command {
	return &cobra.Command{
		Use:    use,
		Short:  short,
		Args:   cobra.ExactArgs(1),
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // no date stamp: the same pages for the same commands
			return write(root, args[0])
		},
	}
}
