package broker

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Defaults of ClusterConfig.
const (
	// ClusterPortDefault is the route port when ClusterConfig.Listen names
	// none, NATS's usual one.
	ClusterPortDefault = 6222
	// RoutePingInterval is how often a node pings the others over their
	// routes; a node cut off without a word (a network partition) is taken
	// as gone after RouteMaxPingsOut unanswered pings.
	RoutePingInterval = 5 * time.Second
	RouteMaxPingsOut  = 3
)

// ErrCluster means a cluster setting is invalid; the message names its
// flag.
var ErrCluster = errors.New("invalid cluster setting")

// ClusterConfig makes an embedded broker one node of a JetStream cluster.
// With Declare's WithReplicas(3) every stream and bucket is kept on three
// nodes and outlives the loss of any one of them: clients given every
// node's URL fail over to the others.
//
// A node's identity is its ServerName and its store (Config.Dir): restart
// a node with both unchanged and it catches up with what it missed. An
// embedded broker with nats-server's DontListen cannot form a cluster; this
// one always listens.
type ClusterConfig struct {
	// Name is the cluster's name, the same on every node. Defaults to "":
	// a single server, no cluster.
	Name string
	// ServerName names this node: unique in the cluster, and the same on
	// every restart on the same store, since JetStream knows its peers by
	// it. Required with Name; defaults to "evoq" without.
	ServerName string
	// Listen is host:port of the route port that the other nodes connect
	// to; the host may be an interface name (ib0). Defaults to the client
	// host (Config.Listen) with ClusterPortDefault.
	Listen string
	// Routes are the route URLs, nats-route://host:port, of the cluster's
	// nodes. This node's own URL may be among them (it is recognized and
	// skipped), so every node can be given the same list. Defaults to none:
	// a cluster of one, which JetStream runs as a single server (its
	// replication needs a second node to talk to), with no route port, so
	// no other node can join it.
	Routes []string
}

// ParseRoutes splits a comma-separated --routes value and checks every URL.
func ParseRoutes(s string) ([]string, error) {
	var routes []string
	for _, r := range strings.Split(s, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if err := checkRoute(r); err != nil {
			return nil, err
		}
		routes = append(routes, r)
	}
	return routes, nil
}

func checkRoute(r string) error {
	u, err := url.Parse(r)
	switch {
	case err != nil:
		return fmt.Errorf("%w: --routes: %q: %v; want nats-route://host:port, comma-separated", ErrCluster, r, err)
	case u.Scheme != "nats-route" && u.Scheme != "nats":
		return fmt.Errorf("%w: --routes: %q: want nats-route://host:port, comma-separated (the other nodes' --cluster-listen addresses, not their client URLs)", ErrCluster, r)
	case u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "":
		return fmt.Errorf("%w: --routes: %q: want nats-route://host:port with a host and a port and nothing after them", ErrCluster, r)
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%w: --routes: %q: port %q is not a number in 1..65535", ErrCluster, r, u.Port())
	}
	return nil
}

// Validate checks c; every message names the flag.
func (c ClusterConfig) Validate() error {
	if c.ServerName != "" {
		if err := checkName("--server-name", c.ServerName); err != nil {
			return err
		}
	}
	if c.Name == "" {
		switch {
		case len(c.Routes) > 0:
			return fmt.Errorf("%w: --routes given without --cluster-name: name the cluster, the same name on every node", ErrCluster)
		case c.Listen != "":
			return fmt.Errorf("%w: --cluster-listen given without --cluster-name: name the cluster, the same name on every node", ErrCluster)
		}
		return nil
	}
	if err := checkName("--cluster-name", c.Name); err != nil {
		return err
	}
	if c.ServerName == "" {
		return fmt.Errorf("%w: --cluster-name %s needs --server-name: JetStream knows each node of a cluster by its name, which must be unique in the cluster and stay the same across restarts on the same --dir", ErrCluster, c.Name)
	}
	if c.Listen != "" {
		if _, _, err := splitRouteListen(c.Listen); err != nil {
			return err
		}
		if len(c.Routes) == 0 {
			return fmt.Errorf("%w: --cluster-listen %s without --routes: a cluster of one runs as a single server, with no route port; give every node --routes with the route URLs of all the nodes (its own may be among them)", ErrCluster, c.Listen)
		}
	}
	for _, r := range c.Routes {
		if err := checkRoute(r); err != nil {
			return err
		}
	}
	return nil
}

// checkName accepts names that nats-server takes for a server or a
// cluster: letters, digits, '-', '_' and '.', at most 64.
func checkName(flag, name string) error {
	ok := len(name) <= 64
	for _, r := range name {
		ok = ok && (r == '-' || r == '_' || r == '.' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}
	if !ok {
		return fmt.Errorf("%w: %s %q: want at most 64 letters, digits, '-', '_' or '.'", ErrCluster, flag, name)
	}
	return nil
}

// splitRouteListen parses --cluster-listen. Unlike the client port, the
// route port cannot be picked at random: the other nodes route to it.
func splitRouteListen(listen string) (string, int, error) {
	host, ps, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("%w: --cluster-listen %q: want host:port or interface:port: %v", ErrCluster, listen, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("%w: --cluster-listen %q: port %q is not a number in 1..65535 (the other nodes route to it, so it cannot be picked at random)", ErrCluster, listen, ps)
	}
	if host, err = resolveHost(host); err != nil {
		return "", 0, fmt.Errorf("%w: --cluster-listen %q: %v", ErrCluster, listen, err)
	}
	if err := CheckListenHost(host); err != nil {
		return "", 0, fmt.Errorf("%w: --cluster-listen %q: %v", ErrCluster, listen, err)
	}
	return host, port, nil
}

// apply sets the cluster options on opts, whose Host and Port are the
// client listener's.
func (c ClusterConfig) apply(opts *server.Options) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.ServerName != "" {
		opts.ServerName = c.ServerName
	}
	if c.Name == "" || len(c.Routes) == 0 {
		return nil // a single server, or a cluster of one: the same thing to JetStream
	}
	listen := c.Listen
	if listen == "" {
		listen = net.JoinHostPort(opts.Host, strconv.Itoa(ClusterPortDefault))
	}
	host, port, err := splitRouteListen(listen)
	if err != nil {
		return err
	}
	if port == opts.Port {
		return fmt.Errorf("%w: --cluster-listen %s: the route port is the client port (--listen); give them different ports", ErrCluster, listen)
	}
	if err := checkRoutePort(host, port); err != nil {
		return err
	}
	opts.Cluster = server.ClusterOpts{Name: c.Name, Host: host, Port: port,
		PingInterval: RoutePingInterval, MaxPingsOut: RouteMaxPingsOut}
	opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
	return nil
}

// checkRoutePort fails fast, naming the flag, when the route port is taken.
func checkRoutePort(host string, port int) error {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: --cluster-listen %s: %v%s", ErrStart, addr, err,
			listenHint(err, "is another evoq or NATS server using it? give each node its own route port"))
	}
	return l.Close()
}

// ServerName is the name this broker's node goes by in its cluster, and
// in a stream's cluster information (jetstream.ClusterInfo.Leader).
func (e *Embedded) ServerName() string { return e.srv.Name() }
