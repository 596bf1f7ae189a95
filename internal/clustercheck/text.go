package clustercheck

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText prints every check, then what is missing with its fix, then the verdict.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tCHECK\tDETAIL")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Status, c.ID, oneLine(c.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	problems := r.Problems()
	if len(problems) > 0 {
		fmt.Fprintf(w, "\nMissing or wrong (%d):\n", len(problems))
		for _, c := range problems {
			fmt.Fprintf(w, "  %s %s: %s\n", c.Status, c.ID, oneLine(c.Detail))
			if c.Fix != "" {
				fmt.Fprintf(w, "    fix: %s\n", oneLine(c.Fix))
			}
		}
	}
	var skipped []string
	for _, c := range r.Checks {
		if c.Status == Skipped && !c.Requested {
			skipped = append(skipped, c.ID)
		}
	}
	switch {
	case len(problems) > 0:
		fmt.Fprintln(w, "\nThe cluster does not meet the operator's prerequisites yet (docs/install.md).")
	case len(skipped) > 0:
		fmt.Fprintf(w, "\nNothing wrong found, but not everything was checked (skipped: %s).\n", strings.Join(skipped, ", "))
	default:
		fmt.Fprintln(w, "\nThe cluster meets every prerequisite checked.")
	}
	return nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
