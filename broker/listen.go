package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// ListenLookupTimeout bounds the DNS lookup of a listen host's name.
const ListenLookupTimeout = 10 * time.Second

// CheckListenHost checks that a broker can listen on host (a name or an
// address; "" is every interface) by listening on it, on a free port, for
// a moment. A name DNS does not know, or an address that is not this
// machine's, is named as such, before anything is written: the server
// itself would report it only as it starts, as a port it cannot take.
func CheckListenHost(host string) error {
	if host == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ListenLookupTimeout)
	defer cancel()
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	if err == nil {
		return l.Close()
	}
	const give = "give a name or address of this machine, an interface such as ib0, or 0.0.0.0 for every interface"
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &dns):
		why := dns.Err
		if dns.IsTimeout {
			why = "DNS lookup timed out"
		}
		return fmt.Errorf("host %s: %s (%s)", host, why, give)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		at := ""
		if errors.As(err, &op) && op.Addr != nil {
			if ip, _, serr := net.SplitHostPort(op.Addr.String()); serr == nil && ip != host {
				at = " (" + ip + ")"
			}
		}
		return fmt.Errorf("host %s%s is not an address of this machine (%s)", host, at, give)
	}
	return fmt.Errorf("host %s: %w", host, err)
}

// listenHint is the hint for a listen error: a port in use gets inUse;
// others (a privileged port) speak for themselves.
func listenHint(err error, inUse string) string {
	if errors.Is(err, syscall.EADDRINUSE) {
		return " (" + inUse + ")"
	}
	return ""
}
