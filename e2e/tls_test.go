package e2e

import (
	"bytes"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// TestTLSGeneratedCertificate: ssl=true without ssl_cert/ssl_key serves
// wss:// with a self-signed pair generated under XDG_DATA_HOME (docs/protocol.md §6),
// which clients trusting it accept and which the next start reuses.
func TestTLSGeneratedCertificate(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	sb.write(sb.systemFile, `{"websocket": {"ssl": true}}`)
	sb.usePort()
	certDir := filepath.Join(sb.dataHome, "OpenVoiceOS", "ovos-messagebus", "certs")
	certFile, keyFile := filepath.Join(certDir, "ovos-messagebus.crt"), filepath.Join(certDir, "ovos-messagebus.key")
	b := sb.start()

	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatalf("the generated certificate: %v", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatalf("the generated key: %v", err)
	}
	cert := checkGeneratedCert(t, certPEM, keyPEM)
	certInfo, _ := os.Stat(certFile)

	pool := x509.NewCertPool()
	pool.AddCert(cert)
	wss := "wss://" + b.addr() + "/core"
	for _, url := range []string{wss, "wss://localhost:" + strings.Split(b.addr(), ":")[1] + "/core"} {
		g := dialGo(t, url, &tls.Config{RootCAs: pool})
		state := g.c.NetConn().(*tls.Conn).ConnectionState()
		if !bytes.Equal(state.PeerCertificates[0].Raw, cert.Raw) {
			t.Errorf("%s: the server presents another certificate than %s", url, certFile)
		}
		py := dialPy(t, url, certFile)
		connectAll(t, g, py)
		msg := []byte(`{"type":"e2e.tls","data":{},"context":{}}`)
		py.send(ws.OpText, msg)
		expectFrame(t, g, ws.OpText, msg)
		expectFrame(t, py, ws.OpText, msg)
	}

	// Untrusted and plain clients are refused, promptly.
	if _, err := tryDialGo(wss, &tls.Config{RootCAs: x509.NewCertPool()}); err == nil {
		t.Error("a client that does not trust the certificate connected")
	}
	if _, err := tryDialGo(b.url(), nil); err == nil {
		t.Error("a plain ws:// client connected to the wss:// bus")
	}

	// The next start reuses the pair.
	if code := b.stop(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Fatalf("exit code = %d", code)
	}
	time.Sleep(20 * time.Millisecond) // a rewrite would have a later mtime
	b = sb.start()
	again, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, certPEM) {
		t.Fatal("the certificate was regenerated on the second start; want it reused")
	}
	if info, _ := os.Stat(certFile); !info.ModTime().Equal(certInfo.ModTime()) {
		t.Errorf("the certificate file was rewritten (mtime %v, was %v)", info.ModTime(), certInfo.ModTime())
	}
	g := dialGo(t, "wss://"+b.addr()+"/core", &tls.Config{RootCAs: pool})
	if !bytes.Equal(g.c.NetConn().(*tls.Conn).ConnectionState().PeerCertificates[0].Raw, cert.Raw) {
		t.Error("after a restart the server presents another certificate")
	}
	expectGreeting(t, g)
}

// checkGeneratedCert checks the properties of docs/protocol.md §6 and returns the
// certificate.
func checkGeneratedCert(t *testing.T, certPEM, keyPEM []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(certPEM)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("the certificate file is not a PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	kblk, _ := pem.Decode(keyPEM)
	if kblk == nil || !strings.Contains(kblk.Type, "PRIVATE KEY") || strings.Contains(kblk.Type, "ENCRYPTED") || kblk.Headers["Proc-Type"] != "" {
		t.Errorf("the key file is not an unencrypted PEM private key (type %q)", blockType(kblk))
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Errorf("the key does not match the certificate: %v", err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok || pub.N.BitLen() != 2048 {
		t.Errorf("public key %T, want RSA-2048", cert.PublicKey)
	}
	if cert.SignatureAlgorithm != x509.SHA256WithRSA {
		t.Errorf("signature %v, want SHA256-RSA", cert.SignatureAlgorithm)
	}
	validity := cert.NotAfter.Sub(cert.NotBefore)
	if tenYears := 10 * 365 * 24 * time.Hour; validity < tenYears-72*time.Hour || validity > tenYears+96*time.Hour {
		t.Errorf("valid for %v, want 10 years", validity)
	}
	if time.Now().Before(cert.NotBefore) || time.Now().After(cert.NotAfter) {
		t.Errorf("not valid now: %v..%v", cert.NotBefore, cert.NotAfter)
	}
	if !slices.Equal(cert.Subject.Organization, []string{"OpenVoiceOS"}) ||
		!slices.Equal(cert.Subject.OrganizationalUnit, []string{"ovos-messagebus"}) ||
		cert.Subject.CommonName != host {
		t.Errorf("subject %q, want O=OpenVoiceOS, OU=ovos-messagebus, CN=%s", cert.Subject, host)
	}
	for _, dns := range []string{"localhost", host} {
		if !slices.Contains(cert.DNSNames, dns) {
			t.Errorf("DNS SANs %q lack %q", cert.DNSNames, dns)
		}
	}
	if !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
		t.Errorf("IP SANs %v lack 127.0.0.1", cert.IPAddresses)
	}
	if cert.IsCA {
		t.Error("the certificate is a CA")
	}
	return cert
}

func blockType(b *pem.Block) string {
	if b == nil {
		return "none"
	}
	return b.Type
}
