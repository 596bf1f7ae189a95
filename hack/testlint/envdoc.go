package testlint

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// envVar matches a project environment variable's name.
var envVar = regexp.MustCompile(`BNERD_[A-Z0-9_]+`)

// EnvVarsInCode maps every BNERD_* name in the Go files, shell scripts and Makefiles
// under root (the files `grep --include=*.go --include=*.sh --include=Makefile` would
// search) to the first file that names it, relative to root.
func EnvVarsInCode(root string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if !strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, ".sh") && name != "Makefile" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, v := range envVar.FindAll(src, -1) {
			if _, ok := out[string(v)]; !ok {
				out[string(v)] = rel
			}
		}
		return nil
	})
	return out, err
}

// EnvVarsInDoc reads a testing page: table holds the names in the first column of its
// rows that start with a BNERD_* name in backquotes (the variables table), mentioned
// every BNERD_* name anywhere on the page but a family's prefix (a name ending in "_*").
func EnvVarsInDoc(md []byte) (table, mentioned map[string]bool) {
	table, mentioned = map[string]bool{}, map[string]bool{}
	row := regexp.MustCompile("^\\| `(BNERD_[A-Z0-9_]+)` \\|")
	sc := bufio.NewScanner(bytes.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		if m := row.FindStringSubmatch(line); m != nil {
			table[m[1]] = true
		}
		for _, v := range envVar.FindAllString(line, -1) {
			if !strings.HasSuffix(v, "_") {
				mentioned[v] = true
			}
		}
	}
	return table, mentioned
}

// EnvDocProblems compares the code's variables with a testing page's: the ones the code
// names and the table lacks, and the ones the page names and the code does not.
func EnvDocProblems(code map[string]string, md []byte) (undocumented, stale []string) {
	table, mentioned := EnvVarsInDoc(md)
	for v := range code {
		if !table[v] {
			undocumented = append(undocumented, v)
		}
	}
	for v := range mentioned {
		if _, ok := code[v]; !ok {
			stale = append(stale, v)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(stale)
	return undocumented, stale
}
