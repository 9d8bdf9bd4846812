package config

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The self-signed pair ovos-messagebus generates (docs/protocol.md §6), shared with it.
const (
	certDirRel   = "OpenVoiceOS/ovos-messagebus/certs"
	certFileName = "ovos-messagebus.crt"
	keyFileName  = "ovos-messagebus.key"
	certValidity = 10 * 365 * 24 * time.Hour
)

// CertificatePaths returns where the self-signed pair lives:
// $XDG_DATA_HOME/OpenVoiceOS/ovos-messagebus/certs/ovos-messagebus.crt and
// .key, XDG_DATA_HOME defaulting to ~/.local/share. lookupEnv nil means
// os.LookupEnv.
func CertificatePaths(lookupEnv func(string) (string, bool)) (certPath, keyPath string, err error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	data, err := env(lookupEnv).xdgHome("XDG_DATA_HOME", filepath.Join(".local", "share"))
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(data, filepath.FromSlash(certDirRel))
	return filepath.Join(dir, certFileName), filepath.Join(dir, keyFileName), nil
}

// Certificate returns the bus's TLS certificate: EnsureCertificate with
// ssl_cert, ssl_key and the machine's host name.
func (c *Config) Certificate() (tls.Certificate, error) {
	return EnsureCertificate(c.SSLCert, c.SSLKey, "")
}

// certMu serialises generation within the process.
var certMu sync.Mutex

// EnsureCertificate returns the certificate to serve wss:// with (docs/protocol.md §6).
//
// With both certPath and keyPath set it loads them. Otherwise it reuses the
// pair at CertificatePaths, or generates it when either file is missing or
// the pair is unusable (unparsable, mismatched, expired): RSA-2048 signed
// with SHA-256, valid 10 years, subject O=OpenVoiceOS, OU=ovos-messagebus,
// CN=hostname, SANs DNS localhost, DNS hostname and IP 127.0.0.1, not a CA;
// the key unencrypted PKCS#1 PEM ("RSA PRIVATE KEY", as ovos-messagebus
// writes it) with mode 0600. hostname "" means os.Hostname().
//
// The returned certificate has Leaf set.
func EnsureCertificate(certPath, keyPath, hostname string) (tls.Certificate, error) {
	if certPath != "" && keyPath != "" {
		cert, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			return tls.Certificate{}, &Error{
				Msg: fmt.Sprintf("cannot load the TLS pair %s + %s: %v", certPath, keyPath, err), Err: err}
		}
		return cert, nil
	}
	certPath, keyPath, err := CertificatePaths(nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	if hostname == "" {
		if hostname, err = os.Hostname(); err != nil || hostname == "" {
			hostname = "localhost"
		}
	}
	return ensureGenerated(certPath, keyPath, hostname, time.Now())
}

func ensureGenerated(certPath, keyPath, hostname string, now time.Time) (tls.Certificate, error) {
	certMu.Lock()
	defer certMu.Unlock()
	if cert, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
		if cert.Leaf != nil && now.Before(cert.Leaf.NotAfter) {
			return cert, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			// Present but unreadable: not ours to overwrite.
			return tls.Certificate{}, &Error{File: pe.Path, Msg: "cannot read the TLS pair: " + pe.Err.Error(), Err: err}
		}
		// Unparsable or mismatched: regenerate below.
	}
	certPEM, keyPEM, err := generateCertificate(hostname, now)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("config: generating a TLS certificate: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(certPath), 0o700); err != nil {
		return tls.Certificate{}, &Error{File: filepath.Dir(certPath), Msg: "cannot create the certificate directory: " + err.Error(), Err: err}
	}
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := writeFileAtomic(certPath, certPEM, 0o644); err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("config: generated TLS pair: %w", err)
	}
	return cert, nil
}

// generateCertificate returns a new self-signed certificate and its key, PEM
// encoded.
func generateCertificate(hostname string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	name := pkix.Name{
		Organization:       []string{"OpenVoiceOS"},
		OrganizationalUnit: []string{"ovos-messagebus"},
		CommonName:         hostname,
	}
	dns := []string{"localhost"}
	if hostname != "localhost" {
		dns = append(dns, hostname)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               name,
		Issuer:                name,
		NotBefore:             now.Add(-time.Minute), // tolerate a little clock skew
		NotAfter:              now.Add(certValidity),
		SignatureAlgorithm:    x509.SHA256WithRSA,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		DNSNames:              dns,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return certPEM, keyPEM, nil
}

// writeFileAtomic writes data to a temporary file beside path and renames it
// over path, so a reader never sees half a file.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return &Error{File: path, Msg: "cannot write: " + err.Error(), Err: err}
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return &Error{File: path, Msg: "cannot write: " + err.Error(), Err: err}
	}
	return nil
}
