package broker

import (
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// ReadCredsFile reads a NATS .creds file (a user JWT and its nkey seed,
// as nsc and the site's NATS operators hand out, and as WriteConnectFile
// writes beside a connect file). A JWT that evoq minted (named
// "role@run") keeps its role and run; any other is a site's credential
// (RoleSite). Errors name the file, never its contents.
func ReadCredsFile(path string) (Credential, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Credential{}, fmt.Errorf("%w: %v", ErrCredential, err)
	}
	token, err := jwt.ParseDecoratedJWT(data)
	if err != nil {
		return Credential{}, fmt.Errorf("%w: %s holds no user JWT: want a NATS .creds file", ErrCredential, path)
	}
	kp, err := jwt.ParseDecoratedUserNKey(data)
	if err != nil {
		return Credential{}, fmt.Errorf("%w: %s holds no user nkey seed: want a NATS .creds file", ErrCredential, path)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return Credential{}, fmt.Errorf("%w: %s: the nkey seed", ErrCredential, path)
	}
	c := Credential{Role: RoleSite, Seed: string(seed), JWT: token}
	if uc, err := jwt.DecodeUserClaims(token); err == nil {
		if role, run, ok := strings.Cut(uc.Name, "@"); ok && (Role(role) == RoleAdmin || Role(role) == RoleWorker || Role(role) == RoleReader) {
			c.Role, c.Run = Role(role), run
		}
	}
	if err := c.Check(); err != nil {
		return Credential{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ReadNkeyFile reads a file holding a user's nkey seed (SU...), as the
// nats CLI's --nkey takes: a site's credential.
func ReadNkeyFile(path string) (Credential, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Credential{}, fmt.Errorf("%w: %v", ErrCredential, err)
	}
	var seed string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "SU") {
			seed = line
			break
		}
	}
	if p, _, err := nkeys.DecodeSeed([]byte(seed)); err != nil || p != nkeys.PrefixByteUser {
		return Credential{}, fmt.Errorf("%w: %s holds no user nkey seed (a line SU...)", ErrCredential, path)
	}
	return Credential{Role: RoleSite, Seed: seed}, nil
}
