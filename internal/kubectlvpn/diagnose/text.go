package diagnose

import (
	"fmt"
	"io"
	"strings"
)

// Write prints the report: the verdict with the first problem and its fix first, then
// every check.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "%s %s/%s\n", r.Kind, r.Namespace, r.Name)
	if first := r.First(); first != nil {
		word := "PROBLEM"
		if first.Status == Warn {
			word = "WARNING"
		}
		fmt.Fprintf(w, "\n%s: %s\n  %s\n", word, first.Title, first.Detail)
		if first.Fix != "" {
			fmt.Fprintf(w, "  Fix: %s\n", first.Fix)
		}
		if first.Runbook != "" {
			fmt.Fprintf(w, "  Runbook: %s\n", first.Runbook)
		}
	} else if r.Healthy() {
		var skipped []string
		for _, c := range r.Checks {
			if c.Requested {
				skipped = append(skipped, c.Title)
			}
		}
		if len(skipped) == 0 {
			fmt.Fprintf(w, "\nAll is well.\n")
		} else {
			fmt.Fprintf(w, "\nAll is well in what was checked; not checked, on request: %s.\n", strings.Join(skipped, ", "))
		}
	} else {
		fmt.Fprintf(w, "\nNothing wrong found, but some checks were skipped (see below): not a clean bill of health.\n")
	}
	fmt.Fprintln(w)
	for _, c := range r.Checks {
		mark := map[Status]string{Pass: "ok  ", Warn: "WARN", Fail: "FAIL", Skipped: "skip"}[c.Status]
		fmt.Fprintf(w, "  [%s] %-52s %s\n", mark, c.Title, oneLine(c.Detail))
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
