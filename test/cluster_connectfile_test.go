package test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evoq/evoq/broker"
)

// Each node of a three-node broker cluster writes an admin connect file
// that lists every node's client URL, not only its own: a controller given
// one node's file fails over to the others when that node goes.
func TestClusterConnectFileListsEveryNode(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	var routes, listens, files []string
	for range 3 {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(freePort(t)))
		listens = append(listens, "127.0.0.1:"+strconv.Itoa(freePort(t)))
	}
	var nodes []*restartable
	for i := range 3 {
		name := fmt.Sprintf("node%d", i+1)
		files = append(files, filepath.Join(root, name+".json"))
		nodes = append(nodes, newRestartable(t, name, "broker", "--dir", filepath.Join(root, name),
			"--listen", listens[i], "--server-name", name, "--cluster-name", "cf",
			"--cluster-listen", strings.TrimPrefix(routes[i], "nats-route://"), "--routes", strings.Join(routes, ","),
			"--connect-file", files[i]))
	}
	want := make([]string, 3)
	for i, l := range listens {
		want[i] = "nats://" + l
	}
	slices.Sort(want)
	listed := func(file string) []string {
		cf, err := broker.ReadConnectFile(file)
		if err != nil {
			return nil
		}
		urls := slices.Clone(cf.URLs)
		slices.Sort(urls)
		return urls
	}
	show := func() string {
		var b strings.Builder
		for i, n := range nodes {
			fmt.Fprintf(&b, "--- node%d lists %v:\n%s\n", i+1, listed(files[i]), tail(n.output(), 2000))
		}
		return b.String()
	}
	waitShowing(t, 2*time.Minute, func() bool {
		for _, f := range files {
			if !slices.Equal(listed(f), want) {
				return false
			}
		}
		return true
	}, show)
}
