// Package testlint checks the project's tests for mistakes the compiler and vet let
// through.
package testlint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// stopping are the testing.TB methods that end the calling goroutine (runtime.Goexit):
// called from a goroutine other than the test's, they stop that goroutine and leave the
// test running, or panic after the test ended.
var stopping = map[string]bool{"Fatal": true, "Fatalf": true, "FailNow": true, "Skip": true, "Skipf": true, "SkipNow": true}

// Finding is one call of a stopping method inside a goroutine a test started.
type Finding struct {
	Pos  token.Position
	Call string
}

// FatalInGoroutines lists, for every package under root, calls of t.Fatal and its kin
// inside a goroutine a test started (`go func() {...}()` or `go helper(...)`), also
// through the package's test helpers and local closures that (transitively) call them.
func FatalInGoroutines(root string) ([]Finding, error) {
	dirs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "vendor" || name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, files := range dirs {
		fset := token.NewFileSet()
		var parsed []*ast.File
		for _, path := range files {
			src, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			parsed = append(parsed, f)
		}
		out = append(out, inPackage(fset, parsed)...)
	}
	return out, nil
}

func inFile(fset *token.FileSet, f *ast.File) []Finding { return inPackage(fset, []*ast.File{f}) }

func inPackage(fset *token.FileSet, files []*ast.File) []Finding {
	// Helpers that stop the test, directly or through each other: must(t, err),
	// h.waitReady(...), and closures like `next := func() {... t.Fatal ...}`.
	bodies := map[string][]ast.Node{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.FuncDecl:
				if x.Body != nil {
					bodies[x.Name.Name] = append(bodies[x.Name.Name], x.Body)
				}
			case *ast.AssignStmt:
				for i, rhs := range x.Rhs {
					if lit, ok := rhs.(*ast.FuncLit); ok && i < len(x.Lhs) {
						if id, ok := x.Lhs[i].(*ast.Ident); ok {
							bodies[id.Name] = append(bodies[id.Name], lit.Body)
						}
					}
				}
			}
			return true
		})
	}
	helpers := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for name, bs := range bodies {
			if helpers[name] {
				continue
			}
			for _, b := range bs {
				if stops(b, helpers) {
					helpers[name] = true
					changed = true
					break
				}
			}
		}
	}
	// Runners: functions that call one of their function parameters inside a goroutine
	// (inNetns(t, func() {...}) runs the closure on a locked thread of its own).
	runners := map[string]int{}
	for _, f := range files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			params := paramIndex(fd)
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				g, ok := n.(*ast.GoStmt)
				if !ok {
					return true
				}
				inspectOutsideSubtests(g.Call, func(n ast.Node) bool {
					if call, ok := n.(*ast.CallExpr); ok {
						if id, ok := call.Fun.(*ast.Ident); ok {
							if idx, ok := params[id.Name]; ok {
								runners[fd.Name.Name] = idx
							}
						}
					}
					return true
				})
				return true
			})
		}
	}
	// ... and functions that hand their function parameter on to a runner.
	for changed := true; changed; {
		changed = false
		for _, f := range files {
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if _, ok := runners[fd.Name.Name]; ok {
					continue
				}
				params := paramIndex(fd)
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					idx, ok := runners[calleeName(call)]
					if !ok || idx >= len(call.Args) {
						return true
					}
					if id, ok := call.Args[idx].(*ast.Ident); ok {
						if pi, ok := params[id.Name]; ok {
							runners[fd.Name.Name] = pi
							changed = true
						}
					}
					return true
				})
			}
		}
	}
	scan := func(body ast.Node, out *[]Finding) {
		inspectOutsideSubtests(body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if name := stoppingCall(call, helpers); name != "" {
				*out = append(*out, Finding{Pos: fset.Position(call.Pos()), Call: name})
			}
			return true
		})
	}
	var out []Finding
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if idx, ok := runners[calleeName(call)]; ok && idx < len(call.Args) {
					if lit, ok := call.Args[idx].(*ast.FuncLit); ok {
						scan(lit.Body, &out)
					}
				}
			}
			g, ok := n.(*ast.GoStmt)
			if !ok {
				return true
			}
			lit, ok := g.Call.Fun.(*ast.FuncLit)
			if !ok {
				if name := stoppingCall(g.Call, helpers); name != "" {
					out = append(out, Finding{Pos: fset.Position(g.Call.Pos()), Call: name})
				}
				return true
			}
			scan(lit.Body, &out)
			return true
		})
	}
	return out
}

// inspectOutsideSubtests is ast.Inspect that does not enter the body of a subtest,
// x.Run(name, func(t *testing.T) {...}): testing runs that body on a goroutine of its
// own with its own t, where FailNow is what it should be, even when the Run call itself
// is made from a goroutine (Run may be called from several at once).
func inspectOutsideSubtests(node ast.Node, f func(ast.Node) bool) {
	ast.Inspect(node, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && isSubtestRun(call) {
			if !f(n) {
				return false
			}
			inspectOutsideSubtests(call.Fun, f)
			inspectOutsideSubtests(call.Args[0], f)
			return false
		}
		return f(n)
	})
}

// isSubtestRun: x.Run("name", func(t *testing.T) {...}) (or *testing.B).
func isSubtestRun(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Run" || len(call.Args) != 2 {
		return false
	}
	lit, ok := call.Args[1].(*ast.FuncLit)
	if !ok || len(lit.Type.Params.List) != 1 {
		return false
	}
	star, ok := lit.Type.Params.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	typ, ok := star.X.(*ast.SelectorExpr)
	return ok && exprString(typ.X) == "testing" && (typ.Sel.Name == "T" || typ.Sel.Name == "B")
}

func stops(body ast.Node, helpers map[string]bool) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if _, ok := n.(*ast.FuncLit); ok {
			return false // a closure's calls are the closure's
		}
		if call, ok := n.(*ast.CallExpr); ok && stoppingCall(call, helpers) != "" {
			found = true
		}
		return !found
	})
	return found
}

func stoppingCall(call *ast.CallExpr, helpers map[string]bool) string {
	switch fn := call.Fun.(type) {
	case *ast.SelectorExpr:
		if stopping[fn.Sel.Name] {
			return exprString(fn.X) + "." + fn.Sel.Name
		}
		if helpers[fn.Sel.Name] {
			return exprString(fn.X) + "." + fn.Sel.Name
		}
	case *ast.Ident:
		if helpers[fn.Name] {
			return fn.Name
		}
	}
	return ""
}

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	}
	return "?"
}

func paramIndex(fd *ast.FuncDecl) map[string]int {
	params := map[string]int{}
	i := 0
	for _, field := range fd.Type.Params.List {
		for _, name := range field.Names {
			params[name.Name] = i
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
	return params
}

func calleeName(call *ast.CallExpr) string {
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		return fn.Name
	case *ast.SelectorExpr:
		return fn.Sel.Name
	}
	return ""
}
