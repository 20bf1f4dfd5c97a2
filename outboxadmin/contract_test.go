package outboxadmin_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWireTypesDocumented keeps the exported …JSON types the documented
// wire contract (docs/library.md): each is named in docs/admin.md's table
// of the API's Go types.
func TestWireTypesDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "admin.md"))
	require.NoError(t, err)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var names []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if ts.Name.IsExported() && strings.HasSuffix(ts.Name.Name, "JSON") {
					names = append(names, ts.Name.Name)
				}
			}
		}
	}
	require.NotEmpty(t, names)
	for _, n := range names {
		require.Contains(t, string(doc), "`"+n+"`", "docs/admin.md does not name the wire type %s", n)
	}
}
