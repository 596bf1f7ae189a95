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

// SkeletonBypasses are the calls a reconciler makes only through the shared skeleton
// (internal/controller/skeleton): the finalizer written any other way, an Event sent
// before the status write that records it.
var SkeletonBypasses = []string{"controllerutil.AddFinalizer", "controllerutil.RemoveFinalizer", "Recorder.Eventf", "Recorder.Event"}

// Calls lists "file:line name" for every call in the non-test files of dirs whose
// callee ends with one of names ("pkg.Func" or "Field.Method": the last two parts of a
// selector chain).
func Calls(dirs, names []string) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			path := filepath.Join(dir, name)
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return nil, err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				var x string
				switch v := sel.X.(type) {
				case *ast.Ident:
					x = v.Name
				case *ast.SelectorExpr:
					x = v.Sel.Name
				default:
					return true
				}
				for _, want := range names {
					if x+"."+sel.Sel.Name == want {
						out = append(out, fmt.Sprintf("%s:%d %s", filepath.ToSlash(path), fset.Position(call.Pos()).Line, want))
					}
				}
				return true
			})
		}
	}
	sort.Strings(out)
	return out, nil
}
