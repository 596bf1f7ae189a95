package chart

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// The chart is checked against the operator's source rather than a copy of its names, so
// a variable or flag added to the operator without the chart following fails here. Names
// that are literals in the source are parsed from it; only internal/render is imported
// (go.mod replaces the operator's module with ../..), because the gateway pod's labels and
// ports are what its builders return.

func parseGo(t *testing.T, path string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	return f
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// envNames returns the first argument of every call of the local `env(name, default)`
// helper in operatorconfig, which is how Load reads each variable.
func envNames(t *testing.T, path string) []string {
	t.Helper()
	var names []string
	ast.Inspect(parseGo(t, path), func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "env" {
			if s, ok := stringLit(call.Args[0]); ok {
				names = append(names, s)
			}
		}
		return true
	})
	if len(names) == 0 {
		t.Fatalf("%s: found no env(...) calls; has operatorconfig changed how it reads the environment?", path)
	}
	return names
}

// getenvNames returns the literal arguments of os.Getenv calls.
func getenvNames(t *testing.T, path string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	ast.Inspect(parseGo(t, path), func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Getenv" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" {
			if s, ok := stringLit(call.Args[0]); ok {
				names[s] = true
			}
		}
		return true
	})
	return names
}

// stringConsts returns the file's string constants declared with a literal value.
func stringConsts(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range parseGo(t, path).Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if s, ok := stringLit(vs.Values[i]); ok {
						out[name.Name] = s
					}
				}
			}
		}
	}
	return out
}

// cmdFlag is a flag the operator's main defines on its FlagSet with fs.String, fs.Bool
// or fs.Duration.
type cmdFlag struct {
	kind string // "String", "Bool" or "Duration"
	def  string
}

func mainFlags(t *testing.T, path string) map[string]cmdFlag {
	t.Helper()
	out := map[string]cmdFlag{}
	ast.Inspect(parseGo(t, path), func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 3 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "String" && sel.Sel.Name != "Bool" && sel.Sel.Name != "Duration") {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "fs" {
			return true
		}
		name, ok := stringLit(call.Args[0])
		if !ok {
			return true
		}
		f := cmdFlag{kind: sel.Sel.Name}
		if s, ok := stringLit(call.Args[1]); ok {
			f.def = s
		} else if id, ok := call.Args[1].(*ast.Ident); ok {
			f.def = id.Name
		}
		out[name] = f
		return true
	})
	if len(out) == 0 {
		t.Fatalf("%s: found no fs.String/fs.Bool flags", path)
	}
	return out
}

// calledWithLiteral returns the literal first arguments of calls of the identifier fn
// (a function parameter such as getenv).
func calledWithLiteral(t *testing.T, path, fn string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	ast.Inspect(parseGo(t, path), func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return true
		}
		if id, ok := call.Fun.(*ast.Ident); ok && id.Name == fn {
			if s, ok := stringLit(call.Args[0]); ok {
				names[s] = true
			}
		}
		return true
	})
	return names
}
