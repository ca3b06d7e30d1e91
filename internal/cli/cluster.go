package cli

import (
	"context"
	"flag"

	"github.com/evoq/evoq/broker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// clusterFlags make `evoq broker` one node of a JetStream cluster.
type clusterFlags struct {
	name, serverName, listen, routes string
	cfg                              broker.ClusterConfig // set by apply
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.name, "cluster-name", "", "name of the JetStream cluster this broker is a node of, the same on every node (default: none, a single server)")
	fs.StringVar(&c.serverName, "server-name", "", "this node's name: unique in the cluster, the same on every restart on its --dir (required with --cluster-name)")
	fs.StringVar(&c.listen, "cluster-listen", "", "host:port the other nodes route to (default: the --listen host, port 6222)")
	fs.StringVar(&c.routes, "routes", "", "the route URLs of the cluster's nodes, comma-separated nats-route://host:port (this node's own may be among them; none: a cluster of one, a single server)")
}

// check checks the flags on their own, before anything is written.
func (c *clusterFlags) check() error {
	routes, err := broker.ParseRoutes(c.routes)
	if err != nil {
		return usageErr("%v", err)
	}
	c.cfg = broker.ClusterConfig{Name: c.name, ServerName: c.serverName, Listen: c.listen, Routes: routes}
	if err := c.cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

// apply checks the flags with the broker's auth and sets cfg's cluster.
func (c *clusterFlags) apply(cfg *broker.Config) error {
	if err := c.check(); err != nil {
		return err
	}
	if c.clustered() && cfg.Auth {
		// Nkey users are each broker's own: a client failing over to
		// another node would be refused there. Operator mode (Trust)
		// is what every node verifies alike.
		return usageErr("--routes: a cluster with auth needs one trust root that every node shares: make it once with 'evoq broker init --dir DIR' and give every node --trust DIR/%s (or --insecure, on a network of your own)", broker.TrustFile)
	}
	cfg.Cluster = c.cfg
	return nil
}

// clustered reports whether the broker is a node of a cluster of more
// than one.
func (c *clusterFlags) clustered() bool { return c.cfg.Name != "" && len(c.cfg.Routes) > 0 }

// declare declares evoq's streams and buckets on a single server. A
// cluster's are declared by the controller, with its --replicas: a node
// starting alone has no quorum to declare anything with.
func (c *clusterFlags) declare(ctx context.Context, js jetstream.JetStream, log logrus.FieldLogger) error {
	if !c.clustered() {
		return broker.Declare(ctx, js)
	}
	log.WithFields(logrus.Fields{"cluster": c.cfg.Name, "server_name": c.cfg.ServerName, "routes": len(c.cfg.Routes)}).
		Info("cluster node; the controller declares the streams and buckets, with its --replicas")
	return nil
}

// checkReplicas checks --replicas: 1, 3 or 5, and 1 on the embedded
// broker, a single server. Call it after brokerFlags.validate.
func (c *controllerCmd) checkReplicas() error {
	if err := broker.CheckReplicas(c.replicas); err != nil {
		return usageErr("%v", err)
	}
	if c.b.nats == "" && c.replicas > 1 {
		return usageErr("--replicas %d: the embedded broker is a single server, which keeps one copy; run the brokers as a cluster (evoq broker --cluster-name ... --routes ...) and give --nats with every node's URL", c.replicas)
	}
	return nil
}
