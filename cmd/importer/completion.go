package main

import (
	"github.com/spf13/cobra"
)

// flagValues are the values of the flags that take one of a few words;
// shell completion offers them.
var flagValues = map[string][]string{
	"format":       {"raw", "qcow2"},
	"format-in":    {"raw"},
	"cache-mode":   {"none", "writeback", "trynone"},
	"content-type": {"kubevirt", "archive", "as-is"},
	"log-format":   logFormats,
}

// registerValueCompletions offers flagValues for those of cmd's flags that
// take them.
func registerValueCompletions(cmd *cobra.Command) {
	for name, values := range flagValues {
		if cmd.Flags().Lookup(name) == nil {
			continue
		}
		values := values
		_ = cmd.RegisterFlagCompletionFunc(name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return values, cobra.ShellCompDirectiveNoFileComp
		})
	}
}
