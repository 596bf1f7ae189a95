package testlint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MaxFunctionLines bounds a function of the controllers: a reconcile phase reads as the
// list of its steps, each step a function of its own, and so does every helper.
const MaxFunctionLines = 60

// LongFunctions lists "file:function (N lines)" for every function in the non-test files
// of dirs longer than max lines.
func LongFunctions(dirs []string, max int) ([]string, error) {
	var out []string
	err := eachSourceFile(dirs, func(fset *token.FileSet, path string, f *ast.File) {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > max {
				out = append(out, fmt.Sprintf("%s:%s (%d lines)", filepath.ToSlash(path), fd.Name.Name, n))
			}
		}
	})
	sort.Strings(out)
	return out, err
}

// eachSourceFile parses every non-test Go file directly in dirs and hands it to f.
func eachSourceFile(dirs []string, f func(fset *token.FileSet, path string, file *ast.File)) error {
	fset := token.NewFileSet()
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			path := filepath.Join(dir, name)
			file, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			f(fset, path, file)
		}
	}
	return nil
}
