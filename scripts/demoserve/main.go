// Command demoserve serves one directory over HTTP on 127.0.0.1 for the
// demo: it prints the base URL on stdout and serves until killed. With
// -tls CERTDIR it serves HTTPS instead, with a certificate for 127.0.0.1
// made at start, written to CERTDIR/ca.pem for the client to trust
// (bench/cpu.sh's BENCH_TLS).
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

func main() {
	certDir := flag.String("tls", "", "serve HTTPS; write the certificate to trust to `DIR`/ca.pem")
	flag.Parse()
	if flag.NArg() != 1 {
		log.Fatal("usage: demoserve [-tls CERTDIR] DIR")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	files := http.FileServer(http.Dir(flag.Arg(0)))
	if *certDir == "" {
		fmt.Printf("http://%s/\n", ln.Addr())
		log.Fatal(http.Serve(ln, files))
	}
	cert, err := selfSigned(*certDir)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("https://%s/\n", ln.Addr())
	srv := &http.Server{Handler: files, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: time.Minute}
	log.Fatal(srv.ServeTLS(ln, "", ""))
}

// selfSigned makes a certificate for 127.0.0.1 and writes it to
// dir/ca.pem.
func selfSigned(dir string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return tls.Certificate{}, err
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), pemBytes, 0o644); err != nil { //nolint:gosec // a public certificate
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
