package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/diskimport/engine/internal/units"
)

// uploadRefusedError is a server's answer other than 2xx, with its text.
type uploadRefusedError struct {
	status string
	code   int
	url    string
	body   string
	// withCert: the client had a certificate to present.
	withCert bool
}

func (e *uploadRefusedError) Error() string {
	msg := fmt.Sprintf("the server answered %s for %s", e.status, e.url)
	if e.body != "" {
		msg += ": " + e.body
	}
	switch e.code {
	case 401, 403:
		if e.withCert {
			// Go's TLS sends a certificate only when it chains to a CA the
			// server names, so one of another CA arrives as none at all.
			msg += " (the client certificate of --cert was not accepted: it must be signed by the CA the server trusts and carry the name it expects)"
		} else {
			msg += " (give a client certificate with --cert and --key, or a token with --token-file)"
		}
	case 409:
		msg += " (another upload is in progress)"
	}
	return msg
}

// explain puts a failed request in the user's words: which side of TLS
// refused and why, or how far the upload got before the connection broke.
func (up *uploadRequest) explain(err error, sent int64) error {
	var refused *uploadRefusedError
	var bound *boundError
	if errors.As(err, &refused) || errors.As(err, &bound) {
		return err // says what happened, where
	}
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	text := err.Error()
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Errorf("TLS: the server's certificate is not signed by a CA this client trusts (give the server's CA with --ca): %w", err)
	case errors.As(err, &hostname):
		return fmt.Errorf("TLS: the server's certificate is not for %s: %w", up.url.Hostname(), err)
	case errors.As(err, &invalid), errors.As(err, &verify):
		return fmt.Errorf("TLS: the server's certificate was not accepted: %w", err)
	case strings.Contains(text, "remote error: tls: certificate required"):
		return fmt.Errorf("TLS: the server requires a client certificate (give --cert and --key): %w", err)
	case strings.Contains(text, "remote error: tls:"):
		// An alert from the server during or just after the handshake: it
		// refused the client certificate (bad certificate, unknown
		// authority, expired).
		return fmt.Errorf("TLS: the server refused the client certificate (--cert/--key must be signed by the CA it trusts): %w", err)
	case strings.Contains(text, "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("the server speaks plain HTTP: use an http:// URL: %w", err)
	case strings.Contains(text, "first record does not look like a TLS handshake"):
		return fmt.Errorf("the server speaks HTTPS: use an https:// URL: %w", err)
	}
	if sent > 0 {
		of := units.Bytes(sent)
		if up.size > 0 {
			of += " of " + units.Bytes(up.size)
		}
		return fmt.Errorf("the connection to %s broke after %s were sent, before the server answered: the import did not complete: %w", up.url.Redacted(), of, err)
	}
	return fmt.Errorf("uploading to %s: %w", up.url.Redacted(), err)
}
