package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// TestDocsListEveryCommandAndFlag checks that docs/cli.md, the command
// reference the README points to, names every command and every flag the
// CLI has, so a new flag cannot ship undocumented.
func TestDocsListEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	text := string(doc)

	a := &app{stdout: &output{}, redact: &redactor{}}
	root := a.rootCommand()
	root.InitDefaultCompletionCmd()
	var missing []string
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Hidden || cmd.Name() == "help" {
			return
		}
		// cobra's completion subcommands are documented together, as
		// `outbox completion bash|zsh|fish|powershell`.
		generated := cmd.HasParent() && cmd.Parent().Name() == "completion"
		if !generated && !strings.Contains(text, "`"+cmd.CommandPath()) {
			missing = append(missing, "the command "+cmd.CommandPath())
		}
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			named := regexp.MustCompile(`(^|[^\w-])--` + regexp.QuoteMeta(f.Name) + `([^\w-]|$)`)
			if !f.Hidden && f.Name != "help" && !named.MatchString(text) {
				missing = append(missing, cmd.CommandPath()+" --"+f.Name)
			}
		})
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
	require.Empty(t, missing, "docs/cli.md does not document these; add them to its tables")
}

// TestDocsLinksResolve checks every relative link of the README, the
// contributor guide and docs/: the file exists and, for a link into a
// Markdown file, so does the heading its #anchor names. Moving a section
// between pages breaks links silently otherwise.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	repo := filepath.Join("..", "..", "..", "..")
	pages, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join(repo, "README.md"), filepath.Join(repo, "DEVELOPERS.md"), filepath.Join(repo, "CHANGELOG.md"))

	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		a := markdownAnchors(string(b))
		anchors[path] = a
		return a
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	var broken []string
	for _, page := range pages {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(withoutCodeBlocks(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			name, _ := filepath.Rel(repo, page)
			if _, err := os.Stat(path); err != nil {
				broken = append(broken, name+": "+target+" (no such file)")
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				broken = append(broken, name+": "+target+" (no such heading)")
			}
		}
	}
	require.Empty(t, broken, "broken links in the documentation")
}

// withoutCodeBlocks drops fenced code blocks, whose # lines are not
// headings and whose brackets are not links.
func withoutCodeBlocks(md string) string {
	var b strings.Builder
	fenced := false
	for line := range strings.Lines(md) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(line)
		}
	}
	return b.String()
}

// markdownAnchors returns the anchors GitHub gives a page's headings:
// lower case, punctuation dropped, spaces as hyphens, and -1, -2, … on
// repeats.
func markdownAnchors(md string) map[string]bool {
	heading := regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	drop := regexp.MustCompile(`[^\p{L}\p{N}_ -]`)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(withoutCodeBlocks(md), -1) {
		slug := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}
