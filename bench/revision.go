package bench

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// buildRevision builds the evoq binary of ref, a git revision of the
// repository repo ("" for the working directory's), into dir: the tree of
// ref's commit is written out with git archive (the working tree and its
// changes stay untouched) and built there with the go tool, which shares
// its module and build caches with every other build.
func buildRevision(ctx context.Context, repo, ref, dir string, log io.Writer) (*revision, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, &ConfigError{Field: "Against", Value: ref, Reason: "building another revision needs the go tool: " + err.Error()}
	}
	if repo == "" {
		out, err := gitOut(ctx, "", "rev-parse", "--show-toplevel")
		if err != nil {
			return nil, &ConfigError{Field: "Repo", Reason: "the working directory is in no git repository (run from a clone of evoq, or name one): " + err.Error()}
		}
		repo = out
	}
	commit, err := gitOut(ctx, repo, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		return nil, &ConfigError{Field: "Against", Value: ref, Reason: "no such commit in " + repo}
	}
	src := filepath.Join(dir, "src-"+commit[:12])
	bin := filepath.Join(dir, "evoq-"+commit[:12])
	fmt.Fprintf(log, "evoq bench: building %s (%s) into %s\n", ref, commit[:12], bin)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(src)
	if err := extract(ctx, repo, commit, src); err != nil {
		return nil, fmt.Errorf("write out %s: %w", ref, err)
	}
	// -buildvcs=false: the tree written out has no .git to stamp from.
	// -trimpath: the tree is written to a new directory each time, and
	// without it the build cache, which keys a package by its directory,
	// would compile evoq's own packages anew on every bench.
	build := exec.CommandContext(ctx, goTool, "build", "-buildvcs=false", "-trimpath", "-o", bin, "./cmd/evoq")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s: %w\n%s", ref, err, tailText(string(out), 2000))
	}
	return &revision{label: ref, bin: bin, commit: commit, repo: repo}, nil
}

// workTree is repo's HEAD commit, with "+changes" when tracked files have
// uncommitted changes; "" if git does not say.
func workTree(ctx context.Context, repo string) string {
	head, err := gitOut(ctx, repo, "rev-parse", "HEAD")
	if err != nil {
		return ""
	}
	if st, err := gitOut(ctx, repo, "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		head += "+changes"
	}
	return head
}

// extract writes the tree of commit into dir: git archive, read by tar.
func extract(ctx context.Context, repo, commit, dir string) error {
	archive := exec.CommandContext(ctx, "git", "-C", repo, "archive", "--format=tar", commit)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	var aerr, terr bytes.Buffer
	archive.Stderr, untar.Stdin, untar.Stderr = &aerr, pipe, &terr
	if err := archive.Start(); err != nil {
		return err
	}
	if err := untar.Run(); err != nil {
		_ = archive.Process.Kill()
		_ = archive.Wait()
		return fmt.Errorf("tar: %w: %s", err, terr.String())
	}
	if err := archive.Wait(); err != nil {
		return fmt.Errorf("git archive: %w: %s", err, aerr.String())
	}
	return nil
}

// gitOut runs git in repo ("" for the working directory) and returns its
// output, trimmed.
func gitOut(ctx context.Context, repo string, args ...string) (string, error) {
	if repo != "" {
		args = append([]string{"-C", repo}, args...)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// binaryRevision is the commit bin was built from, as the go tool stamped
// it, with "+dirty" for a working tree with changes; "" when it was not
// stamped (go run, -buildvcs=false).
func binaryRevision(bin string) string {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return ""
	}
	rev, dirty := "", ""
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// checkFlags checks that both binaries' evoq run knows every flag of args:
// an older revision may lack a newer flag, and would exit at once with a
// usage error, or worse, a flag would mean another thing.
func checkFlags(ctx context.Context, args []string, revs ...*revision) error {
	for _, rev := range revs {
		known, err := runFlagNames(ctx, rev.bin)
		if err != nil {
			return fmt.Errorf("%s: %w", rev.label, err)
		}
		for _, a := range append(runFlags("")[1:], args...) {
			if name, ok := strings.CutPrefix(a, "--"); ok && !slices.Contains(known, name) {
				return fmt.Errorf("%s: evoq run has no --%s: the workloads of --against use only flags both revisions have", rev.label, name)
			}
		}
	}
	return nil
}

// flagLine is a flag's line in the flag package's usage text: two spaces,
// a dash, the name, then its argument's name or the end of the line.
var flagLine = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9-]*)(\s|$)`)

// runFlagNames are the flags `evoq run -h` of bin lists.
func runFlagNames(ctx context.Context, bin string) ([]string, error) {
	// -h exits 0 or 2 with the usage on stderr, depending on the revision.
	out, _ := exec.CommandContext(ctx, bin, "run", "-h").CombinedOutput()
	names := parseFlagNames(out)
	if len(names) == 0 {
		return nil, fmt.Errorf("evoq run -h listed no flags:\n%s", tailText(string(out), 1000))
	}
	return names, nil
}

func parseFlagNames(usage []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(usage))
	for sc.Scan() {
		if m := flagLine.FindStringSubmatch(sc.Text()); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}
