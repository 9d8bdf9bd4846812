package config

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestEnsureCertificateGeneratesAndReuses(t *testing.T) {
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	certPath, keyPath, err := CertificatePaths(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(data, "OpenVoiceOS/ovos-messagebus/certs/ovos-messagebus.crt"); certPath != want {
		t.Errorf("cert path %s, want %s", certPath, want)
	}
	if filepath.Ext(keyPath) != ".key" || filepath.Dir(keyPath) != filepath.Dir(certPath) {
		t.Errorf("key path %s", keyPath)
	}

	before := time.Now()
	cert, err := EnsureCertificate("", "", "mybox")
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		t.Fatal("Leaf not set")
	}
	key, ok := cert.PrivateKey.(*rsa.PrivateKey)
	if !ok || key.N.BitLen() != 2048 {
		t.Errorf("key %T, want RSA-2048", cert.PrivateKey)
	}
	if leaf.SignatureAlgorithm != x509.SHA256WithRSA {
		t.Errorf("signature %v", leaf.SignatureAlgorithm)
	}
	if years := leaf.NotAfter.Sub(before).Hours() / 24 / 365; years < 9.99 || years > 10.01 {
		t.Errorf("valid %.2f years", years)
	}
	if leaf.NotBefore.After(before) {
		t.Errorf("NotBefore %v after now", leaf.NotBefore)
	}
	s := leaf.Subject
	if !slices.Equal(s.Organization, []string{"OpenVoiceOS"}) || !slices.Equal(s.OrganizationalUnit, []string{"ovos-messagebus"}) || s.CommonName != "mybox" {
		t.Errorf("subject %v", s)
	}
	if !slices.Equal(leaf.DNSNames, []string{"localhost", "mybox"}) {
		t.Errorf("DNS SANs %v", leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("IP SANs %v", leaf.IPAddresses)
	}
	if !leaf.BasicConstraintsValid || leaf.IsCA {
		t.Error("must carry basic constraints CA=false")
	}
	for _, name := range []string{"localhost", "mybox", "127.0.0.1"} {
		if err := leaf.VerifyHostname(name); err != nil {
			t.Errorf("VerifyHostname(%s): %v", name, err)
		}
	}
	// It verifies against itself as the root, as a client that pins it would.
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost"}); err != nil {
		t.Errorf("self verification: %v", err)
	}

	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode(keyPEM); b == nil || b.Type != "RSA PRIVATE KEY" || len(b.Headers) != 0 {
		t.Errorf("key is not an unencrypted PKCS#1 PEM")
	}
	if st, err := os.Stat(keyPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v (%v)", st.Mode().Perm(), err)
	}

	// Reused when both exist.
	again, err := EnsureCertificate("", "", "otherbox")
	if err != nil {
		t.Fatal(err)
	}
	if again.Leaf.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Error("existing pair not reused")
	}

	// Regenerated when one is missing.
	if err := os.Remove(certPath); err != nil {
		t.Fatal(err)
	}
	fresh, err := EnsureCertificate("", "", "mybox")
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Leaf.SerialNumber.Cmp(leaf.SerialNumber) == 0 {
		t.Error("pair not regenerated with the certificate missing")
	}

	// Regenerated when expired.
	later := time.Now().Add(11 * 365 * 24 * time.Hour)
	renewed, err := ensureGenerated(certPath, keyPath, "mybox", later)
	if err != nil {
		t.Fatal(err)
	}
	if !renewed.Leaf.NotAfter.After(later) {
		t.Error("expired pair not regenerated")
	}

	// Explicit paths are loaded as given.
	given, err := EnsureCertificate(certPath, keyPath, "ignored")
	if err != nil {
		t.Fatal(err)
	}
	if given.Leaf.SerialNumber.Cmp(renewed.Leaf.SerialNumber) != 0 {
		t.Error("explicit pair not used")
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		t.Errorf("the files do not load as a pair: %v", err)
	}
}

func TestEnsureCertificateErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := EnsureCertificate(filepath.Join(dir, "no.crt"), filepath.Join(dir, "no.key"), "")
	if err == nil {
		t.Fatal("missing explicit pair accepted")
	}
	if _, ok := err.(*Error); !ok {
		t.Errorf("error %T", err)
	}

	// A corrupt generated pair is replaced.
	t.Setenv("XDG_DATA_HOME", dir)
	certPath, keyPath, _ := CertificatePaths(nil)
	os.MkdirAll(filepath.Dir(certPath), 0o700)
	os.WriteFile(certPath, []byte("junk"), 0o644)
	os.WriteFile(keyPath, []byte("junk"), 0o600)
	if _, err := EnsureCertificate("", "", "box"); err != nil {
		t.Errorf("corrupt generated pair: %v", err)
	}
}

func TestCertificatePathsDefault(t *testing.T) {
	env := map[string]string{"HOME": "/home/u"}
	cert, key, err := CertificatePaths(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if cert != "/home/u/.local/share/OpenVoiceOS/ovos-messagebus/certs/ovos-messagebus.crt" ||
		key != "/home/u/.local/share/OpenVoiceOS/ovos-messagebus/certs/ovos-messagebus.key" {
		t.Errorf("paths %s %s", cert, key)
	}
}
