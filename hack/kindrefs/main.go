// Command kindrefs counts how often the shared files of package controllers
// name something declared in a kind's files: the coupling issue 29 asks to
// keep below 10.
//
// A kind file is one named after its kind: sandbox_*, sandboxfork_*,
// sandboxsnapshot_*, sandboxclass_*, sandboxquota_* (tests excluded). Every
// other non-test file is shared, except setup.go: it wires every kind's
// reconciler (it is the package's top, as cmd/manager is the binary's), so its
// references are counted apart. A reference is a distinct (shared file,
// identifier) pair where the identifier — a type, function, method, field,
// variable or constant of package controllers — is declared in a kind file.
// A method of a kind's reconciler declared in a shared file counts through its
// receiver type.
//
//	go run ./hack/kindrefs          # the count
//	go run ./hack/kindrefs -v       # and each reference
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

var kindFile = regexp.MustCompile(`^sandbox(fork|snapshot|class|quota)?_[^/]*\.go$`)

func main() {
	verbose := flag.Bool("v", false, "list every reference")
	dir := flag.String("dir", "./controllers", "package directory")
	flag.Parse()

	exports, files, err := goList(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		parsed = append(parsed, af)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		exp, ok := exports[path]
		if !ok || exp == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exp)
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: imp}
	pkg, err := conf.Check("controllers", fset, parsed, info)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	refs, wiring := map[string]bool{}, map[string]bool{}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		from := filepath.Base(fset.Position(id.Pos()).Filename)
		to := filepath.Base(fset.Position(obj.Pos()).Filename)
		if kindFile.MatchString(from) || !kindFile.MatchString(to) {
			continue
		}
		ref := fmt.Sprintf("%s -> %s %s", from, to, name(obj))
		if from == "setup.go" {
			wiring[ref] = true
		} else {
			refs[ref] = true
		}
	}
	lines := make([]string, 0, len(refs))
	for r := range refs {
		lines = append(lines, r)
	}
	sort.Strings(lines)
	if *verbose {
		for _, l := range lines {
			fmt.Println(l)
		}
	}
	fmt.Printf("%d references from shared files to kind files (setup.go, which wires the kinds, names %d more)\n", len(lines), len(wiring))
}

// name qualifies methods and fields by their type so that two kinds'
// finalize methods stay two references.
func name(obj types.Object) string {
	switch o := obj.(type) {
	case *types.Func:
		if sig, ok := o.Type().(*types.Signature); ok && sig.Recv() != nil {
			return types.TypeString(sig.Recv().Type(), func(*types.Package) string { return "" }) + "." + o.Name()
		}
	case *types.Var:
		if o.IsField() {
			return "field " + o.Name()
		}
	}
	return obj.Name()
}

// goList returns the export data of every dependency and the package's own
// non-test files.
func goList(dir string) (map[string]string, []string, error) {
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", dir).Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list -export: %w", err)
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		path, exp, _ := strings.Cut(sc.Text(), " ")
		exports[path] = exp
	}
	out, err = exec.Command("go", "list", "-f", "{{.Dir}}\n{{range .GoFiles}}{{.}}\n{{end}}", dir).Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list: %w", err)
	}
	fields := strings.Fields(string(out))
	var files []string
	for _, f := range fields[1:] {
		files = append(files, filepath.Join(fields[0], f))
	}
	return exports, files, nil
}
