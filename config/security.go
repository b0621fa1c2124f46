package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TLS configures the TLS connection of a sender (the tls key of every
// sender type). The block's presence turns TLS on; every key is optional,
// so `tls: { enabled: true }` is TLS with the system's roots.
type TLS struct {
	// Enabled turns TLS on or off. Defaults to true when the tls block
	// is present, so enabled: false switches a block off without
	// removing it.
	Enabled *bool `yaml:"enabled"`
	// CAFile is a PEM file of the CA certificates to trust instead of the
	// system's (a private CA). Defaults to the system roots.
	CAFile string `yaml:"ca-file"`
	// CertFile and KeyFile are the PEM client certificate and its key,
	// for mutual TLS. Set both or neither. The key file is a secret file;
	// its content never appears in output.
	CertFile string `yaml:"cert-file"`
	KeyFile  string `yaml:"key-file"`
	// ServerName is the name checked against the server's certificate,
	// when it differs from the host in the address. Defaults to that host.
	ServerName string `yaml:"server-name"`
	// InsecureSkipVerify accepts any server certificate, so anyone on the
	// path can read and change the traffic. For a test set-up only: the
	// relay logs a warning at start when it is on. Defaults to false.
	InsecureSkipVerify bool `yaml:"insecure-skip-verify"`
}

// on reports whether t asks for TLS.
func (t *TLS) on() bool { return t != nil && (t.Enabled == nil || *t.Enabled) }

// check reports the problems of a tls block; c is its own path.
func (t *TLS) check(c senderCheck) {
	if t == nil {
		return
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		c.fail("cert-file", "cert-file and key-file go together: set both or neither")
	}
	if !t.on() && (t.CAFile != "" || t.CertFile != "" || t.ServerName != "" || t.InsecureSkipVerify) {
		c.fail("enabled", "is false, so the other tls keys would do nothing")
	}
}

// build loads the files of t into a *tls.Config; nil when TLS is off.
// Errors name the key (under path p) and the file, never its content.
// logger gets the insecure-skip-verify warning.
func (t *TLS) build(p string, logger *slog.Logger) (*tls.Config, error) {
	if !t.on() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &Error{Path: join(p, "ca-file"), Msg: fmt.Sprintf("cannot read: %v", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &Error{Path: join(p, "ca-file"), Msg: fmt.Sprintf("%s holds no PEM certificate", t.CAFile)}
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			// crypto/tls names the files and the problem, not the key.
			return nil, &Error{Path: join(p, "cert-file"), Msg: fmt.Sprintf("cannot load the client certificate and key: %v", err)}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if t.InsecureSkipVerify && logger != nil {
		logger.Warn("TLS server certificate verification is off: anyone on the network path can read and change this traffic",
			"key", join(p, "insecure-skip-verify"))
	}
	return tc, nil
}

// KafkaSASL authenticates a Kafka sender (the sasl key).
type KafkaSASL struct {
	// Mechanism is plain, scram-sha-256 or scram-sha-512. Required.
	Mechanism string `yaml:"mechanism"`
	// Username is the SASL user. Required.
	Username string `yaml:"username"`
	// PasswordEnv names an environment variable holding the password.
	PasswordEnv string `yaml:"password-env"`
	// PasswordFile is a file holding the password (a mounted secret);
	// one trailing newline is dropped. Set exactly one of password-env
	// and password-file.
	PasswordFile string `yaml:"password-file"`
}

// SASL mechanisms accepted by sasl.mechanism.
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

func (s *KafkaSASL) check(c senderCheck) {
	if s == nil {
		return
	}
	switch strings.ToLower(s.Mechanism) {
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
	case "":
		c.fail("mechanism", "required: plain, scram-sha-256 or scram-sha-512")
	default:
		c.fail("mechanism", "must be plain, scram-sha-256 or scram-sha-512, not %q", clip(s.Mechanism))
	}
	if s.Username == "" {
		c.fail("username", "required")
	}
	c.secret("password", s.PasswordEnv, s.PasswordFile, true)
}

// mechanism returns the franz-go mechanism for password pw.
func (s *KafkaSASL) mechanism(pw string) sasl.Mechanism {
	auth := scram.Auth{User: s.Username, Pass: pw}
	switch strings.ToLower(s.Mechanism) {
	case SASLScramSHA256:
		return auth.AsSha256Mechanism()
	case SASLScramSHA512:
		return auth.AsSha512Mechanism()
	}
	return plain.Auth{User: s.Username, Pass: pw}.AsMechanism()
}

// secret checks a pair of keys <name>-env and <name>-file:
// at most one of them (exactly one when required), and a valid variable
// name.
func (c senderCheck) secret(name, env, file string, required bool) {
	switch {
	case env != "" && file != "":
		c.fail(name+"-env", "set %s-env or %s-file, not both", name, name)
	case required && env == "" && file == "":
		c.fail(name+"-env", "required: %s-env (an environment variable) or %s-file (a file holding it)", name, name)
	}
	checkEnvName(c.d, join(c.p, name+"-env"), env)
}

// sub is the check of the block under key (tls, sasl).
func (c senderCheck) sub(key string) senderCheck { return senderCheck{d: c.d, p: join(c.p, key)} }

// readSecret returns the secret that the key pair <name>-env / <name>-file
// under path p points to: the variable's value or the file's content
// without its trailing newline; "" when neither is set. A variable or
// file that is empty or unreadable is an error naming the key.
func readSecret(getenv func(string) string, p, name, env, file string) (string, error) {
	if env != "" {
		return secretEnv(getenv, p, name+"-env", env)
	}
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", &Error{Path: join(p, name+"-file"), Msg: fmt.Sprintf("cannot read: %v", err)}
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", &Error{Path: join(p, name+"-file"), Msg: fmt.Sprintf("%s is empty", file)}
	}
	return v, nil
}

// withPassword returns the URL raw with its user-info password set to pw
// (the user is kept). raw must not carry a password already: validation
// rejects that.
func withPassword(raw, pw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("url is not a URL")
	}
	user := ""
	if u.User != nil {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, pw)
	return u.String(), nil
}

// literalSecretKeys are keys a file might use to write a secret in clear.
// No sender type has them: each secret has <name>-env and <name>-file keys
// instead, and decoding says so rather than "unknown key".
var literalSecretKeys = map[string]bool{"password": true, "token": true, "secret": true, "hmac-secret": true, "nkey-seed": true, "nkey": true, "headers": true}

// literalSecret returns the message for key when it is a secret written in
// clear in a settings struct that offers <key>-env, or "".
func literalSecret(key string, valid []string) string {
	if !literalSecretKeys[key] {
		return ""
	}
	var alts []string
	for _, k := range valid {
		if strings.HasPrefix(k, key+"-") && (strings.HasSuffix(k, "-env") || strings.HasSuffix(k, "-file")) {
			alts = append(alts, k)
		}
	}
	if len(alts) == 0 {
		return ""
	}
	return fmt.Sprintf("secrets are not written in the configuration: use %s", strings.Join(alts, " or "))
}
