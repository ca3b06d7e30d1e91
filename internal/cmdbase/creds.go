package cmdbase

import (
	"flag"
	"os"

	"github.com/evoq/evoq/broker"
)

// RegisterCreds registers the flags of a credential of an external
// broker, as the nats CLI names them, into creds and nkey.
func RegisterCreds(fs *flag.FlagSet, creds, nkey *string) {
	fs.StringVar(creds, "creds", "", "NATS credentials file (.creds: a user JWT and its seed) for an external broker, as a site's NATS hands them out (default: $NATS_CREDS)")
	fs.StringVar(nkey, "nkey", "", "file of a NATS user nkey seed for an external broker (default: $NATS_NKEY)")
}

// SiteCreds are a client's --creds and --nkey, and the credential read
// from them.
type SiteCreds struct {
	Creds, Nkey string
	Credential  *broker.Credential
}

// Register registers --creds and --nkey.
func (s *SiteCreds) Register(fs *flag.FlagSet) { RegisterCreds(fs, &s.Creds, &s.Nkey) }

// Load reads --creds or --nkey (else $NATS_CREDS or $NATS_NKEY, unless
// the client's --connect file, connect, carries a credential: carried)
// into Credential; nil when none is given.
func (s *SiteCreds) Load(connect string, carried bool) error {
	if s.Creds != "" && s.Nkey != "" {
		return UsageErr("--creds and --nkey: give one or the other")
	}
	if (s.Creds != "" || s.Nkey != "") && carried {
		return UsageErr("--creds or --nkey, and --connect %s, which carries a credential: give one or the other", connect)
	}
	if !carried && s.Creds == "" && s.Nkey == "" {
		s.Creds, s.Nkey = os.Getenv("NATS_CREDS"), os.Getenv("NATS_NKEY")
		if s.Creds != "" {
			s.Nkey = ""
		}
	}
	var c broker.Credential
	var err error
	switch {
	case s.Creds != "":
		c, err = broker.ReadCredsFile(s.Creds)
	case s.Nkey != "":
		c, err = broker.ReadNkeyFile(s.Nkey)
	default:
		return nil
	}
	if err != nil {
		return UsageErr("%v", err)
	}
	s.Credential = &c
	return nil
}
