package testlint

import (
	"fmt"
	"go/ast"
	"go/token"
	"path/filepath"
	"sort"
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
	err := eachSourceFile(dirs, func(fset *token.FileSet, path string, f *ast.File) {
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
	})
	sort.Strings(out)
	return out, err
}
