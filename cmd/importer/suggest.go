package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// maxSuggestDistance: a typo at most this many edits from a name is
// offered that name (two catches a dropped, doubled or swapped letter).
const maxSuggestDistance = 2

// misspelledCommand returns the usage error for `importer inspct x`: a
// first argument that is no existing path, no URL and no "-", and lies
// within maxSuggestDistance of a subcommand, is that subcommand
// misspelled, not a source to import.
func misspelledCommand(root *cobra.Command, first string) error {
	if first == "-" || strings.Contains(first, "/") || strings.Contains(first, ":") {
		return nil
	}
	if _, err := os.Lstat(first); err == nil {
		return nil
	}
	for _, c := range root.Commands() {
		if !c.IsAvailableCommand() {
			continue
		}
		for _, name := range append([]string{c.Name()}, c.Aliases...) {
			if editDistance(first, name) <= maxSuggestDistance {
				return fmt.Errorf("unknown command %q: did you mean %q? (a source that is a file must exist; see importer --help)", first, name)
			}
		}
	}
	return nil
}

// importArgs checks the root command's arguments (an import takes SOURCE
// and DEST): a stray word before them (`importer import a b`) is not a
// command, and is named so rather than counted ("accepts at most 2
// arg(s)").
func importArgs(cmd *cobra.Command, args []string) error {
	if len(args) <= 2 {
		return nil
	}
	first := args[0]
	if first != "-" && !strings.ContainsAny(first, "/:.") {
		if _, err := os.Lstat(first); err != nil {
			var names []string
			for _, c := range cmd.Commands() {
				if c.IsAvailableCommand() {
					names = append(names, c.Name())
				}
			}
			return fmt.Errorf("%q is not a command (the commands are %s; an import is importer SOURCE DEST)", first, strings.Join(names, ", "))
		}
	}
	return fmt.Errorf("an import takes SOURCE and DEST, not %d arguments (see importer --help)", len(args))
}

// unknownFlagRe finds the flag name in pflag's "unknown flag: --sise" and
// "unknown shorthand flag: 'x' in -x".
var unknownFlagRe = regexp.MustCompile(`^unknown flag: --([^ =]+)`)

// suggestFlag adds "did you mean --size?" to an unknown long flag's error.
func suggestFlag(cmd *cobra.Command, err error) error {
	m := unknownFlagRe.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	best, bestDistance := "", maxSuggestDistance+1
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if d := editDistance(m[1], f.Name); d < bestDistance {
			best, bestDistance = f.Name, d
		}
	})
	if best == "" {
		return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
	}
	return fmt.Errorf("%w: did you mean --%s?", err, best)
}

// editDistance is the Levenshtein distance of a and b (bytes: names and
// flags are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
