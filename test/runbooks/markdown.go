// Package runbooks tests the runbooks in docs/runbooks against what they describe: the
// manifests are admitted by a real API server, every `kubectl vpn` invocation parses with
// the plugin's own command tree, every condition reason and diagnose finding has a
// troubleshooting entry, annotations are the API's, and links resolve.
package runbooks

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// block is one fenced code block.
type block struct {
	file string
	line int
	info string // the fence's info string: "yaml", "yaml values", "sh", "console"
	text string
}

func readBlocks(files []string) ([]block, error) {
	var out []block
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var cur *block
		var indent string
		for n, line := range strings.Split(string(data), "\n") {
			trimmed := strings.TrimLeft(line, " ")
			if strings.HasPrefix(trimmed, "```") {
				if cur == nil {
					indent = line[:len(line)-len(trimmed)]
					cur = &block{file: f, line: n + 1, info: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
					continue
				}
				out = append(out, *cur)
				cur = nil
				continue
			}
			if cur != nil {
				cur.text += strings.TrimPrefix(line, indent) + "\n"
			}
		}
	}
	return out, nil
}

// commands returns the shell command lines of sh and console blocks, continuation lines
// joined and console prompts ("$ ") stripped; console output lines are skipped.
func commands(b block) []string {
	var out []string
	var cur string
	for _, l := range strings.Split(b.text, "\n") {
		if b.info == "console" {
			if cur == "" && !strings.HasPrefix(l, "$ ") {
				continue
			}
			l = strings.TrimPrefix(l, "$ ")
		}
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur += strings.TrimSuffix(t, "\\") + " "
			continue
		}
		out = append(out, cur+t)
		cur = ""
	}
	return out
}

// shellWords splits a command line like a POSIX shell does for the quoting used in the
// runbooks: single and double quotes, backslash escapes outside single quotes.
func shellWords(s string) []string {
	var out []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				w.WriteByte(s[i])
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case unicode.IsSpace(rune(c)):
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

var (
	reHeading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	reLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// anchors returns the GitHub anchors of a markdown file's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range reHeading.FindAllStringSubmatch(text, -1) {
		out[githubAnchor(m[1])] = true
	}
	return out
}

func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// headings returns the text of a file's headings of the given level.
func headings(text string, level int) []string {
	prefix := strings.Repeat("#", level) + " "
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, strings.TrimSpace(strings.TrimPrefix(l, prefix)))
		}
	}
	return out
}

func runbookFiles(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "runbooks", "*.md"))
	sort.Strings(files)
	// The install guide is a runbook too: its manifests, plugin lines and links are held
	// to the same checks.
	return append(files, filepath.Join(root, "docs", "install.md")), err
}
