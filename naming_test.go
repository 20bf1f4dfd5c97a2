package outbox_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNamingScheme keeps the one naming scheme of log components and error
// prefixes (DEVELOPERS.md, "Log components and error prefixes"), in every
// non-test Go file of the repository:
//
//   - an error (errors.New, fmt.Errorf) whose message starts with the name
//     of one of this repository's packages and a colon, or with outbox…
//     and one more word and a colon ("outbox relay:"), starts with exactly
//     its own package's name and ": " ("natssink: …", "outboxmigrate: …",
//     "outbox: relay: …"); the outbox command's packages start none so
//     (the program adds "outbox: ");
//   - a logger's component (slog.String("component", …), or a "component"
//     key and value) is its own package's name, or that name and a part
//     after a dot ("outbox.relay"); the outbox command's may name the
//     library package whose logs it forwards.
func TestNamingScheme(t *testing.T) {
	t.Parallel()
	type file struct {
		path string
		pkg  string
		ast  *ast.File
	}
	var files []file
	pkgs := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, file{path: path, pkg: f.Name.Name, ast: f})
		if f.Name.Name != "main" {
			pkgs[f.Name.Name] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, pkgs["outbox"] && pkgs["natssink"] && pkgs["outboxmigrate"], "walked the repository")

	prefix := regexp.MustCompile(`^(\w+):|^(outbox\w*) \w+:`)
	var bad []string
	for _, f := range files {
		command := strings.HasPrefix(filepath.ToSlash(f.path), "cmd/")
		report := func(n ast.Node, format string, args ...any) {
			bad = append(bad, fset.Position(n.Pos()).String()+": "+strings.TrimSpace(fmt.Sprintf(format, args...)))
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch callee(call) {
			case "errors.New", "fmt.Errorf":
				msg, ok := stringArg(call, 0)
				if !ok {
					return true
				}
				m := prefix.FindStringSubmatch(msg)
				if m == nil || !pkgs[m[1]+m[2]] {
					return true
				}
				switch {
				case command:
					report(call, "%q: the outbox command adds \"outbox: \" itself; start the message with what failed", msg)
				case !strings.HasPrefix(msg, f.pkg+": "):
					report(call, "%q: an error of package %s starts with %q", msg, f.pkg, f.pkg+": ")
				}
			default:
				for i := 0; i+1 < len(call.Args); i++ {
					if key, ok := componentKey(call.Args[i]); ok && key {
						v, ok := stringArg(call, i+1)
						if !ok {
							continue
						}
						name, _, _ := strings.Cut(v, ".")
						if (command && !pkgs[name]) || (!command && name != f.pkg) {
							report(call, "component %q: name the logging package (%s), optionally with .part", v, f.pkg)
						}
					}
				}
			}
			return true
		})
	}
	require.Empty(t, bad, "log components and error prefixes off the naming scheme:\n%s", strings.Join(bad, "\n"))
}

// callee is pkg.Func for a call of a selector, "" otherwise.
func callee(call *ast.CallExpr) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	id, ok := sel.X.(*ast.Ident)
	if !ok {
		return ""
	}
	return id.Name + "." + sel.Sel.Name
}

// stringArg is the i-th argument when it is a string literal.
func stringArg(call *ast.CallExpr, i int) (string, bool) {
	if i >= len(call.Args) {
		return "", false
	}
	lit, ok := call.Args[i].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// componentKey reports whether e is the string literal "component", a
// key among a log call's alternating keys and values.
func componentKey(e ast.Expr) (bool, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return false, false
	}
	return lit.Value == `"component"`, true
}
